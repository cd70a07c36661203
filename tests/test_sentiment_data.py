"""The demo's sentiment CSVs, built from VADER's real rated movie-review snippets."""

import csv
import io

import pytest

from conftest import fetched
from data.data_error import DataError
from data.processors import get_processor
from tools import sentiment_data


@pytest.fixture(scope="module")
def ground_truth():
  from tools import assets
  return fetched(assets.vader_movie_reviews)


def _rows(path):
  with io.open(path, encoding="utf-8", newline="") as f:
    return list(csv.DictReader(f))


def test_real_ratings_file(ground_truth):
  rows = sentiment_data.read_ratings(ground_truth)
  assert len(rows) == 10605
  assert rows[2] == ("3", -0.6, "Effective but too tepid biopic")
  assert sum(1 for _, r, _ in rows if r > 0) == 5242
  assert sum(1 for _, r, _ in rows if r < 0) == 5326
  assert all(-4 <= r <= 4 for _, r, _ in rows)


def test_splits_are_seeded_disjoint_and_labelled_by_sign(ground_truth, tmp_path):
  summary = sentiment_data.build(ground_truth, str(tmp_path / "a"))
  assert summary["left_out_neutral"] == 37
  assert (summary["train"], summary["dev"], summary["test"]) == (8445, 2111, 12)
  train, dev = _rows(str(tmp_path / "a" / "train.csv")), _rows(str(tmp_path / "a" / "dev.csv"))
  test = _rows(str(tmp_path / "a" / "test.csv"))
  ids = [r["id"] for r in train + dev + test]
  assert len(ids) == len(set(ids)) == 10605 - 37
  ratings = {i: r for i, r, _ in sentiment_data.read_ratings(ground_truth)}
  for row in train + dev:
    assert row["label"] == ("positive" if ratings[row["id"]] > 0 else "negative")
  positives = sum(r["label"] == "positive" for r in dev)
  assert summary["dev_majority_baseline"] == max(positives, 2111 - positives) / 2111.0
  assert sentiment_data.build(ground_truth, str(tmp_path / "b")) == summary
  assert _rows(str(tmp_path / "b" / "dev.csv")) == dev
  # The project's generic CSV processor reads them back row for row.
  processor = get_processor("csv", data_dir=str(tmp_path / "a"), text_column="sentence",
                            label_columns=["label"], id_column="id")
  assert len(processor.get_examples("train")) == 8445
  assert processor.labels == ["negative", "positive"]
  assert [e.label for e in processor.get_examples("test")] == [None] * 12


def test_malformed_ratings_file_names_the_line(tmp_path):
  path = tmp_path / "gt.txt"
  path.write_text(u"1\t2.5\tgood\n2\tgreat\tfilm\n")
  with pytest.raises(DataError) as error:
    sentiment_data.read_ratings(str(path))
  assert error.value.line == 2 and "rating 'great' is not a number" in str(error.value)
