"""Exact statistics on numpy arrays: ranks, ROC-AUC, correlations, F1, MSE.

Plain numpy, no TensorFlow: the streaming eval metrics (modeling/metrics.py) compute
them on the collected predictions, and the Jigsaw bias metric (pipeline/bias_metrics.py)
on any predictions file. An undefined statistic is NaN.
"""

import numpy as np


def average_ranks(values):
  """1-based ranks, ties sharing the mean of their positions (as in Spearman's rho)."""
  _, inverse, counts = np.unique(np.asarray(values, dtype=np.float64), return_inverse=True,
                                 return_counts=True)
  last = np.cumsum(counts).astype(np.float64)  # 1-based position of each value's last copy
  return (last - (counts - 1) / 2.0)[inverse.reshape(-1)]


def pearson(x, y):
  """Pearson's correlation; NaN (undefined) for fewer than 2 rows or a constant side."""
  x = np.asarray(x, dtype=np.float64)
  y = np.asarray(y, dtype=np.float64)
  if len(x) < 2 or x.std() == 0 or y.std() == 0:
    return float("nan")
  return float(np.corrcoef(x, y)[0, 1])


def spearman(x, y):
  return pearson(average_ranks(x), average_ranks(y))


def roc_auc(scores, labels):
  """Area under the ROC curve via the rank-sum (Mann-Whitney U) identity; ties count half.
  NaN (undefined) when the labels lack a class."""
  labels = np.asarray(labels).astype(bool)
  num_pos, num_neg = int(labels.sum()), int((~labels).sum())
  if num_pos == 0 or num_neg == 0:
    return float("nan")
  ranks = average_ranks(scores)
  return float((ranks[labels].sum() - num_pos * (num_pos + 1) / 2.0) / (num_pos * num_neg))


def matthews_corrcoef(tp, tn, fp, fn):
  denominator = np.sqrt(float((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)))
  return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def mean_of_defined(values):
  """The mean of the values that are not NaN (a metric undefined for a column, e.g. an AUC
  where the column has no positive row); NaN when none is defined."""
  defined = [v for v in values if not np.isnan(v)]
  return float(np.mean(defined)) if defined else float("nan")


def f1_at_half(probabilities, labels):
  """F1 of the positive class when a probability >= 0.5 predicts it (0 when undefined)."""
  predicted, actual = np.asarray(probabilities) >= 0.5, np.asarray(labels) >= 0.5
  tp = float(np.sum(predicted & actual))
  denominator = float(np.sum(predicted) + np.sum(actual))
  return 2.0 * tp / denominator if denominator else 0.0


def mean_squared_error(predicted, actual):
  return float(np.mean((np.asarray(predicted, np.float64) - np.asarray(actual, np.float64)) ** 2))
