"""--calibrate: temperature scaling fitted on the dev split. The fit against scipy's
minimiser and scikit-learn's log-loss, an overconfident model cooled to the temperature it
was made with, the graph that divides the logits by the card's temperature, the checks of a
temperature wherever one is read, and a run's fit (the shared model of conftest is
calibrated, so every predictor test reads a calibrated export)."""

import json
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from hypothesis import given, settings, strategies as st

from conftest import JIGSAW, common_flags, model_features, run_flags, small_config
from data.features import InputExample
from modeling.model_fn import ModelSettings, model_fn_builder
from pipeline import calibration
from spec.heads import from_card
from spec.heads.classification import SingleLabel
from spec.heads.multi_label import MultiLabel
from spec.heads.regression import Regression
from spec.heads.soft_target import SoftTarget
from spec.model_card import CardError, from_json
from spec.run_errors import FlagError


def _softmax(z):
  z = np.exp(z - z.max(axis=1, keepdims=True))
  return z / z.sum(axis=1, keepdims=True)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2 ** 31 - 1), st.sampled_from([0.3, 1.0, 4.0]))
def test_the_fit_is_scipy_s_minimum_of_the_log_loss(seed, scale):
  """On random logits of three classes (and of one soft-target column), the temperature
  is the one scipy's bounded minimiser finds, and the likelihood it minimises is the
  log-loss of the scaled probabilities (scipy's log_softmax; scikit-learn's log_loss,
  which clips probabilities at 1e-15, where none is that small)."""
  from scipy.optimize import minimize_scalar
  from scipy.special import log_softmax
  from sklearn.metrics import log_loss
  rng = np.random.RandomState(seed)
  logits = rng.normal(0, scale, (200, 3)) + 2.0 * np.eye(3)[rng.randint(0, 3, 200)]
  classes = rng.randint(0, 3, 200)
  logits[np.arange(200), classes] += rng.normal(0.5, 1.0, 200)  # (some signal)
  for t in (0.5, 1.0, 3.0):
    nll = calibration.softmax_nll(logits, classes, t)
    assert nll == pytest.approx(-np.mean(log_softmax(logits / t, axis=1)[np.arange(200),
                                                                           classes]), rel=1e-9)
    if _softmax(logits / t).min() > 1e-12:
      assert nll == pytest.approx(log_loss(classes, _softmax(logits / t), labels=[0, 1, 2]),
                                  rel=1e-9)
  column = logits[:, 0]
  fractions = 1 / (1 + np.exp(-(0.7 * column + rng.normal(0, 0.5, 200))))  # (some signal)
  sigmoid = 1 / (1 + np.exp(-column / 2.0))
  assert calibration.sigmoid_nll(column, fractions, 2.0) == pytest.approx(
      -np.mean(fractions * np.log(sigmoid) + (1 - fractions) * np.log(1 - sigmoid)), rel=1e-9)
  for nll in (lambda t: calibration.softmax_nll(logits, classes, t),
              lambda t: calibration.sigmoid_nll(column, fractions, t)):
    reference = minimize_scalar(lambda u: nll(np.exp(u)), bounds=np.log([0.01, 100.0]),
                                method="bounded", options={"xatol": 1e-10})
    fitted = calibration.fit_temperature(nll)
    near = min(abs(reference.x - np.log([0.01, 100.0])))
    if near < calibration.AT_BOUND:  # (no minimum inside)
      assert fitted is None
      continue
    if near < 0.01:  # (a minimum inside, near an end: found, or taken for the end)
      assert fitted is None or fitted == pytest.approx(np.exp(reference.x), rel=1e-4)
      continue
    assert fitted == pytest.approx(np.exp(reference.x), rel=1e-4)
    assert nll(fitted) <= reference.fun + 1e-12


def test_an_overconfident_model_is_cooled_to_the_temperature_it_was_made_with(caplog):
  """Labels drawn from sigmoid(z) and logits of 3 z: the fit finds T near 3, the
  calibrated probabilities are those of z, and the calibration error falls. A column of
  one label, and one whose logits tell nothing, have no temperature: they stay at 1, and
  the log says why."""
  rng = np.random.RandomState(0)
  z = rng.normal(0, 2, (20000, 3))
  labels = (rng.uniform(size=z.shape) < 1 / (1 + np.exp(-z))).astype(float)
  labels[:, 1] = 0.0  # (every row negative)
  logits = 3.0 * z
  logits[:, 2] = 0.0  # (nothing told apart)
  spec = MultiLabel(["toxic", "threat", "insult"])
  examples = [InputExample(i, "", label=tuple(row)) for i, row in enumerate(labels)]
  with caplog.at_level("INFO"):
    figures = calibration.calibrate(spec, examples, logits)
  outputs = calibration.scaled_outputs(spec, logits, spec.temperatures())
  figures.update(calibration.calibration_errors(spec, examples, outputs))
  assert spec.temperature == {"toxic": figures["temperature_toxic"]}
  assert figures["temperature_toxic"] == pytest.approx(3.0, rel=0.05)
  for name in ("threat", "insult"):
    assert figures["temperature_" + name] is None
    assert "nll_calibrated_" + name not in figures and "ece_calibrated_" + name not in figures
  assert ("--calibrate: no temperature fits threat on the dev split (its rows are all of one "
          "label); left uncalibrated") in caplog.text
  assert ("--calibrate: no temperature fits insult on the dev split (the log-loss falls on "
          "beyond [0.01, 100]: the model separates its rows completely, or its logits do "
          "not tell them apart); left uncalibrated") in caplog.text
  assert spec.temperatures() == [figures["temperature_toxic"], 1.0, 1.0]
  np.testing.assert_allclose(outputs[:, 0], 1 / (1 + np.exp(-logits[:, 0] /
                                                            figures["temperature_toxic"])),
                             rtol=1e-6)
  np.testing.assert_allclose(outputs[:, 1], 1 / (1 + np.exp(-logits[:, 1])), rtol=1e-6)
  assert figures["ece_calibrated_toxic"] < 0.02 < 0.1 < figures["ece_uncalibrated_toxic"]
  assert figures["nll_calibrated_toxic"] < figures["nll_uncalibrated_toxic"]
  spec.set_temperature({})  # (no column fitted, as a card edited so)
  assert spec.temperature is None and spec.to_card().get("temperature") is None


def _graph_outputs(spec, mode, with_ids=True):
  """What a small model's graph gives for one batch in mode, with spec's temperature."""
  config = small_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  with tf.Graph().as_default():
    tf.set_random_seed(7)
    features = model_features(config)
    if not with_ids:  # (a serving request's features)
      features = {k: v for k, v in features.items() if k not in ("example_id",
                                                                  "is_real_example")}
    if spec.loss == "sigmoid_cross_entropy":
      features["label_ids"] = tf.constant([[1.0, 0.0]] * 4)
    model_fn = model_fn_builder(config, spec, ModelSettings())
    made = model_fn(features, None, mode, {})
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      if mode == tf.estimator.ModeKeys.PREDICT:
        return session.run(made.predictions)
      return session.run(made.loss)


@pytest.mark.one_runtime("tf2")  # (a division of the logits; the runs check both runtimes)
def test_the_graph_divides_the_logits_by_the_head_s_temperature():
  """Predict gives softmax (or each column's sigmoid) of logits / T, and the logits as they
  are for the record batches --calibrate fits on; eval's loss is that of logits / T; a
  serving request gets the outputs alone."""
  predict, evaluate = tf.estimator.ModeKeys.PREDICT, tf.estimator.ModeKeys.EVAL
  spec = SingleLabel(["y"], ["a", "b", "c"])
  plain = _graph_outputs(spec, predict)
  spec.set_temperature(2.5)
  scaled = _graph_outputs(spec, predict)
  np.testing.assert_allclose(scaled["logits"], plain["logits"], rtol=1e-6)
  np.testing.assert_allclose(plain["outputs"], _softmax(plain["logits"]), rtol=1e-5)
  np.testing.assert_allclose(scaled["outputs"], _softmax(plain["logits"] / 2.5), rtol=1e-5)
  assert calibration.softmax_nll(plain["logits"], np.arange(4) % 3, 2.5) == pytest.approx(
      _graph_outputs(spec, evaluate), rel=1e-5)
  assert sorted(_graph_outputs(spec, predict, with_ids=False)) == ["outputs"]
  columns = MultiLabel(["a", "b"])
  plain = _graph_outputs(columns, predict)
  columns.set_temperature({"b": 0.5})
  scaled = _graph_outputs(columns, predict)
  np.testing.assert_allclose(scaled["outputs"], 1 / (1 + np.exp(-plain["logits"] /
                                                                 [1.0, 0.5])), rtol=1e-5)


def test_a_temperature_is_checked_wherever_it_is_read(tmp_path):
  entry = {"kind": "classification", "columns": ["y"], "classes": ["0", "1"]}
  assert from_card(dict(entry, temperature=1.5)).temperature == 1.5
  assert from_card(dict(entry, temperature=1.5)).to_card() == dict(entry, temperature=1.5)
  column_entry = {"kind": "soft_target", "columns": ["a", "b"], "classes": None,
                  "temperature": {"b": 2}}
  assert from_card(column_entry).temperatures() == [1.0, 2.0]
  for spec, value, message in (
      (SingleLabel(["y"], ["0", "1"]), 0.0, "the temperature is 0.0, not a number in [0.01, "
       "100]"),
      (SingleLabel(["y"], ["0", "1"]), True, "the temperature is true, not a number in "
       "[0.01, 100]"),
      (SingleLabel(["y"], ["0", "1"]), "2", 'the temperature is "2", not a number in [0.01, '
       '100]'),
      (MultiLabel(["a", "b"]), 2.0, "the temperature of a multi_label head on a, b is 2.0, "
       "not an object of temperatures by label column"),
      (MultiLabel(["a", "b"]), {"c": 2.0}, 'a temperature of "c": the multi_label head on a, '
       "b has no such label column (it has a, b)"),
      (SoftTarget(["a"]), {"a": float("inf")}, "the temperature of a is Infinity, not a "
       "number in [0.01, 100]"),
      (Regression(["v"]), 2.0, "a temperature: the regression head on v predicts values, not "
       "probabilities, so it has none to calibrate")):
    with pytest.raises(FlagError) as error:
      spec.set_temperature(value)
    assert str(error.value) == message
  card = dict(json.load(open(os.path.join(os.path.dirname(__file__), "data", "model_cards",
                                          "version4_f2677be.json"))))
  card = from_json(json.dumps(card), "card.json")
  card["label_spec"] = dict(card["label_spec"], temperature=-1)
  with pytest.raises(CardError) as error:
    from_json(json.dumps(card), "card.json")
  assert str(error.value) == (
      "card.json: label_spec's temperature: the temperature is -1, not a number in [0.01, "
      "100] (the file was edited): restore the card, or calibrate again with --do_eval "
      "--calibrate")


def test_calibration_is_refused_where_it_cannot_work(tmp_path, tiny_checkpoint):
  base = common_flags(tiny_checkpoint, str(tmp_path / "out")) + ["--num_train_steps=1"]
  for extra, message in (
      (["--do_train", "--calibrate"],
       "--calibrate fits the temperature on the dev split: add --do_eval"),
      (["--do_train", "--num_folds=3", "--fold=1", "--calibrate"],
       "--calibrate with --num_folds fits one temperature on every fold's out-of-fold "
       "predictions; --fold=1 runs one fold: drop --fold (or calibrate one model, without "
       "--num_folds)"),
      (["--do_train", "--do_eval", "--calibrate", "--task_name=csv", "--head=regression",
        "--text_column=comment_text", "--label_column=toxic"],
       "--calibrate scales the logits of a head with probabilities; a regression head on "
       "toxic predicts values: drop --calibrate")):
    with pytest.raises(FlagError) as error:
      run_flags(*base + extra)
    assert str(error.value) == message


def test_a_new_temperature_moves_the_card_s_thresholds_to_decide_as_before(caplog):
  """A folder calibrated again: each tuned threshold becomes the probability, at the new
  temperature, of the logit it stood for, so every row is decided as before."""
  rng = np.random.RandomState(1)
  logits = rng.normal(0, 3, (500, 2))
  for spec, old, new, names in (
      (SingleLabel(["y"], ["0", "1"]), 2.0, 0.5, ["1"]),
      (MultiLabel(["a", "b"]), {"a": 3.0}, {"a": 0.8, "b": 1.7}, ["a", "b"])):
    spec.set_temperature(old)
    before = calibration.scaled_outputs(spec, logits, spec.temperatures())
    earlier = spec.temperatures()
    spec.set_thresholds({name: 0.2 + 0.5 * i for i, name in enumerate(names)})
    decided = [spec.result(spec.classes or list(spec.columns), row) for row in before.tolist()]
    spec.set_temperature(new)
    with caplog.at_level("INFO"):
      calibration.moved_thresholds(spec, earlier)
    after = calibration.scaled_outputs(spec, logits, spec.temperatures())
    again = [spec.result(spec.classes or list(spec.columns), row) for row in after.tolist()]
    assert [r.get("label", r.get("labels")) for r in again] == [
        r.get("label", r.get("labels")) for r in decided]
  assert spec.thresholds["a"] == pytest.approx(1 / (1 + np.exp(-np.log(0.2 / 0.8) * 3 / 0.8)))
  assert "the model card's thresholds move with the temperature, deciding as before: " \
         "1 0.2 -> " in caplog.text
  # A threshold that moves to where float32 probabilities are 1 can no longer decide.
  spec = MultiLabel(["a"])
  spec.set_thresholds({"a": 0.9999})
  spec.set_temperature({"a": 0.3})
  with caplog.at_level("INFO"):
    calibration.moved_thresholds(spec, None)
  assert ("the moved threshold of a is a probability that float32 outputs round to 0 or 1: "
          "rows near it can no longer be told apart, so they may be decided otherwise than "
          "before; tune again (--tune_thresholds)") in caplog.text


def test_a_training_keeps_a_temperature_only_while_the_model_does_not_change(caplog):
  from pipeline.card import carry_over
  card = {"label_spec": {"kind": "classification", "columns": ["toxic"],
                         "classes": ["0", "1"], "temperature": 1.75}}
  kept, dropped = SingleLabel(["toxic"], ["0", "1"]), SingleLabel(["toxic"], ["0", "1"])
  with caplog.at_level("INFO"):
    carry_over(card, kept, trains=False)
    carry_over(card, dropped, trains=True)
  assert (kept.temperature, dropped.temperature) == (1.75, None)
  assert ("the model card's temperature (1.75) was fitted to the model before this "
          "training: the model it trains is uncalibrated until it is calibrated again "
          "(--do_eval --calibrate)") in caplog.text


@pytest.mark.slow
@pytest.mark.one_runtime("tf2")  # (the shared model calibrates on both runtimes)
def test_a_run_fits_on_the_dev_logits_and_its_graph_reads_by_the_fit(jigsaw_model, tmp_path):
  """The shared model's run (--calibrate --tune_thresholds=f1): eval_results.json gives the
  temperature the card keeps, with the dev log-loss before it equal to the eval's loss. A
  later eval of the calibrated folder fits again on the logits as they are (the same
  temperature), while its eval loss is that of the calibrated outputs."""
  with open(os.path.join(jigsaw_model.output_dir, "eval_results.json")) as f:
    results = json.load(f)
  with open(os.path.join(jigsaw_model.output_dir, "model_card.json")) as f:
    card = json.load(f)
  temperature = results["temperature"]
  assert card["label_spec"]["temperature"] == temperature and temperature != 1.0
  assert results["nll_uncalibrated"] == pytest.approx(results["loss"], rel=1e-5)
  assert results["nll_calibrated"] < results["nll_uncalibrated"]
  assert results["threshold_objective"] == "f1"  # (tuned on the calibrated outputs)
  output_dir = jigsaw_model.copy_to(str(tmp_path / "model"))
  run_flags("--output_dir=" + output_dir, "--data_dir=" + JIGSAW, "--do_eval", "--calibrate")
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    again = json.load(f)
  assert again["temperature"] == pytest.approx(temperature, rel=1e-4)
  assert again["loss"] == pytest.approx(results["nll_calibrated"], rel=1e-4)
  assert again["nll_uncalibrated"] == pytest.approx(results["nll_uncalibrated"], rel=1e-4)


def _aggregated_by_hand(p, counts, aggregation, softmax):
  """Each text's row of its windows' outputs p (counts windows per text, in order): their
  mean, the first's, or the max (a softmax head's window most likely of its second class,
  the first of equal ones; a sigmoid head's max per column)."""
  rows, start = [], 0
  for k in counts:
    windows = p[start:start + k]
    start += k
    if aggregation == "mean":
      rows.append(windows.mean(axis=0))
    elif aggregation == "first":
      rows.append(windows[0])
    elif softmax:
      rows.append(windows[int(np.argmax(windows[:, 1]))])
    else:
      rows.append(windows.max(axis=0))
  return np.array(rows)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2 ** 31 - 1), st.sampled_from(["mean", "max", "first"]),
       st.booleans())
def test_with_windows_the_fit_minimises_the_log_loss_of_the_texts_aggregated_outputs(
    seed, aggregation, softmax):
  """Windows (--doc_stride): the temperature divides each window's logits, and the fit
  minimises the log-loss of the texts' outputs aggregated by hand (scipy's bounded
  minimiser about the best point of a grid: a mean of windows need not be convex
  in 1/T); the calibrated outputs are those aggregated at it. With first, or a max, it is
  the fit of the one window each text reads."""
  from collections import namedtuple
  from scipy.optimize import minimize_scalar
  from data.long_texts import WindowLogits
  rng = np.random.RandomState(seed)
  counts = rng.randint(1, 5, 120)
  logits = rng.normal(0, 2.5, (int(counts.sum()), 2))
  Example = namedtuple("Example", "label")
  if softmax:
    spec, loss = SingleLabel(["y"], ["0", "1"]), "softmax_cross_entropy"
    truth = (rng.rand(120) < 0.4).astype(int)
    logits[:, 1] += 1.5 * np.repeat(truth, counts)  # (some signal)
    examples = [Example(str(t)) for t in truth]
    targets = truth
  else:
    spec, loss = MultiLabel(["a", "b"]), "sigmoid_cross_entropy"
    targets = (rng.rand(120, 2) < 0.4).astype(float)
    logits += 1.5 * np.repeat(targets, counts, axis=0)
    examples = [Example(tuple(t)) for t in targets]
  logits = logits.astype(np.float32).astype(np.float64)  # (the graph's logits are float32)
  windows = WindowLogits(logits, counts, aggregation, loss)
  figures = calibration.calibrate(spec, examples, windows)

  def texts_at(t):
    z = logits / t
    p = _softmax(z) if softmax else np.exp(-np.logaddexp(0.0, -z))
    return _aggregated_by_hand(p, counts, aggregation, softmax)

  def nll(u, j):
    p = np.clip(texts_at(np.exp(u)), 1e-300, 1 - 1e-16)
    if softmax:
      return -np.mean(np.log(p[np.arange(120), truth]))
    return -np.mean(targets[:, j] * np.log(p[:, j]) + (1 - targets[:, j]) * np.log(1 - p[:, j]))
  grid = np.linspace(np.log(0.01), np.log(100.0), 401)
  for j, suffix in ([(None, "")] if softmax else [(0, "_a"), (1, "_b")]):
    assert figures["nll_uncalibrated" + suffix] == pytest.approx(nll(0.0, j), rel=1e-9)
    best = grid[int(np.argmin([nll(u, j) for u in grid]))]
    reference = minimize_scalar(lambda u: nll(u, j), bounds=(max(best - 0.025, grid[0]),
                                                             min(best + 0.025, grid[-1])),
                                method="bounded", options={"xatol": 1e-11})
    fitted = figures["temperature" + suffix]
    if min(abs(reference.x - grid[[0, -1]])) < 0.01:
      assert fitted is None
      continue
    assert fitted == pytest.approx(np.exp(reference.x), rel=1e-4)
    assert figures["nll_calibrated" + suffix] <= reference.fun + 1e-12
  temperatures = spec.temperatures() or [1.0, 1.0]
  if not softmax:
    expected = np.column_stack([_aggregated_by_hand(
        1 / (1 + np.exp(-logits[:, j:j + 1] / temperatures[j])), counts, aggregation,
        False)[:, 0] for j in range(2)])
  else:
    expected = texts_at(temperatures[0])
  np.testing.assert_allclose(calibration.scaled_outputs(spec, windows, temperatures),
                             expected, atol=1e-6)
  if aggregation != "mean":  # (first, or max: the one window each text reads)
    one = np.array([w[0] if aggregation == "first" else
                    (w[int(np.argmax(w[:, 1] - w[:, 0]))] if softmax else w.max(axis=0))
                    for w in windows])
    plain = type(spec)(*([["y"], ["0", "1"]] if softmax else [["a", "b"]]))
    calibration.calibrate(plain, examples, one)
    assert plain.temperatures() == pytest.approx(spec.temperatures(), rel=1e-6) if (
        spec.temperatures()) else plain.temperatures() is None


def test_thresholds_follow_a_new_temperature_through_one_window_but_not_a_mean():
  """A card's thresholds move with a new temperature and decide every text as before
  where a text's output is one window's (first, max); through a mean no threshold does,
  which is refused, before any work when the card says so."""
  from data.long_texts import WindowLogits
  from pipeline.checks import check_windows
  from spec.config import RunConfig
  rng = np.random.RandomState(4)
  counts = rng.randint(1, 5, 300)
  logits = rng.normal(0, 3, (int(counts.sum()), 2))
  for aggregation in ("first", "max"):
    windows = WindowLogits(logits, counts, aggregation, "sigmoid_cross_entropy")
    spec = MultiLabel(["a", "b"])
    spec.set_temperature({"a": 2.0, "b": 0.7})
    spec.set_thresholds({"a": 0.3, "b": 0.8})
    before = calibration.scaled_outputs(spec, windows, spec.temperatures())
    decided = [spec.result(["a", "b"], row)["labels"] for row in before.tolist()]
    earlier = spec.temperatures()
    spec.set_temperature({"a": 0.5, "b": 1.9})
    calibration.moved_thresholds(spec, earlier, aggregation)
    after = calibration.scaled_outputs(spec, windows, spec.temperatures())
    assert [spec.result(["a", "b"], row)["labels"] for row in after.tolist()] == decided
  with pytest.raises(FlagError) as error:
    calibration.moved_thresholds(spec, earlier, "mean")
  assert str(error.value) == calibration.MEAN_THRESHOLDS_REFUSED == (
      "--calibrate would move the model card's tuned thresholds to the new temperature so "
      "that they decide as before, and no threshold does that for windows aggregated by "
      "their mean: add --tune_thresholds to tune them again at the new temperature")
  spec = SingleLabel(["y"], ["0", "1"])
  spec.set_thresholds({"1": 0.4})
  for calibrate, tune, aggregation, more, refused in (
      (True, None, "mean", {}, True), (True, "f1", "mean", {}, False),
      (True, None, "max", {}, False), (False, None, "mean", {}, False),
      (True, None, "mean", {"do_eval": False}, False),  # (no fit: a k-fold fold's export)
      (True, None, "mean", {"num_folds": 3}, False)):  # (k-fold's own check: run_folds)
    c = RunConfig(doc_stride=8, window_aggregation=aggregation, calibrate=calibrate,
                  tune_thresholds=tune, **dict(dict(do_eval=True), **more))
    if refused:
      with pytest.raises(FlagError) as error:
        check_windows(c, spec)
      assert str(error.value) == calibration.MEAN_THRESHOLDS_REFUSED
    else:
      check_windows(c, spec)
