"""Reads CSV/TSV files a block at a time into rows that remember their line numbers, with
clear errors."""

import collections
import csv
import hashlib
import itertools
import logging
import re
import sys

from data.data_error import DataError
from data.text_lines import decoded_lines, open_binary

log = logging.getLogger(__name__)

# Jigsaw comments can be long; Python's default field limit of 128 KiB is not enough.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


class Table(object):
  """The records of one delimited file, read as they are asked for: the file is never held
  whole, so memory does not grow with it.

  header: the list of column names, or None for a file without a header.
  Iterating yields (line_number, fields) once, line_number being where the record starts;
  first_records(n) looks ahead without losing records (another pass over the file is
  another Table). While reading, the counts grow:
  num_lines (physical lines), records, blank_lines (empty lines that held no record) and
  multi_line (records spanning several lines: how many, their lines, the first starts).
  """

  def __init__(self, path, delimiter, has_header, quoting=csv.QUOTE_MINIMAL):
    self.path = path
    self.delimiter, self.quoting = delimiter, quoting
    self.num_lines = self.records = self.blank_lines = 0
    self.multi_line = MultiLineCount()
    self.digest = hashlib.sha256()  # of the bytes read so far
    self.content = False  # whether a character other than whitespace was read
    self._ahead = collections.deque()
    self._source = _records(self, open_binary(path), delimiter, quoting)
    self._consumed = False
    self.header = None
    first = next(self._source, None)
    while first is not None and not self.content:  # (only whitespace so far)
      self._ahead.append(first)
      first = next(self._source, None)
    if not self.content:
      raise DataError(path, "the file is empty",
                      "give a file with rows, or point at the right file")
    if first is not None:
      self._ahead.append(first)
    if has_header:
      self.header = [h.strip() for h in self._ahead.popleft()[1]]
      self._header_cells = [_cell(h) for h in self.header]

  def digests(self):
    """The sha256 of the bytes read, of each file the table reads (here one)."""
    return [self.digest.hexdigest()]

  def first_records(self, n):
    """Up to n of the first records, without consuming them."""
    while len(self._ahead) < n:
      record = self._pull()
      if record is None:
        break
      self._ahead.append(record)
    return list(itertools.islice(self._ahead, n))

  def first_fields(self):
    """The fields of the first record (after the header)."""
    first = self.first_records(1)
    return first[0][1] if first else []

  def usual_width(self):
    """The number of fields most of the first USUAL_WIDTH_RECORDS records have (the
    reader checks it against every record at the end)."""
    counts = collections.Counter(len(fields) for _, fields in
                                 self.first_records(USUAL_WIDTH_RECORDS))
    return counts.most_common(1)[0][0] if counts else 0

  def take_header(self):
    """Reads the first record as the header (a file whose header is known only once its
    first record is seen)."""
    self.first_records(1)
    first = self._ahead.popleft()
    self.header = [h.strip() for h in first[1]]
    self._header_cells = [_cell(h) for h in self.header]

  def __iter__(self):
    if self._consumed:
      raise RuntimeError("the records of %s are read once" % self.path)
    self._consumed = True
    return self._stream()

  def _stream(self):
    while True:
      record = self._ahead.popleft() if self._ahead else self._pull()
      if record is None:
        break
      self.records += 1
      yield record
    if not self.records:
      raise DataError(self.path, "the file has a header but no data rows",
                      "give a file with rows, or point at the right file", line=1)

  def _pull(self):
    """The next record from the file (the header's check applied), or None at its end."""
    record = next(self._source, None)
    if record is not None and self.header is not None:
      _check_not_header(self.path, self._header_cells, record)
    return record

  def accounting(self):
    """'N lines: a header, M records, B blank lines' for the log."""
    parts = ["%d lines: " % self.num_lines]
    parts.append("a header, " if self.header is not None else "")
    parts.append("%d records" % self.records)
    if self.blank_lines:
      parts.append(", %d blank lines" % self.blank_lines)
    if self.multi_line.records:
      parts.append(", %d records spanning %d lines" % (self.multi_line.records,
                                                       self.multi_line.lines))
    return "".join(parts)

  def account(self, split, examples, skipped, left_aside=None):
    """What reading the file found, logged, and as a dict for the records' metadata:
    examples made of its records for split, the rows skipped by cause, and the rows the
    options left out (left_aside: {what: rows})."""
    path = self.path
    if self.blank_lines:
      log.warning("%s: %d empty lines held no record and were passed over", path,
                  self.blank_lines)
    if self.multi_line:
      log.warning("%s: %d records span several lines (quoted newlines), starting at lines "
                  "%s%s", path, self.multi_line.records,
                  ", ".join(str(line) for line in self.multi_line.first_starts),
                  ", ..." if self.multi_line.records > len(self.multi_line.first_starts)
                  else "")
    causes = "".join(", %d skipped (%s)" % (n, cause) for cause, n in sorted(skipped.items()))
    causes += "".join(", %d %s left aside" % (n, what)
                      for what, n in sorted((left_aside or {}).items()))
    log.info("%s: %s -> %d %s examples%s", path, self.accounting(), examples, split, causes)
    account = {"lines": self.num_lines, "header": self.header is not None,
               "records": self.records, "blank_lines": self.blank_lines,
               "multi_line_records": self.multi_line.records, "examples": examples,
               "skipped": dict(skipped)}
    if left_aside:
      account["left_aside"] = dict(left_aside)
    return account

  def column_index(self, column, flag_hint):
    """Resolves a column given by name or by 0-based position to an index."""
    if is_position(column):
      index = int(column)
      width = len(self.header) if self.header else len(self.first_fields())
      if index >= width:
        raise DataError(self.path, "there is no column number %d: rows have %d columns"
                        % (index, width), self._other_delimiter_fix() or
                        "pass %s with a position below %d" % (flag_hint, width),
                        line=1, column=column)
      return index
    if self.header is None:
      raise DataError(self.path, "column %r was asked for by name but the file has no header"
                      % column, "give %s as a 0-based position, or add a header row" % flag_hint,
                      line=1)
    if column not in self.header:
      raise DataError(self.path, "there is no column %r; the header has: %s"
                      % (column, ", ".join(self.header)),
                      self._other_delimiter_fix(column) or
                      "pass %s=<one of those names>, or fix the header" % flag_hint,
                      line=1, column=column)
    positions = [i for i, name in enumerate(self.header) if name == column]
    if len(positions) > 1:
      raise DataError(self.path, "the header names column %r %d times (positions %s), so which "
                      "one to read is unclear" % (column, len(positions),
                                                  ", ".join(str(i) for i in positions)),
                      "rename the columns so that each name appears once", line=1,
                      column=column)
    return positions[0]

  def _other_delimiter_fix(self, column=None):
    """The fix when the file's first line splits into columns by another delimiter than
    the one read with (into a header that has column, when one is named)."""
    first = self.header if self.header is not None else self.first_fields()
    line = self.delimiter.join(first)
    for candidate in OTHER_DELIMITERS:
      if candidate == self.delimiter:
        continue
      names = [name.strip() for name in line.split(candidate)]
      if len(names) > len(first) and (column is None or column in names):
        return ("the file seems to be separated by %s, not %s (its first line splits into %s): "
                "pass --delimiter=%s (with --task_name=csv)" % (
                    _delimiter_name(candidate), _delimiter_name(self.delimiter),
                    ", ".join(names[:6]) + (", ..." if len(names) > 6 else ""),
                    "tab" if candidate == "\t" else "'%s'" % candidate))
    return None


def total_account(accounts):
  """The accounts (Table.account) of a split's files summed; one file's is its own."""
  if len(accounts) == 1:
    return dict(accounts[0])
  total = {key: sum(a[key] for a in accounts) for key in
           ("lines", "records", "blank_lines", "multi_line_records", "examples")}
  total["header"] = all(a["header"] for a in accounts)
  for key in ("skipped", "left_aside"):
    counts = collections.Counter()
    for a in accounts:
      counts.update(a.get(key) or {})
    if counts or key == "skipped":
      total[key] = dict(counts)
  return total


def is_position(column):
  """Whether a column is given by its 0-based position (digits) rather than by name."""
  return isinstance(column, int) or bool(_POSITION.match(str(column)))


# The delimiters a file may use instead of the one it was read with.
OTHER_DELIMITERS = (",", ";", "\t", "|")
_POSITION = re.compile(r"^[0-9]+$")


BOM = u"\ufeff"  # a byte-order mark, as text


def _check_not_header(path, header_cells, record):
  """A row that repeats the header (files joined with `cat`, the second one's header
  left in, perhaps after its byte-order mark) would make a class of its label cell
  'label': refused, naming the line. (A byte-order mark at a row's start is refused only
  where it matters, in a label cell: refuse_bom_cell. A text may start with U+FEFF, and
  the tokenizer drops it.)"""
  line, fields = record
  # (the first cell first: a million rows pass here)
  if len(fields) == len(header_cells) and _cell(fields[0]) == header_cells[0] and \
      [_cell(f) for f in fields] == header_cells:
    raise DataError(path, "the header appears again at line %d (files joined with cat?)"
                    % line, "remove the repeated header lines (to join files with "
                    "headers, take all but the first's with `tail -n +2`)", line=line)


def _cell(text):
  return text.strip().lstrip(BOM).strip()


def refuse_bom_cell(path, line, cell, column):
  """A label cell that starts with a byte-order mark (U+FEFF, invisible) would be a class
  of its own ('\ufeff1' beside '1'): refused, naming the cell."""
  if cell.strip().startswith(BOM):
    raise DataError(path, "the cell %r starts with an invisible byte-order mark (U+FEFF)"
                    % cell.strip(), "remove the mark (a file's first bytes, pasted or "
                    "joined into this one?)", line=line, column=column)


class MultiLineCount(object):
  """The records that span several lines (quoted newlines): how many, their lines, and
  where the first few start (for the log)."""
  SHOWN = 5

  def __init__(self):
    self.records = self.lines = 0
    self.first_starts = []

  def add(self, start, lines):
    self.records += 1
    self.lines += lines
    if len(self.first_starts) < self.SHOWN:
      self.first_starts.append(start)

  def __bool__(self):
    return self.records > 0

  __nonzero__ = __bool__


USUAL_WIDTH_RECORDS = 1000  # the records a headerless file's usual width is taken from


def _records(table, stream, delimiter, quoting):
  """(line, fields) of each record of the file, counting lines, blank lines and records
  that span lines into table as they pass. Quotes follow CSV's strict rules (a quoted
  field that never closes, or closes with anything but a delimiter or the line's end
  after it, is an error): such a quote would merge rows into one text."""
  kwargs = {"delimiter": delimiter}
  if quoting == csv.QUOTE_NONE:
    kwargs.update(quoting=csv.QUOTE_NONE, quotechar=None)
  else:
    kwargs.update(strict=True)  # a quote out of place is an error, not a merged text
  consumed = []

  def feed():
    for line in decoded_lines(table, stream):
      table.num_lines += 1
      consumed.append(line)
      yield line

  reader = csv.reader(feed(), **kwargs)
  next_line = 1
  try:
    for fields in reader:
      start, next_line = next_line, reader.line_num + 1
      if not fields:
        table.blank_lines += 1  # An empty line holds no record; counted and reported.
      else:
        if len(consumed) > 1:
          table.multi_line.add(start, len(consumed))
        yield start, fields
      del consumed[:]
  except csv.Error as e:
    raise _quoting_error(table.path, delimiter, next_line, consumed, e)
  finally:
    stream.close()


def _quoting_error(path, delimiter, start, record_lines, error):
  """The DataError of a record the csv module could not read (strict quoting), naming
  where its quoted field opened and what went wrong."""
  fix = ("remove or double (\"\") the stray quote, or read quotes as plain characters "
         "(--quoting=none)")
  quote = (record_lines[0].find('"') + 1) if record_lines else 0
  end = start + max(len(record_lines), 1) - 1
  if "unexpected end of data" in str(error):
    return DataError(path, "the quote at line %d, character %d opens a quoted field that is "
                     "never closed: the file ends inside it, so the %d lines after it would "
                     "be one text" % (start, quote, end - start), fix, line=start)
  if "new-line character seen in unquoted field" in str(error):
    return DataError(path, "a carriage return (\\r) stands inside a text that is not quoted, "
                     "where it cannot be told from a line's end",
                     "quote that text (\"...\") or remove the carriage return", line=start)
  if "expected after" in str(error):
    closing = record_lines[-1] if record_lines else ""
    return DataError(path, "the quoted field that opens at line %d, character %d closes at "
                     "line %d with text after its closing quote, where %s or the line's end "
                     "should follow (%s)" % (start, quote, end, _delimiter_name(delimiter),
                                             closing.strip()[:60]), fix, line=start)
  return DataError(path, "the file cannot be parsed as %s: %s" % (_kind(delimiter), error),
                   "check the quoting around line %d" % start, line=start)


def _delimiter_name(delimiter):
  return {"\t": "a tab", ",": "a comma"}.get(delimiter, repr(delimiter))


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
