"""Property tests of the reader: files written by Python's csv module, with generated texts
(quotes, every delimiter, line breaks, Unicode, empty and repeated cells) and labels in
their several spellings, read back through the project's csv task. Every row comes back
once, in order, with its texts and label unchanged, or the run stops with an error that
names the line."""

import csv
import io
import os
import tempfile

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from data.data_error import DataError
from data.processors import get_processor
from spec.labels import canonical_label

# derandomize: the same files in every run, so no example database is kept (none is
# written into the checkout).
SETTINGS = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

# Characters a reader must not trip on, given more often than random text would.
SPECIAL = st.sampled_from([u'"', u'""', u",", u";", u"\t", u"|", u"\n", u"\r\n", u"\r", u" ",
                           u"'", u"\u00e9", u"\u4e2d", u"\u2028", u"\ufeff", u"\U0001f600",
                           u"0", u"label", u"text"])
PLAIN = st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                       blacklist_characters=u"\x00"), max_size=12)
TEXTS = st.lists(st.one_of(PLAIN, SPECIAL), max_size=6).map(u"".join)
# Labels in several spellings of a few classes (0, 1, true, positive).
LABELS = st.sampled_from([u"0", u"1", u"1.0", u" 0", u"00", u"TRUE", u"true", u"positive"])
DELIMITERS = st.sampled_from([u",", u";", u"\t", u"|"])


def _write_csv(folder, header, rows, delimiter, quoting, line_end):
  path = os.path.join(folder, "train.csv")
  with io.open(path, "w", encoding="utf-8", newline="") as f:
    writer = csv.writer(f, delimiter=delimiter, quoting=quoting, lineterminator=line_end)
    writer.writerow(header)
    writer.writerows(rows)
  return path


def _read(path, pair, delimiter, quoting, labels=None):
  processor = get_processor(
      "csv", files={"train": path}, text_column="text", label_columns=["label"],
      text_b_column="text_b" if pair else None, delimiter=delimiter, quoting=quoting,
      labels=labels)
  return [(e.text_a, e.text_b, e.label) for e in processor.get_examples("train")]


def _classes(rows):
  """--labels when the rows name fewer than two classes (a classifier needs two)."""
  found = set(canonical_label(r[-1]) for r in rows)
  return None if len(found) >= 2 else sorted(found | {u"0", u"1"})


@SETTINGS
@given(rows=st.lists(st.tuples(TEXTS, TEXTS, LABELS), min_size=1, max_size=20),
       delimiter=DELIMITERS, quote_all=st.booleans(), line_end=st.sampled_from([u"\n", u"\r\n"]),
       pair=st.booleans())
@example(rows=[(u"\r", u"", u"0")], delimiter=u",", quote_all=False, line_end=u"\n", pair=False)
@example(rows=[(u"a\rb", u"", u"1"), (u"c", u"", u"0")], delimiter=u"\t", quote_all=False,
         line_end=u"\n", pair=True)
def test_every_row_written_by_the_csv_module_comes_back_unchanged(rows, delimiter, quote_all,
                                                                  line_end, pair):
  header = [u"text", u"text_b", u"label"] if pair else [u"text", u"label"]
  rows = [r if pair else (r[0], r[2]) for r in rows]
  expected = [(r[0], r[1] if pair else None, canonical_label(r[-1])) for r in rows]
  quoting = csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL
  with tempfile.TemporaryDirectory() as folder:
    path = _write_csv(folder, header, rows, delimiter, quoting, line_end)
    # The csv module leaves a lone carriage return unquoted when lines end in "\n" alone,
    # and every CSV reader takes it for a line end: such a file is not the rows it was
    # written from, and the reader must say where instead of reading other rows.
    ambiguous = line_end == u"\n" and not quote_all and any(
        u"\r" in cell and not any(c in cell for c in (delimiter, u'"', u"\n"))
        for r in rows for cell in r)
    try:
      read = _read(path, pair, delimiter, "csv", _classes(rows))
    except DataError as error:
      assert ambiguous and error.line is not None, error
      return
  assert read == expected


@SETTINGS
@given(rows=st.lists(st.tuples(TEXTS, LABELS), min_size=1, max_size=20))
def test_a_tsv_read_without_quote_processing_keeps_every_quote(rows):
  """.tsv files are read as Google's _read_tsv reads them: a quote is a plain character."""
  rows = [(u"".join(c for c in text if c not in u"\t\r\n\u2028\x85\x0b\x0c\x1c\x1d\x1e"),
           label) for text, label in rows]
  with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, "train.tsv")
    with io.open(path, "w", encoding="utf-8", newline="") as f:
      f.write(u"".join(u"%s\t%s\n" % row for row in [(u"text", u"label")] + rows))
    read = _read(path, False, None, "auto", _classes(rows))
  assert read == [(text, None, canonical_label(label)) for text, label in rows]


@SETTINGS
@given(texts=st.lists(PLAIN.filter(lambda t: not set(t) & set(u'"\r\n,;|\t\u2028\x85')),
                      min_size=2, max_size=15), broken=st.integers(min_value=0),
       delimiter=DELIMITERS)
def test_a_quote_that_never_closes_names_its_line(texts, broken, delimiter):
  """A stray quote opens row k's text and nothing closes it: an error at row k's line,
  never rows merged into one text."""
  broken %= len(texts)
  rows = [(text, u"0" if i % 2 else u"1") for i, text in enumerate(texts)]
  with tempfile.TemporaryDirectory() as folder:
    path = _write_csv(folder, [u"text", u"label"], rows, delimiter, csv.QUOTE_MINIMAL, u"\n")
    with io.open(path, encoding="utf-8", newline="") as f:
      lines = f.read().split(u"\n")
    lines[1 + broken] = u'"' + lines[1 + broken]
    with io.open(path, "w", encoding="utf-8", newline="") as f:
      f.write(u"\n".join(lines))
    try:
      _read(path, False, delimiter, "csv")
    except DataError as error:
      assert error.line == 2 + broken and "never closed" in str(error), error
      return
  assert False, "rows were read from a file whose quote at line %d never closes" % (2 + broken)
