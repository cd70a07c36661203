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
