"""Checks of option values that a type alone does not make: each says what is wrong with a
value, or None (spec/options.py's option(check=...))."""


def delimiter_problem(value):
  """What makes a --delimiter value unusable as a field delimiter, or None."""
  if value in ("\\t", "tab"):
    return None
  if len(value) != 1:
    return ("is not one character: give the single character between fields (`\\t` or "
            "`tab` for a tab)")
  if value in "\r\n\"":
    return "cannot separate fields: it ends lines or quotes text. Give another character"
  return None


EXPORT_FORMATS = ("saved_model", "hf", "onnx")


def export_format_problem(value):
  """What is wrong with an --export_format list, or None."""
  unknown = [name for name in value if name not in EXPORT_FORMATS]
  if unknown:
    return "names %s: the formats are %s" % (", ".join(unknown), ", ".join(EXPORT_FORMATS))
  return None
