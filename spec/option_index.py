"""The run's options looked up by name (spec/options.py defines them): their group, field,
default, choices, help and type."""

import dataclasses
from typing import Tuple

from spec.options import GROUPS


def option_fields():
  """[(group name, dataclasses.Field)] of every option, in definition order."""
  return [(group, field) for group, cls in GROUPS for field in dataclasses.fields(cls)]


def option_names():
  return [field.name for _, field in option_fields()]


def _unique(fields):
  """{name: group}; an option defined twice (a head's named as another's) stops the import."""
  found = {}
  for group, field in fields:
    if field.name in found:
      raise TypeError("the option %s is defined twice: in the groups %s and %s" % (
          field.name, found[field.name], group))
    found[field.name] = group
  return found


_GROUP_OF = _unique(option_fields())
_FIELD = {field.name: field for _, field in option_fields()}


def group_of(name):
  """The group an option belongs to; None for a name that is no option."""
  return _GROUP_OF.get(name)


def option_field(name):
  return _FIELD[name]


def default(name):
  return _FIELD[name].default


def choices(name):
  return _FIELD[name].metadata["choices"]


def help_of(name):
  return _FIELD[name].metadata["help"]


def is_optional(field):
  """Whether the option may be None (unset)."""
  return type(None) in getattr(field.type, "__args__", ())


def base_type(field):
  """An option's type without Optional: bool, int, float, str, or tuple (of strings)."""
  annotation = field.type.__args__[0] if is_optional(field) else field.type
  if getattr(annotation, "__origin__", None) in (tuple, Tuple):
    return tuple
  return annotation
