"""Evaluation metrics: streaming TF metrics for eval_metrics, with exact numpy statistics.

ROC-AUC, Pearson and Spearman need every prediction, not a running sum, so they are
computed exactly on the collected values (tf.metrics.auc would bucket scores into
thresholds). Everything is weighted by is_real_example, so padding rows never count.
"""

import numpy as np
import tensorflow.compat.v1 as tf


# --- exact statistics on numpy arrays ----------------------------------------------

def average_ranks(values):
  """1-based ranks, ties sharing the mean of their positions (as in Spearman's rho)."""
  values = np.asarray(values, dtype=np.float64)
  order = np.argsort(values, kind="mergesort")
  sorted_values = values[order]
  ranks = np.empty(len(values), dtype=np.float64)
  start = 0
  while start < len(values):
    end = start
    while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
      end += 1
    ranks[order[start:end + 1]] = (start + end) / 2.0 + 1.0
    start = end + 1
  return ranks


def pearson(x, y):
  x = np.asarray(x, dtype=np.float64)
  y = np.asarray(y, dtype=np.float64)
  if len(x) < 2 or x.std() == 0 or y.std() == 0:
    return 0.0
  return float(np.corrcoef(x, y)[0, 1])


def spearman(x, y):
  return pearson(average_ranks(x), average_ranks(y))


def roc_auc(scores, labels):
  """Area under the ROC curve via the rank-sum (Mann-Whitney U) identity; ties count half."""
  labels = np.asarray(labels).astype(bool)
  num_pos, num_neg = int(labels.sum()), int((~labels).sum())
  if num_pos == 0 or num_neg == 0:
    return 0.0
  ranks = average_ranks(scores)
  return float((ranks[labels].sum() - num_pos * (num_pos + 1) / 2.0) / (num_pos * num_neg))


def matthews_corrcoef(tp, tn, fp, fn):
  denominator = np.sqrt(float((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)))
  return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


# --- streaming TF metrics -------------------------------------------------------------

def _local_variable(name, initial, shape=None):
  return tf.Variable(initial, trainable=False, name=name, validate_shape=shape is None,
                     shape=shape,
                     collections=[tf.GraphKeys.LOCAL_VARIABLES, tf.GraphKeys.METRIC_VARIABLES])


def streaming_sum(values, name):
  total = _local_variable(name, tf.zeros([], tf.float32))
  return total.read_value(), total.assign_add(tf.reduce_sum(tf.cast(values, tf.float32)))


def collected(values, name):
  """A metric whose value is every `values` seen so far, concatenated (1-D float32)."""
  store = _local_variable(name, tf.zeros([0], tf.float32), shape=tf.TensorShape([None]))
  update = store.assign(tf.concat([store.read_value(), tf.cast(values, tf.float32)], 0))
  return store.read_value(), update


def numpy_metric(fn, inputs, update_ops):
  """Wraps fn(*arrays) -> float as a (value, update_op) metric over collected inputs."""
  value = tf.py_func(lambda *arrays: np.float32(fn(*arrays)), inputs, tf.float32, stateful=False)
  return tf.reshape(value, []), tf.group(*update_ops)


def _real_only(tensor, weights):
  return tf.boolean_mask(tensor, weights > 0)


def classification_metrics(per_example_loss, label_ids, logits, is_real_example):
  """loss, accuracy and count; for two labels also precision, recall, F1, ROC-AUC and MCC."""
  weights = tf.cast(is_real_example, tf.float32)
  predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
  metrics = {
      "eval_loss": tf.metrics.mean(per_example_loss, weights=weights),
      "accuracy": tf.metrics.accuracy(label_ids, predictions, weights=weights),
      "num_examples": streaming_sum(weights, "num_examples"),
  }
  if logits.shape.as_list()[-1] == 2:
    metrics.update(_binary_metrics(label_ids, predictions, logits, weights))
  return metrics


def _binary_metrics(label_ids, predictions, logits, weights):
  precision = tf.metrics.precision(label_ids, predictions, weights=weights)
  recall = tf.metrics.recall(label_ids, predictions, weights=weights)
  f1 = _f1(precision[0], recall[0]), tf.group(precision[1], recall[1])

  labels_bool, predictions_bool = tf.cast(label_ids, tf.bool), tf.cast(predictions, tf.bool)
  counts = {}
  for name, fn in (("tp", tf.metrics.true_positives), ("tn", tf.metrics.true_negatives),
                   ("fp", tf.metrics.false_positives), ("fn", tf.metrics.false_negatives)):
    counts[name] = fn(labels_bool, predictions_bool, weights=weights)
  mcc = (tf.py_func(lambda tp, tn, fp, fn: np.float32(matthews_corrcoef(tp, tn, fp, fn)),
                    [counts[k][0] for k in ("tp", "tn", "fp", "fn")], tf.float32,
                    stateful=False),
         tf.group(*[c[1] for c in counts.values()]))

  positive_score = tf.nn.softmax(logits, axis=-1)[:, 1]
  scores = collected(_real_only(positive_score, weights), "auc_scores")
  labels = collected(_real_only(label_ids, weights), "auc_labels")
  auc = numpy_metric(roc_auc, [scores[0], labels[0]], [scores[1], labels[1]])
  return {"precision": precision, "recall": recall, "f1": f1, "mcc": mcc, "auc": auc}


def _f1(precision, recall):
  return tf.where(precision + recall > 0, 2.0 * precision * recall / (precision + recall + 1e-12),
                  0.0)


def regression_metrics(per_example_loss, targets, predictions, is_real_example):
  """loss (MSE), count, and exact Pearson and Spearman correlations."""
  weights = tf.cast(is_real_example, tf.float32)
  predicted = collected(_real_only(predictions, weights), "predicted")
  actual = collected(_real_only(targets, weights), "actual")
  updates = [predicted[1], actual[1]]
  return {
      "eval_loss": tf.metrics.mean(per_example_loss, weights=weights),
      "num_examples": streaming_sum(weights, "num_examples"),
      "pearson": numpy_metric(pearson, [predicted[0], actual[0]], updates),
      "spearman": numpy_metric(spearman, [predicted[0], actual[0]], updates),
  }
