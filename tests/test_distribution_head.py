"""The distribution head (spec/heads/distribution.py): each row's counts or shares of
several classes, learnt as one softmax. Its reading of cells against a plain division,
its loss against numpy, and a run on Davidson's tweets (how many raters chose hate speech,
offensive language or neither) whose metrics, temperature, predictions and exports are
checked against scikit-learn, scipy and each other."""

import csv
import fractions
import io
import json
import math
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from hypothesis import given, settings, strategies as st

from conftest import IS_TF1, run_flags, sample_path, tiny_tweet_flags
from modeling import head
from spec.heads import build_spec, from_card
from spec.heads.distribution import Distribution
from spec.labels import LabelError
from spec.run_errors import FlagError

COLUMNS = ["hate_speech", "offensive_language", "neither"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 10 ** 6), st.floats(0, 1e6, allow_nan=False),
                          st.floats(0, 1.7e308, allow_nan=False)),
                min_size=2, max_size=6).filter(lambda values: sum(values) > 0))
def test_a_row_is_its_cells_divided_by_their_sum(values):
  """Shares of the exact sum (to a float's rounding), counts near float's largest too."""
  spec = Distribution(["c%d" % i for i in range(len(values))])
  cells = [repr(v) for v in values]
  shares = spec.parse(cells)
  read = [fractions.Fraction(float(c)) for c in cells]  # (the numbers as floats read them)
  total = sum(read)
  for share, value in zip(shares, read):
    assert share == pytest.approx(float(value / total), rel=1e-15,
                                  abs=1e-320)  # (a subnormal share has fewer digits)
  assert math.fsum(shares) == pytest.approx(1.0, abs=1e-12)
  assert spec.output_targets(shares) == shares
  assert spec.stratum(shares) == "c%d" % max(range(len(values)), key=lambda k: shares[k])


def test_cells_that_are_no_counts_are_refused_naming_the_column():
  spec = Distribution(COLUMNS)
  assert spec.parse(["1", "2", "0"]) == (1 / 3.0, 2 / 3.0, 0.0)
  assert spec.parse([" 0.25", "0.5 ", "0"]) == spec.parse(["1", "2", "0"])
  assert spec.parse(["1e308", "1.5e308", "0"]) == pytest.approx((0.4, 0.6, 0.0), rel=1e-15)
  cases = [(["1", "-1", "0"], 1, "'-1' is below 0. Fix: give a count or share of at least 0",
            False),
           (["0", "0", "0.0"], 0, "every label column of the row is 0, so it spreads over no "
            "class. Fix: give a class a count or share above 0, or remove the row", True),
           (["1", "", "2"], 1, "the value is empty. Fix: fill in a count or share of at least "
            "0, remove the row", True),
           (["1", "2", "many"], 2, "'many' is not a number. Fix: give a count or share of at "
            "least 0", False),
           (["inf", "1", "1"], 0, "the value 'inf' is infinite. Fix: give a count or share of "
            "at least 0", False)]
  for cells, index, message, missing in cases:
    with pytest.raises(LabelError) as error:
      spec.parse(cells)
    assert (str(error.value), error.value.index, error.value.missing) == (message, index,
                                                                           missing)
  with pytest.raises(FlagError, match=r"^a distribution head spreads each row over at least 2 "
                     r"label columns, one per class, not 1 \(toxic\); for one fraction per "
                     r"row use --head=soft_target$"):
    build_spec("distribution", ["toxic"])
  with pytest.raises(FlagError, match="a distribution head has no class list"):
    build_spec("distribution", COLUMNS, ["a", "b", "c"])


def test_its_loss_is_the_cross_entropy_against_the_shares():
  spec = from_card(Distribution(COLUMNS).to_card())
  rng = np.random.RandomState(5)
  logits = rng.randn(6, 3).astype(np.float32) * 2
  shares = rng.dirichlet([0.5] * 3, 6).astype(np.float32)
  with tf.Graph().as_default(), tf.Session() as session:
    loss, outputs = session.run(head.loss_and_outputs(spec, tf.constant(logits),
                                                      tf.constant(shares)))
  z = logits.astype(np.float64)
  log_p = z - z.max(1, keepdims=True) - np.log(np.exp(z - z.max(1, keepdims=True)).sum(1,
                                                                                      keepdims=True))
  np.testing.assert_allclose(loss, -(shares * log_p).sum(1), rtol=1e-5)
  np.testing.assert_allclose(outputs, np.exp(log_p), rtol=1e-5)
  assert spec.prediction_header() == ["probability_%s" % c for c in COLUMNS] + ["prediction"]
  assert spec.prediction_cells([0.2, 0.5, 0.3])[-1] == "offensive_language"
  assert spec.result(COLUMNS, [0.2, 0.3, 0.5]) == {
      "probabilities": dict(zip(COLUMNS, [0.2, 0.3, 0.5])), "label": "neither"}


def _flags(checkpoint, output_dir, data):
  return tiny_tweet_flags(checkpoint, output_dir, data) + [
      "--label_column=" + ",".join(COLUMNS), "--head=distribution"]


def _softmax(z):
  z = np.exp(z - z.max(axis=1, keepdims=True))
  return z / z.sum(axis=1, keepdims=True)


def _predicted(output_dir):
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    rows = list(csv.DictReader(f, delimiter="\t"))
  return rows, np.array([[float(r["probability_%s" % c]) for c in COLUMNS] for r in rows],
                        np.float64)


@pytest.mark.slow
# (the head's graph is its graph_loss, checked on both runtimes above, and softmax; its
# float records, collected column metrics, calibration and export are the code that
# tests/test_heads.py's multi-label run and the shared Jigsaw model run on both)
@pytest.mark.one_runtime("tf2")
def test_a_run_on_raters_counts_trains_evaluates_calibrates_predicts_and_exports(
    tmp_path, tiny_checkpoint):
  """Davidson's 300 sample tweets, each with how many raters chose each class: the
  evaluation's loss is the cross-entropy against the shares and its metrics scikit-learn's
  and scipy's; a second run on the folder calibrates it, with the temperature that
  minimises the dev cross-entropy (scipy); test_results.tsv, the SavedModel's Predictor,
  the transformers folder's config and (TF 2.15) the ONNX predictor agree; a run from the
  card alone predicts the same rows."""
  import sklearn.metrics as sk
  from scipy.optimize import minimize_scalar
  from scipy.stats import spearmanr
  output_dir = str(tmp_path / "out")
  data = sample_path("davidson_hate_offensive", "labeled_data.csv")
  run_flags(*_flags(tiny_checkpoint, output_dir, data) + [
      "--do_train", "--do_eval", "--do_predict", "--num_train_steps=12"])
  truth = list(csv.DictReader(io.open(data, encoding="utf-8", newline="")))
  counts = np.array([[float(t[c]) for c in COLUMNS] for t in truth])
  shares = counts / counts.sum(axis=1, keepdims=True)
  rows, at_one = _predicted(output_dir)
  assert len(rows) == 300 and list(rows[0]) == (
      ["id"] + ["probability_%s" % c for c in COLUMNS] + ["prediction"])
  assert [r["id"] for r in rows] == [t[""] for t in truth]
  np.testing.assert_allclose(at_one.sum(axis=1), 1.0, atol=1e-5)
  assert [r["prediction"] for r in rows] == [COLUMNS[k] for k in at_one.argmax(axis=1)]
  results = json.load(open(os.path.join(output_dir, "eval_results.json")))
  cross_entropy = lambda p: float(-(shares * np.log(p)).sum(axis=1).mean())
  assert results["num_examples"] == 300 and results["global_step"] == 12
  assert results["loss"] == pytest.approx(cross_entropy(at_one), rel=1e-5)
  for j, name in enumerate(COLUMNS):
    assert results["auc_" + name] == pytest.approx(
        sk.roc_auc_score(shares[:, j] >= 0.5, at_one[:, j]), abs=1e-6)
    assert results["spearman_" + name] == pytest.approx(
        spearmanr(at_one[:, j], shares[:, j]).correlation, abs=1e-5)
    assert results["mse_" + name] == pytest.approx(
        float(np.mean((at_one[:, j] - shares[:, j]) ** 2)), rel=1e-4)
  assert results["mean_auc"] == pytest.approx(np.mean([results["auc_" + c] for c in COLUMNS]),
                                              abs=1e-6)

  formats = "saved_model,hf" if IS_TF1 else "saved_model,hf,onnx"
  run_flags(*_flags(tiny_checkpoint, output_dir, data) + [
      "--do_eval", "--do_predict", "--do_export", "--calibrate", "--export_format=" + formats])
  results = json.load(open(os.path.join(output_dir, "eval_results.json")))
  card = json.load(open(os.path.join(output_dir, "model_card.json")))
  temperature = results["temperature"]
  assert card["label_spec"] == {"kind": "distribution", "columns": COLUMNS, "classes": None,
                                "temperature": temperature}
  logits = np.log(at_one)  # (the logits up to a constant, which softmax ignores)
  reference = minimize_scalar(lambda u: cross_entropy(_softmax(logits / np.exp(u))),
                              bounds=(np.log(0.01), np.log(100.0)), method="bounded",
                              options={"xatol": 1e-9})
  assert temperature == pytest.approx(np.exp(reference.x), rel=1e-3)
  assert results["nll_uncalibrated"] == pytest.approx(cross_entropy(at_one), rel=1e-5)
  assert results["nll_calibrated"] == pytest.approx(reference.fun, rel=1e-5)
  rows, predicted = _predicted(output_dir)
  np.testing.assert_allclose(predicted, _softmax(logits / temperature), atol=1e-5)

  from data.features import InputExample
  from serving.predictor import Predictor
  texts = [t["tweet"] for t in truth[:40]]
  with Predictor(output_dir) as predictor:
    served = predictor.predict(texts)
    outputs = np.array(predictor.predict_outputs([InputExample(i, t)
                                                  for i, t in enumerate(texts)]))
  np.testing.assert_allclose(outputs, predicted[:40], atol=1e-5)
  assert [s["label"] for s in served] == [r["prediction"] for r in rows[:40]]
  assert sorted(served[0]["probabilities"]) == sorted(COLUMNS)
  export = os.path.join(output_dir, "export")
  (stamp,) = os.listdir(export)
  with open(os.path.join(export, stamp, "hf", "config.json")) as f:
    config = json.load(f)
  from modeling.convert_hf import hf_head
  assert config["problem_type"] == "single_label_classification"
  assert hf_head(config) == ("distribution", COLUMNS)
  if not IS_TF1:
    from serving.onnx_predictor import OnnxPredictor
    onnx_outputs = np.array(OnnxPredictor(os.path.join(export, stamp)).predict_outputs(
        [InputExample(i, t["tweet"]) for i, t in enumerate(truth)]))
    np.testing.assert_allclose(onnx_outputs, predicted, atol=1e-4)
    quality = json.load(open(os.path.join(export, stamp, "onnx", "int8_quality.json")))
    assert quality["fp32"] == pytest.approx(np.mean(
        [sk.roc_auc_score(shares[:, j] >= 0.5, onnx_outputs[:, j]) for j in range(3)]),
        abs=1e-6)

  os.rename(os.path.join(output_dir, "test_results.tsv"), str(tmp_path / "first.tsv"))
  run_flags("--output_dir=" + output_dir, "--do_predict", "--predict_file=" + data,
            "--text_column=tweet", "--id_column=0")
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    assert list(csv.DictReader(f, delimiter="\t")) == rows
  # The card's columns in another order would name each output after another's class.
  with pytest.raises(FlagError) as error:
    run_flags("--output_dir=" + output_dir, "--do_predict", "--predict_file=" + data,
              "--text_column=tweet", "--id_column=0",
              "--label_column=neither,offensive_language,hate_speech")
  assert str(error.value) == (
      "%s says label_columns=hate_speech,offensive_language,neither, but this run has "
      "neither,offensive_language,hate_speech. The model was trained with hate_speech,"
      "offensive_language,neither: drop the flag to use the model's own, or train a new "
      "model into another --output_dir" % os.path.join(output_dir, "model_card.json"))


@pytest.mark.parametrize("extra, message", [
    (["--tune_thresholds=f1"], "--tune_thresholds"),
    (["--class_weights=balanced"], "--class_weights"),
    (["--labels=a,b,c"], "--labels lists the classes of a classification head; a "
     "distribution head's outputs are its label columns"),
    (["--doc_stride=8", "--window_aggregation=max"], "max")])
def test_what_a_distribution_cannot_mean_is_refused_before_any_work(tmp_path, tiny_checkpoint,
                                                                     extra, message):
  output_dir = str(tmp_path / "out")
  data = sample_path("davidson_hate_offensive", "labeled_data.csv")
  with pytest.raises(FlagError) as error:
    run_flags(*_flags(tiny_checkpoint, output_dir, data) + [
        "--do_train", "--do_eval", "--num_train_steps=2"] + extra)
  assert message in str(error.value)
  assert not os.path.exists(os.path.join(output_dir, "model_card.json"))


def test_a_row_no_rater_chose_is_refused_or_skipped_and_counted(tmp_path, tiny_checkpoint):
  """A row whose every column is 0 has no label: refused naming its line and column, or
  skipped and counted with --skip_malformed_rows, as a row with an empty label is."""
  from data.data_error import DataError
  data = sample_path("davidson_hate_offensive", "labeled_data.csv")
  with io.open(data, encoding="utf-8", newline="") as f:
    header, *records = list(csv.reader(f))
  records = records[:39]
  for column in COLUMNS:
    records[2][header.index(column)] = "0"
  zeros = str(tmp_path / "zeros.csv")
  with io.open(zeros, "w", encoding="utf-8", newline="") as f:
    csv.writer(f, lineterminator="\n").writerows([header] + records)
  flags = _flags(tiny_checkpoint, str(tmp_path / "out"), zeros) + [
      "--do_train", "--num_train_steps=1"]
  with pytest.raises(DataError) as error:
    run_flags(*flags)
  assert str(error.value) == (
      "%s, line 4, column 'hate_speech': every label column of the row is 0, so it spreads "
      "over no class. Fix: give a class a count or share above 0, or remove the row, or pass "
      "--skip_malformed_rows to skip and count such rows" % zeros)
  from data.processors import get_processor
  skipping = get_processor("csv", files={"train": zeros}, text_column="tweet",
                           label_columns=COLUMNS, id_column="0", head="distribution",
                           skip_malformed_rows=True)
  examples = skipping.get_examples("train")
  assert len(examples) == 38 and skipping.skipped["train"] == {"a missing label": 1}
  assert [e.guid for e in examples] == [r[0] for r in records[:2] + records[3:]]
