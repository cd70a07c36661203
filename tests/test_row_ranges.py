"""--train_rows and --eval_rows: a split's rows chosen by their place in the file, the rest
counted and left aside, a range past the last row refused, a held-out slice of the train
file evaluated, and the choice part of what names the cached records."""

import csv
import io
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import TINY, TINY_VOCAB, run_flags, sample_path
from data.data_error import DataError
from data.processors import get_processor
from spec.run_errors import FlagError
from spec.rows import RowRange, format_rows, overlap, parse_rows

BIAS = sample_path("jigsaw_bias_davidson")
BIAS_TRAIN = os.path.join(BIAS, "train.csv")


def file_ids(path):
  with io.open(path, encoding="utf-8", newline="") as f:
    return [row["id"] for row in csv.DictReader(f)]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10 ** 9), st.one_of(st.none(), st.integers(1, 10 ** 9)))
def test_a_range_reads_back_as_written(start, length):
  rows = RowRange(start, None if length is None else start + length)
  assert parse_rows(format_rows(rows)) == rows
  assert parse_rows(" %s " % format_rows(rows)) == rows


@given(st.integers(1, 10 ** 9))
def test_n_is_the_first_n_rows(n):
  assert parse_rows(str(n)) == RowRange(0, n) == parse_rows(":%d" % n)


@pytest.mark.parametrize("text,problem", [
    ("abc", "is not N"), ("1.5", "is not N"), ("1:2:3", "is not N"), ("", "is not N"),
    ("0", "chooses no rows"), ("-3", "chooses no rows"), ("5:5", "chooses no rows"),
    ("9:4", "chooses no rows"), ("-1:", "chooses no rows")])
def test_a_value_that_chooses_no_rows_is_refused(text, problem):
  with pytest.raises(ValueError, match=problem):
    parse_rows(text)


@given(st.integers(0, 50), st.integers(1, 50), st.integers(0, 50), st.integers(1, 50))
def test_overlap_is_a_shared_row(a, a_len, b, b_len):
  first, second = set(range(a, a + a_len)), set(range(b, b + b_len))
  assert overlap(RowRange(a, a + a_len), RowRange(b, b + b_len)) == bool(first & second)
  assert overlap(RowRange(a, None), RowRange(b, b + b_len)) == (a < b + b_len)


@pytest.mark.parametrize("rows", [RowRange(0, 100), RowRange(100, 250), RowRange(550, None)])
def test_the_examples_are_the_rows_of_the_range_in_file_order(rows):
  ids = file_ids(BIAS_TRAIN)
  processor = get_processor("jigsaw_bias", data_dir=BIAS, row_ranges={"train": rows})
  examples = processor.get_examples("train")
  assert [str(e.guid) for e in examples] == ids[rows.start:rows.end]
  aside = processor.rows_left_aside["train"]
  assert aside == {"rows outside --train_rows=%s" % format_rows(rows):
                   len(ids) - len(examples)}
  assert processor.accounts["train"]["examples"] == len(examples)


def test_a_range_past_the_last_row_is_refused_with_the_files_rows():
  count = len(file_ids(BIAS_TRAIN))
  for rows, fix in ((RowRange(0, count + 1), "give a range within them, e.g. --train_rows=%d"
                     % count),
                    (RowRange(count - 5, count + 100), "give a range within them, e.g. "
                     "--train_rows=%d:%d" % (count - 5, count)),
                    (RowRange(count, None), "start --train_rows below %d (its rows are 0 to %d)"
                     % (count, count - 1))):
    processor = get_processor("jigsaw_bias", data_dir=BIAS, row_ranges={"train": rows})
    with pytest.raises(DataError) as e:
      processor.get_examples("train")
    assert str(e.value) == (
        "%s: --train_rows=%s reaches past its last row: it has %d data rows (counted from 0). "
        "Fix: %s"
        % (BIAS_TRAIN, format_rows(rows), count, fix))
  # The whole file is a range within it.
  processor = get_processor("jigsaw_bias", data_dir=BIAS, row_ranges={"train": RowRange(0, count)})
  assert len(processor.get_examples("train")) == count


def test_malformed_rows_outside_the_range_are_left_aside_not_errors(tmp_path):
  path = tmp_path / "rows.csv"
  path.write_text(u"text,label\ngood one,0\ngood two,1\nbroken row without its label\n"
                  u"good three,0\n", encoding="utf-8")
  processor = get_processor("csv", files={"train": str(path)}, text_column="text",
                            label_columns=["label"], row_ranges={"train": RowRange(0, 2)})
  assert [e.text_a for e in processor.get_examples("train")] == ["good one", "good two"]
  processor = get_processor("csv", files={"train": str(path)}, text_column="text",
                            label_columns=["label"], row_ranges={"train": RowRange(1, 4)})
  with pytest.raises(DataError, match=r"rows\.csv, line 4"):
    processor.get_examples("train")


def bias_flags(output_dir, *extra):
  return ["--task_name=jigsaw_bias", "--head=classification", "--data_dir=" + BIAS,
          "--bert_config_file=" + os.path.join(TINY, "bert_config.json"),
          "--vocab_file=" + TINY_VOCAB, "--output_dir=" + output_dir, "--max_seq_length=16",
          "--train_batch_size=8", "--eval_batch_size=8", "--num_train_steps=2"] + list(extra)


@pytest.mark.one_runtime("tf1")  # (rows are chosen as the file is read, the same on both)
def test_a_held_out_slice_of_the_train_file_is_evaluated(tmp_path, tiny_checkpoint, caplog):
  caplog.set_level("INFO")
  output_dir = str(tmp_path / "out")
  ids = file_ids(BIAS_TRAIN)
  result = run_flags(*bias_flags(output_dir, "--do_train", "--do_eval",
                                 "--init_checkpoint=" + tiny_checkpoint, "--train_rows=300",
                                 "--eval_file=" + BIAS_TRAIN, "--eval_rows=300:404"))
  assert result.eval["num_examples"] == 104
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    assert json.load(f)["num_examples"] == 104
  assert ("the eval file is the train file, %s: its rows 300:404 are held out from "
          "training's 0:300" % BIAS_TRAIN) in caplog.text
  assert "rows the model trained on" not in caplog.text
  assert "%s: left aside %d rows outside --train_rows=0:300" % (BIAS_TRAIN, len(ids) - 300) in caplog.text
  with open(os.path.join(output_dir, "run_summary.json")) as f:
    summary = json.load(f)
  assert summary["flags"]["train_rows"] == "300" and summary["flags"]["eval_rows"] == "300:404"
  # Other rows are other records: the cache is not reused for them.
  caplog.clear()
  result = run_flags(*bias_flags(str(tmp_path / "out2"), "--do_eval", "--cache_dir=" + str(
      tmp_path / "out" / "features"), "--init_checkpoint=" + os.path.join(output_dir,
                                                                          "model.ckpt-2"),
      "--eval_file=" + BIAS_TRAIN, "--eval_rows=404:500"))
  assert result.eval["num_examples"] == 96


def test_overlapping_ranges_of_one_file_are_said(tmp_path, caplog):
  """The check of the splits' files that a run makes before any work (that run() makes it
  with the rows chosen, the held-out slice's run above shows), on ranges that overlap."""
  from pipeline.build import make_processor
  from pipeline.splits import check_files_of_splits
  from run_classifier import parse_flags
  caplog.set_level("INFO")
  c = parse_flags(["run_classifier.py"] + bias_flags(
      str(tmp_path / "out"), "--do_train", "--do_eval", "--train_rows=300",
      "--eval_file=" + BIAS_TRAIN, "--eval_rows=250:350"))
  check_files_of_splits(make_processor(c.data), c.modes)
  assert ("the eval file is the train file, %s: the evaluation scores rows the model "
          "trained on" % BIAS_TRAIN) in caplog.text


@pytest.mark.parametrize("extra,message", [
    (["--do_eval", "--train_rows=10"], "--train_rows=10 chooses rows to read for --do_train; "
                                       "this run does not: add --do_train or drop --train_rows"),
    (["--do_train", "--eval_rows=5:9"], "--eval_rows=5:9 chooses rows to read for --do_eval; "
                                        "this run does not: add --do_eval or drop --eval_rows"),
    (["--do_train", "--do_eval", "--num_folds=2", "--eval_rows=10"],
     "--eval_rows=10 cannot be combined with --num_folds: each fold's dev split is its own "
     "rows of the train file (choose them with --train_rows)"),
    (["--do_train", "--train_rows=7:3"], "--train_rows='7:3' chooses no rows: give 0 <= "
                                         "START < END, e.g. 100000 or 100000:110000"),
    (["--do_train", "--classifier_dropout=1.0"], "--classifier_dropout=1.0 must be in [0, 1), "
                                                 "e.g. 0.4"),
])
def test_options_that_choose_nothing_are_refused(tmp_path, extra, message):
  with pytest.raises(FlagError) as e:
    run_flags(*bias_flags(str(tmp_path / "out"), *extra))
  assert str(e.value) == message


def test_a_csv_tasks_classes_are_those_of_the_rows_read(tmp_path):
  path = tmp_path / "rows.csv"
  path.write_text(u"text,label\none,a\ntwo,b\nthree,a\nfour,c\n", encoding="utf-8")
  settings = dict(files={"train": str(path)}, text_column="text", label_columns=["label"])
  assert get_processor("csv", **settings).labels == ["a", "b", "c"]
  assert get_processor("csv", row_ranges={"train": RowRange(0, 3)}, **settings).labels == [
      "a", "b"]
  with pytest.raises(DataError, match="column label holds only the label 'c', but a "
                                      "classifier needs at least two classes"):
    get_processor("csv", row_ranges={"train": RowRange(3, None)}, **settings).labels


def test_xnlis_eval_file_of_every_language_takes_no_range():
  with pytest.raises(FlagError) as e:
    get_processor("xnli", data_dir=sample_path("xnli"), row_ranges={"dev": RowRange(0, 10)})
  assert str(e.value) == ("--eval_rows cannot choose rows of xnli.dev.tsv, which holds every "
                          "language's rows (--xnli_language=zh chooses those read): drop "
                          "--eval_rows")


def test_other_rows_of_the_file_are_other_data_to_a_resumed_training():
  """The card's fingerprint of the train rows: another range is another fingerprint (a
  resume on it is refused as new data); without a range it is as before ranges existed."""
  import hashlib
  from pipeline.state import ROW_SETTINGS, rows_fingerprint
  metadata = {name: "value of %s" % name for name in ROW_SETTINGS}
  before = hashlib.sha256(json.dumps(metadata, sort_keys=True).encode("utf-8")).hexdigest()
  assert rows_fingerprint(metadata) == before[:16]
  first = rows_fingerprint(dict(metadata, row_range="0:1000"))
  second = rows_fingerprint(dict(metadata, row_range="1000:2000"))
  assert len({first, second, before[:16]}) == 3
