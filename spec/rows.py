"""Which data rows of a split's files a run reads: --train_rows and --eval_rows.

A range counts a split's data rows (records, after any header) from 0, in file order and
on across its files: "N" is the first N rows, "START:END" rows START to END - 1, and
"START:" every row from START on.
"""

import collections

RowRange = collections.namedtuple("RowRange", "start end")  # end None: to the last row


def parse_rows(text):
  """The RowRange of a --*_rows value; ValueError saying what is wrong with it."""
  text = str(text).strip()
  start_text, colon, end_text = text.partition(":")
  try:
    if not colon:
      start, end = 0, int(start_text)
    else:
      start = int(start_text) if start_text.strip() else 0
      end = int(end_text) if end_text.strip() else None
  except ValueError:
    raise ValueError("is not N (the first N rows) or START:END (0-based rows, END "
                     "exclusive), e.g. 100000 or 100000:110000")
  if start < 0 or (end is not None and end <= start):
    raise ValueError("chooses no rows: give 0 <= START < END, e.g. 100000 or 100000:110000")
  return RowRange(start, end)


def rows_problem(text):
  """What is wrong with a --*_rows value, or None (an options check)."""
  try:
    parse_rows(text)
  except ValueError as e:
    return str(e)
  return None


def format_rows(rows):
  """A RowRange as the option would give it."""
  return "%d:%s" % (rows.start, "" if rows.end is None else rows.end)


def overlap(a, b):
  """Whether two RowRanges share a row."""
  a_end = float("inf") if a.end is None else a.end
  b_end = float("inf") if b.end is None else b.end
  return max(a.start, b.start) < min(a_end, b_end)


def row_ranges_of(data):
  """{split: the RowRange its option chooses} of DataOptions' --train_rows and --eval_rows,
  for the splits that have one."""
  return {split: parse_rows(value) for split, value in (
      ("train", data.train_rows), ("dev", data.eval_rows)) if value is not None}
