"""Evaluation metrics: streaming TF metrics for eval_metrics, with exact numpy statistics.

ROC-AUC, Pearson and Spearman need every prediction, not a running sum, so they are
computed exactly on the collected values (tf.metrics.auc would bucket scores into
thresholds). Everything is weighted by is_real_example, so padding rows never count.
"""

import numpy as np
import tensorflow.compat.v1 as tf

from modeling.head import loss_and_outputs

# The exact statistics, in plain numpy (shared with the TF-free bias metric; also
# importable from here).
from modeling.statistics import (average_ranks, f1_at_half, matthews_corrcoef,
                                 mean_of_defined, mean_squared_error, pearson, roc_auc,
                                 spearman)


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


def metric_fn_for(label_spec):
  """The eval metric_fn of a label spec's head: the classification metrics for a head with
  classes, else each statistic the head names (LabelSpec.column_statistics) per label
  column.

  It takes the tensors model_fn hands to eval_metrics: per_example_loss [batch],
  labels (class ids [batch] or values [batch, n]), logits and outputs [batch, n]
  (probabilities, or a regression head's values) and is_real_example [batch].
  """
  if label_spec.has_classes:
    def classification(per_example_loss, labels, logits, outputs, is_real_example):
      del outputs
      return classification_metrics(per_example_loss, labels, logits, is_real_example)
    return classification

  columns, names = list(label_spec.columns), label_spec.column_statistics
  unknown = [name for name in names if name not in STATISTICS]
  if unknown or not names:
    raise ValueError("the %s names statistics %s; the evaluation has %s" % (
        label_spec.describe(), ", ".join(unknown) or "none", ", ".join(sorted(STATISTICS))))

  def per_column(per_example_loss, labels, logits, outputs, is_real_example):
    del logits
    return column_metrics(per_example_loss, labels, outputs, is_real_example, columns, names)
  return per_column


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


# --- heads with one output per label column -------------------------------------------
# Their values are collected as [rows, columns] matrices (flattened in the graph), and
# every statistic is exact numpy on them. A metric of one column is named plainly
# ("auc"); with several columns each is suffixed with its column ("auc_toxic") and the
# mean over columns is "mean_<metric>".

def _collected_matrix(values, weights, name):
  real = _real_only(tf.cast(values, tf.float32), weights)
  return collected(tf.reshape(real, [-1]), name)


def _per_column(name, fn, predicted, actual, columns, updates, with_mean):
  """{name_<column>: metric} for each column (or {name: metric} for one column), and the
  mean over columns; fn(predicted_column, actual_column) -> float."""
  n = len(columns)

  def column_value(i):
    return lambda p, a: fn(p.reshape(-1, n)[:, i], a.reshape(-1, n)[:, i])

  def mean_value(p, a):
    p, a = p.reshape(-1, n), a.reshape(-1, n)
    return mean_of_defined([fn(p[:, i], a[:, i]) for i in range(n)])

  if n == 1:
    return {name: numpy_metric(column_value(0), [predicted, actual], updates)}
  result = {"%s_%s" % (name, column): numpy_metric(column_value(i), [predicted, actual], updates)
            for i, column in enumerate(columns)}
  if with_mean:
    result["mean_%s" % name] = numpy_metric(mean_value, [predicted, actual], updates)
  return result


def _common(per_example_loss, outputs, labels, is_real_example):
  weights = tf.cast(is_real_example, tf.float32)
  predicted = _collected_matrix(outputs, weights, "predicted")
  actual = _collected_matrix(labels, weights, "actual")
  metrics = {"eval_loss": tf.metrics.mean(per_example_loss, weights=weights),
             "num_examples": streaming_sum(weights, "num_examples")}
  return metrics, predicted[0], actual[0], [predicted[1], actual[1]]


def _auc_at_half(scores, targets):
  return roc_auc(scores, np.asarray(targets) >= 0.5)


# The statistics a head can name per label column, each fn(predicted, actual) -> float on
# one column's real rows. auc: ROC-AUC against actual >= 0.5 (mean ROC-AUC over columns is
# the Jigsaw Toxic Kaggle metric); f1: at 0.5; spearman (its mean over columns is the
# Google QUEST metric), pearson and mse against the values themselves.
STATISTICS = {"auc": _auc_at_half, "f1": f1_at_half, "spearman": spearman, "pearson": pearson,
              "mse": mean_squared_error}


def column_metrics(per_example_loss, labels, outputs, is_real_example, columns, names):
  """Each named statistic per column and its mean over columns; the loss and the count."""
  metrics, predicted, actual, updates = _common(per_example_loss, outputs, labels,
                                                is_real_example)
  for name in names:
    metrics.update(_per_column(name, STATISTICS[name], predicted, actual, columns, updates,
                               True))
  return metrics


def metric_names(label_spec):
  """The names of the eval metrics of a label spec's head, as Estimator.evaluate returns
  them (eval_loss and num_examples included): found by building its metric_fn in a
  scratch graph, so they cannot drift from what an evaluation reports."""
  n = label_spec.num_outputs
  with tf.Graph().as_default():
    labels = (tf.placeholder(tf.int32, [None]) if label_spec.record_width is None
              else tf.placeholder(tf.float32, [None, n]))
    metrics = metric_fn_for(label_spec)(
        tf.placeholder(tf.float32, [None]), labels, tf.placeholder(tf.float32, [None, n]),
        tf.placeholder(tf.float32, [None, n]), tf.placeholder(tf.int32, [None]))
  return sorted(metrics)


def metrics_of(label_spec, logits, labels):
  """The eval metrics of a label spec's head (as Estimator.evaluate gives them, eval_loss
  and num_examples included) of logits [rows, n] against labels (class ids [rows], or
  values [rows, n]), every row real: for outputs found outside the graph, such as a long
  text's windows aggregated. The same metric_fn and loss as an evaluation's, run once
  in a scratch graph."""
  logits = np.asarray(logits, np.float32)
  with tf.Graph().as_default():
    read = tf.constant(logits)
    targets = tf.constant(np.asarray(labels, np.int32 if label_spec.record_width is None
                                     else np.float32))
    per_example_loss, outputs = loss_and_outputs(label_spec, read, targets)
    metrics = metric_fn_for(label_spec)(per_example_loss, targets, read, outputs,
                                        tf.ones([len(logits)], tf.int32))
    with tf.Session() as session:
      session.run(tf.local_variables_initializer())
      session.run([update for _, update in metrics.values()])
      return session.run({name: value for name, (value, _) in metrics.items()})

