"""Eval metrics: exact statistics against independent references, padding never counted."""

import functools

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import pairwise_auc
from modeling import metrics


def test_roc_auc_equals_pairwise_definition():
  rng = np.random.RandomState(0)
  scores = np.round(rng.rand(200), 2)  # rounding makes ties
  labels = rng.rand(200) > 0.6
  assert metrics.roc_auc(scores, labels) == pytest.approx(pairwise_auc(scores, labels), 1e-12)
  assert metrics.roc_auc([0.1, 0.9], [0, 1]) == 1.0
  assert metrics.roc_auc([0.5, 0.5], [0, 1]) == 0.5
  assert np.isnan(metrics.roc_auc([0.2, 0.7], [1, 1]))  # no negative row: undefined


def test_spearman_and_pearson_against_formulas():
  x = np.array([1.0, 2.0, 2.0, 5.0, 3.0, 7.0])
  y = np.array([2.0, 1.0, 4.0, 6.0, 6.0, 9.0])
  assert metrics.average_ranks(x).tolist() == [1.0, 2.5, 2.5, 5.0, 4.0, 6.0]
  xm, ym = x - x.mean(), y - y.mean()
  assert metrics.pearson(x, y) == pytest.approx((xm * ym).sum() / np.sqrt((xm ** 2).sum() *
                                                                          (ym ** 2).sum()))
  rx, ry = metrics.average_ranks(x), metrics.average_ranks(y)
  assert metrics.spearman(x, y) == pytest.approx(np.corrcoef(rx, ry)[0, 1])
  # Without ties Spearman is 1 - 6 sum d^2 / (n (n^2 - 1)).
  a, b = np.array([3.0, 1.0, 4.0, 1.5, 5.0]), np.array([2.0, 7.0, 1.0, 8.0, 2.5])
  d = metrics.average_ranks(a) - metrics.average_ranks(b)
  assert metrics.spearman(a, b) == pytest.approx(1 - 6 * (d ** 2).sum() / (5 * 24))
  assert np.isnan(metrics.pearson([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]))  # constant: undefined
  assert np.isnan(metrics.spearman([1.0], [1.0]))


def test_matthews_correlation():
  assert metrics.matthews_corrcoef(5, 5, 0, 0) == 1.0
  assert metrics.matthews_corrcoef(0, 0, 5, 5) == -1.0
  assert metrics.matthews_corrcoef(6, 3, 1, 2) == pytest.approx(
      (6 * 3 - 1 * 2) / np.sqrt(7 * 8 * 4 * 5))
  assert metrics.matthews_corrcoef(4, 0, 0, 0) == 0.0


def _stream(metric_fn, batches):
  """Runs a metric_fn over batches of numpy inputs the way Estimator evaluation does."""
  with tf.Graph().as_default():
    placeholders = {k: tf.placeholder(tf.as_dtype(v.dtype), [None] + list(v.shape[1:]))
                    for k, v in batches[0].items()}
    ops = metric_fn(**placeholders)
    with tf.Session() as session:
      session.run(tf.local_variables_initializer())
      for batch in batches:
        session.run({k: op[1] for k, op in ops.items()},
                    {placeholders[k]: v for k, v in batch.items()})
      return session.run({k: op[0] for k, op in ops.items()})


def _split(arrays, size):
  n = len(next(iter(arrays.values())))
  return [{k: v[i:i + size] for k, v in arrays.items()} for i in range(0, n, size)]


def test_streamed_binary_metrics_ignore_padding_rows():
  rng = np.random.RandomState(1)
  n, padding = 29, 3
  logits = rng.randn(n + padding, 2).astype(np.float32)
  labels = rng.randint(0, 2, n + padding).astype(np.int32)
  loss = rng.rand(n + padding).astype(np.float32)
  real = np.array([1] * n + [0] * padding, np.int32)
  logits[n:] = [9.0, -9.0]  # padding rows that would skew every metric if counted
  result = _stream(metrics.classification_metrics, _split(
      {"per_example_loss": loss, "label_ids": labels, "logits": logits, "is_real_example": real},
      8))
  predicted = logits[:n].argmax(1)
  y = labels[:n]
  tp = int(((predicted == 1) & (y == 1)).sum())
  fp = int(((predicted == 1) & (y == 0)).sum())
  fn = int(((predicted == 0) & (y == 1)).sum())
  tn = n - tp - fp - fn
  probs = np.exp(logits[:n]) / np.exp(logits[:n]).sum(1, keepdims=True)
  assert result["num_examples"] == n
  assert result["eval_loss"] == pytest.approx(loss[:n].mean(), 1e-6)
  assert result["accuracy"] == pytest.approx((tp + tn) / float(n), 1e-6)
  assert result["precision"] == pytest.approx(tp / float(tp + fp), 1e-6)
  assert result["recall"] == pytest.approx(tp / float(tp + fn), 1e-6)
  p, r = tp / float(tp + fp), tp / float(tp + fn)
  assert result["f1"] == pytest.approx(2 * p * r / (p + r), 1e-5)
  assert result["mcc"] == pytest.approx(metrics.matthews_corrcoef(tp, tn, fp, fn), 1e-6)
  assert result["auc"] == pytest.approx(pairwise_auc(probs[:, 1], y), 1e-5)


def test_multiclass_has_no_binary_metrics():
  arrays = {"per_example_loss": np.ones(4, np.float32), "label_ids": np.array([0, 1, 2, 2],
                                                                              np.int32),
            "logits": np.eye(3, dtype=np.float32)[[0, 1, 1, 2]],
            "is_real_example": np.ones(4, np.int32)}
  result = _stream(metrics.classification_metrics, [arrays])
  assert sorted(result) == ["accuracy", "eval_loss", "num_examples"]
  assert result["accuracy"] == pytest.approx(0.75)


def test_streamed_regression_metrics():
  rng = np.random.RandomState(2)
  targets = rng.rand(21).astype(np.float32) * 5
  predictions = (targets + rng.randn(21) * 0.5).astype(np.float32)
  real = np.array([1] * 19 + [0, 0], np.int32)
  result = _stream(functools.partial(metrics.column_metrics, columns=["score"],
                                     names=("pearson", "spearman", "mse")), _split(
      {"per_example_loss": (predictions - targets) ** 2, "labels": targets[:, None],
       "outputs": predictions[:, None], "is_real_example": real}, 4))
  assert result["num_examples"] == 19
  assert result["pearson"] == pytest.approx(np.corrcoef(predictions[:19], targets[:19])[0, 1],
                                            1e-5)
  assert result["spearman"] == pytest.approx(metrics.spearman(predictions[:19], targets[:19]),
                                             1e-5)
  assert result["eval_loss"] == pytest.approx(((predictions - targets)[:19] ** 2).mean(), 1e-5)
