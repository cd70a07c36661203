"""The checks of a row's shape as a split's file is read: too few or too many fields for
its columns, a file whose rows change their layout, and the errors they raise
(MalformedRow: --skip_malformed_rows skips and counts it by cause)."""

from data.data_error import DataError
from data.table import USUAL_WIDTH_RECORDS


class MalformedRow(DataError):
  """A row that cannot make an example; --skip_malformed_rows skips and counts it by cause."""
  cause = "malformed rows"


class MissingLabel(MalformedRow):
  cause = "a missing label"


class ShortRow(MalformedRow):
  cause = "too few fields"


class LongRow(MalformedRow):
  cause = "too many fields"


def check_row_width(table, line, fields, needed, width):
  if len(fields) <= needed:
    raise ShortRow(table.path, "the row has %d fields but column %d is needed"
                   % (len(fields), needed),
                   "fix the row (a stray delimiter or quote?), or pass "
                   "--skip_malformed_rows to skip and count such rows", line=line)
  if len(fields) > width:
    raise LongRow(table.path, "the row has %d fields but %s %d: a delimiter (%r) inside a "
                  "text that is not quoted would cut the text there"
                  % (len(fields), "the header has" if table.header else
                     "most of the file's first %d records have" % USUAL_WIDTH_RECORDS,
                     width, _delimiter_name(table)),
                  "quote the text (\"...\"; a .tsv/.txt file also needs --quoting=csv), remove "
                  "the extra delimiter, or pass "
                  "--skip_malformed_rows to skip and count such rows", line=line)


def check_usual_width(table, widths, width):
  """A headerless file's rows were checked against the width of its first records; the
  whole file must agree (else rows with a cut text could have passed as the usual ones)."""
  usual = widths.most_common(1)[0][0] if widths else width
  if usual != width:
    raise DataError(table.path, "most rows have %d fields, but the first %d records mostly "
                    "have %d: the file's rows change their layout" % (
                        usual, USUAL_WIDTH_RECORDS, width),
                    "give every row the same columns (files of two layouts joined?)")


def _delimiter_name(table):
  return "tab" if table.delimiter == "\t" else table.delimiter
