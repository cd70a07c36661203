"""run_summary.json (the wall-time record each run writes) and tools/run_table.py (the
GPU-against-TPU table made from several of them)."""

import json
import os
import platform

import pytest
import tensorflow.compat.v1 as tf

from tools import run_table


def summary_of(name, kind, description, startup, wall, rate, total, steps=100):
  return {"name": name, "device": {"kind": kind, "description": description, "count": 1},
          "versions": {"tensorflow": "1.15.5", "python": "3.7.16"}, "model": "BERT L=12 H=768 A=12",
          "flags": {"max_seq_length": 220, "use_tpu": kind == "TPU",
                    "iterations_per_loop": 1000}, "total_seconds": total,
          "training": {"batch_size": 32, "steps": steps, "startup_seconds": startup,
                       "wall_seconds": wall, "examples_per_second": rate}}


def test_run_table_markdown_and_plot(tmp_path):
  gpu = summary_of("gpu", "GPU", "1 x Tesla P100-PCIE-16GB", 61.0, 1800.25, 1.78, 1900.0)
  tpu = summary_of("tpu", "TPU", "Cloud TPU t1, 8 cores", 95.5, 310.0, 14.9, 402.0)
  # A TPU run whose every train() call was one loop has no steady window.
  one_loop = summary_of("one_loop", "TPU", "Cloud TPU t2, 8 cores", 90.0, 200.0, None, 250.0)
  paths = []
  for summary in (gpu, tpu, one_loop):
    folder = tmp_path / summary.pop("name")
    folder.mkdir()
    (folder / "run_summary.json").write_text(json.dumps(summary))
    paths.append(str(folder))
  run_table.main(paths + ["--out_dir", str(tmp_path / "table")])
  lines = (tmp_path / "table" / "wall_time.md").read_text().splitlines()
  assert lines[0] == ("| run | device | runtime | model | seq | steps | batch | examples seen | "
                      "start-up s | training s | examples/s | 1.8M-row epoch | cost |")
  assert lines[2].startswith("| 2019 GPU | Tesla K80 (Colab) | TF 1.14 |")
  assert lines[3].startswith("| 2019 TPU | TPU v2-8 (Colab TPU node) | TF 1.14 |")
  # 1,804,874 rows at 1.78 a second after 61 s: 282 h.
  assert lines[4] == ("| gpu | 1 x Tesla P100-PCIE-16GB | TF 1.15.5, Python 3.7.16 | "
                      "BERT L=12 H=768 A=12 | 220 | 100 | 32 | 3,200 | 61.0 | 1800.2 | 1.8 | "
                      "281.7 h |  |")
  assert lines[5].startswith("| tpu | Cloud TPU t1, 8 cores |")
  assert lines[6].endswith("| 100 | 32 | 3,200 | 90.0 | 200.0 | n/a | n/a |  |")
  assert lines[7] == ""
  assert lines[9] == ("one_loop: no examples/s: its 100 steps ran in one TPU loop "
                      "(--iterations_per_loop=1000), whose time holds the graph's "
                      "compilation: train more steps than a loop, or lower "
                      "--iterations_per_loop, for a steady rate.") and len(lines) == 10
  assert (tmp_path / "table" / "wall_time.png").read_bytes()[:4] == b"\x89PNG"


def test_run_table_refuses_a_summary_without_training(tmp_path):
  (tmp_path / "run_summary.json").write_text(json.dumps({"training": None}))
  with pytest.raises(SystemExit, match="did not train"):
    run_table.load([str(tmp_path)])
  with pytest.raises(SystemExit, match="cannot be read as a run summary"):
    run_table.load([str(tmp_path / "missing.json")])


@pytest.mark.slow
def test_a_training_run_writes_its_summary(jigsaw_model):
  output_dir = jigsaw_model.output_dir
  with open(jigsaw_model.result.summary) as f:
    summary = json.load(f)
  training = summary["training"]
  assert training["steps"] == 6 and training["global_step"] == 6
  assert training["steps_trained"] == 6  # (from step 0)
  assert training["batch_size"] == 8 and training["measured_steps"] == 5  # after step 1
  assert training["restarts"] == 0 and training["restart_seconds"] == 0
  assert 0 < training["startup_seconds"] < training["wall_seconds"] <= summary["total_seconds"]
  # 5 steps of 8 examples after the first, timed from the end of the first step to the
  # end of the last (the final checkpoint is after that).
  assert training["examples_per_second"] == pytest.approx(40 / training["measured_seconds"])
  assert 0 < training["measured_seconds"] < (training["wall_seconds"] -
                                             training["startup_seconds"])
  assert set(summary["seconds"]) == {"featurisation", "training", "eval", "predict", "export"}
  assert summary["seconds"]["training"] == training["wall_seconds"]
  assert summary["device"]["kind"] == "CPU" and summary["device"]["count"] == os.cpu_count()
  assert summary["versions"]["tensorflow"] == tf.__version__
  assert summary["versions"]["python"] == platform.python_version()
  assert summary["model"] == "BERT L=2 H=128 A=2"
  assert summary["flags"]["max_seq_length"] == 32 and summary["flags"]["num_train_steps"] == 6
  assert "do_train" in summary["given_flags"] and "use_tpu" not in summary["given_flags"]
  assert summary["results"]["eval"]["global_step"] == 6
  # The table tool reads it as it is.
  assert run_table.markdown(run_table.table_rows(run_table.load([output_dir]))).splitlines()[
      4].startswith("| out | %s |" % summary["device"]["description"])


def test_a_tpu_loop_of_steps_counts_the_steps_it_ran():
  """On a TPU one session run is a loop of iterations_per_loop steps; the step is read after
  each run, so the measured window holds the steps after the first loop, exactly."""
  from pipeline.progress import ProgressHook
  lines = []
  with tf.Graph().as_default():
    step = tf.train.get_or_create_global_step()
    loop = tf.assign(step, tf.minimum(step + 5, 12))  # loops of 5 steps, 12 in all
    hook = ProgressHook(12, 8, every_steps=5, fetch_loss=False, report=lines.append,
                        step_after_run=True)
    with tf.train.MonitoredSession(hooks=[hook]) as session:
      for _ in range(3):
        session.run(loop)
  assert (hook.first_step, hook.last_step) == (5, 12)
  assert hook.measured()[0] == 7  # the second loop's 5 steps and the last loop's 2
  assert [line.split("  ")[0] for line in lines] == ["step 10/12", "step 12/12"]


def test_the_table_counts_the_steps_a_run_trained():
  """A resumed run's row counts its own steps; one that trained none says so."""
  resumed = summary_of("resumed", "GPU", "1 x L4", 20.0, 100.0, 50.0, 130.0, steps=100)
  resumed["training"]["steps_trained"] = 40
  finished = summary_of("finished", "GPU", "1 x L4", 0.5, 0.5, None, 9.0, steps=100)
  finished["training"]["steps_trained"] = 0
  rows = run_table.table_rows([resumed, finished])
  lines = run_table.markdown(rows).splitlines()
  assert lines[4].startswith("| resumed |") and "| 40 | 32 | 1,280 |" in lines[4]
  assert "| 0 | 32 | 0 |" in lines[5]
  assert lines[-1] == ("finished: no examples/s: it trained no step: the model in its folder "
                       "had its steps already.")
