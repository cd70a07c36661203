"""--train_rows and --eval_rows as a split's files are read: which rows are in, and a range
that reaches past the last row refused (spec/rows.py parses them)."""

from data.data_error import DataError
from spec.rows import format_rows


def range_option(flag, rows):
  """The option of a range, as given back to the user (flag: train, eval)."""
  return "--%s_rows=%s" % (flag, format_rows(rows))


def in_range(rows, position):
  """Whether the row at position (0-based, in the split's files' order) is in rows."""
  return rows.start <= position and (rows.end is None or position < rows.end)


def check_range_read(path, flag, rows, records):
  """A range that ends past the split's last row, refused once the split's records are
  read: the run would train (or score) on fewer rows than asked for."""
  if max(rows.start + 1, rows.end or 0) <= records:
    return
  option = "--%s_rows" % flag
  if rows.start >= records:
    fix = "start %s below %d (its rows are 0 to %d)" % (option, records, records - 1)
  elif rows.start > 0:
    fix = "give a range within them, e.g. %s=%d:%d" % (option, rows.start, records)
  else:
    fix = "give a range within them, e.g. %s=%d" % (option, records)
  raise DataError(path, "%s reaches past its last row: it has %d data rows (counted from 0)"
                  % (range_option(flag, rows), records), fix)
