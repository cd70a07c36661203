"""Training weights: by class, from a column, by identity; how records carry them and how
the training loss applies them."""

import csv
import io
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import (SAMPLES, THREE_CLASSES, TINY, TINY_VOCAB, model_features, run_flags,
                      sample_path, small_config)
from data import weights
from data.data_error import DataError
from data.processors import get_processor

BIAS = os.path.join(SAMPLES, "jigsaw_bias_davidson")
NINE = ["male", "female", "homosexual_gay_or_lesbian", "christian", "jewish", "muslim",
        "black", "white", "psychiatric_or_mental_illness"]


def test_balanced_class_weights_on_sst2():
  examples = get_processor("sst-2", data_dir=sample_path("glue", "SST-2")).get_examples("train")
  n1 = sum(1 for e in examples if e.label == "1")
  n0 = len(examples) - n1
  labels = [e.label for e in examples]
  by_class = weights.balanced_class_weights(labels, ["0", "1"])
  assert by_class == pytest.approx({"0": 300 / (2.0 * n0), "1": 300 / (2.0 * n1)})
  per_row = weights.class_weighted(labels, by_class)
  assert sum(per_row) == pytest.approx(300)  # balanced weights keep the mean at 1
  with pytest.raises(ValueError, match="no row of class 2"):
    weights.balanced_class_weights(labels, ["0", "1", "2"])


def test_class_weight_lists_are_checked():
  assert weights.parse_class_weights(["1", "2.5"], ["0", "1"]) == {"0": 1.0, "1": 2.5}
  with pytest.raises(ValueError, match="has 3 values but the head has 2 classes"):
    weights.parse_class_weights(["1", "2", "3"], ["0", "1"])
  with pytest.raises(ValueError, match="the weight of class 1 is '0'"):
    weights.parse_class_weights(["1", "0"], ["0", "1"])
  with pytest.raises(ValueError, match="'heavy' .* is not a number"):
    weights.parse_class_weights(["heavy", "1"], ["0", "1"])


def test_column_weights_read_from_a_real_column(tmp_path):
  """Davidson's annotator count as a weight column of a csv."""
  data = sample_path("davidson_hate_offensive", "labeled_data.csv")
  processor = get_processor("csv", files={"train": data}, text_column="tweet",
                            label_columns=["class"], weight_column="count")
  examples = processor.get_examples("train")
  with io.open(data, encoding="utf-8", newline="") as f:
    counts = [float(r["count"]) for r in csv.DictReader(f)]
  from pipeline import task_extras, training_order
  from spec.config import RunConfig
  training = RunConfig(sample_weight_column="count").training
  inputs = training_order.weight_inputs(training, task_extras.task_of(processor), examples)
  assert training_order.training_weights(training, task_extras.task_of(processor), inputs) == counts
  with pytest.raises(DataError, match="every weight in column count is 0"):
    weights.column_weights([0.0] * len(counts), "count", data)
  # A bad cell is refused as its row is read, naming the line.
  text = io.open(data, encoding="utf-8", newline="").read()
  assert text.split("\n")[7].startswith("420,3,")  # line 8
  bad = str(tmp_path / "bad.csv")
  with io.open(bad, "w", encoding="utf-8", newline="") as f:
    f.write(text.replace("\n420,3,", "\n420,-1,", 1))
  processor = get_processor("csv", files={"train": bad}, text_column="tweet",
                            label_columns=["class"], weight_column="count")
  with pytest.raises(DataError, match=r"line 8, column 'count': the weight '-1' is not a "
                     r"number >= 0"):
    processor.get_examples("train")


def _bias_rows(split):
  with io.open(os.path.join(BIAS, split + ".csv"), encoding="utf-8", newline="") as f:
    return list(csv.DictReader(f))


def reference_identity_weights(rows):
  """The formula of the README, row by row, then scaled to mean 1."""
  raw = []
  for r in rows:
    toxic = float(r["target"]) >= 0.5
    mentions = any(r[c] and float(r[c]) >= 0.5 for c in NINE)
    w = 0.25
    if mentions:
      w += 0.25
    if toxic and not mentions:
      w += 0.25
    if mentions and not toxic:
      w += 0.25
    raw.append(w)
  return [w * len(raw) / sum(raw) for w in raw]


def test_identity_weights_formula_on_jigsaw_layout():
  rows = _bias_rows("train")
  toxic = [float(r["target"]) >= 0.5 for r in rows]
  mentions = [any(r[c] and float(r[c]) >= 0.5 for c in NINE) for r in rows]
  got = weights.identity_weights(toxic, mentions)
  assert got == pytest.approx(reference_identity_weights(rows), rel=1e-12)
  assert sum(got) == pytest.approx(len(rows))
  assert len(set(round(w, 9) for w in got)) == 3  # 1/4, 1/2 and 3/4 before scaling


def _train_losses(weighted, sample_weights, seed=7):
  """The train loss of one batch of model_features under each of sample_weights (with
  weighted, else once without weights), each in a new session of one graph, so that every
  one draws the same initial values and dropout masks (the same seeds)."""
  config = small_config()
  with tf.Graph().as_default():
    tf.set_random_seed(seed)
    features = model_features(config)
    # Made in both graphs, so that each op gets the same seed in both (TF1 derives it from
    # the graph's op count).
    weight = tf.placeholder(tf.float32, [4])
    if weighted:
      features["sample_weight"] = weight
    from modeling.model_fn import ModelSettings, model_fn_builder
    spec = model_fn_builder(config, THREE_CLASSES, ModelSettings(
        learning_rate=1e-3, num_train_steps=10))(
        features, None, tf.estimator.ModeKeys.TRAIN, {})
    values = []
    for sample_weight in sample_weights:
      with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        values.append(float(session.run(spec.loss, {weight: sample_weight})))
    return values


@pytest.mark.one_runtime("tf2")  # (the loss's ops are the same on both)
def test_the_training_loss_is_the_mean_of_weighted_row_losses():
  w = [0.5, 2.0, 1.0, 0.0]
  one_hot = [[4.0 if j == i else 0.0 for j in range(4)] for i in range(4)]
  [unweighted] = _train_losses(False, [[1.0] * 4])
  per_row = _train_losses(True, one_hot + [w])
  per_row, weighted = per_row[:4], per_row[4]
  assert unweighted == pytest.approx(np.mean(per_row), rel=1e-5)
  assert weighted == pytest.approx(np.mean(np.multiply(w, per_row)), rel=1e-5)


@pytest.mark.slow
@pytest.mark.one_runtime("tf2")  # (the records are written by plain Python)
def test_identity_weights_reach_the_training_records(tmp_path, tiny_checkpoint):
  output_dir = str(tmp_path / "out")
  run_flags("--task_name=jigsaw_bias", "--data_dir=" + BIAS, "--identity_weights",
            "--bert_config_file=" + os.path.join(TINY, "bert_config.json"),
            "--vocab_file=" + TINY_VOCAB, "--init_checkpoint=" + tiny_checkpoint,
            "--output_dir=" + output_dir, "--max_seq_length=16", "--train_batch_size=8",
            "--do_train", "--num_train_steps=2")
  record = os.path.join(output_dir, "features", "train.tf_record")
  written = [tf.train.Example.FromString(r).features.feature
             for r in tf.io.tf_record_iterator(record)]
  # The records are in training order (a seeded shuffle of the file's rows, --seed's
  # default), and each row's weight goes with its row: with its target.
  from pipeline.training_order import in_training_order
  rows = _bias_rows("train")
  expected, _ = in_training_order(
      list(zip([float(r["target"]) for r in rows], reference_identity_weights(rows))), None,
      12345)
  assert [f["label_ids"].float_list.value[0] for f in written] == pytest.approx(
      [target for target, _ in expected], abs=1e-6)
  assert [f["sample_weight"].float_list.value[0] for f in written] == pytest.approx(
      [weight for _, weight in expected], rel=1e-6)


def test_weights_that_leave_a_class_with_none_are_refused(tmp_path):
  """--sample_weight_column=label on 0/1 labels gave every class-0 row weight 0, and the
  only trace was 'training weights: min 0'."""
  from pipeline import task_extras, training_order
  from spec.config import RunConfig
  from spec.run_errors import FlagError
  path = str(tmp_path / "train.csv")
  with io.open(path, "w", encoding="utf-8", newline="") as f:
    csv.writer(f).writerows([["text", "label"]] + [["text %d" % i, str(i % 2)]
                                                   for i in range(10)])
  processor = get_processor("csv", files={"train": path}, text_column="text",
                            label_columns=["label"], weight_column="label")
  examples = processor.get_examples("train")
  training = RunConfig(sample_weight_column="label").training
  with pytest.raises(FlagError) as error:
    task = task_extras.task_of(processor)
    training_order.training_weights(training, task, training_order.weight_inputs(training, task, examples))
  assert str(error.value) == (
      "the training weights give the rows of class '0' a total weight of 0: nothing of it "
      "would be learnt. Check --sample_weight_column (and --class_weights).")
