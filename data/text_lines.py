"""A text file's bytes as lines of text, read a block at a time, with clear errors for
bytes that are not UTF-8 text (another encoding, NUL bytes, Excel's sep= line)."""

import re

import tensorflow.compat.v1 as tf

from data.data_error import DataError

BLOCK_BYTES = 1 << 20  # read at a time: the only part of a file held at once

# Byte-order marks of the encodings a text file may be in instead of UTF-8; UTF-32's come
# first, as UTF-32LE's starts with UTF-16LE's.
_OTHER_BOMS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"),
               (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))

def open_binary(path):
  check_file(path)
  # (Python's own file object for a local file: several times faster than GFile's.)
  return tf.io.gfile.GFile(path, "rb") if "://" in path else open(path, "rb")


def check_file(path):
  """DataError for a path that is missing or a folder."""
  if not tf.io.gfile.exists(path):
    raise DataError(path, "the file does not exist",
                    "check --data_dir and the file name (docs/guide/data.md names each task's files)")
  if tf.io.gfile.isdir(path):
    raise DataError(path, "this is a folder, not a file",
                    "name the file itself (or pass the folder as --data_dir)")


def decoded_lines(table, stream):
  """The file's lines as text, each with its end, read a block at a time. Lines end at
  "\n" (or "\r\n"), so a lone carriage return stays a character of its line, which the csv
  module keeps inside a quoted text and refuses elsewhere, instead of taking it for a line
  end and cutting a row in two. A file with no "\n" at all has its lines end at "\r" (old
  Mac files). Bytes that are not UTF-8, UTF-16/32 and NUL bytes are refused, naming the
  line (decode_block)."""
  path = table.path
  pending = b""
  line_number = 1  # of the first line in pending
  first = True  # (no line given yet)
  block = _read(table, stream)
  _refuse_other_encoding(path, block)
  if block.startswith(_UTF8_BOM):
    block = block[len(_UTF8_BOM):] or _read(table, stream)
  waiting = []  # blocks with no line end yet (an old Mac file, or a very long line)
  while block:
    end = block.rfind(b"\n")
    if end < 0:
      waiting.append(block)  # (joined once a line ends: no copy per block)
      block = _read(table, stream)
      continue
    whole = b"".join([pending] + waiting + [block[:end + 1]])
    pending, waiting = block[end + 1:], []
    text = decode_block(path, whole, line_number, table)
    lines = text.split(u"\n")
    lines.pop()  # (the empty piece after the last end)
    if first:
      _sep_line(path, lines[0])
      first = False
    line_number += len(lines)
    for line in lines:
      yield line + u"\n"
    block = _read(table, stream)
  pending = b"".join([pending] + waiting)
  if pending:
    # (a file with no "\n" at all: its lines end at "\r", and errors count them so)
    text = decode_block(path, pending, line_number, table,
                        b"\r" if first and b"\r" in pending else b"\n")
    if first and u"\r" in text:  # no "\n" in the whole file: lines end at "\r"
      pieces = text.split(u"\r")
      lines = [piece + u"\r" for piece in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
    else:
      lines = [text]
    if first:
      _sep_line(path, lines[0])
    for line in lines:
      yield line


def _read(table, stream):
  """The file's next block, counted into table.digest (the sha256 of the bytes read)."""
  block = stream.read(BLOCK_BYTES)
  table.digest.update(block)
  return block


_UTF8_BOM = b"\xef\xbb\xbf"


def decode_block(path, raw, first_line, table=None, line_end=b"\n"):
  """Decodes whole lines of bytes (first_line: the number of the first; each ending at
  line_end) as UTF-8, naming the line and byte of a bad byte, and the line and character
  of a NUL (Python 3.7's csv module refuses NUL, 3.11's reads it: both refuse it here).
  Marks table as holding content when the text is not all whitespace."""
  try:
    text = raw.decode("utf-8")
  except UnicodeDecodeError as e:
    line_start = raw.rfind(line_end, 0, e.start) + 1
    raise DataError(
        path, "invalid UTF-8 (byte 0x%02x at byte %d of the line)" % (
            bytearray(raw)[e.start], e.start - line_start + 1),
        "re-save the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 in.csv > out.csv`",
        line=first_line + raw.count(line_end, 0, e.start))
  end = line_end.decode("ascii")
  nul = text.find(u"\x00")
  if nul >= 0:
    line_start = text.rfind(end, 0, nul) + 1
    raise DataError(path, "the line holds a NUL byte (character %d of the line): the file is "
                    "probably not a text file, or a text in another encoding than UTF-8"
                    % (nul - line_start + 1),
                    "give the CSV/TSV file itself, re-saved as UTF-8 text (or remove the NUL "
                    "bytes: `tr -d '\\000' < in.csv > out.csv`)",
                    line=first_line + text.count(end, 0, nul))
  if table is not None and not table.content and text and not text.isspace():
    table.content = True
  return text


def _refuse_other_encoding(path, head):
  """A UTF-16 or UTF-32 file (by its byte-order mark, or UTF-16 without one by its NUL
  bytes) is refused with the iconv command for its encoding."""
  encoding = _other_encoding(head)
  if encoding is not None:
    source, sign = encoding
    raise DataError(path, "the file is %s, not UTF-8 (%s)" % (source.upper(), sign),
                    "re-save the file as UTF-8, e.g. `iconv -f %s -t utf-8 in.csv > out.csv`"
                    % source)


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


def _sep_line(path, first):
  """Excel's first line `sep=X` names the file's delimiter; it is no header and no row.
  Refused, with the flag that reads the file without it."""
  first = first.rstrip(u"\r\n")
  match = _SEP_LINE.match(first)
  if match:
    delimiter = match.group(1)
    raise DataError(path, "the first line is %r, Excel's line naming the delimiter, not a "
                    "header or a row" % first,
                    "remove that line (e.g. `tail -n +2 in.csv > out.csv`) and pass "
                    "--delimiter=%s (with --task_name=csv)"
                    % ("tab" if delimiter == u"\t" else "'%s'" % delimiter), line=1)


_SEP_LINE = re.compile(u"^sep=(.)$")
