"""The heads by kind: every LabelSpec subclass defined in this package's modules that
carries a kind (spec/labels.py's base class says what a head is).

A head is one module here (or one class in one): it is found, so nothing else lists it.
Its class says how its label cells are read and stored, which loss its graph learns by
and what its outputs are (`loss`, or its own `graph_loss`), which statistics the
evaluation reports per label column (`column_statistics`), how a predictor states its
result, what k-fold stratifies by, what Hugging Face calls its problem, and how it is
calibrated and decided (spec/calibration.py, spec/thresholds.py). docs/guide/heads.md
gives each head's row.

A head's own options are fields of its class's `Options` (a frozen dataclass of
spec/option_field.py's options), read as `self.options.<name>`. They are collected here
into HeadOptions, the `heads` group of the run's options, so each is a flag, a RunConfig
value and a row of docs/reference/flags.md with nothing else naming it; a run whose head
does not declare an option it gives is refused.
"""

import dataclasses
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


def _declared_options(specs):
  """({option name: the kinds of the heads declaring it}, [its field, in the order of the
  heads' kinds]). Heads may share an option only as one definition (the same class's
  field, or an equal one); two different ones stop the import naming the heads."""
  declared, fields = {}, {}
  for kind in sorted(specs):
    if specs[kind].Options is None:
      continue
    for field in dataclasses.fields(specs[kind].Options):
      if field.name in fields and (fields[field.name].default, fields[field.name].type,
                                   fields[field.name].metadata) != (
                                       field.default, field.type, field.metadata):
        raise TypeError("the heads %s and %s define the option %s differently" % (
            declared[field.name][0], kind, field.name))
      fields.setdefault(field.name, field)
      declared.setdefault(field.name, []).append(kind)
  return {name: tuple(kinds) for name, kinds in declared.items()}, list(fields.values())


def _options_group(declared, fields):
  """The `heads` group of the run's options: every head's own options, each one's help
  ending with the heads it acts on."""
  return dataclasses.make_dataclass("HeadOptions", [
      (f.name, f.type, dataclasses.field(default=f.default, metadata=dict(
          f.metadata, help="%s Head%s: %s." % (f.metadata["help"],
                                               "s" if len(declared[f.name]) > 1 else "",
                                               ", ".join(declared[f.name])))))
      for f in fields], frozen=True)


DECLARED_BY, _FIELDS = _declared_options(SPECS)
HeadOptions = _options_group(DECLARED_BY, _FIELDS)
HeadOptions.__module__ = __name__  # (where pickle finds it)
HeadOptions.__doc__ = "The options heads declare (each head's `Options`)."


def apply_options(spec, values):
  """Gives spec its own options' values from the run's `heads` group (values: a
  HeadOptions; None keeps the defaults). An option another head declares, given a value
  other than its default, is refused: this run's head would not read it."""
  if values is None:
    return spec
  for name, kinds in sorted(DECLARED_BY.items()):
    if spec.kind not in kinds and getattr(values, name) != getattr(HeadOptions(), name):
      raise FlagError("--%s is an option of the %s head%s; this run's head is %s: drop "
                      "--%s, or choose %s with --head" % (
                          name, " and ".join(kinds), "s" if len(kinds) > 1 else "",
                          spec.kind, name, "one of those" if len(kinds) > 1 else "it"))
  if spec.Options is not None:
    spec.options = spec.Options(**{f.name: getattr(values, f.name)
                                   for f in dataclasses.fields(spec.Options)})
  return spec


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
