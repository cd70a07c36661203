"""The error of a setting that cannot work, raised by whichever layer finds it."""


class FlagError(ValueError):
  """A setting (a flag, or the RunConfig field of the same name) that cannot work, or
  that contradicts another one or the model. The message names the setting and the fix;
  run_classifier prints it as a flag error and exits 2. Raised where the mistake is
  found, never made from some other ValueError: a bug stays a traceback."""
