"""Reads CSV/TSV files into rows that remember their line numbers, with clear errors."""

import csv
import re
import sys

import tensorflow.compat.v1 as tf

from data.errors import DataError

# Jigsaw comments can be long; Python's default field limit of 128 KiB is not enough.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


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
    if is_position(column):
      index = int(column)
      width = len(self.header) if self.header else (len(self.rows[0][1]) if self.rows else 0)
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
    first = self.header if self.header is not None else self.rows[0][1]
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


def is_position(column):
  """Whether a column is given by its 0-based position (digits) rather than by name."""
  return isinstance(column, int) or bool(_POSITION.match(str(column)))


# The delimiters a file may use instead of the one it was read with.
OTHER_DELIMITERS = (",", ";", "\t", "|")
_POSITION = re.compile(r"^[0-9]+$")


# Byte-order marks of the encodings a text file may be in instead of UTF-8; UTF-32's come
# first, as UTF-32LE's starts with UTF-16LE's.
_OTHER_BOMS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"),
               (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))
BOM = u"\ufeff"  # a byte-order mark, as text


def decode_utf8(path, raw):
  """Decodes bytes as UTF-8 (a BOM is allowed), naming the line and column of a bad byte.
  A UTF-16 or UTF-32 file (by its byte-order mark, or UTF-16 without one by its NUL bytes)
  is refused with the iconv command for its encoding, and a NUL byte in a UTF-8 file with
  its line (Python 3.7's csv module refuses NUL, 3.11's reads it: both refuse it here)."""
  encoding = _other_encoding(raw)
  if encoding is not None:
    source, sign = encoding
    raise DataError(path, "the file is %s, not UTF-8 (%s)" % (source.upper(), sign),
                    "re-save the file as UTF-8, e.g. `iconv -f %s -t utf-8 in.csv > out.csv`"
                    % source)
  try:
    text = raw.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    line = raw.count(b"\n", 0, e.start) + 1
    line_start = raw.rfind(b"\n", 0, e.start) + 1
    raise DataError(
        path, "invalid UTF-8 (byte 0x%02x at byte %d of the line)" % (raw[e.start], e.start - line_start + 1),
        "re-save the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 in.csv > out.csv`",
        line=line)
  nul = text.find(u"\x00")
  if nul >= 0:
    line_start = text.rfind(u"\n", 0, nul) + 1
    raise DataError(path, "the line holds a NUL byte (character %d of the line): the file is "
                    "probably not a text file, or a text in another encoding than UTF-8"
                    % (nul - line_start + 1),
                    "give the CSV/TSV file itself, re-saved as UTF-8 text (or remove the NUL "
                    "bytes: `tr -d '\\000' < in.csv > out.csv`)",
                    line=text.count(u"\n", 0, nul) + 1)
  return text


def _other_encoding(raw):
  """(encoding for iconv, its sign) of a UTF-16/UTF-32 file, else None. Without a
  byte-order mark, UTF-16 shows as a NUL byte in every other byte of a mostly ASCII
  text: at odd offsets little-endian, at even offsets big-endian."""
  for bom, encoding in _OTHER_BOMS:
    if raw.startswith(bom):
      return encoding, "it starts with the byte-order mark %s" % " ".join(
          "%02x" % b for b in bytearray(bom))
  head = bytearray(raw[:4096])
  pairs = len(head) // 2
  if pairs < 2:
    return None
  even = sum(1 for i in range(0, 2 * pairs, 2) if head[i] == 0)
  odd = sum(1 for i in range(1, 2 * pairs, 2) if head[i] == 0)
  for nuls, others, encoding, where in ((odd, even, "utf-16le", "odd"),
                                        (even, odd, "utf-16be", "even")):
    if nuls * 2 > pairs and others * 10 < pairs:
      return encoding, "every other byte is NUL, at %s offsets: UTF-16 without a " \
          "byte-order mark" % where
  return None


def _sep_line(path, text):
  """Excel's first line `sep=X` names the file's delimiter; it is no header and no row.
  Refused, with the flag that reads the file without it."""
  first = lines_of(text[:200])[0].rstrip(u"\r\n") if text else u""
  match = _SEP_LINE.match(first)
  if match:
    delimiter = match.group(1)
    raise DataError(path, "the first line is %r, Excel's line naming the delimiter, not a "
                    "header or a row" % first,
                    "remove that line (e.g. `tail -n +2 in.csv > out.csv`) and pass "
                    "--delimiter=%s (with --task_name=csv)"
                    % ("tab" if delimiter == u"\t" else "'%s'" % delimiter), line=1)


_SEP_LINE = re.compile(u"^sep=(.)$")


def _check_rows(path, header, rows):
  """A row that repeats the header (files joined with `cat`, the second one's header
  left in, perhaps after its byte-order mark) would make a class of its label cell
  'label': refused, naming the line. (A byte-order mark at a row's start is refused only
  where it matters, in a label cell: refuse_bom_cell. A text may start with U+FEFF, and
  the tokenizer drops it.)"""
  if header is None:
    return
  names = [_cell(h) for h in header]
  for line, fields in rows:  # (the first cell first: a million rows are read here)
    if len(fields) == len(names) and _cell(fields[0]) == names[0] and \
        [_cell(f) for f in fields] == names:
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


def read_table(path, delimiter, has_header, quoting=csv.QUOTE_MINIMAL):
  """Reads a whole delimited file. Raises DataError when it is empty or not UTF-8, or when
  its quotes do not follow CSV's rules (a quoted field that never closes, or that closes
  with anything but a delimiter or the line's end after it): such a quote would merge rows
  into one text."""
  if not tf.io.gfile.exists(path):
    raise DataError(path, "the file does not exist",
                    "check --data_dir and the file name (see the README for each task's files)")
  if tf.io.gfile.isdir(path):
    raise DataError(path, "this is a folder, not a file",
                    "name the file itself (or pass the folder as --data_dir)")
  with tf.io.gfile.GFile(path, "rb") as f:
    raw = f.read()
  text = decode_utf8(path, raw)
  if not text.strip():
    raise DataError(path, "the file is empty", "give a file with rows, or point at the right file")
  _sep_line(path, text)
  kwargs = {"delimiter": delimiter}
  if quoting == csv.QUOTE_NONE:
    kwargs.update(quoting=csv.QUOTE_NONE, quotechar=None)
  else:
    kwargs.update(strict=True)  # a quote out of place is an error, not a merged text
  lines = lines_of(text)
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
      del consumed[:]
  except csv.Error as e:
    raise _quoting_error(path, delimiter, next_line, consumed, e)
  header = None
  if has_header:
    header = [h.strip() for h in rows[0][1]]
    rows = rows[1:]
  _check_rows(path, header, rows)
  if not rows:
    raise DataError(path, "the file has a header but no data rows",
                    "give a file with rows, or point at the right file", line=1)
  return Table(path, header, rows, len(lines), blank_lines, multi_line, delimiter)


def lines_of(text):
  """The file's lines, each with its end. Lines end at "\n" (or "\r\n"), so a lone
  carriage return stays a character of its line, which the csv module keeps inside a
  quoted text and refuses elsewhere, instead of taking it for a line end and cutting a row
  in two. A file with no "\n" at all has its lines end at "\r" (old Mac files)."""
  end = "\n" if "\n" in text else "\r"
  pieces = text.split(end)
  return [piece + end for piece in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])


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
