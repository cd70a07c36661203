"""Every head end to end: its loss against numpy, its streamed metrics against references
written here, and a run through run_classifier on real data whose written predictions
and metrics agree with each other."""

import csv
import io
import json
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import (JIGSAW, SAMPLES, TINY, TINY_VOCAB, assert_auc_of_scores, common_flags,
                      pairwise_auc, run_flags, sample_path)
from modeling import head, metrics
from pipeline import eval_report
from spec.heads.classification import SingleLabel
from spec.heads.multi_label import MultiLabel
from spec.heads.regression import Regression
from spec.heads.soft_target import SoftTarget

TOXIC_COLUMNS = ["toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate"]
BIAS = os.path.join(SAMPLES, "jigsaw_bias_davidson")


def _run(tensor_fn, *arrays):
  with tf.Graph().as_default(), tf.Session() as session:
    return session.run(tensor_fn(*[tf.constant(a) for a in arrays]))


def test_losses_equal_their_formulas():
  rng = np.random.RandomState(0)
  logits = rng.randn(5, 3).astype(np.float32)
  p = 1 / (1 + np.exp(-logits.astype(np.float64)))
  targets = rng.rand(5, 3).astype(np.float32)
  loss, outputs = _run(lambda l, t: head.loss_and_outputs(SoftTarget(list("abc")), l, t),
                       logits, targets)
  expected = -(targets * np.log(p) + (1 - targets) * np.log(1 - p)).mean(axis=1)
  np.testing.assert_allclose(loss, expected, rtol=1e-5)
  np.testing.assert_allclose(outputs, p, rtol=1e-5)
  loss, outputs = _run(lambda l, t: head.loss_and_outputs(Regression(list("abc")), l, t),
                       logits, targets)
  np.testing.assert_allclose(loss, ((logits - targets) ** 2).mean(axis=1), rtol=1e-5)
  np.testing.assert_array_equal(outputs, logits)
  classes = np.array([2, 0, 1, 1, 0], np.int32)
  loss, outputs = _run(lambda l, t: head.loss_and_outputs(SingleLabel(["y"], "abc"), l, t),
                       logits, classes)
  softmax = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
  np.testing.assert_allclose(loss, -np.log(softmax[np.arange(5), classes]), rtol=1e-5)


def ranks(values):
  order = sorted(range(len(values)), key=lambda i: values[i])
  result = [0.0] * len(values)
  i = 0
  while i < len(order):
    j = i
    while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
      j += 1
    for k in range(i, j + 1):
      result[order[k]] = (i + j) / 2.0 + 1
    i = j + 1
  return result


def spearman(x, y):
  return float(np.corrcoef(ranks(list(x)), ranks(list(y)))[0, 1])


def f1_at_half(p, y):
  tp = sum(1 for a, b in zip(p, y) if a >= 0.5 and b >= 0.5)
  fp = sum(1 for a, b in zip(p, y) if a >= 0.5 and b < 0.5)
  fn = sum(1 for a, b in zip(p, y) if a < 0.5 and b >= 0.5)
  return 2.0 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0


def _stream(metric_fn, arrays, batch=8):
  with tf.Graph().as_default():
    holders = {k: tf.placeholder(tf.as_dtype(v.dtype), [None] + list(v.shape[1:]))
               for k, v in arrays.items()}
    ops = metric_fn(**holders)
    with tf.Session() as session:
      session.run(tf.local_variables_initializer())
      n = len(next(iter(arrays.values())))
      for i in range(0, n, batch):
        session.run({k: op[1] for k, op in ops.items()},
                    {holders[k]: v[i:i + batch] for k, v in arrays.items()})
      return session.run({k: op[0] for k, op in ops.items()})


def _metric_inputs(labels, outputs, real):
  return {"per_example_loss": np.ones(len(real), np.float32), "labels": labels,
          "logits": outputs, "outputs": outputs, "is_real_example": real}


def test_multi_label_metrics_per_column_and_mean_with_undefined_columns():
  """The real labels of Jigsaw's 25 validation comments, and scores that rank them
  imperfectly; two columns have no positive row, so their AUC is undefined (NaN)."""
  rows = list(csv.DictReader(io.open(sample_path("jigsaw_toxic_sample", "valid.csv"),
                                     encoding="utf-8", newline="")))
  y = np.array([[float(r[c]) for c in TOXIC_COLUMNS] for r in rows], np.float32)
  rng = np.random.RandomState(4)
  p = np.clip(0.6 * y + rng.rand(*y.shape) * 0.7, 0, 1).astype(np.float32)
  padding = 7
  labels = np.concatenate([y, np.ones((padding, 6), np.float32)])
  outputs = np.concatenate([p, np.zeros((padding, 6), np.float32)])  # would spoil every metric
  real = np.array([1] * len(y) + [0] * padding, np.int32)
  result = _stream(metrics.metric_fn_for(MultiLabel(TOXIC_COLUMNS)),
                   _metric_inputs(labels, outputs, real))
  aucs = {}
  for i, column in enumerate(TOXIC_COLUMNS):
    aucs[column] = pairwise_auc(p[:, i], y[:, i] >= 0.5)
    if aucs[column] is None:
      assert np.isnan(result["auc_" + column]), column
    else:
      assert result["auc_" + column] == pytest.approx(aucs[column], abs=1e-6), column
    assert result["f1_" + column] == pytest.approx(f1_at_half(p[:, i], y[:, i]), abs=1e-6)
  assert [c for c in TOXIC_COLUMNS if aucs[c] is None] == ["severe_toxic", "threat"]
  defined = [a for a in aucs.values() if a is not None]
  assert result["mean_auc"] == pytest.approx(sum(defined) / len(defined), abs=1e-6)
  assert result["num_examples"] == 25


def test_soft_target_and_regression_metrics_against_references():
  rows = list(csv.DictReader(io.open(os.path.join(BIAS, "dev.csv"), encoding="utf-8",
                                     newline="")))
  columns = ["target", "insult"]
  y = np.array([[float(r[c]) for c in columns] for r in rows], np.float32)
  rng = np.random.RandomState(5)
  p = np.clip(y * 0.5 + rng.rand(*y.shape) * 0.5, 0, 1).astype(np.float32)
  real = np.ones(len(y), np.int32)
  soft = _stream(metrics.metric_fn_for(SoftTarget(columns)), _metric_inputs(y, p, real), 64)
  for i, c in enumerate(columns):
    assert soft["auc_" + c] == pytest.approx(pairwise_auc(p[:, i], y[:, i] >= 0.5), abs=1e-6)
    assert soft["spearman_" + c] == pytest.approx(spearman(p[:, i], y[:, i]), abs=1e-6)
    assert soft["mse_" + c] == pytest.approx(float(np.mean((p[:, i] - y[:, i]) ** 2)), abs=1e-6)
  assert soft["mean_spearman"] == pytest.approx(
      np.mean([spearman(p[:, i], y[:, i]) for i in range(2)]), abs=1e-6)
  one = _stream(metrics.metric_fn_for(Regression(["target"])),
                _metric_inputs(y[:, :1] * 5, p[:, :1] * 5, real), 64)
  assert one["pearson"] == pytest.approx(float(np.corrcoef(p[:, 0], y[:, 0])[0, 1]), abs=1e-5)
  assert one["spearman"] == pytest.approx(spearman(p[:, 0], y[:, 0]), abs=1e-6)
  assert one["mse"] == pytest.approx(float(np.mean((p[:, 0] * 5 - y[:, 0] * 5) ** 2)), rel=1e-5)


# --- end to end through run_classifier -------------------------------------------------

def _predictions(path):
  with io.open(path, encoding="utf-8", newline="") as f:
    return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def _tiny_flags(checkpoint, output_dir):
  return ["--bert_config_file=" + os.path.join(TINY, "bert_config.json"),
          "--vocab_file=" + TINY_VOCAB, "--init_checkpoint=" + checkpoint,
          "--output_dir=" + output_dir, "--max_seq_length=32", "--train_batch_size=8",
          "--eval_batch_size=8", "--predict_batch_size=8", "--learning_rate=1e-3",
          "--log_every_steps=4"]


@pytest.mark.slow
def test_multi_label_run_on_jigsaw_toxic_writes_six_probabilities_per_row(tmp_path,
                                                                          tiny_checkpoint):
  output_dir = str(tmp_path / "out")
  valid = os.path.join(JIGSAW, "valid.csv")
  run_flags(*common_flags(tiny_checkpoint, output_dir) + [
      "--label_column=" + ",".join(TOXIC_COLUMNS), "--do_train", "--do_eval", "--do_predict",
      "--num_train_steps=12", "--predict_file=" + valid, "--class_weights=balanced",
      "--eval_report"])
  rows = _predictions(os.path.join(output_dir, "test_results.tsv"))
  assert list(rows[0]) == ["id"] + ["probability_%s" % c for c in TOXIC_COLUMNS]
  truth = list(csv.DictReader(io.open(valid, encoding="utf-8", newline="")))
  assert [r["id"] for r in rows] == [t["id"] for t in truth]  # every row, in order
  p = np.array([[float(r["probability_" + c]) for c in TOXIC_COLUMNS] for r in rows])
  y = np.array([[float(t[c]) for c in TOXIC_COLUMNS] for t in truth])
  assert ((p > 0) & (p < 1)).all()
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    results = json.load(f)
  for i, c in enumerate(TOXIC_COLUMNS):  # the eval's metrics are those of the written rows
    expected = pairwise_auc(p[:, i], y[:, i] >= 0.5)
    if expected is None:
      assert results["auc_" + c] is None
    else:
      assert_auc_of_scores(results["auc_" + c], p[:, i], y[:, i] >= 0.5)
  loss = -(y * np.log(p) + (1 - y) * np.log(1 - p)).mean()
  assert results["loss"] == pytest.approx(loss, abs=2e-4)
  # --eval_report: its files, and its figures of the dev rows against the eval's (the
  # figures themselves: tests/test_eval_report.py).
  folder = os.path.join(output_dir, "eval_report")
  assert sorted(os.listdir(folder)) == sorted(
      ["report.json", "report.md", "per_class.tsv", "confusion.tsv", "confusion.png",
       "roc.png", "pr.png", "reliability.png"])
  for name in ("confusion.png", "roc.png", "pr.png", "reliability.png"):
    with open(os.path.join(folder, name), "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  with open(os.path.join(folder, "report.json")) as f:
    report = json.load(f)
  assert report["num_examples"] == results["num_examples"] == len(truth)
  assert [r["name"] for r in report["per_class"]] == TOXIC_COLUMNS
  for row in report["per_class"]:  # (every dev row, the real ones only)
    assert row["support"] == sum(1 for t in truth if t[row["name"]] == "1")
    assert row["tp"] + row["fp"] + row["fn"] + row["tn"] == len(truth)
    if results["auc_" + row["name"]] is None:
      assert row["roc_auc"] is None
    else:  # (the eval's AUC and the report's are of the same outputs, up to another graph)
      assert row["roc_auc"] == pytest.approx(results["auc_" + row["name"]], abs=0.02)
  with open(os.path.join(folder, "per_class.tsv")) as f:
    lines = f.read().splitlines()
  assert lines[0].split("\t") == list(eval_report.PER_CLASS_COLUMNS) and len(lines) == 7
  with open(os.path.join(folder, "report.md")) as f:
    assert "| toxic |" in f.read()
  with open(os.path.join(output_dir, "model_card.json")) as f:
    card = json.load(f)
  assert (card["head"], card["label_columns"], card["num_outputs"]) == (
      "multi_label", TOXIC_COLUMNS, 6)
  # --class_weights=balanced: each column's negatives over its positives in the train file
  # (the eval's loss above is unweighted).
  train = list(csv.DictReader(io.open(os.path.join(JIGSAW, "train.csv"), encoding="utf-8",
                                      newline="")))
  positives = {c: sum(float(t[c]) for t in train) for c in TOXIC_COLUMNS}
  assert card["training"]["data"][0]["class_weights"] == pytest.approx(
      {c: (len(train) - positives[c]) / positives[c] for c in TOXIC_COLUMNS}, rel=1e-12)
  # A later predict run takes the head and the columns from the card.
  again = str(tmp_path / "again.tsv")
  run_flags("--output_dir=" + output_dir, "--do_predict", "--predict_file=" + valid)
  os.rename(os.path.join(output_dir, "test_results.tsv"), again)
  assert _predictions(again) == rows


@pytest.mark.slow
@pytest.mark.one_runtime("tf1")  # (the metric is numpy's on both; the multi-label run runs on both)
def test_soft_target_run_on_jigsaw_bias_reports_the_competition_metric(tmp_path,
                                                                        tiny_checkpoint):
  """jigsaw_bias on tweets laid out as Kaggle's files: the fraction is learnt as a soft
  target with the auxiliary columns the train file fills, and the eval's bias metric is
  that of the written predictions of the same dev rows."""
  output_dir = str(tmp_path / "out")
  dev = os.path.join(BIAS, "dev.csv")
  run_flags(*_tiny_flags(tiny_checkpoint, output_dir) + [
      "--task_name=jigsaw_bias", "--data_dir=" + BIAS, "--auxiliary_targets", "--do_train",
      "--do_eval", "--do_predict", "--num_train_steps=12", "--predict_file=" + dev])
  # obscene, threat and sexual_explicit are empty in these files: left out.
  columns = ["target", "severe_toxicity", "identity_attack", "insult"]
  rows = _predictions(os.path.join(output_dir, "test_results.tsv"))
  assert len(rows) == 400
  assert list(rows[0])[:5] == ["id"] + ["prediction_" + c for c in columns]
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    results = json.load(f)
  truth = list(csv.DictReader(io.open(dev, encoding="utf-8", newline="")))
  p = np.array([[float(r["prediction_" + c]) for c in columns] for r in rows])
  y = np.array([[float(t[c]) for c in columns] for t in truth])
  for i, c in enumerate(columns):
    assert_auc_of_scores(results["auc_" + c], p[:, i], y[:, i] >= 0.5)
    assert results["spearman_" + c] == pytest.approx(spearman(p[:, i], y[:, i]), abs=2e-3)
  from pipeline.bias_metrics import IDENTITY_COLUMNS, bias_report
  identities = {n: [float(t[n]) if t[n] else float("nan") for t in truth]
                for n in IDENTITY_COLUMNS}
  table, summary = bias_report(p[:, 0], y[:, 0], identities)
  assert results["bias_final_metric"] == pytest.approx(summary["final_metric"], abs=1e-3)
  assert results["bias_overall_auc"] == pytest.approx(summary["overall_auc"], abs=1e-3)
  with io.open(os.path.join(output_dir, "bias_metrics.csv"), encoding="utf-8") as f:
    written = list(csv.DictReader(f))
  assert [r["identity"] for r in written] == list(IDENTITY_COLUMNS)
  assert [int(r["subgroup_size"]) for r in written] == table["subgroup_size"].tolist()
  with open(os.path.join(output_dir, "bias_metrics.png"), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
# (the head's graph and files are the same code on both; the multi-label run runs on both)
@pytest.mark.one_runtime("tf2")
def test_regression_on_any_numeric_column_of_a_csv(tmp_path, tiny_checkpoint):
  """Davidson's tweets: how many raters found each tweet offensive, learnt by regression
  from a plain csv with mean pooling; predictions and Pearson agree with each other, and a
  run from the model card alone predicts the same (it takes the pooling from the card)."""
  output_dir = str(tmp_path / "out")
  data = sample_path("davidson_hate_offensive", "labeled_data.csv")
  run_flags(*_tiny_flags(tiny_checkpoint, output_dir) + [
      "--task_name=csv", "--train_file=" + data, "--eval_file=" + data,
      "--predict_file=" + data, "--text_column=tweet", "--label_column=offensive_language",
      "--id_column=0", "--head=regression", "--pooling=mean", "--do_train", "--do_eval",
      "--do_predict", "--num_train_steps=12"])
  rows = _predictions(os.path.join(output_dir, "test_results.tsv"))
  truth = list(csv.DictReader(io.open(data, encoding="utf-8", newline="")))
  assert len(rows) == 300 and list(rows[0]) == ["id", "prediction"]
  predicted = np.array([float(r["prediction"]) for r in rows])
  actual = np.array([float(t["offensive_language"]) for t in truth])
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    results = json.load(f)
  assert results["pearson"] == pytest.approx(float(np.corrcoef(predicted, actual)[0, 1]),
                                             abs=1e-4)
  assert results["mse"] == pytest.approx(float(np.mean((predicted - actual) ** 2)), rel=1e-4)
  assert results["loss"] == pytest.approx(results["mse"], rel=1e-4)
  with open(os.path.join(output_dir, "model_card.json")) as f:
    card = json.load(f)
  assert (card["head"], card["label_columns"], card["pooling"]) == (
      "regression", ["offensive_language"], "mean")
  os.rename(os.path.join(output_dir, "test_results.tsv"), str(tmp_path / "first.tsv"))
  run_flags("--output_dir=" + output_dir, "--do_predict", "--predict_file=" + data,
            "--text_column=tweet", "--id_column=0")  # (the layout is the run's, not the card's)
  assert _predictions(os.path.join(output_dir, "test_results.tsv")) == rows
  from spec.run_errors import FlagError
  with pytest.raises(FlagError, match="says pooling=mean, but this run has cls"):
    run_flags("--output_dir=" + output_dir, "--do_predict", "--predict_file=" + data,
              "--text_column=tweet", "--id_column=0", "--pooling=cls")


def test_mean_pooling_averages_the_last_layer_over_real_tokens():
  from conftest import model_features, small_config
  from modeling.bert import BertModel
  from modeling.model_fn import encode
  config = small_config()
  with tf.Graph().as_default():
    features = model_features(config, batch=3, seq=10)
    mask = np.array([[1] * 10, [1] * 4 + [0] * 6, [1] * 7 + [0] * 3], np.int32)
    features["input_mask"] = tf.constant(mask)
    with tf.variable_scope("a"):
      pooled = encode(config, features, False, False, pooling="mean")
    with tf.variable_scope("a", reuse=True):
      sequence = BertModel(config, False, features["input_ids"], features["input_mask"],
                           features["segment_ids"]).get_sequence_output()
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      pooled, sequence = session.run([pooled, sequence])
  expected = [sequence[i, :mask[i].sum()].mean(axis=0) for i in range(3)]
  np.testing.assert_allclose(pooled, expected, rtol=1e-5, atol=1e-6)


def test_flags_a_head_cannot_use_are_refused_before_any_work(tmp_path, tiny_checkpoint):
  from spec.run_errors import FlagError
  output_dir = str(tmp_path / "never")
  flags = common_flags(tiny_checkpoint, output_dir)
  cases = [
      (["--class_weights=1,2", "--do_eval"],
       "--class_weights weighs the training loss; it does nothing without --do_train"),
      (["--task_name=sst-2", "--labels=0,1", "--do_train"],
       "--labels lists the classes of a task whose files may not name them (csv's label "
       "column, TweetEval's indices); task sst-2 has its own"),
      (["--task_name=sst-2", "--label_column=label", "--do_train"],
       "--label_column picks label columns of the csv and Jigsaw tasks; task sst-2 reads"),
      (["--head=regression", "--do_train"],
       "--head=regression cannot be used with task jigsaw_toxic; its labels train: "
       "classification, multi_label, soft_target"),
      (["--label_column=toxic,,insult", "--do_train"],
       "--label_column=toxic,,insult has an empty column name"),
      (["--auxiliary_targets", "--do_train"], "--auxiliary_targets is for task jigsaw_bias"),
      (["--truncation_head_tokens=-3", "--truncation=head_tail", "--do_train"],
       "head_tokens must be a whole number of tokens >= 0"),
      (["--class_weights=", "--do_train"], "--class_weights is empty: give one weight per "
       "class (or label column), or 'balanced', or drop the flag"),
      (["--label_column=toxic,insult", "--class_weights=1,2,3", "--do_train"],
       "--class_weights has 3 values but the head has 2 label columns (toxic, insult)"),
  ]
  for extra, message in cases:
    with pytest.raises(FlagError) as error:
      run_flags(*flags + extra)
    assert message in str(error.value), extra
    assert not os.path.exists(os.path.join(output_dir, "model_card.json"))


@pytest.mark.slow
@pytest.mark.one_runtime("tf2")  # (the task's reading and batching are the same code on both)
def test_jigsaw_bias_classification_head_and_other_batch_sizes(tmp_path, tiny_checkpoint):
  """target >= 0.5 as two classes; the bias metric's own pass over the dev rows works with
  an eval batch size that does not divide the predict batch size."""
  output_dir = str(tmp_path / "out")
  run_flags(*_tiny_flags(tiny_checkpoint, output_dir) + [
      "--task_name=jigsaw_bias", "--data_dir=" + BIAS, "--head=classification",
      "--eval_batch_size=16", "--predict_batch_size=12", "--do_train", "--do_eval",
      "--num_train_steps=4"])
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    results = json.load(f)
  assert results["num_examples"] == 400 and 0.0 <= results["accuracy"] <= 1.0
  truth = list(csv.DictReader(io.open(os.path.join(BIAS, "dev.csv"), encoding="utf-8",
                                      newline="")))
  toxic = sum(1 for t in truth if float(t["target"]) >= 0.5)
  assert results["majority_baseline_accuracy"] == pytest.approx(
      max(toxic, 400 - toxic) / 400.0)
  assert 0.0 < results["bias_final_metric"] < 1.0
  with open(os.path.join(output_dir, "features", "dev.tf_record.meta.json")) as f:
    assert json.load(f)["num_padding"] == 32  # 400 + 32 = 432, a multiple of 16 and 12


@pytest.mark.tf1_only
def test_a_checkpoint_fine_tuned_by_googles_run_classifier_loads_and_predicts_the_same(
    tmp_path):
  """bert-tensorflow's run_classifier.create_model (Google's classifier graph) on BERT-Tiny's
  config, saved as a fine-tuned checkpoint: our model_fn restores its head by Google's
  variable names and gives the same probabilities."""
  from conftest import google_bert, model_features
  from modeling.bert import BertConfig
  from modeling.checkpoint import head_shape
  from modeling.model_fn import ModelSettings, model_fn_builder
  google = google_bert("run_classifier")
  google_modeling = google_bert("modeling")
  config_path = os.path.join(TINY, "bert_config.json")
  config = BertConfig.from_json_file(config_path)
  checkpoint = str(tmp_path / "google_fine_tuned.ckpt")
  with tf.Graph().as_default():
    tf.set_random_seed(3)
    features = model_features(config, batch=5, seq=16)
    _, _, _, probabilities = google.create_model(
        google_modeling.BertConfig.from_json_file(config_path), False,
        features["input_ids"], features["input_mask"], features["segment_ids"],
        features["label_ids"], 3, False)
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      # A trained head is not near zero: give it values, as fine-tuning would.
      for variable in tf.trainable_variables():
        if variable.op.name in ("output_weights", "output_bias"):
          session.run(variable.assign(tf.random.normal(variable.shape, stddev=0.5, seed=4)))
      expected = session.run(probabilities)
      tf.train.Saver().save(session, checkpoint)
  assert head_shape(checkpoint) == [3, 128]
  with tf.Graph().as_default():
    features = model_features(config, batch=5, seq=16)
    model_fn = model_fn_builder(config, SingleLabel(["label"], ["0", "1", "2"]),
                                ModelSettings(init_checkpoint=checkpoint, learning_rate=1e-3))
    spec = model_fn(features, None, tf.estimator.ModeKeys.PREDICT, {})
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())  # init_from_checkpoint sets the values
      ours = session.run(spec.predictions["outputs"])
  np.testing.assert_allclose(ours, expected, atol=1e-5)
  assert not np.allclose(expected, 1.0 / 3, atol=1e-3)  # the head really does something
