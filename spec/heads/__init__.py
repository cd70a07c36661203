"""The heads by kind: every LabelSpec subclass defined in this package's modules that
carries a kind (spec/labels.py's base class says what a head is).

A head is one module here (or one class in one): it is found, so nothing else lists it.
Its class says how its label cells are read and stored, which loss its graph learns by
and what its outputs are (`loss`, or its own `graph_loss`), which statistics the
evaluation reports per label column (`column_statistics`), how a predictor states its
result, what k-fold stratifies by, what Hugging Face calls its problem, and how it is
calibrated and decided (spec/calibration.py, spec/thresholds.py). docs/guide/heads.md
gives each head's row.
"""

import sys

from spec.found import classes_in
from spec.labels import LabelSpec
from spec.run_errors import FlagError


def _registry(classes):
  """{kind: class}; a kind given twice or not a lower-case word, or a head that names no
  loss, stops the import naming the classes."""
  registry = {}
  for cls in classes:
    if not isinstance(cls.kind, str) or not cls.kind.replace("_", "").isalpha() or (
        cls.kind != cls.kind.lower()):
      raise TypeError("the head %s's kind %r is not a lower-case word" % (cls.__name__,
                                                                         cls.kind))
    if not cls.loss:
      raise TypeError("the head %s names no loss (its outputs' family)" % cls.__name__)
    if cls.kind in registry:
      raise TypeError("two heads are of kind %r: %s and %s" % (
          cls.kind, registry[cls.kind].__name__, cls.__name__))
    registry[cls.kind] = cls
  return registry


SPECS = _registry(classes_in(sys.modules[__name__], LabelSpec, "kind"))
HEAD_KINDS = tuple(sorted(SPECS))


def build_spec(kind, columns, classes=None):
  """The spec of a head kind over label columns (classes: a head with classes only)."""
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
