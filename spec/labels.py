"""What a head is: the base class of every head's label specification (spec/heads/ holds
one module per head), and the reading of label cells the heads share.

A spec is plain Python, shared by data/ and modeling/. It owns:
- parsing and validating a row's raw label cells (`parse`): a class name, or a tuple of
  floats, one per label column;
- the value a record stores for it (`record_value`) and its schema (`record_dtype`,
  `record_width`);
- the loss its graph learns by and its outputs (`loss`, a name modeling/head.py
  implements, or the head's own `graph_loss`), and the statistics its evaluation reports
  (`column_statistics`, names modeling/metrics.py implements);
- the prediction columns of test_results.tsv (`prediction_header`, `prediction_cells`);
- what the model card says about the labels (`to_card`; spec/heads/ `from_card`);
- what --class_weights weighs (`class_weights_weigh`);
- how its outputs become a predictor's result, k-fold's strata, the export's output name
  and Hugging Face's problem_type, and the thresholds it decides by (spec/thresholds.py).

The heads, their labels, losses and metrics: docs/guide/heads.md. Adding a head means one
module in spec/heads/ (and its tests).
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


def highest(values):
  """The index of the highest value (the first of equal ones): a head's predicted class."""
  return max(range(len(values)), key=lambda k: values[k])


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
  # The family of the outputs and, unless graph_loss gives another, the loss:
  # "softmax_cross_entropy" (probabilities over the outputs, one temperature),
  # "sigmoid_cross_entropy" (a probability per output, a temperature each) or
  # "squared_error" (values). Windows, calibration and the exports read outputs by it.
  loss = None
  column_statistics = ()  # per label column (modeling/metrics.py STATISTICS); none: a head
  # with classes reports the classification metrics
  record_dtype = None  # "int64" or "float32"
  has_classes = False  # whether the outputs are the classes of one label column
  output_name = "probabilities"  # what the export's signature calls the outputs
  hf_problem_type = None  # Hugging Face's problem_type for this head's config.json
  strata_by_quantile = False  # k-fold stratifies by quintiles of stratum() (numbers)
  class_weights_weigh = None  # "classes", or each label column's "positives"
  # The head's own options: a frozen dataclass of spec/option_field.py options, each a
  # flag (spec/heads/ collects them); its values are `self.options` (the defaults until
  # spec/heads/ apply_options gives the run's).
  Options = None

  def __init__(self, columns):
    self.columns = tuple(str(c) for c in columns)
    if not self.columns:
      raise FlagError("a label specification needs at least one label column")
    if len(set(self.columns)) != len(self.columns):
      raise FlagError("label column listed twice: %s" % ", ".join(self.columns))
    self.options = self.Options() if self.Options is not None else None

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

  def graph_loss(self, tf, logits, targets):
    """The head's own loss, where `loss` names none that fits: (per_example_loss [batch],
    outputs [batch, num_outputs]) of logits [batch, num_outputs] against the records'
    targets, written against the TensorFlow module the graph passes as tf (spec/ imports
    none). None: the loss `loss` names (modeling/head.py)."""
    del tf, logits, targets
    return None

  def parse(self, cells):
    """The label of one row's label cells (one per column), or LabelError."""
    raise NotImplementedError

  def record_value(self, label):
    """What a record stores for a parsed label: the floats themselves, here."""
    return label

  def output_targets(self, label):
    """What each output should be for a parsed label (a float per output; calibration and
    the held-out ROC-AUC read them): the label's values themselves, here."""
    return tuple(float(v) for v in label)

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

  def options_entry(self):
    """The head's own options that differ from their defaults, by name: how the model was
    trained, which the card keeps."""
    if self.options is None:
      return {}
    defaults = self.Options()
    return {name: getattr(self.options, name) for name in sorted(vars(defaults))
            if getattr(self.options, name) != getattr(defaults, name)}

  def head_entry(self):
    """What the head is (the card's entry without its temperature and thresholds)."""
    return {"kind": self.kind, "columns": list(self.columns), "classes": self.classes}

  def to_card(self):
    entry = self.head_entry()
    options = self.options_entry()
    if options:
      entry["options"] = options
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
