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
import typing

from spec.found import classes_in
from spec.labels import LabelSpec
from spec.option_field import choice_problem, of_type
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
  """({option name: the kinds of the heads declaring it}, [(its type, its field)] in the
  order of the heads' kinds). Heads may share an option only as one definition (one
  Options class, shared or inherited); two definitions stop the import naming the heads,
  as does a field that is no option (made without spec/option_field.py's option)."""
  declared, fields = {}, {}
  for kind in sorted(specs):
    if specs[kind].Options is None:
      continue
    types = typing.get_type_hints(specs[kind].Options)  # (annotations written as text too)
    for field in dataclasses.fields(specs[kind].Options):
      if "help" not in field.metadata:
        raise TypeError("the head %s's option %s is no option: declare it with "
                        "spec.option_field.option(default, help, ...)" % (kind, field.name))
      if field.name in fields and fields[field.name][1] is not field:
        raise TypeError("the heads %s and %s define the option %s differently" % (
            declared[field.name][0], kind, field.name))
      fields.setdefault(field.name, (types[field.name], field))
      declared.setdefault(field.name, []).append(kind)
  return {name: tuple(kinds) for name, kinds in declared.items()}, list(fields.values())


def _options_group(declared, fields):
  """The `heads` group of the run's options: every head's own options, each one's help
  ending with the heads it acts on."""
  return dataclasses.make_dataclass("HeadOptions", [
      (f.name, kind, dataclasses.field(default=f.default, metadata=dict(
          f.metadata, help="%s Head%s: %s." % (f.metadata["help"],
                                               "s" if len(declared[f.name]) > 1 else "",
                                               ", ".join(declared[f.name])))))
      for kind, f in fields], frozen=True)


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
                      "--%s" % (name, " and ".join(kinds), "s" if len(kinds) > 1 else "",
                                spec.kind, name))
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


def options_of(spec, recorded):
  """The spec's Options with the values recorded ({name: value}, a model card's
  "options"); a name the head does not declare, or a value its option refuses, is a
  FlagError naming it."""
  fields = {f.name: f for f in dataclasses.fields(spec.Options)} if spec.Options else {}
  types = typing.get_type_hints(spec.Options) if spec.Options else {}
  for name, value in sorted(recorded.items()):
    if name not in fields:
      raise FlagError("the %s head has no option %s" % (spec.kind, name))
    kind = types[name]
    if isinstance(kind, type) and not of_type(value, kind):
      raise FlagError("its option %s is %r, not a %s" % (name, value, kind.__name__))
    problem = (fields[name].metadata["check"] and fields[name].metadata["check"](value) or
               choice_problem(fields[name], value))
    if problem:
      raise FlagError("its option %s=%r %s" % (name, value, problem))
  return spec.Options(**{name: float(value) if types[name] is float else value
                         for name, value in recorded.items()}) if spec.Options else None


def from_card(entry):
  """The spec a model card's "label_spec" entry describes, with its own options, its
  temperature and its tuned thresholds."""
  spec = build_spec(entry["kind"], entry["columns"], entry.get("classes"))
  if entry.get("options"):
    spec.options = options_of(spec, entry["options"])
  spec.set_thresholds(entry.get("thresholds"))
  spec.set_temperature(entry.get("temperature"))
  return spec
