"""The run's configuration, typed: every option of spec/options.py in its group.

Python builds a RunConfig without absl, by option name:

  from spec.config import RunConfig
  run(RunConfig(task_name="sst-2", data_dir="glue/SST-2", output_dir="/tmp/out", ...))

and reads an option in its group: c.model.max_seq_length. `given` names the options set
explicitly (built directly: those that differ from their defaults); a model card supplies
the others and contradicts none of the given ones. Values are checked here for their
type and choices; pipeline/checks.py checks what they mean together.
"""

import dataclasses

from spec.run_errors import FlagError
from spec.option_field import choice_problem, of_type
from spec.option_index import base_type, default, group_of, is_optional, option_names
from spec.options import GROUPS


class ConfigError(FlagError):
  """An option value of the wrong type or outside its choices."""


class RunConfig(object):
  """Every option's value, in its group (modes, data, model, training, device, outputs,
  heads), and `given`, the options set explicitly. Immutable: replace() makes a changed
  copy."""

  __slots__ = tuple(group for group, _ in GROUPS) + ("given",)

  def __init__(self, given=None, **options):
    unknown = sorted(name for name in options if group_of(name) is None)
    if unknown:
      raise ConfigError("unknown options: %s" % ", ".join(unknown))
    for group, cls in GROUPS:
      values = {f.name: options[f.name] for f in dataclasses.fields(cls) if f.name in options}
      object.__setattr__(self, group, cls(**values))
      for field in dataclasses.fields(cls):
        _check_type(field, getattr(getattr(self, group), field.name))
    if given is None:
      given = frozenset(name for name in option_names() if self.value(name) != default(name))
    unknown = sorted(name for name in given if group_of(name) is None)
    if unknown:
      raise ConfigError("given names unknown options: %s" % ", ".join(unknown))
    object.__setattr__(self, "given", frozenset(given))

  def __setattr__(self, name, value):
    raise AttributeError("RunConfig is immutable: use replace(%s=...)" % name)

  def __eq__(self, other):
    return isinstance(other, RunConfig) and all(
        getattr(self, name) == getattr(other, name) for name in self.__slots__)

  def __repr__(self):
    return "RunConfig(%s)" % ", ".join("%s=%r" % (name, self.value(name))
                                        for name in sorted(self.given))

  def value(self, name):
    """An option's value by name."""
    return getattr(getattr(self, group_of(name)), name)

  def is_given(self, name):
    return name in self.given

  def if_given(self, name):
    """The option's value when it was given, else None."""
    return self.value(name) if name in self.given else None

  def replace(self, **changes):
    """A copy with these values (a model card's, say); `given` is unchanged."""
    values = {name: self.value(name) for name in option_names()}
    values.update(changes)
    return RunConfig(given=self.given, **values)

  def as_dict(self):
    """Every option and its value, tuples as lists (for the model card and run summary)."""
    return {name: _plain(self.value(name)) for name in option_names()}


def _plain(value):
  return list(value) if isinstance(value, tuple) else value


def _check_type(field, value):
  if value is None:
    if is_optional(field):
      return
    raise ConfigError("%s must be set (got None)" % field.name)
  kind = base_type(field)
  if kind is tuple:
    if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
      raise ConfigError("%s must be a tuple of strings, not %r" % (field.name, value))
    if any(not v.strip() for v in value):  # ("0,,1": a class no row could name)
      raise ConfigError("--%s=%s has an empty item: list the values between commas, each "
                        "once" % (field.name, ",".join(value)))
  elif not of_type(value, kind):
    raise ConfigError("%s must be %s, not %r" % (field.name, kind.__name__, value))
  problem = field.metadata.get("check") and field.metadata["check"](value)
  if problem:  # (a list as on the command line)
    raise ConfigError("--%s=%s %s" % (field.name, ",".join(value) if kind is tuple else
                                      repr(value), problem))
  problem = choice_problem(field, value)
  if problem:
    raise ConfigError("%s=%r %s" % (field.name, value, problem))
