"""The distribution head: how a row spreads over several classes, one label column per
class (e.g. how many of a tweet's raters chose hate speech, offensive language and
neither), learnt by softmax cross-entropy against the row's shares.

A row's cells are counts or shares, any numbers of at least 0; its target is each divided
by the row's sum, so 1,2,0 (raters' counts) and 0.25,0.5,0 train alike. The outputs are
one softmax over the columns: one temperature calibrates them, and windows aggregate them
as a classification head's. A predictor names the most probable column beside the
probabilities. It has no class list and no threshold to tune: its targets are shares, not
one class.
"""

import math

from spec.labels import LabelError, LabelSpec, float32_text, highest, parse_number
from spec.run_errors import FlagError


class Distribution(LabelSpec):
  """Shares of several classes per row, one column each, learnt as one softmax."""

  kind = "distribution"
  loss = "softmax_cross_entropy"  # (its outputs' family; its loss is graph_loss's)
  column_statistics = ("auc", "spearman", "mse")
  record_dtype = "float32"
  # transformers' softmax head: its outputs are these (its own loss takes one class a row).
  hf_problem_type = "single_label_classification"

  def __init__(self, columns):
    super(Distribution, self).__init__(columns)
    if len(self.columns) < 2:
      raise FlagError("a distribution head spreads each row over at least 2 label columns, "
                      "one per class, not 1 (%s); for one fraction per row use "
                      "--head=soft_target" % self.columns[0])

  def parse(self, cells):
    counts = []
    for i, cell in enumerate(cells):
      value = parse_number(cell, i, "a count or share of at least 0")
      if value < 0:
        raise LabelError("%r is below 0" % cell, "give a count or share of at least 0",
                         index=i)
      counts.append(value)
    total = _sum(counts)
    if total == math.inf:  # (counts near float's largest: their shares of the largest)
      largest = max(counts)
      counts = [count / largest for count in counts]
      total = math.fsum(counts)
    if total <= 0:  # (no class chosen: a row without a label, which a run may skip)
      raise LabelError("every label column of the row is 0, so it spreads over no class",
                       "give a class a count or share above 0, or remove the row",
                       missing=True)
    return tuple(count / total for count in counts)

  def graph_loss(self, tf, logits, targets):
    """Softmax cross-entropy against the shares: -sum_k y_k log softmax(logits)_k."""
    log_probabilities = tf.nn.log_softmax(logits, axis=-1)
    per_example_loss = -tf.reduce_sum(tf.cast(targets, log_probabilities.dtype) *
                                      log_probabilities, axis=-1)
    return per_example_loss, tf.nn.softmax(logits, axis=-1)

  def unlabelled_value(self):  # (an even spread: a share for every class, summing to 1)
    return (1.0 / len(self.columns),) * len(self.columns)

  def prediction_header(self):
    return ["probability_%s" % c for c in self.columns] + ["prediction"]

  def prediction_cells(self, outputs):
    return [float32_text(p) for p in outputs] + [self.columns[highest(outputs)]]

  def stratum(self, label):  # (k-fold keeps each most-chosen class's share of rows)
    return self.columns[highest(label)]

  def result(self, names, outputs):
    return dict(super(Distribution, self).result(names, outputs),
                label=names[highest(outputs)])


def _sum(values):
  """The exact sum of finite numbers of at least 0, or inf where it passes float's largest."""
  try:
    return math.fsum(values)
  except OverflowError:
    return math.inf
