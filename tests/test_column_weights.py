"""--class_weights on a multi-label or soft-target head: each label column's positives
weighed in the loss (as given, or balanced from the rows trained on), kept by the train
records' metadata and the model card."""

import csv
import io
import json
import math
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from hypothesis import given, settings, strategies as st

from conftest import JIGSAW, SAMPLES, TEST_DATA, model_features, small_config
from data import weights
from data.processors import get_processor
from modeling import head
from modeling.model_fn import ModelSettings, model_fn_builder
from pipeline import task_extras
from pipeline.training_order import TrainingOrder, fraction_indices
from spec.config import RunConfig
from spec.heads.classification import SingleLabel
from spec.heads.multi_label import MultiLabel
from spec.run_errors import FlagError

TOXIC = ["toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate"]
BIAS = os.path.join(SAMPLES, "jigsaw_bias_davidson")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=3, max_size=3),
                min_size=1, max_size=30))
def test_balanced_weights_make_each_column_s_positives_weigh_as_its_negatives(rows):
  columns = ["a", "b", "c"]
  sums = [math.fsum(r[k] for r in rows) for k in range(3)]
  lacking = [(c, s) for c, s in zip(columns, sums) if s == 0 or s == len(rows)]
  if lacking:
    with pytest.raises(FlagError) as error:
      weights.balanced_positive_weights(sums, len(rows), columns)
    column, total = lacking[0]
    assert str(error.value) == (
        "--class_weights=balanced: the train file has %s in label column %s, so its "
        "positive weight is undefined; give one weight per column instead"
        % ("no positive row" if total == 0 else "no negative row", column))
    return
  by_column = weights.balanced_positive_weights(sums, len(rows), columns)
  assert list(by_column) == columns
  for k, column in enumerate(columns):  # w * positives == negatives
    assert by_column[column] * sums[k] == pytest.approx(len(rows) - sums[k], rel=1e-12)


def test_column_weight_lists_are_checked():
  columns = ["toxic", "insult"]
  assert weights.parse_class_weights(["1", "2.5"], columns, of_columns=True) == {
      "toxic": 1.0, "insult": 2.5}
  for values, message in (
      (["1", "2", "3"], "--class_weights has 3 values but the head has 2 label columns "
       "(toxic, insult): give one positive weight per label column, in that order, or "
       "'balanced'"),
      (["1", "0"], "--class_weights: the weight of label column insult is '0'; weights must "
       "be positive and finite"),
      (["1", "inf"], "--class_weights: the weight of label column insult is 'inf'; weights "
       "must be positive and finite"),
      (["heavy", "1"], "--class_weights: 'heavy' (for label column toxic) is not a number"),
      (["\uff11", "1"], "--class_weights: '\uff11' (for label column toxic) is not a number"),
      (["1_0", "1"], "--class_weights: '1_0' (for label column toxic) is not a number"),
      (["1e39", "1"], "--class_weights: the weight of label column toxic is 1e+39, outside "
       "what a float32 loss holds (1.18e-38 to 3.4e+38): give weights nearer 1"),
      (["1", "1e-50"], "--class_weights: the weight of label column insult is 1e-50, outside "
       "what a float32 loss holds (1.18e-38 to 3.4e+38): give weights nearer 1")):
    with pytest.raises(FlagError) as error:
      weights.parse_class_weights(values, columns, of_columns=True)
    assert str(error.value) == message
  with pytest.raises(FlagError) as error:
    weights.parse_class_weights(["1", "2"], ["only"], of_columns=True)
  assert "the head has 1 label column (only)" in str(error.value)


class _Counted(object):
  def __init__(self, num_examples):
    self.num_examples = num_examples


def _resolved(processor, **options):
  """The class weights a training order resolves over the processor's train rows."""
  training = RunConfig(**options).training
  order = TrainingOrder(training, task_extras.task_of(processor))
  examples = processor.get_examples("train")
  for example in examples:
    order.observe(example)
  order.arrange(_Counted(len(examples)))
  return order.recorded().get("class_weights")


def _file_rows(path):
  with io.open(path, encoding="utf-8", newline="") as f:
    return list(csv.DictReader(f))


def test_balanced_column_weights_are_those_of_the_rows_trained_on():
  processor = get_processor("jigsaw_toxic", data_dir=JIGSAW, label_columns=TOXIC)
  rows = _file_rows(os.path.join(JIGSAW, "train.csv"))
  positives = {c: sum(int(r[c]) for r in rows) for c in TOXIC}
  assert _resolved(processor, class_weights=("balanced",)) == pytest.approx(
      {c: (len(rows) - positives[c]) / positives[c] for c in TOXIC}, rel=1e-12)
  # With --train_fraction, the subset's counts (the subset is fraction_indices').
  chosen = [rows[i] for i in fraction_indices(len(rows), 0.6, 12345)]
  assert 0 < len(chosen) < len(rows)
  positives = {c: sum(int(r[c]) for r in chosen) for c in TOXIC}
  assert _resolved(processor, class_weights=("balanced",), train_fraction=0.6) == (
      pytest.approx({c: (len(chosen) - positives[c]) / positives[c] for c in TOXIC},
                    rel=1e-12))
  # A subset that leaves a column without positives is named as the subset.
  few = fraction_indices(len(rows), 0.02, 12345)
  lacking = [c for c in TOXIC if not any(int(rows[i][c]) for i in few)][0]
  with pytest.raises(FlagError) as error:
    _resolved(processor, class_weights=("balanced",), train_fraction=0.02)
  assert str(error.value) == (
      "--class_weights=balanced: the %d rows --train_fraction=0.02 keeps have no positive row "
      "in label column %s, so its positive weight is undefined; give one weight per column "
      "instead" % (len(few), lacking))
  # As given, in the columns' order.
  assert _resolved(processor, class_weights=tuple("123456")) == {
      c: float(i + 1) for i, c in enumerate(TOXIC)}


def test_a_soft_target_s_positives_are_the_sum_of_its_fractions():
  processor = get_processor("jigsaw_bias", data_dir=BIAS, head="soft_target")
  rows = _file_rows(os.path.join(BIAS, "train.csv"))
  total = math.fsum(float(r["target"]) for r in rows)
  assert 0 < total < len(rows) and total != int(total)
  assert _resolved(processor, class_weights=("balanced",)) == pytest.approx(
      {"target": (len(rows) - total) / total}, rel=1e-12)


def test_class_weights_a_head_cannot_take_are_refused_before_the_rows_are_read(tmp_path):
  path = str(tmp_path / "train.csv")
  with io.open(path, "w", encoding="utf-8", newline="") as f:
    csv.writer(f).writerows([["text", "score", "other"]] +
                            [["text %d" % i, str(i), str(i % 2)] for i in range(6)])
  regression = get_processor("csv", files={"train": path}, text_column="text",
                             label_columns=["score"], head="regression")
  multi = get_processor("csv", files={"train": path}, text_column="text",
                        label_columns=["other"], head="multi_label")
  for processor, values, message in (
      (regression, ("balanced",), "--class_weights weighs the classes of a classification "
       "head, or the positives of each multi-label or soft-target column; a regression head "
       "has neither. Use --sample_weight_column for per-row weights"),
      (multi, ("1", "2"), "--class_weights has 2 values but the head has 1 label column "
       "(other): give one positive weight per label column, in that order, or 'balanced'")):
    with pytest.raises(FlagError) as error:
      TrainingOrder(RunConfig(class_weights=values).training, task_extras.task_of(processor))
    assert str(error.value) == message
  # A column whose rows are all negative has no balanced weight.
  with io.open(path, "w", encoding="utf-8", newline="") as f:
    csv.writer(f).writerows([["text", "other"]] + [["text %d" % i, "0"] for i in range(6)])
  with pytest.raises(FlagError) as error:
    _resolved(multi, class_weights=("balanced",))
  assert str(error.value).startswith("--class_weights=balanced: the train file has no "
                                     "positive row in label column other")


def test_k_fold_checks_every_fold_s_train_rows_before_any_fold_trains(tmp_path):
  from pipeline.training_order import check_folds_balanced
  path = str(tmp_path / "train.csv")
  with io.open(path, "w", encoding="utf-8", newline="") as f:
    csv.writer(f).writerows([["text", "a", "rare"]] + [
        ["text %d" % i, str(i % 2), "1" if i == 5 else "0"] for i in range(12)])
  processor = get_processor("csv", files={"train": path}, text_column="text",
                            label_columns=["a", "rare"], head="multi_label")
  task, examples = task_extras.task_of(processor), processor.get_examples("train")
  training = RunConfig(class_weights=("balanced",)).training
  assignment = [i % 3 for i in range(12)]  # (row 5, the one positive of rare, is in fold 2)
  with pytest.raises(FlagError) as error:
    check_folds_balanced(training, task, examples, assignment, 3)
  assert str(error.value) == (
      "--class_weights=balanced: fold 2's train rows (the other folds') have no positive row "
      "in label column rare, so its positive weight is undefined; give one weight per "
      "column instead")
  check_folds_balanced(RunConfig(class_weights=("1", "9")).training, task, examples,
                       assignment, 3)  # (weights as given need no rows)


def test_the_weighted_sigmoid_loss_is_its_formula():
  rng = np.random.RandomState(1)
  logits = (rng.randn(6, 3) * 4).astype(np.float32)
  targets = rng.choice([0.0, 0.3, 1.0], (6, 3)).astype(np.float32)
  w = (0.5, 1.0, 7.0)
  spec = MultiLabel(list("abc"))
  with tf.Graph().as_default(), tf.Session() as session:
    loss, outputs = session.run(head.loss_and_outputs(spec, tf.constant(logits),
                                                      tf.constant(targets), w))
    plain, _ = session.run(head.loss_and_outputs(spec, tf.constant(logits),
                                                 tf.constant(targets), (1.0, 1.0, 1.0)))
    unweighted, _ = session.run(head.loss_and_outputs(spec, tf.constant(logits),
                                                      tf.constant(targets)))
  p = 1 / (1 + np.exp(-logits.astype(np.float64)))
  expected = -(np.array(w) * targets * np.log(p) + (1 - targets) * np.log(1 - p)).mean(axis=1)
  np.testing.assert_allclose(loss, expected, rtol=1e-5)
  np.testing.assert_allclose(outputs, p, rtol=1e-4)  # (TF 1.15's sigmoid: ~1e-4 at 1e-4)
  np.testing.assert_allclose(plain, unweighted, rtol=1e-6)
  with pytest.raises(ValueError) as error:
    head.loss_and_outputs(SingleLabel(["y"], "ab"), tf.constant(logits[:, :2]),
                          tf.constant([0, 1] * 3), (1.0, 2.0))
  assert str(error.value) == ("positive weights weigh a sigmoid head's outputs; a labels a,b "
                              "has none")


def _training_loss(positive_weights, label):
  """The training graph's loss of a small model (no dropout, the same initial weights
  each time) on a batch whose labels are all label."""
  config = small_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  spec = MultiLabel(["a", "b"])
  with tf.Graph().as_default():
    tf.set_random_seed(7)
    features = model_features(config)
    features["label_ids"] = tf.fill([4, 2], float(label))
    model_fn = model_fn_builder(config, spec, ModelSettings(
        num_train_steps=1, classifier_dropout=0.0, positive_weights=positive_weights))
    loss = model_fn(features, None, tf.estimator.ModeKeys.TRAIN, {}).loss
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      return session.run(loss)


@pytest.mark.one_runtime("tf2")  # (the loss is the formula's on both, as tested above)
def test_the_training_graph_weighs_the_positives():
  # (a row's negatives are unweighted: the formula's test above)
  assert _training_loss((3.0, 3.0), 1) == pytest.approx(3 * _training_loss(None, 1), rel=1e-5)
  with pytest.raises(ValueError) as error:
    model_fn_builder(small_config(), MultiLabel(["a", "b"]),
                     ModelSettings(positive_weights=(1.0, 2.0, 3.0)))
  assert str(error.value) == "3 positive weights for a head of 2 outputs"
  for bad in ((0.0, 1.0), (float("inf"), 1.0), (1, 2)):
    with pytest.raises(ValueError, match="are not all positive finite floats"):
      ModelSettings(positive_weights=bad)


def test_a_run_s_column_weights_reach_its_settings_in_column_order(monkeypatch):
  from pipeline.build import model_fn_of
  made = []
  monkeypatch.setattr("pipeline.build.model_fn_builder",
                      lambda config, spec, settings: made.append(settings))
  c = RunConfig(class_weights=("balanced",))
  given = {"b": 4.0, "a": 0.5}
  model_fn_of(c.model, c.training, c.device, None, None, MultiLabel(["a", "b"]), 10,
              class_weights=given)
  model_fn_of(c.model, c.training, c.device, None, None, MultiLabel(["a", "b"]),
              serving=True, class_weights=given)
  model_fn_of(c.model, c.training, c.device, None, None, SingleLabel(["y"], "ab"), 10,
              class_weights={"a": 1.0, "b": 2.0})
  assert [s.positive_weights for s in made] == [(0.5, 4.0), None, None]


def _card_with(class_weights, head="multi_label", columns=("toxic", "insult")):
  from spec import model_card
  with open(os.path.join(TEST_DATA, "model_cards", "version4_f2677be.json")) as f:
    card = model_card.from_json(f.read(), "v4")
  spec = {"kind": head, "columns": list(columns), "classes": None}
  card.update(label_spec=spec, head=head, labels=None, label_columns=list(columns),
              num_outputs=len(columns))
  card["training"]["data"][0]["class_weights"] = class_weights
  return json.dumps(card)


def test_a_card_s_class_weights_are_checked_when_read():
  from spec import model_card
  card = model_card.from_json(_card_with({"toxic": 2.5, "insult": 9}), "x")
  assert card["training"]["data"][0]["class_weights"] == {"toxic": 2.5, "insult": 9}
  assert model_card.from_json(_card_with(None), "x")["training"]["data"][0][
      "class_weights"] is None
  for edited in ({"toxic": 2.5}, {"toxic": 2.5, "insult": -1}, {"toxic": 1, "insult": True},
                 {"toxic": 1, "insult": 2, "threat": 3}, {"toxic": "2", "insult": 1}):
    with pytest.raises(model_card.CardError) as error:
      model_card.from_json(_card_with(edited), "x")
    assert str(error.value) == (
        "x: training.data[0].class_weights is %s, not a positive number for each of toxic, "
        "insult (the file was edited): restore the card, or train again into a new "
        "--output_dir" % json.dumps(edited, sort_keys=True))
  with pytest.raises(model_card.CardError, match="is 3, which is not dict or null"):
    model_card.from_json(_card_with(3), "x")
