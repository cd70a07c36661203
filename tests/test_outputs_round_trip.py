"""Every cell the project writes back survives the round trip unchanged: the predictions'
and the out-of-fold TSVs, read by Python's csv module and by pandas, give back each id,
class name and carried column exactly as it was, whatever characters it holds (tabs,
line breaks of every kind, quotes, combining marks, bidi and control characters)."""

import csv
import io

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data.features import InputExample
from pipeline.outputs import check_tsv, tsv_cell, write_fold_predictions, write_predictions
from spec.heads import build_spec
from spec.labels import canonical_label

# Any text an input file can hold: UTF-8 (no surrogates) without NUL, which the readers
# refuse; with the characters that end a TSV cell or line for some reader made likely.
TRICKY = u"\t\n\r\"'\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\u200f\u202e\u0301 ,;"
TEXT = st.text(alphabet=st.one_of(st.sampled_from(TRICKY), st.characters(
    blacklist_categories=("Cs",), blacklist_characters=u"\x00")), max_size=12)


def read_back(path):
  """(csv module's rows, pandas' rows), every cell as text."""
  with io.open(path, encoding="utf-8", newline="") as f:
    by_csv = list(csv.reader(f, delimiter="\t"))
  frame = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False, encoding="utf-8")
  return by_csv, [list(frame.columns)] + frame.values.tolist()


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(TEXT, min_size=1, max_size=6),
       classes=st.lists(TEXT.filter(lambda c: c.strip()), min_size=2, max_size=3,
                        unique_by=canonical_label),
       carried=st.lists(TEXT, min_size=1, max_size=6))
def test_predictions_round_trip_through_csv_and_pandas(tmp_path_factory, ids, classes,
                                                       carried):
  spec = build_spec("classification", ["label"], tuple(classes))
  classes = spec.classes  # (each class's one spelling: spec.labels.canonical_label)
  examples = [InputExample(guid, u"text", extras={"identity": carried[i % len(carried)]})
              for i, guid in enumerate(ids)]
  outputs = np.eye(len(classes), dtype=np.float32)[[i % len(classes) for i in range(len(ids))]]
  path = str(tmp_path_factory.mktemp("tsv") / "test_results.tsv")
  assert write_predictions(path, zip(examples, outputs), spec, ["identity"]) == len(ids)
  header = ["id"] + ["probability_%s" % c for c in classes] + ["prediction", "identity"]
  expected = [header] + [
      [guid] + ["1" if k == i % len(classes) else "0" for k in range(len(classes))] +
      [classes[i % len(classes)], carried[i % len(carried)]] for i, guid in enumerate(ids)]
  by_csv, by_pandas = read_back(path)
  assert by_csv == expected
  if len(set(header)) == len(header):  # (pandas renames repeated column names)
    assert by_pandas == expected


@settings(max_examples=30, deadline=None)
@given(ids=st.lists(TEXT, min_size=1, max_size=5),
       columns=st.lists(TEXT.filter(lambda c: c.strip()), min_size=1, max_size=3, unique=True))
def test_out_of_fold_predictions_round_trip(tmp_path_factory, ids, columns):
  spec = build_spec("multi_label", list(columns), None)
  examples = [InputExample(guid, u"text") for guid in ids]
  path = str(tmp_path_factory.mktemp("oof") / "oof_predictions.tsv")
  write_fold_predictions(path, examples, [i % 2 for i in range(len(ids))],
                         np.full((len(ids), len(columns)), 0.25, np.float32), spec)
  by_csv, _ = read_back(path)
  assert by_csv[0] == ["id", "fold"] + ["probability_%s" % c for c in columns]
  assert [row[:2] for row in by_csv[1:]] == [[guid, str(i % 2)] for i, guid in enumerate(ids)]


def test_a_cell_is_quoted_only_where_it_must_be():
  assert tsv_cell(u"plain text, with commas") == u"plain text, with commas"
  assert tsv_cell(u"a\tb") == u'"a\tb"'
  assert tsv_cell(u'say "hi"') == u'"say ""hi"""'
  assert tsv_cell(u"a\rb") == u'"a\rb"'
  assert tsv_cell(0.5) == u"0.5"


def test_a_file_that_does_not_read_back_is_not_written(tmp_path):
  path = tmp_path / "bad.tsv"
  path.write_text(u"id\tx\n1\t2\t3\n", encoding="utf-8")
  with pytest.raises(RuntimeError) as error:
    check_tsv(str(path), 2, 1)
  assert str(error.value) == "%s: line 2 reads back as 3 cells, not 2" % path
  with pytest.raises(RuntimeError) as error:
    check_tsv(str(path), 2, 2)
  assert "line 2 reads back as 3 cells" in str(error.value)
