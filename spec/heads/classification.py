"""The classification head: one label column naming one of several classes, learnt by
softmax cross-entropy (with --label_smoothing, against smoothed targets); its outputs are
the classes' probabilities."""

import dataclasses

from spec.labels import (MISSING_VALUES, LabelError, LabelSpec, canonical_label,
                         float32_text, highest)
from spec.option_field import option
from spec.run_errors import FlagError


@dataclasses.dataclass(frozen=True)
class ClassificationOptions(object):
  """The classification head's own options."""
  label_smoothing: float = option(
      0.0, "Label smoothing e, as Keras's and Hugging Face's: training learns 1 - e + e/K "
      "for a row's class and e/K for each other of the K classes; 0 learns the labels as "
      "they are. The eval loss is the same smoothed loss; the outputs are the model's "
      "probabilities.",
      check=lambda value: None if 0.0 <= value < 1.0 else "must be at least 0 and below 1",
      example="--label_smoothing=0.1")


class SingleLabel(LabelSpec):
  """One column naming one of several classes; the head's outputs are the classes."""

  kind = "classification"
  loss = "softmax_cross_entropy"
  record_dtype = "int64"
  has_classes = True
  hf_problem_type = "single_label_classification"
  class_weights_weigh = "classes"
  Options = ClassificationOptions

  def __init__(self, columns, classes):
    super(SingleLabel, self).__init__(columns)
    if len(self.columns) != 1:
      raise FlagError("a classification head reads one label column, not %d (%s); for "
                      "several 0/1 columns use the multi_label head"
                      % (len(self.columns), ", ".join(self.columns)))
    self._classes = [str(c).strip() for c in classes]
    if len(self._classes) < 2:
      raise FlagError("a classification head needs at least 2 classes, not %d (%s)"
                      % (len(self._classes), ", ".join(self._classes) or "none"))
    # A cell names a class by its canonical spelling (canonical_label), so two names
    # that read the same (0 and 0.0, True and true) would be one class.
    self._index = {canonical_label(c): i for i, c in enumerate(self._classes)}
    if len(self._index) != len(self._classes):
      raise FlagError("class listed twice: %s (labels are read by value: 1 and 1.0 are one "
                      "class, and so are True and true)" % ", ".join(self._classes))

  @property
  def classes(self):
    return list(self._classes)

  @property
  def num_outputs(self):
    return len(self._classes)

  @property
  def record_width(self):
    return None

  def parse(self, cells):
    value = cells[0].strip()
    index = self._index.get(canonical_label(value))
    if index is not None:
      return self._classes[index]
    if value in MISSING_VALUES:
      raise LabelError("the label is %s" % ("empty" if not value else
                                            "%r, a missing value" % value),
                       "fill in one of %s, remove the row" % ", ".join(self._classes),
                       missing=True,
                       hint=(" (if %r is a class, list every class with --labels)" % value
                             if value else ""))
    raise LabelError("unknown label %r; the labels are %s" % (value, ", ".join(self._classes)),
                     "correct the row, or pick the right --task_name / --label_column",
                     unknown=True)

  def record_value(self, label):
    return self._index[canonical_label(label)]

  def output_targets(self, label):  # (1 for the label's class, 0 for the others)
    index = self.record_value(label)
    return tuple(1.0 if i == index else 0.0 for i in range(len(self._classes)))

  def unlabelled_value(self):
    return 0

  def graph_loss(self, tf, logits, targets):
    """Softmax cross-entropy against the class ids' one-hot targets smoothed by
    --label_smoothing (None without it: modeling/head.py's plain loss)."""
    smoothing = self.options.label_smoothing
    if not smoothing:
      return None
    k = self.num_outputs
    smoothed = tf.one_hot(targets, k, on_value=1.0 - smoothing + smoothing / k,
                          off_value=smoothing / k, dtype=tf.float32)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    return -tf.reduce_sum(smoothed * log_probs, axis=-1), tf.nn.softmax(logits, axis=-1)

  def prediction_header(self):
    return ["probability_%s" % c for c in self._classes] + ["prediction"]

  def prediction_cells(self, outputs):
    return [float32_text(p) for p in outputs] + [self.decide(outputs)]

  def stratum(self, label):
    return label

  def decision_names(self):  # (a binary head: the second class, above its threshold)
    return (self._classes[1],) if len(self._classes) == 2 else ()

  def decide(self, outputs):
    """The predicted class: the second of two at or above its tuned threshold, else the
    highest output (the first of equal ones)."""
    if self.thresholds:
      positive = self._classes[1]
      return positive if outputs[1] >= self.threshold(positive) else self._classes[0]
    return self._classes[highest(outputs)]

  def result(self, names, outputs):
    result = dict(super(SingleLabel, self).result(names, outputs), label=self.decide(outputs))
    if self.thresholds:  # (says which threshold gave the label)
      result["threshold"] = self.threshold(self._classes[1])
    return result

  def describe(self):
    return "labels %s" % ",".join(self._classes)
