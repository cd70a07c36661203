"""Reads CSV/TSV files into rows that remember their line numbers, with clear errors."""

import csv
import io
import re
import sys

import tensorflow.compat.v1 as tf

from data.errors import DataError

# Jigsaw comments can be long; Python's default field limit of 128 KiB is not enough.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


# A record may span this many physical lines before the lines it holds are checked
# for rows it swallowed (a stray quote that is never closed where it should be).
HANDFUL_OF_LINES = 5


class Table(object):
  """The rows of one delimited file.

  header: the list of column names, or None for a file without a header.
  rows: list of (line_number, fields), line_number being where the record starts.
  num_lines: physical lines in the file; blank_lines: empty lines that held no record;
  multi_line: (first line, number of lines) of each record that spans several lines.
  """

  def __init__(self, path, header, rows, num_lines=0, blank_lines=0, multi_line=(),
               delimiter=","):
    self.path = path
    self.delimiter = delimiter
    self.header = header
    self.rows = rows
    self.num_lines = num_lines
    self.blank_lines = blank_lines
    self.multi_line = list(multi_line)

  def accounting(self):
    """'N lines: a header, M records, B blank lines' for the log."""
    parts = ["%d lines: " % self.num_lines]
    parts.append("a header, " if self.header is not None else "")
    parts.append("%d records" % len(self.rows))
    if self.blank_lines:
      parts.append(", %d blank lines" % self.blank_lines)
    if self.multi_line:
      parts.append(", %d records spanning %d lines" % (
          len(self.multi_line), sum(n for _, n in self.multi_line)))
    return "".join(parts)

  def column_index(self, column, flag_hint):
    """Resolves a column given by name or by 0-based position to an index."""
    if isinstance(column, int) or (isinstance(column, str) and column.isdigit()):
      index = int(column)
      width = len(self.header) if self.header else (len(self.rows[0][1]) if self.rows else 0)
      if index >= width:
        raise DataError(self.path, "there is no column number %d: rows have %d columns"
                        % (index, width), "pass %s with a position below %d" % (flag_hint, width),
                        line=1, column=column)
      return index
    if self.header is None:
      raise DataError(self.path, "column %r was asked for by name but the file has no header"
                      % column, "give %s as a 0-based position, or add a header row" % flag_hint,
                      line=1)
    if column not in self.header:
      raise DataError(self.path, "there is no column %r; the header has: %s"
                      % (column, ", ".join(self.header)),
                      "pass %s=<one of those names>, or fix the header" % flag_hint,
                      line=1, column=column)
    return self.header.index(column)


def decode_utf8(path, raw):
  """Decodes bytes as UTF-8 (a BOM is allowed), naming the line and column of a bad byte."""
  try:
    return raw.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    line = raw.count(b"\n", 0, e.start) + 1
    line_start = raw.rfind(b"\n", 0, e.start) + 1
    raise DataError(
        path, "invalid UTF-8 (byte 0x%02x at byte %d of the line)" % (raw[e.start], e.start - line_start + 1),
        "re-save the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 in.csv > out.csv`",
        line=line)


def read_table(path, delimiter, has_header, quoting=csv.QUOTE_MINIMAL):
  """Reads a whole delimited file. Raises DataError when it is empty or not UTF-8, or when a
  quote swallowed rows into one record."""
  if not tf.io.gfile.exists(path):
    raise DataError(path, "the file does not exist",
                    "check --data_dir and the file name (see the README for each task's files)")
  with tf.io.gfile.GFile(path, "rb") as f:
    raw = f.read()
  text = decode_utf8(path, raw)
  if not text.strip():
    raise DataError(path, "the file is empty", "give a file with rows, or point at the right file")
  kwargs = {"delimiter": delimiter}
  if quoting == csv.QUOTE_NONE:
    kwargs.update(quoting=csv.QUOTE_NONE, quotechar=None)
  lines = io.StringIO(text, newline="").readlines()
  consumed = []

  def feed():
    for line in lines:
      consumed.append(line)
      yield line

  reader = csv.reader(feed(), **kwargs)
  rows, multi_line = [], []
  blank_lines = 0
  next_line = 1
  try:
    for fields in reader:
      start, next_line = next_line, reader.line_num + 1
      if not fields:
        blank_lines += 1  # An empty line holds no record; counted and reported.
      else:
        rows.append((start, fields))
        if len(consumed) > 1:
          multi_line.append((start, len(consumed)))
          _check_not_swallowing_rows(path, delimiter, start, consumed, rows)
      del consumed[:]
  except csv.Error as e:
    raise DataError(path, "the file cannot be parsed as %s: %s" % (_kind(delimiter), e),
                    "check the quoting around line %d" % next_line, line=next_line)
  header = None
  if has_header:
    header = [h.strip() for h in rows[0][1]]
    rows = rows[1:]
  if not rows:
    raise DataError(path, "the file has a header but no data rows",
                    "give a file with rows, or point at the right file", line=1)
  return Table(path, header, rows, len(lines), blank_lines, multi_line, delimiter)


def _looks_like_a_row(line, delimiter, width):
  """A line with a row's number of fields whose first or last field is a short token (an id,
  a label): prose with a comma in it has words with spaces at both ends."""
  fields = line.rstrip("\r\n").split(delimiter)
  return len(fields) == width and any(
      _SHORT_TOKEN.match(fields[i].strip()) for i in (0, -1))


_SHORT_TOKEN = re.compile(r"^[^\s\"]{1,32}$")


def _check_not_swallowing_rows(path, delimiter, start, record_lines, rows):
  """A record over a handful of lines whose inner lines mostly look like rows of their own
  (as many delimiters as a row has) is rows merged by a quote that opened and never closed
  where it should: an error that names where the quote opened."""
  if len(record_lines) <= HANDFUL_OF_LINES:
    return
  width = len(rows[0][1]) if len(rows) > 1 else record_lines[0].count(delimiter) + 1
  inner = record_lines[1:]
  looking_like_rows = sum(1 for line in inner if _looks_like_a_row(line, delimiter, width))
  if width < 2 or looking_like_rows * 2 < len(inner):
    return
  quote = record_lines[0].find('"')
  raise DataError(
      path, "one record runs from line %d over %d lines, and %d of them look like rows of "
      "their own: the quote at line %d, character %d opens a quoted field that is not closed "
      "until line %d" % (start, len(record_lines), looking_like_rows, start, quote + 1,
                         start + len(record_lines) - 1),
      "remove or double (\"\") the stray quote, or read the file without quote processing "
      "(--quoting=none)", line=start)


def _kind(delimiter):
  return "TSV" if delimiter == "\t" else "CSV"


QUOTING = {"csv": csv.QUOTE_MINIMAL, "none": csv.QUOTE_NONE}


def quoting_for(path, choice="auto"):
  """csv quoting mode: 'csv' (double quotes enclose fields), 'none' (a quote is a plain
  character), or 'auto': quotes in .csv files, none in .tsv/.txt files, as Google's
  _read_tsv reads them."""
  if choice != "auto":
    return QUOTING[choice]
  lowered = path.lower()
  return csv.QUOTE_NONE if lowered.endswith(".tsv") or lowered.endswith(".txt") else \
      csv.QUOTE_MINIMAL


def delimiter_for(path, explicit=None):
  """The field delimiter: an explicit one, else tab for .tsv/.txt files and comma otherwise."""
  if explicit:
    return "\t" if explicit in ("\\t", "tab") else explicit
  lowered = path.lower()
  return "\t" if lowered.endswith(".tsv") or lowered.endswith(".txt") else ","
