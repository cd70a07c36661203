"""Label specifications: what a task's labels are, in one object per label shape.

A spec is plain Python, shared by data/ and modeling/. It owns:
- parsing and validating a row's raw label cells (`parse`): a class name, or a tuple of
  floats, one per label column;
- the value a record stores for it (`record_value`) and its schema (`record_dtype`,
  `record_width`);
- which loss and which metrics the head uses (`loss`, `metrics`: names that
  modeling/head.py and modeling/metrics.py implement) and how many outputs it has;
- the prediction columns of test_results.tsv (`prediction_header`, `prediction_cells`);
- what the model card says about the labels (`to_card`, `from_card`);
- what --class_weights weighs (`class_weights_weigh`);
- how its outputs become a predictor's result, k-fold's strata, the export's output name
  and Hugging Face's problem_type, and the thresholds it decides by (spec/thresholds.py).

The heads, their labels, losses and metrics: docs/guide/heads.md. Adding a head means one
subclass here, listed in SPECS (and its tests).
"""

import decimal
import math
import re

from spec.run_errors import FlagError
from spec.calibration import Calibration
from spec.thresholds import Thresholds

# Cells that mean "no value" (as pandas reads them), unless a class is named so.
MISSING_VALUES = frozenset(["", "nan", "NaN", "NAN", "NA", "N/A", "n/a", "null", "NULL",
                            "None", "#N/A"])

BOOLEANS = {"true": 1.0, "false": 0.0}


# A number as data files write one (no Python-only spellings: 1_000 is no number).
_NUMBER = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$")  # (ASCII digits:
# a full-width １ is text, never the number 1)


def canonical_label(cell):
  """A class label's one spelling, whatever the file's: a number by its value (1, 1.0,
  01 and +1 are the class 1; 0.50 is 0.5), true and false in any case (TRUE is true),
  other text as it is; surrounding whitespace never counts. Two cells are the same class
  exactly when their canonical labels are equal."""
  text = cell.strip()
  if text.lower() in BOOLEANS:
    return text.lower()
  if not _NUMBER.match(text):
    return text
  try:
    value = decimal.Decimal(text)
  except decimal.InvalidOperation:
    return text
  if not value.is_finite():
    return text
  return "0" if value.is_zero() else format(value.normalize(), "f")


def class_order(names):
  """Canonical class names in a deterministic order: numbers by value, then true and
  false, then other text in code point order (never the order of a set)."""
  def key(name):
    try:
      return (0, decimal.Decimal(name), name)
    except decimal.InvalidOperation:
      return (1 if name in BOOLEANS else 2, 0, name)
  return sorted(names, key=key)


def float32_text(value):
  """A float32 output as text that reads back as the same float32 (9 significant digits):
  fixed decimals would turn small probabilities into ties or zeros."""
  return "%.9g" % value


class LabelError(ValueError):
  """A label cell a spec cannot take. index is the cell's position among the label columns;
  missing is True when the cell holds no value (an empty or NaN cell), which a run may
  skip and count; unknown is True for a value that is none of the classes; fix says what
  would make it valid."""

  def __init__(self, problem, fix, index=0, missing=False, hint="", unknown=False):
    super(LabelError, self).__init__("%s. Fix: %s%s" % (problem, fix, hint))
    self.problem = problem
    self.fix = fix
    self.index = index
    self.missing = missing
    self.unknown = unknown
    self.hint = hint  # a last remark, after any fix the caller adds


class LabelSpec(Thresholds, Calibration):
  """The base class. columns are the label columns (names, or positions as strings)."""

  kind = None
  loss = None          # "softmax_cross_entropy", "sigmoid_cross_entropy", "squared_error"
  metrics = None       # the metric family in modeling/metrics.py
  record_dtype = None  # "int64" or "float32"
  has_classes = False  # whether the outputs are the classes of one label column
  output_name = "probabilities"  # what the export's signature calls the outputs
  hf_problem_type = None  # Hugging Face's problem_type for this head's config.json
  strata_by_quantile = False  # k-fold stratifies by quintiles of stratum() (numbers)
  class_weights_weigh = None  # "classes", or each label column's "positives"

  def __init__(self, columns):
    self.columns = tuple(str(c) for c in columns)
    if not self.columns:
      raise FlagError("a label specification needs at least one label column")
    if len(set(self.columns)) != len(self.columns):
      raise FlagError("label column listed twice: %s" % ", ".join(self.columns))

  @property
  def num_outputs(self):
    return len(self.columns)

  @property
  def record_width(self):
    """None for one scalar per record, else the length of the stored vector."""
    return len(self.columns)

  @property
  def classes(self):
    """Class names in the order of the outputs (classification only)."""
    return None

  def parse(self, cells):
    """The label of one row's label cells (one per column), or LabelError."""
    raise NotImplementedError

  def record_value(self, label):
    """What a record stores for a parsed label: the floats themselves, here."""
    return label

  def unlabelled_value(self):
    """The value stored for a row whose label is not read (predict files, padding)."""
    return (0.0,) * self.record_width

  def prediction_header(self):
    return ["prediction_%s" % c for c in self.columns]

  def prediction_cells(self, outputs):
    """The text cells of one prediction, given the head's outputs for the row."""
    return [float32_text(v) for v in outputs]

  def stratum(self, label):
    """What k-fold stratifies a row by (a parsed label): whether the first column is at
    least 0.5, here."""
    return label[0] >= 0.5

  def result(self, names, outputs):
    """A predictor's result for one input from the head's outputs (named by names)."""
    return {self.output_name: dict(zip(names, outputs))}

  def describe(self):
    return "%s head on %s" % (self.kind, ", ".join(self.columns))

  def head_entry(self):
    """What the head is (the card's entry without its temperature and thresholds)."""
    return {"kind": self.kind, "columns": list(self.columns), "classes": self.classes}

  def to_card(self):
    entry = self.head_entry()
    if self.thresholds:
      entry["thresholds"] = dict(self.thresholds)
    if self.temperature is not None:
      entry["temperature"] = self.temperature
    return entry

  def __eq__(self, other):  # (the same head; its calibration and thresholds read its outputs)
    return type(self) is type(other) and (self.kind, self.columns, self.classes) == (
        other.kind, other.columns, other.classes)

  def __repr__(self):
    return "%s(%s)" % (type(self).__name__, self.to_card())


class SingleLabel(LabelSpec):
  """One column naming one of several classes; the head's outputs are the classes."""

  kind = "classification"
  loss = "softmax_cross_entropy"
  metrics = "classification"
  record_dtype = "int64"
  has_classes = True
  hf_problem_type = "single_label_classification"
  class_weights_weigh = "classes"

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

  def unlabelled_value(self):
    return 0

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
    return self._classes[_best(outputs)]

  def result(self, names, outputs):
    result = dict(super(SingleLabel, self).result(names, outputs), label=self.decide(outputs))
    if self.thresholds:  # (says which threshold gave the label)
      result["threshold"] = self.threshold(self._classes[1])
    return result

  def describe(self):
    return "labels %s" % ",".join(self._classes)


def _best(outputs):
  """The index of the highest output (the first of equal ones)."""
  return max(range(len(outputs)), key=lambda k: outputs[k])


def parse_number(cell, index, what):
  """A finite float from a cell; LabelError (missing for empty/NaN cells) otherwise."""
  text = cell.strip()
  if text in MISSING_VALUES:
    raise LabelError("the value is %s" % ("empty" if not text else "%r, a missing value" % text),
                     "fill in %s, remove the row" % what, index=index, missing=True)
  try:
    value = float(text)
    if "_" in text or not text.isascii():  # (Python reads 1_000 and a full-width １ as
      raise ValueError(text)                # numbers; a data file means none by them)
  except ValueError:
    raise LabelError("%r is not a number" % cell, "give %s" % what, index=index)
  if math.isnan(value):
    raise LabelError("the value is NaN", "fill in %s, remove the row" % what, index=index,
                     missing=True)
  if math.isinf(value):
    raise LabelError("the value %r is infinite" % cell, "give %s" % what, index=index)
  return value


class MultiLabel(LabelSpec):
  """Several 0/1 columns, each its own yes/no question (e.g. Jigsaw Toxic's six labels)."""

  kind = "multi_label"
  loss = "sigmoid_cross_entropy"
  metrics = "multi_label"
  record_dtype = "float32"
  hf_problem_type = "multi_label_classification"
  class_weights_weigh = "positives"

  def parse(self, cells):
    values = []
    for i, cell in enumerate(cells):
      word = cell.strip().lower()
      value = BOOLEANS[word] if word in BOOLEANS else parse_number(cell, i, "0 or 1")
      if value not in (0.0, 1.0):
        raise LabelError("%r is not 0 or 1" % cell, "a multi-label column holds 0 or 1; for "
                         "fractions use --head=soft_target", index=i)
      values.append(value)
    return tuple(values)

  def prediction_header(self):
    return ["probability_%s" % c for c in self.columns]

  def decision_names(self):
    return self.columns

  def result(self, names, outputs):
    result = dict(super(MultiLabel, self).result(names, outputs),
                  labels=[name for name, p in zip(names, outputs) if p >= self.threshold(name)])
    if self.thresholds:  # (says which thresholds gave the labels)
      result["thresholds"] = {name: self.threshold(name) for name in names}
    return result


class SoftTarget(LabelSpec):
  """Fractions in [0, 1] (e.g. the share of raters who found a comment toxic), learnt with
  sigmoid cross-entropy against the fraction itself."""

  kind = "soft_target"
  loss = "sigmoid_cross_entropy"
  metrics = "soft_target"
  record_dtype = "float32"
  hf_problem_type = "multi_label_classification"  # (Hugging Face has no soft targets)
  class_weights_weigh = "positives"

  def parse(self, cells):
    values = []
    for i, cell in enumerate(cells):
      value = parse_number(cell, i, "a fraction in [0, 1]")
      if not 0.0 <= value <= 1.0:
        raise LabelError("target %r is outside [0, 1]" % cell, "give a fraction in [0, 1], or "
                         "use --head=regression for other numbers", index=i)
      values.append(value)
    return tuple(values)


class Regression(LabelSpec):
  """Numbers of any range (e.g. STS-B's similarity in [0, 5]), learnt by squared error."""

  kind = "regression"
  loss = "squared_error"
  metrics = "regression"
  record_dtype = "float32"
  output_name = "values"
  hf_problem_type = "regression"
  strata_by_quantile = True

  def stratum(self, label):
    return label[0]

  def parse(self, cells):
    return tuple(parse_number(cell, i, "a number") for i, cell in enumerate(cells))

  def prediction_header(self):
    if len(self.columns) == 1:
      return ["prediction"]
    return super(Regression, self).prediction_header()


# Every head: its class by its kind. A new head is a class here, listed once.
SPECS = {spec.kind: spec for spec in (SingleLabel, MultiLabel, SoftTarget, Regression)}
HEAD_KINDS = tuple(SPECS)


def build_spec(kind, columns, classes=None):
  """The spec of a head kind over label columns (classes: classification only)."""
  if kind not in SPECS:
    raise FlagError("unknown head %r; heads: %s" % (kind, ", ".join(HEAD_KINDS)))
  if SPECS[kind].has_classes:
    return SPECS[kind](columns, classes or ())
  if classes:
    raise FlagError("a %s head has no class list (its outputs are the label columns %s); "
                    "drop --labels (or, when the classes come from a model card, the --head that "
                    "contradicts it)" % (kind, ", ".join(str(c) for c in columns)))
  return SPECS[kind](columns)


def from_card(entry):
  """The spec a model card's "label_spec" entry describes, with its temperature and tuned
  thresholds."""
  spec = build_spec(entry["kind"], entry["columns"], entry.get("classes"))
  spec.set_thresholds(entry.get("thresholds"))
  spec.set_temperature(entry.get("temperature"))
  return spec
