"""Per-row training weights: by class, from a column, or by identity (Jigsaw Bias).

A weight multiplies a row's loss in training (eval and predict are unweighted). Each
function returns one float per example, in order, and says nothing about flags.
"""

import collections
import math

from data.data_error import DataError
from data.record_format import check_float32
from spec.run_errors import FlagError


# The rows a balanced weight is counted over, as its message names them.
TRAIN_FILE_ROWS = "the train file has"
# A class weight a float32 loss holds: a normal float32 (a smaller one would round towards
# 0, a larger one to infinity).
WEIGHT_RANGE = (1.1754944e-38, 3.4028234663852886e38)


def balanced_class_weights(labels, classes, rows=TRAIN_FILE_ROWS):
  """{class: n / (k * n_class)} over the rows' labels (class names): each class then weighs
  as much in the loss as if the classes were equally frequent (k classes, n rows). A class
  with no row is an error: its weight would be infinite. rows names the rows in it."""
  counts = collections.Counter(labels)
  missing = [c for c in classes if not counts[c]]
  if missing:
    raise FlagError("--class_weights=balanced: %s no row of class %s, so its weight is "
                    "undefined; give the weights as a list instead"
                    % (rows, ", ".join(missing)))
  n = float(sum(counts[c] for c in classes))
  return checked_weights({c: n / (len(classes) * counts[c]) for c in classes}, "class")


def balanced_positive_weights(positives, num_rows, columns, rows=TRAIN_FILE_ROWS):
  """{column: negatives / positives} of each label column over num_rows rows, where
  positives are the column's sums (a soft target's fractions add up): each column's
  positives then weigh as much in the loss as its negatives. A column with no positive or
  no negative is an error: its weight would be infinite, or 0. rows names the rows in
  the message."""
  weights = {}
  for column, positive in zip(columns, positives):
    negative = num_rows - positive
    if not positive > 0 or not negative > 0:
      raise FlagError("--class_weights=balanced: %s %s in label column %s, so its positive "
                      "weight is undefined; give one weight per column instead" % (
                          rows, "no positive row" if not positive > 0 else "no negative row",
                          column))
    weights[column] = negative / positive
  return checked_weights(weights, "label column")


def checked_weights(weights, unit):
  """weights ({name: weight}), when each is a weight a float32 loss holds (WEIGHT_RANGE)."""
  for name, weight in weights.items():
    if not WEIGHT_RANGE[0] <= weight <= WEIGHT_RANGE[1]:
      raise FlagError("--class_weights: the weight of %s %s is %.4g, outside what a float32 "
                      "loss holds (%.3g to %.3g): give weights nearer 1"
                      % (unit, name, weight, WEIGHT_RANGE[0], WEIGHT_RANGE[1]))
  return weights


def parse_class_weights(values, names, of_columns=False):
  """{name: weight} from one positive number per class (or, of_columns, per label column:
  the weight of its positives), in the names' order."""
  unit, units, what = (("label column", "label columns", "positive weight") if of_columns
                       else ("class", "classes", "weight"))
  if len(values) != len(names):
    raise FlagError("--class_weights has %d values but the head has %d %s (%s): give "
                    "one %s per %s, in that order, or 'balanced'"
                    % (len(values), len(names), unit if len(names) == 1 else units,
                       ", ".join(names), what, unit))
  weights = {}
  for value, name in zip(values, names):
    try:
      weight = float(value)
      if "_" in value or not value.isascii():  # (Python reads 1_000 and a full-width １)
        raise ValueError(value)
    except ValueError:
      raise FlagError("--class_weights: %r (for %s %s) is not a number" % (value, unit, name))
    if not weight > 0 or math.isinf(weight):
      raise FlagError("--class_weights: the weight of %s %s is %r; weights must be "
                      "positive and finite" % (unit, name, value))
    weights[name] = weight
  return checked_weights(weights, unit)


def class_weighted(labels, weights):
  """Each row's weight: that of its class."""
  return [weights[label] for label in labels]


def read_weight(path, index, fields, column, line):
  """The weight in a row's cell, checked as the row is read: a number >= 0 that a float32
  record holds, else a DataError naming the file, line and column."""
  cell = fields[index].strip() if index < len(fields) else None
  weight = _number(cell)
  fix = "fix the cell, or drop --sample_weight_column"
  if not weight >= 0 or math.isinf(weight):
    raise DataError(path, "the weight %r is not a number >= 0" % (cell,), fix, line=line,
                    column=column)
  return check_float32(path, weight, cell, "give weights of at most 3.4e38 (rescale the "
                       "column?), or drop --sample_weight_column", line=line, column=column)


def _number(cell):
  try:
    return float(cell)
  except (TypeError, ValueError):
    return float("nan")


def column_weights(values, column, path):
  """The weights read from a column (each checked by read_weight as its row was read), as
  a list; all of them 0 is an error: nothing would be learnt."""
  result = list(values)
  if not any(result):
    raise DataError(path, "every weight in column %s is 0: nothing would be learnt" % column,
                    "give positive weights, or drop --sample_weight_column", column=column)
  return result


def identity_weights(is_toxic, mentions_identity):
  """Identity weighting after the top public Jigsaw Unintended Bias solutions, with the
  sum normalised to the row count (mean 1):

    w = 1/4
      + 1/4 if the row mentions an identity (any identity value >= 0.5)
      + 1/4 if it is toxic and mentions none        (background positive)
      + 1/4 if it is not toxic and mentions one     (subgroup negative)

  so non-toxic rows that mention an identity (the model's usual false positives) weigh
  3/4 before normalising, toxic rows 1/2, and non-toxic rows that mention none 1/4. The
  public kernels wrote the background-positive term as "toxic and some identity value
  < 0.5" (empty cells as 0), which holds for nearly every toxic row; here it is "toxic and
  mentions none", the rows that term was meant for. is_toxic and mentions_identity are
  one bool per row.
  """
  raw = [0.25 + 0.25 * m + 0.25 * (t and not m) + 0.25 * ((not t) and m)
         for t, m in zip(is_toxic, mentions_identity)]
  mean = sum(raw) / len(raw)
  return [w / mean for w in raw]


FLOAT32_MAX = 3.4028234663852886e38


def combined(parts, spec, labels=None):
  """The product of the weight lists parts, row by row. FlagError for a product a float32
  record cannot hold (an infinite loss), or one that leaves a class of a classification
  head (labels: each row's class) with no weight at all (a weight column that is the label
  column gave class 0 weight 0): nothing of it would be learnt."""
  weights = [1.0] * len(parts[0])
  for part in parts:
    weights = [a * b for a, b in zip(weights, part)]
  largest = max(weights) if weights else 0.0
  if not largest <= FLOAT32_MAX:
    raise FlagError("the training weights multiply to %.3g for some rows (the class, column "
                    "and identity weights asked for), more than a float32 holds (3.4e38): the "
                    "loss would be infinite. Rescale --class_weights or the weight column"
                    % largest)
  if labels is not None:
    totals, rows = collections.Counter(), collections.Counter()
    for label, weight in zip(labels, weights):
      totals[label] += weight
      rows[label] += 1
    unweighed = [name for name in spec.classes if rows[name] and not totals[name]]
    if unweighed:
      raise FlagError("the training weights give the rows of class %s a total weight of 0: "
                      "nothing of %s would be learnt. Check --sample_weight_column (and "
                      "--class_weights)."
                      % (", ".join(repr(n) for n in unweighed),
                         "it" if len(unweighed) == 1 else "them"))
  return weights
