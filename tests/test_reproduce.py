"""./run.sh reproduce jigsaw2019: the recipe's flag files as the flags parser reads them,
the command's checks of its inputs, the comparison table with 2019's rows, and the
command itself scaled down to BERT-Tiny on a few hundred rows of this machine's CPU."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, sample_path, tiny_google_dir
from tools import reproduce, run_table

BIAS = sample_path("jigsaw_bias_davidson")
RECIPE = os.path.join(ROOT, "tools", "recipes", "jigsaw2019")


def reproduce_command(*args):
  return subprocess.run([sys.executable, "-m", "tools.reproduce"] + list(args), cwd=ROOT,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        universal_newlines=True, timeout=900)


@pytest.mark.parametrize("device,batch,tpu", [("gpu", 8, False), ("cpu", 8, False),
                                              ("tpu", 32, True)])
def test_the_recipe_is_2019s_settings(device, batch, tpu):
  from run_classifier import parse_flags
  c = parse_flags(["run_classifier.py"] + [
      "--flagfile=" + path for path in reproduce.recipe_flag_files("jigsaw2019", device)] +
      ["--output_dir=gs://bucket/out", "--data_dir=/data"])
  assert (c.data.task_name, c.data.head, c.data.train_rows, c.data.eval_rows) == (
      "jigsaw_bias", "classification", "100000", "100000:110000")
  assert (c.model.max_seq_length, c.model.do_lower_case, c.model.classifier_dropout) == (
      220, True, 0.4)
  assert (c.training.learning_rate, c.training.warmup_proportion,
          c.training.num_train_epochs, c.training.num_train_steps) == (2e-5, 0.05, 1.0, 0)
  assert (c.training.train_batch_size, c.device.use_tpu, c.device.dynamic_padding) == (
      batch, tpu, False)
  assert c.training.save_summary_steps == 10
  if tpu:
    assert (c.device.num_tpu_cores, c.device.iterations_per_loop) == (8, 1000)
  # One epoch of the first 100,000 rows: 12,500 steps of 8, or 3,125 of 32.
  assert 100000 // c.training.train_batch_size == {8: 12500, 32: 3125}[batch]


def test_the_2019_rows_are_the_notebooks_figures():
  gpu, tpu = run_table.ROWS_2019
  assert (gpu["steps"], gpu["examples"], gpu["training"]) == (12500, 100000, 6036.0)
  assert (tpu["steps"], tpu["examples"], tpu["training"]) == (3125, 200000, 850.0)
  assert gpu["rate"] == pytest.approx(16.567, abs=1e-3)
  assert tpu["rate"] == pytest.approx(235.294, abs=1e-3)
  # A full epoch of 1,804,874 rows at those rates: 30.3 h on the K80, 2.1 h on the TPU.
  assert run_table.projected_epoch(gpu) == pytest.approx(1804874 / (100000 / 6036.0))
  assert run_table.format_duration(run_table.projected_epoch(gpu)) == "30.3 h"
  assert run_table.format_duration(run_table.projected_epoch(tpu)) == "2.1 h"


def summary_of(name, steps=100, batch=32, wall=60.0, startup=10.0, rate=80.0, tpu=False):
  return {"name": name, "device": {"description": "a device", "kind": "CPU", "count": 1},
          "versions": {"tensorflow": "2.15.1", "python": "3.11.7"}, "model": "BERT",
          "flags": {"max_seq_length": 220, "use_tpu": tpu, "iterations_per_loop": 1000},
          "training": {"steps": steps, "batch_size": batch, "wall_seconds": wall,
                       "startup_seconds": startup, "examples_per_second": rate}}


def test_the_table_has_2019s_rows_then_each_run_with_its_projection_and_cost():
  runs = [summary_of("gpu_run", rate=400.0), summary_of("tpu_run", steps=300, rate=None,
                                                       tpu=True)]
  rows = run_table.table_rows(runs)
  table = run_table.markdown(rows, run_table.parse_prices(["gpu_run=0.36", "2019 GPU=0.9"],
                                                          rows)).splitlines()
  assert [line.split(" | ")[0] for line in table[2:6]] == [
      "| 2019 GPU", "| 2019 TPU", "| gpu_run", "| tpu_run"]
  # gpu_run: 3,200 examples; an epoch is 10 s + 1,804,874 / 400 s = 1.3 h; 60 s at
  # $0.36 an hour is $0.01, the epoch $0.45.
  assert table[4].endswith("| 100 | 32 | 3,200 | 10.0 | 60.0 | 400.0 | 1.3 h | "
                           "$0.01 (epoch $0.45) |")
  assert table[2].endswith("| 6036.0 | 16.6 | 30.3 h | $1.51 (epoch $27.24) |")
  assert table[5].endswith("| 300 | 32 | 9,600 | 10.0 | 60.0 | n/a | n/a |  |")
  assert ("tpu_run: no examples/s: its 300 steps ran in one TPU loop "
          "(--iterations_per_loop=1000), whose time holds the graph's compilation: train "
          "more steps than a loop, or lower --iterations_per_loop, for a steady rate.") in table
  with pytest.raises(SystemExit, match="--price nope=1: the rows are 2019 GPU, 2019 TPU, "
                                       "gpu_run, tpu_run; give one of them"):
    run_table.parse_prices(["nope=1"], rows)
  with pytest.raises(SystemExit, match="--price gpu_run=cheap: give NAME=USD_PER_HOUR"):
    run_table.parse_prices(["gpu_run=cheap"], rows)


def write_csv(path, header, rows=("1,a comment,0.0",)):
  path.write_text(u"%s\n%s\n" % (header, "\n".join(rows)), encoding="utf-8")


@pytest.mark.parametrize("case,message", [
    ("no train.csv", "input error: --data_dir={data} has no train.csv: give the folder of "
                     "the Jigsaw Unintended Bias data (Kaggle's jigsaw-unintended-bias-in-"
                     "toxicity-classification, whose train.csv has comment_text and target)"),
    ("no target column", "input error: {data}/train.csv, line 1: no column target (its "
                         "header has id, comment_text, toxic). Fix: give the Unintended Bias "
                         "train.csv, whose columns include comment_text and target"),
    ("no model", "input error: give the pre-trained model: --hub=HANDLE_OR_PATH (a TF-Hub "
                 "BERT) or --model_dir=DIR (Google's uncased_L-12_H-768_A-12: "
                 "bert_config.json, vocab.txt, bert_model.ckpt), one of them"),
    ("incomplete model", "input error: --model_dir={model} lacks vocab.txt, "
                         "bert_model.ckpt.index: give the folder of Google's BERT checkpoint "
                         "(uncased_L-12_H-768_A-12)"),
    ("gpu", "input error: --device=gpu: TensorFlow {tf} sees no GPU here. Fix: on TF 2.15, "
            "./run.sh setup --cuda (and check nvidia-smi), or --device=cpu"),
    ("tpu", "input error: --device=tpu: no TPU named and none on this machine. Fix: "
            "--tpu_name=NAME (or --tpu_name=local on a TPU VM)"),
    ("cpu fp16", "input error: --mixed_precision is fp16 on a GPU and bf16 on a TPU: the "
                 "CPU's row trains in float32, as the recipe; drop it"),
    ("a used folder", "input error: --output_dir={out} already holds a run: give a new "
                      "folder for each run (./run.sh benchmark table makes the table of runs "
                      "already done)"),
    ("a folder after --", "input error: --output_dir=/elsewhere after -- would change what "
                          "this command runs and tables: give it as this command's own "
                          "option (see --help), or drop it"),
    ("no rows after --", "input error: --nodo_eval after -- would change what this command "
                         "runs and tables: give it as this command's own option (see "
                         "--help), or drop it"),
    ("a bad comparison", "{data}/none.json: cannot be read as a run summary"),
    ("an unknown price", "--price gpu=1: the rows are 2019 GPU, 2019 TPU, out; give one of "
                         "them and a price >= 0"),
])
def test_each_input_is_checked_before_the_run(tmp_path, case, message, monkeypatch, capsys):
  import tensorflow as tf
  data, model = tmp_path / "data", tmp_path / "model"
  data.mkdir()
  model.mkdir()
  (model / "bert_config.json").write_text(u"{}")
  if case != "no train.csv":
    write_csv(data / "train.csv", "id,comment_text,toxic" if case == "no target column" else
              "id,comment_text,target")
  if case not in ("no model", "incomplete model"):
    for name in ("vocab.txt", "bert_model.ckpt.index"):
      (model / name).write_text(u"x")
  for name in ("TPU_NAME", "COLAB_TPU_ADDR"):
    monkeypatch.delenv(name, raising=False)
  args = ["jigsaw2019", "--device", {"gpu": "gpu", "tpu": "tpu"}.get(case, "cpu"),
          "--data_dir", str(data), "--output_dir", str(tmp_path / "out")]
  if case != "no model":
    args += ["--model_dir", str(model)]
  if case == "cpu fp16":
    args.append("--mixed_precision")
  if case == "a used folder":
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "run_summary.json").write_text(u"{}")
  args += {"a bad comparison": ["--compare", str(data / "none.json")],
           "an unknown price": ["--price", "gpu=1"],
           "a folder after --": ["--", "--output_dir=/elsewhere"],
           "no rows after --": ["--", "--nodo_eval"]}.get(case, [])
  with pytest.raises(SystemExit) as e:
    reproduce.main(args)
  assert str(e.value).startswith(message.format(data=data, model=model, tf=tf.__version__,
                                                out=tmp_path / "out"))
  assert str(e.value) == message.format(data=data, model=model, tf=tf.__version__,
                                        out=tmp_path / "out") or case == "a bad comparison"
  if case != "a used folder":
    assert not (tmp_path / "out").exists()  # (nothing ran)


@pytest.mark.slow
@pytest.mark.one_runtime  # (run_classifier's run is tested on both; this is the command's)
def test_the_cpu_command_scaled_down_trains_evaluates_and_tables(tmp_path, tiny_checkpoint):
  """The command a user runs, on BERT-Tiny and 256 rows of the committed sample, 64 of the
  next rows held out: the run's summary, its metrics and the table with 2019's rows."""
  output_dir = str(tmp_path / "cpu_scaled")
  result = reproduce_command(
      "jigsaw2019", "--device", "cpu", "--data_dir", BIAS, "--output_dir", output_dir,
      "--model_dir", tiny_google_dir(tmp_path, tiny_checkpoint), "--rows", "256",
      "--held_out", "64", "--price", "cpu_scaled=0.10", "--", "--max_seq_length=32")
  assert result.returncode == 0, result.stdout[-3000:]
  with open(os.path.join(output_dir, "run_summary.json")) as f:
    summary = json.load(f)
  assert summary["flags"]["train_rows"] == "256"
  assert summary["flags"]["eval_rows"] == "256:320"
  assert summary["flags"]["classifier_dropout"] == 0.4
  assert summary["training"]["steps"] == 32 and summary["training"]["batch_size"] == 8
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    assert json.load(f)["num_examples"] == 64
  with open(os.path.join(output_dir, "comparison.md")) as f:
    table = f.read()
  assert table in result.stdout
  lines = table.splitlines()
  assert [line.split(" | ")[0] for line in lines[2:5]] == ["| 2019 GPU", "| 2019 TPU",
                                                          "| cpu_scaled"]
  ours = lines[4].split(" | ")
  assert ours[4:8] == ["32", "32", "8", "256"]  # seq, steps, batch, examples seen
  assert ours[-1].startswith("$") and "epoch $" in ours[-1]
  with open(os.path.join(output_dir, "comparison.png"), "rb") as f:
    assert f.read(4) == b"\x89PNG"
