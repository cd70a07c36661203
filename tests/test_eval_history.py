"""Evaluation during training: --eval_every_steps, --best_metric, --early_stopping_patience,
eval_history.csv, the best checkpoint and the learning curve."""

import csv
import json
import os

import numpy as np
import pytest

from conftest import JIGSAW, checkpoint_variables, common_flags, run_flags
from modeling.metrics import metric_names
from pipeline import eval_history
from pipeline.checks import check_run
from pipeline.eval_history import EvalHistory, Goal, keep_best, lower_is_better
from pipeline.evaluation import metric_names_of
from pipeline.task_extras import task_of
from run_classifier import parse_flags
from spec.run_errors import FlagError
from spec.heads.classification import SingleLabel
from spec.heads.multi_label import MultiLabel
from spec.heads.regression import Regression
from test_summaries import scalars_in


def test_metric_direction():
  assert [lower_is_better(m) for m in ("loss", "mse", "mse_toxic", "mean_mse")] == [True] * 4
  assert not any(lower_is_better(m) for m in ("auc", "accuracy", "mean_auc", "mcc", "f1",
                                              "spearman_target", "bias_final_metric"))
  higher, lower = Goal("auc"), Goal("loss")
  assert higher.improves(0.7, 0.6) and not higher.improves(0.6, 0.6)
  assert lower.improves(0.5, 0.6) and not lower.improves(0.6, 0.6)
  assert higher.improves(0.1, None) and not higher.improves(None, 0.1)
  assert not higher.improves(float("nan"), None)


def test_history_file_round_trip_best_and_patience(tmp_path):
  path = str(tmp_path / "eval_history.csv")
  history = EvalHistory(path)
  for step, auc, loss in ((10, 0.70, 0.6), (20, 0.75, 0.55), (30, 0.74, 0.5), (40, 0.75, 0.52)):
    history.append({"step": step, "train_loss": 0.1 * step, "auc": auc, "loss": loss,
                    "best": 0, "checkpoint": "ck-%d" % step, "train_seconds_so_far": 1.5,
                    "eval_seconds_so_far": 0.25})
  with open(path) as f:
    lines = f.read().splitlines()
  assert lines[0] == ("step,train_loss,auc,loss,best,checkpoint,train_seconds_so_far,"
                      "eval_seconds_so_far")
  assert lines[1] == "10,1.0,0.7,0.6,0,ck-10,1.5,0.25"
  loaded = EvalHistory.load(path, up_to_step=40)
  assert loaded.rows == history.rows
  # A tie does not improve: the first 0.75 stays the best.
  assert loaded.best_row(Goal("auc"))["step"] == 20
  assert loaded.best_value(Goal("auc")) == 0.75 and EvalHistory(path).best_value(Goal("auc")) is None
  assert loaded.evaluations_since_best(Goal("auc")) == 2
  assert loaded.best_row(Goal("loss"))["step"] == 30
  assert loaded.evaluations_since_best(Goal("loss")) == 1
  # Eval values are float32 numbers in Python floats: they read back exactly, so a resumed
  # run sees the same ties as an uninterrupted one.
  value = float(np.float32(0.1))
  history.append({"step": 50, "auc": value, "best": 0})
  reread = EvalHistory.load(path, up_to_step=50).rows[-1]
  assert reread["auc"] == value and isinstance(reread["step"], int)
  assert not Goal("auc").improves(reread["auc"], value)
  # Rows past the checkpoint training resumes from belong to checkpoints that are gone.
  assert EvalHistory.load(path, up_to_step=25).steps() == [10, 20]
  assert EvalHistory.load(str(tmp_path / "none.csv"), 10).rows == []


def test_keep_best_copies_records_and_replaces(tmp_path):
  output_dir = tmp_path / "out"
  output_dir.mkdir()
  for step in (10, 20):
    write_checkpoint(str(output_dir / ("model.ckpt-%d" % step)), step)
  goal = Goal("auc")
  first = keep_best(str(output_dir / "model.ckpt-10"), str(output_dir), goal, 0.7, 10)
  assert first == str(output_dir / "best" / "model.ckpt-10")
  second = keep_best(str(output_dir / "model.ckpt-20"), str(output_dir), goal, 0.8, 20)
  assert sorted(os.listdir(str(output_dir / "best"))) == [
      "best_checkpoint.json", "model.ckpt-20.data-00000-of-00001", "model.ckpt-20.index"]
  assert checkpoint_variables(str(output_dir / "best" / "model.ckpt-20"))["w"] == 20
  assert eval_history.read_best(str(output_dir)) == {
      "metric": "auc", "value": 0.8, "step": 20, "checkpoint": second,
      "checkpoint_name": "model.ckpt-20", "lower_is_better": False}
  # The record names the checkpoint within best/: a moved folder keeps its best.
  moved = tmp_path / "moved"
  output_dir.rename(moved)
  assert eval_history.read_best(str(moved))["checkpoint"] == str(moved / "best" /
                                                                 "model.ckpt-20")


def write_checkpoint(prefix, value):
  """A real checkpoint of one variable w = value (without its .meta)."""
  import tensorflow.compat.v1 as tf
  with tf.Graph().as_default():
    w = tf.get_variable("w", initializer=float(value))
    with tf.Session() as session:
      session.run(w.initializer)
      tf.train.Saver([w]).save(session, prefix, write_meta_graph=False)
  os.remove(os.path.join(os.path.dirname(prefix), "checkpoint"))


def test_metric_names_are_those_an_evaluation_reports():
  assert metric_names(SingleLabel(["label"], ["0", "1"])) == [
      "accuracy", "auc", "eval_loss", "f1", "mcc", "num_examples", "precision", "recall"]
  assert metric_names(SingleLabel(["label"], ["a", "b", "c"])) == [
      "accuracy", "eval_loss", "num_examples"]
  assert metric_names(MultiLabel(["toxic", "insult"])) == [
      "auc_insult", "auc_toxic", "eval_loss", "f1_insult", "f1_toxic", "mean_auc", "mean_f1",
      "num_examples"]
  assert "pearson" in metric_names(Regression(["y"]))


def test_periodic_eval_flag_errors():
  base = ["--task_name=sst-2", "--data_dir=.", "--output_dir=/tmp/x"]
  cases = [
      (["--do_train", "--eval_every_steps=5"], "add --do_train and --do_eval"),
      (["--do_train", "--do_eval", "--best_metric=auc"], "add --eval_every_steps"),
      (["--do_train", "--do_eval", "--eval_every_steps=5", "--early_stopping_patience=2"],
       "add --best_metric"),
      (["--do_train", "--do_eval", "--eval_every_steps=-1"], "must be >= 0"),
      (["--do_train", "--do_eval", "--eval_every_steps=5", "--num_folds=3"],
       "cannot be combined with --num_folds"),
  ]
  for flags, message in cases:
    with pytest.raises(FlagError, match=message):
      check_run(parse_flags(["run_classifier.py"] + base + flags))


def _history(output_dir):
  with open(os.path.join(output_dir, "eval_history.csv")) as f:
    return list(csv.DictReader(f))


@pytest.mark.slow
def test_evaluation_during_training_keeps_the_best_checkpoint(best_run):
  """conftest's best_run: evaluations at steps 3 and 6 of 6, each a history row with every
  metric; the best AUC's checkpoint is kept, and the final eval results are that
  checkpoint's."""
  output_dir, outcome = best_run.output_dir, best_run.result
  rows = _history(output_dir)
  assert [r["step"] for r in rows] == ["3", "6"]
  assert list(rows[0]) == ["step", "train_loss", "accuracy", "auc", "f1", "loss", "mcc",
                           "precision", "recall", "best", "checkpoint",
                           "train_seconds_so_far", "eval_seconds_so_far"]
  aucs = [float(r["auc"]) for r in rows]
  best_step = [3, 6][aucs.index(max(aucs))]
  # A row is marked when it beats every earlier one.
  running = [aucs[i] > max(aucs[:i], default=-1) for i in range(2)]
  assert [r["best"] == "1" for r in rows] == running
  # Train loss: the mean of the steps since the previous evaluation.
  losses = dict(outcome.train_losses)
  assert sorted(losses) == list(range(1, 7))
  assert float(rows[1]["train_loss"]) == pytest.approx(
      sum(losses[s] for s in range(4, 7)) / 3, rel=1e-5)
  kept = eval_history.read_best(output_dir)
  assert kept["step"] == best_step and kept["metric"] == "auc"
  assert kept["checkpoint"] == os.path.join(output_dir, "best", "model.ckpt-%d" % best_step)
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    results = json.load(f)
  assert results["checkpoint"] == (kept["checkpoint"] if best_step != 6 else
                                   os.path.join(output_dir, "model.ckpt-6"))
  assert results["auc"] == pytest.approx(max(aucs), abs=1e-6)
  assert results["global_step"] == best_step
  with open(os.path.join(output_dir, "learning_curve.png"), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  assert [s for s, _ in scalars_in(os.path.join(output_dir, "eval"))["auc"]] == [3, 6]
  with open(outcome.summary) as f:
    summary = json.load(f)
  assert summary["training"]["restarts"] == 1
  assert summary["results"]["best"]["step"] == best_step
  assert summary["seconds"]["eval"] > 0


@pytest.mark.slow
# The stopping rule is Python over the history file; what TensorFlow does in it (training
# to a step, evaluating, keeping a checkpoint) the keeps-best test runs on both runtimes.
@pytest.mark.one_runtime("tf1")
def test_early_stopping_and_its_rerun(tmp_path, tiny_checkpoint):
  """A learning rate too small to change any float32 output leaves every metric where it
  was: the first evaluation stays the best, and patience 2 stops training after the third
  of 40 steps' evaluations. The same command again trains no further; eval and predict
  use the best (first) checkpoint."""
  output_dir = str(tmp_path / "out")
  flags = common_flags(tiny_checkpoint, output_dir) + [
      "--do_train", "--do_eval", "--do_predict", "--num_train_steps=40",
      "--eval_every_steps=3", "--save_checkpoints_steps=3", "--best_metric=loss",
      "--early_stopping_patience=2", "--learning_rate=1e-20"]
  run_flags(*flags)
  rows = _history(output_dir)
  assert [r["step"] for r in rows] == ["3", "6", "9"]
  assert [r["best"] for r in rows] == ["1", "0", "0"]
  assert len(set(r["loss"] for r in rows)) == 1
  kept = eval_history.read_best(output_dir)
  assert kept["step"] == 3
  with open(os.path.join(output_dir, "test_results.json")) as f:
    assert json.load(f)["checkpoint"] == kept["checkpoint"]
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    assert json.load(f)["global_step"] == 3
  assert sorted(n for n in os.listdir(output_dir) if n.startswith("eval")) == [
      "eval", "eval_best", "eval_history.csv", "eval_results.json", "eval_results.txt"]

  outcome = run_flags(*flags)
  assert _history(output_dir) == rows
  assert outcome.train_progress == []
  from modeling.checkpoint import checkpoint_global_step
  import tensorflow.compat.v1 as tf
  assert checkpoint_global_step(tf.train.latest_checkpoint(output_dir)) == 9

  # Another metric (or none) on this folder is refused before any work.
  with pytest.raises(FlagError, match="keeps the best checkpoint by --best_metric=loss"):
    run_flags(*[f for f in flags if not f.startswith(("--best_metric", "--early"))])
  # Predicting from the folder alone takes the best checkpoint too.
  run_flags("--output_dir=" + output_dir, "--do_predict",
            "--predict_file=" + os.path.join(JIGSAW, "test.csv"))
  with open(os.path.join(output_dir, "test_results.json")) as f:
    assert json.load(f)["checkpoint"] == kept["checkpoint"]


def test_an_unknown_best_metric_is_refused_before_training(tmp_path, tiny_checkpoint):
  output_dir = str(tmp_path / "out")
  with pytest.raises(FlagError, match="--best_metric=mean_auc is not a metric of this run's "
                     "evaluation \\(classification head\\); choose one of: accuracy, auc, f1, "
                     "loss, mcc, precision, recall"):
    run_flags(*common_flags(tiny_checkpoint, output_dir) + [
        "--do_train", "--do_eval", "--num_train_steps=4", "--eval_every_steps=2",
        "--best_metric=mean_auc"])
  assert not [n for n in os.listdir(output_dir) if n.startswith("model.ckpt")]


def test_eval_metric_names_of_a_run():
  class Processor(object):
    name = "jigsaw_toxic"
    label_spec = SingleLabel(["toxic"], ["0", "1"])
  assert metric_names_of(task_of(Processor()), []) == [
      "accuracy", "auc", "f1", "loss", "mcc", "precision", "recall"]


def test_a_history_without_the_best_metrics_column_is_refused(tmp_path):
  """The column deleted by hand reset the best and the patience without a word."""
  path = str(tmp_path / "eval_history.csv")
  history = EvalHistory(path)
  for step in (3, 6):
    history.append({"step": step, "auc": 0.5 + step / 100.0, "best": 0, "checkpoint": "c"})
  with open(path) as f:
    rows = list(csv.reader(f))
  column = rows[0].index("auc")
  with open(path, "w", newline="") as f:
    csv.writer(f, lineterminator="\n").writerows([r[:column] + r[column + 1:] for r in rows])
  assert EvalHistory.load(path, 10).steps() == [3, 6]  # (no metric is asked of it)
  with pytest.raises(eval_history.ArtefactFault) as error:
    EvalHistory.load(path, 10, needs="auc")
  assert str(error.value).startswith(
      "%s has no column auc, the metric the best checkpoint is chosen by" % path)


def test_a_best_record_missing_an_entry_says_which(tmp_path):
  output_dir = tmp_path / "out"
  (output_dir / "best").mkdir(parents=True)
  write_checkpoint(str(output_dir / "best" / "model.ckpt-3"), 3)
  record = {"metric": "auc", "value": 0.7, "step": 3, "lower_is_better": False}
  (output_dir / "best" / "best_checkpoint.json").write_text(json.dumps(record))
  with pytest.raises(eval_history.ArtefactFault) as error:
    eval_history.read_best(str(output_dir))
  assert "best_checkpoint.json: it has no entry checkpoint_name. Fix: restore the best/ " \
      "folder" in str(error.value)
