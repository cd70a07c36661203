"""--label_smoothing, the classification head's own option (spec/heads/classification.py):
its loss against TensorFlow's own label-smoothed cross-entropy and numpy, its checks, its
refusal by other heads, and a run on Davidson's tweets whose eval loss is the smoothed
cross-entropy of its own predictions."""

import csv
import io
import json
import os
import re

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import run_flags, sample_path, tiny_tweet_flags
from modeling import head
from spec.config import ConfigError, RunConfig
from spec.heads import apply_options, build_spec
from spec.model_card import CardError
from spec.run_errors import FlagError

CLASSES = ["0", "1", "2"]


def _smoothed(smoothing, k):
  return apply_options(build_spec("classification", ["y"], [str(i) for i in range(k)]),
                       RunConfig(label_smoothing=smoothing).heads)


@pytest.mark.parametrize("smoothing", [0.05, 0.3, 0.9])
@pytest.mark.parametrize("k", [2, 3, 7])
def test_the_loss_is_tensorflow_s_label_smoothed_cross_entropy(smoothing, k):
  spec = _smoothed(smoothing, k)
  rng = np.random.RandomState(k)
  logits = (rng.randn(16, k) * 4).astype(np.float32)
  ids = rng.randint(0, k, 16)
  with tf.Graph().as_default(), tf.Session() as session:
    loss, outputs = head.loss_and_outputs(spec, tf.constant(logits), tf.constant(ids, tf.int64))
    reference = tf.losses.softmax_cross_entropy(
        tf.one_hot(ids, k), tf.constant(logits), label_smoothing=smoothing,
        reduction=tf.losses.Reduction.NONE)
    loss, outputs, reference = session.run([loss, outputs, reference])
  np.testing.assert_allclose(loss, reference, rtol=1e-5)
  z = logits.astype(np.float64)
  log_p = z - z.max(1, keepdims=True)
  log_p -= np.log(np.exp(log_p).sum(1, keepdims=True))
  targets = np.full((16, k), smoothing / k)
  targets[np.arange(16), ids] += 1 - smoothing
  np.testing.assert_allclose(loss, -(targets * log_p).sum(1), rtol=1e-5)
  np.testing.assert_allclose(outputs, np.exp(log_p), rtol=1e-5)


def test_without_it_the_head_learns_the_plain_loss():
  spec = build_spec("classification", ["y"], CLASSES)
  assert spec.options.label_smoothing == 0.0 and spec.graph_loss(tf, None, None) is None
  assert _smoothed(0.0, 3).graph_loss(tf, None, None) is None


@pytest.mark.parametrize("value", [1.0, -0.1, float("nan"), 2.5])
def test_a_smoothing_outside_0_to_1_is_refused(value):
  with pytest.raises(ConfigError, match="^--label_smoothing=%s must be at least 0 and below "
                                        "1$" % value):
    RunConfig(label_smoothing=value)


# (the smoothed loss is the head's graph_loss, checked against TensorFlow's on both
# runtimes above; the run around it, the card and the refusals are generic or Python)
@pytest.mark.one_runtime("tf1")
def test_a_run_s_eval_loss_is_the_smoothed_cross_entropy_of_its_predictions(
    tmp_path, tiny_checkpoint):
  """Davidson's 300 tweets and their class (0 hate speech, 1 offensive, 2 neither): the
  eval loss is the smoothed cross-entropy of test_results.tsv's probabilities on the same
  rows, not the plain one; the card records the option, later runs on the model take it
  from there and refuse another, and a new model from its checkpoint trains by the flag."""
  output_dir = str(tmp_path / "out")
  data = sample_path("davidson_hate_offensive", "labeled_data.csv")
  run_flags(*tiny_tweet_flags(tiny_checkpoint, output_dir, data) + [
      "--label_column=class", "--label_smoothing=0.2", "--do_train", "--do_eval",
      "--do_predict", "--num_train_steps=12"])
  truth = list(csv.DictReader(io.open(data, encoding="utf-8", newline="")))
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    rows = list(csv.DictReader(f, delimiter="\t"))
  assert [r["id"] for r in rows] == [t[""] for t in truth]
  p = np.array([[float(r["probability_%s" % c]) for c in CLASSES] for r in rows], np.float64)
  ids = np.array([CLASSES.index(t["class"]) for t in truth])
  targets = np.full(p.shape, 0.2 / 3)
  targets[np.arange(len(ids)), ids] += 0.8
  smoothed = float(-(targets * np.log(p)).sum(1).mean())
  plain = float(-np.log(p[np.arange(len(ids)), ids]).mean())
  results = json.load(open(os.path.join(output_dir, "eval_results.json")))
  assert results["num_examples"] == 300
  assert results["loss"] == pytest.approx(smoothed, rel=1e-5)
  assert abs(smoothed - plain) > 1e-3
  card = json.load(open(os.path.join(output_dir, "model_card.json")))
  assert card["flags"]["label_smoothing"] == 0.2
  assert card["label_spec"]["options"] == {"label_smoothing": 0.2}

  # The card's smoothing is the model's: an evaluation without the flag scores as the
  # training's did, and a flag that says otherwise is refused, resuming too.
  again = run_flags(*tiny_tweet_flags(tiny_checkpoint, output_dir, data) + [
      "--label_column=class", "--do_eval"])
  assert again.eval["loss"] == pytest.approx(results["loss"], rel=1e-6)
  for extra in (["--do_eval", "--label_smoothing=0.9"],
                ["--do_train", "--num_train_steps=24", "--label_smoothing=0.5"],
                ["--do_predict", "--label_smoothing=0.0"]):
    with pytest.raises(FlagError, match="^%s$" % re.escape(
        "--label_smoothing=%r contradicts %s: its model was trained with "
        "label_smoothing=0.2. Drop the flag (the card's value is used), or train a new "
        "model into another --output_dir" % (float(extra[-1].split("=")[1]),
                                             os.path.join(output_dir, "model_card.json")))):
      run_flags(*tiny_tweet_flags(tiny_checkpoint, output_dir, data) + [
          "--label_column=class"] + extra)

  # A new model from the fine-tuned checkpoint, in a new folder, trains by the flag.
  second = str(tmp_path / "second")
  run_flags(*tiny_tweet_flags(tf.train.latest_checkpoint(output_dir), second, data) + [
      "--label_column=class", "--label_smoothing=0.05", "--do_train", "--num_train_steps=2"])
  card = json.load(open(os.path.join(second, "model_card.json")))
  assert card["label_spec"]["options"] == {"label_smoothing": 0.05}

  # An edited card's smoothing is refused as the edit it is.
  path = os.path.join(output_dir, "model_card.json")
  first = json.load(open(path))
  edited = dict(first, label_spec=dict(first["label_spec"], options={"label_smoothing": 2}))
  with open(path, "w") as f:
    json.dump(edited, f)
  with pytest.raises(CardError, match="^%s$" % re.escape(
      "%s: label_spec's options: its option label_smoothing=2 must be at least 0 and below 1 "
      "(the file was edited): restore the card, or train again into a new --output_dir"
      % path)):
    run_flags(*tiny_tweet_flags(tiny_checkpoint, output_dir, data) + [
        "--label_column=class", "--do_eval"])


@pytest.mark.parametrize("extra", [[], ["--num_folds=2"]])
def test_another_head_refuses_it_before_any_work(tmp_path, tiny_checkpoint, extra):
  output_dir = str(tmp_path / "out")
  data = sample_path("davidson_hate_offensive", "labeled_data.csv")
  with pytest.raises(FlagError, match="^--label_smoothing is an option of the classification "
                                      "head; this run's head is multi_label: drop "
                                      "--label_smoothing$"):
    run_flags(*tiny_tweet_flags(tiny_checkpoint, output_dir, data) + [
        "--label_column=hate_speech,offensive_language", "--head=multi_label",
        "--label_smoothing=0.1", "--do_train", "--num_train_steps=2"] + extra)
  assert not os.path.exists(os.path.join(output_dir, "model_card.json"))
