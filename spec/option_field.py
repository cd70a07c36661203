"""How an option is declared, wherever it is: spec/options.py's groups, and a head's own
options (a head class's `Options`, spec/heads/). Flags, RunConfig, `--help` and
docs/reference/flags.md are all made from these fields."""

import dataclasses


def option(default, help, choices=None, check=None, example=None):
  """An option's default, its help (the flag's) and, for a closed set, its choices; check:
  a function of a value that says what is wrong with it (None when nothing is); example:
  the option on a command line, where its format is not obvious from its type."""
  return dataclasses.field(default=default, metadata={"help": help, "choices": choices,
                                                      "check": check, "example": example})


def of_type(value, kind):
  """Whether value is of an option's type (bool, int, float or str): a whole number is a
  float too; a switch (True, False) is no number. RunConfig's values and a model card's
  recorded head options are both checked with it."""
  if isinstance(value, bool):
    return kind is bool
  return isinstance(value, (int, float) if kind is float else kind)


def choice_problem(field, value):
  """What is wrong with value for an option of a closed set of choices, or None."""
  allowed = field.metadata["choices"]
  if allowed and value not in allowed:
    return "is not one of %s" % ", ".join(allowed)
  return None
