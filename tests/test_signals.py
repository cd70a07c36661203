"""A run stopped by a signal in each phase (spec/inventory.PHASES): one line naming the
signal, the phase and how to go on, exit 128 + the signal, the training lock released,
nothing half-written kept, and the same command then finishes the work."""

import csv
import io
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import JIGSAW, ROOT, TINY, TINY_VOCAB

# (the stops are the project's Python around TensorFlow's loops; both runtimes' loops stop
# at the same hooks: one runtime runs these)
pytestmark = [pytest.mark.slow, pytest.mark.one_runtime("tf1")]


def big_predict_file(folder, copies=150):
  """The Jigsaw test rows many times over: a prediction that lasts a few seconds."""
  with io.open(os.path.join(JIGSAW, "test.csv"), encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f))
  path = os.path.join(folder, "big_test.csv")
  with io.open(path, "w", encoding="utf-8", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(rows[0])
    for copy in range(copies):
      writer.writerows([["%s_%d" % (r[0], copy)] + r[1:] for r in rows[1:]])
  return path


def command(output_dir, *modes):
  return [sys.executable, os.path.join(ROOT, "run_classifier.py"), "--task_name=jigsaw_toxic",
          "--data_dir=" + JIGSAW, "--bert_config_file=" + os.path.join(TINY, "bert_config.json"),
          "--vocab_file=" + TINY_VOCAB, "--output_dir=" + output_dir, "--max_seq_length=32",
          "--train_batch_size=8", "--predict_batch_size=8", "--log_every_steps=1",
          "--save_checkpoints_steps=1000"] + list(modes)


def stop_when(args, marker, signum, log_path, cwd):
  """Runs args until its log shows marker, then sends signum; (exit code, its log)."""
  with open(log_path, "w") as log:
    process = subprocess.Popen(args, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                               env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  deadline = time.time() + 300
  while time.time() < deadline and process.poll() is None:
    with open(log_path) as f:
      if marker in f.read():
        break
    time.sleep(0.2)
  process.send_signal(signum)
  process.wait(120)
  with open(log_path) as f:
    return process.returncode, f.read()


def test_a_stopped_training_saves_its_step_and_resumes_there(tmp_path, tiny_checkpoint):
  output_dir = str(tmp_path / "out")
  args = command(output_dir, "--do_train", "--num_train_steps=2000",
                 "--init_checkpoint=" + tiny_checkpoint)
  code, log = stop_when(args, "step 31/2000", signal.SIGTERM, str(tmp_path / "a.log"),
                        str(tmp_path))
  assert code == 128 + signal.SIGTERM, log[-2000:]
  last = log.strip().splitlines()[-1]
  assert last.startswith("run_classifier: stopped by SIGTERM during training (its newest "
                         "checkpoint is at step "), last
  assert last.endswith("). Fix: run the same command again to resume training from that "
                       "checkpoint")
  step = int(last.split("at step ")[1].split(")")[0])
  assert 31 <= step < 2000  # (the step under way finished and was saved)
  assert os.path.exists(os.path.join(output_dir, "model.ckpt-%d.index" % step))
  assert not os.path.exists(os.path.join(output_dir, "training.lock"))
  assert "Traceback" not in log
  leftovers = [n for n in os.listdir(output_dir) if ".tmp-" in n or n.endswith("_temp")]
  assert leftovers == []
  # The same command resumes from that step (stopped again once it says so).
  code, log = stop_when(args, "resuming from the checkpoint at step %d of 2000" % step,
                        signal.SIGINT, str(tmp_path / "again.log"), str(tmp_path))
  assert "resuming from the checkpoint at step %d of 2000" % step in log
  assert code == 128 + signal.SIGINT


@pytest.mark.parametrize("signum, phase, marker, modes", [
    (signal.SIGINT, "predict", "predicting 4950 examples", ["--do_predict"]),
    (signal.SIGTERM, "export", "exporting", ["--do_export"]),
])
def test_a_stop_while_predicting_or_exporting_writes_nothing_half_done(
    jigsaw_model, tmp_path, signum, phase, marker, modes):
  output_dir = jigsaw_model.copy_to(str(tmp_path / "model"))
  args = command(output_dir, "--predict_file=" + big_predict_file(str(tmp_path)), *modes)
  code, log = stop_when(args, marker, signum, str(tmp_path / "b.log"), str(tmp_path))
  assert code == 128 + signum, log[-2000:]
  assert log.strip().splitlines()[-1] == (
      "run_classifier: stopped by %s during %s. Fix: run the same command again (the "
      "checkpoints and cached records written so far are reused; nothing half-written was "
      "kept)" % (signal.Signals(signum).name, phase))
  left = sorted(os.listdir(output_dir))
  assert "test_results.tsv" not in left and not [n for n in left if ".tmp-" in n]
  exports = os.path.join(output_dir, "export")
  if os.path.exists(exports):  # (an export the signal came too late for is whole)
    from serving.predicting import check_export_files
    for name in os.listdir(exports):
      assert not name.startswith(".partial"), name
      check_export_files(os.path.join(exports, name))
  assert "Traceback" not in log
