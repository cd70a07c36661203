"""Nothing silent on input: every file's lines are accounted for, quotes cannot merge rows
unnoticed, extra fields and missing labels are errors (or counted skips), a header read
as data is caught, and predict files need no labels. Each case on a real file."""

import csv
import io
import json
import os
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import JIGSAW, TINY_VOCAB, sample_path
from data import tokenization
from data.data_error import DataError
from data.features import InputExample
from data.processors import get_processor
from data.tfrecord import build_records
from spec.heads.classification import SingleLabel

SST2_TRAIN = sample_path("glue", "SST-2", "train.tsv")
JIGSAW_TRAIN = sample_path("jigsaw_toxic_sample", "train.csv")
COMMENTS = sample_path("jigsaw_toxic_balanced", "comments.csv")


def read_lines(path):
  with io.open(path, encoding="utf-8", newline="") as f:
    return f.read().split("\n")


def write_lines(path, lines):
  with io.open(str(path), "w", encoding="utf-8", newline="") as f:
    f.write("\n".join(lines))
  return str(path)


def sst2(path, **kwargs):
  """The csv task on an SST-2 layout file: sentence<TAB>label with a header."""
  return get_processor("csv", files={"train": str(path), "test": str(path)},
                       text_column="sentence", label_columns=["label"], **kwargs)


def error_of(processor, split="train"):
  with pytest.raises(DataError) as error:
    processor.get_examples(split)
  return error.value


def test_every_file_accounts_for_its_lines(caplog):
  caplog.set_level("INFO")
  processor = get_processor("jigsaw_toxic", data_dir=sample_path("jigsaw_toxic_sample"))
  assert len(processor.get_examples("train")) == 267
  starts = []  # where each multi-line record starts, found with the csv module
  with io.open(JIGSAW_TRAIN, encoding="utf-8", newline="") as f:
    reader = csv.reader(f)
    previous = 0
    for record in reader:
      if "\n" in "".join(record):
        starts.append(previous + 1)
      previous = reader.line_num
  physical_lines = len(read_lines(JIGSAW_TRAIN)) - 1  # the file ends with a newline
  assert physical_lines == 1000 and len(starts) == 157
  single_line_records = 267 - 157
  assert ("%s: 1000 lines: a header, 267 records, 157 records spanning %d lines -> 267 train "
          "examples" % (JIGSAW_TRAIN, 1000 - 1 - single_line_records)) in caplog.text
  assert processor.accounts["train"] == {
      "lines": 1000, "header": True, "records": 267, "blank_lines": 0,
      "multi_line_records": 157, "examples": 267, "skipped": {}}
  warning = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
  assert warning == ["%s: 157 records span several lines (quoted newlines), starting at lines "
                     "%s, ..." % (JIGSAW_TRAIN, ", ".join(str(n) for n in starts[:5]))]


def test_a_stray_quote_in_a_tsv_is_a_plain_character_by_default(tmp_path):
  lines = read_lines(SST2_TRAIN)
  lines[10] = '"' + lines[10]  # a quote opens row 10's text and is never closed
  path = write_lines(tmp_path / "train.tsv", lines)
  examples = sst2(path).get_examples("train")
  assert len(examples) == 300  # every row, as Google's _read_tsv reads them
  assert examples[9].text_a == lines[10].split("\t")[0] and lines[10].startswith('"')


def test_a_quote_that_swallows_rows_is_an_error_naming_where_it_opened(tmp_path):
  lines = read_lines(SST2_TRAIN)
  lines[10] = '"' + lines[10]
  path = write_lines(tmp_path / "train.tsv", lines)
  error = error_of(sst2(path, quoting="csv"))
  assert error.line == 11
  assert str(error) == (
      "%s, line 11: the quote at line 11, character 1 opens a quoted field that is never "
      "closed: the file ends inside it, so the 290 lines after it would be one text. Fix: "
      "remove or double (\"\") the stray quote, or read quotes as plain characters "
      "(--quoting=none)" % path)


def test_an_unclosed_quote_near_the_end_of_a_predict_file_is_an_error(tmp_path):
  """Three rows before the end: the last rows would have been one text (a warning only)."""
  with io.open(os.path.join(JIGSAW, "test.csv"), encoding="utf-8", newline="") as f:
    rows = [r for r in csv.reader(f)][1:]
  plain = [r for r in rows if not set('",\n') & set(r[1])][:10]
  lines = ["id,comment_text"] + ["%s,%s" % (r[0], r[1]) for r in plain]
  lines[-3] = lines[-3].replace(",", ',"', 1)  # its text opens a quote that never closes
  path = write_lines(tmp_path / "test.csv", lines)
  error = error_of(get_processor("jigsaw_toxic", files={"test": str(path)}), "test")
  assert error.line == len(lines) - 2
  assert ("the quote at line %d, character %d opens a quoted field that is never closed: the "
          "file ends inside it, so the 2 lines after it would be one text"
          % (len(lines) - 2, len(plain[-3][0]) + 2)) in str(error)


def test_text_after_a_closing_quote_is_an_error(tmp_path):
  path = tmp_path / "train.csv"
  path.write_text(u'text,label\n"fine",1\n"he said "hi" to me",0\nok,1\n')
  error = error_of(get_processor("csv", files={"train": str(path)}, text_column="text",
                                 label_columns=["label"]))
  assert error.line == 3
  assert ("the quoted field that opens at line 3, character 1 closes at line 3 with text "
          "after its closing quote, where a comma or the line's end should follow") in str(error)


def test_more_fields_than_the_header_is_an_error_or_a_counted_skip(tmp_path):
  with io.open(COMMENTS, encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f))
  with_comma = next(i for i, (text, _) in enumerate(rows) if "," in text and "\n" not in text
                    and '"' not in text)
  lines = [",".join(['"%s"' % r[0].replace('"', '""'), r[1]]) for r in rows]
  lines[with_comma] = rows[with_comma][0] + "," + rows[with_comma][1]  # the quotes forgotten
  path = write_lines(tmp_path / "comments.csv", lines + [""])
  processor = get_processor("csv", files={"train": path}, text_column="0", label_columns=["1"],
                            has_header=False)
  error = error_of(processor)
  assert error.line == with_comma + 1
  fields = len(next(csv.reader([lines[with_comma]])))
  assert ("the row has %d fields but most of the file's first 1000 records have 2: a "
          "delimiter (',') inside a text that is not quoted would cut the text there"
          % fields) in str(error)
  skipping = get_processor("csv", files={"train": path}, text_column="0", label_columns=["1"],
                           has_header=False, skip_malformed_rows=True)
  assert len(skipping.get_examples("train")) == 399
  assert skipping.skipped == {"train": {"too many fields": 1}}
  assert skipping.accounts["train"]["skipped"] == {"too many fields": 1}


@pytest.mark.parametrize("missing", ["", "nan", "NaN"])
def test_an_empty_or_nan_label_is_an_error_or_a_counted_skip(tmp_path, missing, caplog):
  caplog.set_level("INFO")
  lines = read_lines(SST2_TRAIN)
  sentence = lines[5].split("\t")[0]
  lines[5] = sentence + "\t" + missing
  path = write_lines(tmp_path / "train.tsv", lines)
  error = error_of(sst2(path))
  assert (error.line, error.column) == (6, "label")
  assert ("the label is %s" % ("empty" if not missing else "%r, a missing value" % missing)
          ) in str(error)
  assert "fill in one of 0, 1, remove the row, or pass --skip_malformed_rows" in str(error)
  skipping = sst2(path, skip_malformed_rows=True)
  assert skipping.labels == ["0", "1"]  # no class named after a missing value
  assert len(skipping.get_examples("train")) == 299
  assert skipping.skipped["train"] == {"a missing label": 1}
  assert "skipped 1 rows with a missing label (--skip_malformed_rows)" in caplog.text


def test_a_header_read_as_data_is_caught(tmp_path):
  processor = get_processor("csv", files={"train": SST2_TRAIN}, text_column="0",
                            label_columns=["1"], has_header=False)
  with pytest.raises(DataError) as error:
    processor.labels  # the label list is read first, before any example
  assert error.value.line == 1
  assert ("the first line looks like a header read as data: its label 'label' appears on no other "
          "line, and its text is 'sentence'. Fix: drop --nohas_header") in str(error.value)


def test_labels_given_are_the_only_labels_in_the_train_file_too(tmp_path):
  error = error_of(sst2(SST2_TRAIN, labels=["0", "neutral"]))
  assert "task csv: unknown label '1'; the labels are 0, neutral" in str(error)
  assert error.line == next(i for i, line in enumerate(read_lines(SST2_TRAIN))
                            if line.endswith("\t1")) + 1


def test_predict_files_need_no_labels(tmp_path):
  lines = read_lines(SST2_TRAIN)
  lines[3] = lines[3].split("\t")[0] + "\tmaybe"  # an unknown label
  lines[4] = lines[4].split("\t")[0] + "\t"  # a missing one
  path = write_lines(tmp_path / "test.tsv", lines)
  processor = get_processor("csv", files={"train": SST2_TRAIN, "test": path},
                            text_column="sentence", label_columns=["label"])
  examples = processor.get_examples("test")
  assert len(examples) == 300 and {e.label for e in examples} == {None}
  no_labels = write_lines(tmp_path / "unlabelled.tsv",
                          [line.split("\t")[0] for line in read_lines(SST2_TRAIN)])
  processor = get_processor("csv", files={"train": SST2_TRAIN, "test": no_labels},
                            text_column="sentence", label_columns=["label"])
  assert len(processor.get_examples("test")) == 300


def test_truncated_and_empty_texts_are_counted(tmp_path, caplog):
  caplog.set_level("INFO")
  tokenizer = tokenization.FullTokenizer(TINY_VOCAB, do_lower_case=True)
  examples = get_processor("jigsaw_toxic", data_dir=sample_path("jigsaw_toxic_sample")
                           ).get_examples("train")
  examples += [InputExample("e1", "   "), InputExample("e2", "")]
  lengths = [len(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(e.text_a))) + 2
             for e in examples]  # every text encoded whole, the slow way
  settings = {"label_spec": SingleLabel(["toxic"], ["0", "1"]).to_card(), "max_seq_length": 64,
              "vocab_sha256": "v", "source_sha256": "s"}
  for workers in (1, 2):
    path = str(tmp_path / ("w%d.tf_record" % workers))
    meta = build_records(examples, path, settings, tokenizer, num_workers=workers)
    truncated = sum(1 for n in lengths if n > 64)
    assert (meta["truncated"], meta["empty_texts"]) == (truncated, 2)
    assert truncated == 118
    # The longest comment is encoded from a prefix (past 8 x 64 characters): its length is
    # a lower bound, and marked so.
    assert 64 < meta["longest_tokens"] < max(lengths)
    assert meta["longest_tokens_exact"] is False
    with open(path + ".meta.json") as f:
      assert json.load(f)["truncated"] == truncated
  assert ("2 examples have an empty or whitespace-only text; they are kept and featurised "
          "as [CLS] [SEP]") in caplog.text
  assert ("%d examples were longer than max_seq_length=64 and were truncated (the longest has "
          "at least" % truncated) in caplog.text
  # Sentences encoded whole: the longest length is exact.
  sentences = sst2(SST2_TRAIN).get_examples("train")
  whole = max(len(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(e.text_a))) + 2
              for e in sentences)
  meta = build_records(sentences, str(tmp_path / "sst2.tf_record"),
                       dict(settings, max_seq_length=40), tokenizer, num_workers=2)
  assert (meta["longest_tokens"], meta["longest_tokens_exact"]) == (whole, True) and whole > 40
  assert "the longest has %d tokens)" % whole in caplog.text


def test_each_file_has_its_own_layout(tmp_path):
  """A headerless train file with a headered predict file: the header is given per split.
  Headered files are read by column name, each in its own order."""
  sentences = [line.split("\t")[0].replace(",", " ") for line in read_lines(SST2_TRAIN)[1:31]]
  predict = write_lines(tmp_path / "test.csv", ["text,label"] + [
      "%s,%s" % (text, i % 2) for i, text in enumerate(sentences)] + [""])
  processor = get_processor("csv", files={"train": COMMENTS, "test": predict},
                            text_column="0", label_columns=["1"], has_header=False,
                            split_headers={"test": True, "dev": None})
  assert len(processor.get_examples("train")) == 400
  assert [e.text_a for e in processor.get_examples("test")] == sentences
  reordered = write_lines(tmp_path / "dev.csv", ["label,id,text"] + [
      "%s,row%d,%s" % (i % 2, i, text) for i, text in enumerate(sentences)] + [""])
  by_name = get_processor("csv", files={"train": predict, "dev": reordered},
                          text_column="text", label_columns=["label"])
  assert [e.text_a for e in by_name.get_examples("dev")] == sentences
  assert [e.text_a for e in by_name.get_examples("train")] == sentences


def test_a_headerless_file_read_with_a_header_is_caught():
  """The default --has_header on a headerless file would take its first row as a header."""
  processor = get_processor("csv", files={"train": COMMENTS}, text_column="0",
                            label_columns=["1"])
  with pytest.raises(DataError) as error:
    processor.labels
  first_label = read_lines(COMMENTS)[0].rsplit(",", 1)[1]
  assert str(error.value) == (
      "%s, line 1: the first line is read as a header, but it looks like data: its label %r "
      "is a label of other lines. Fix: pass --nohas_header (no file has a header) or "
      "--notrain_has_header (this file has none), or add a header line"
      % (COMMENTS, first_label))


def test_a_long_quoted_comment_with_commas_is_no_swallowed_rows(tmp_path):
  """A real multi-line comment whose lines hold commas, in a text,label CSV: one record."""
  with io.open(COMMENTS, encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f))
  prose = [t for t, _ in rows if t.count(",") >= 8 and "\n" not in t][0]
  comment = "\n".join(piece.strip() + "," for piece in prose.split(",") if piece.strip())
  path = tmp_path / "train.csv"
  with io.open(str(path), "w", encoding="utf-8", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["text", "label"])
    writer.writerows([rows[0], [comment, "1"], rows[1]])
  examples = get_processor("csv", files={"train": str(path)}, text_column="text",
                           label_columns=["label"]).get_examples("train")
  assert [e.text_a for e in examples] == [rows[0][0], comment, rows[1][0]]
  assert comment.count("\n") > 5


def test_a_header_flag_for_the_file_overrides_the_header_guess():
  processor = get_processor("csv", files={"train": SST2_TRAIN}, text_column="0",
                            label_columns=["1"], has_header=False, split_headers={"train": False})
  assert processor.labels == ["0", "1", "label"]  # as the user insists: line 1 is data


def test_an_unlabelled_rte_row_in_training_is_an_error(tmp_path):
  lines = read_lines(sample_path("glue", "RTE", "train.tsv"))
  fields = lines[7].split("\t")
  lines[7] = "\t".join(fields[:2] + ["-1"] + fields[3:])
  write_lines(tmp_path / "train.tsv", lines)
  error = error_of(get_processor("rte", data_dir=str(tmp_path)))
  assert (error.line, error.column) == (8, "label")
  assert "the label is -1 (GLUE's mark for an unlabelled row)" in str(error)


def test_cola_predict_files_labels_are_not_read_and_its_test_layout_is_not_training_data(
    tmp_path):
  lines = read_lines(sample_path("glue", "CoLA", "dev.tsv"))
  lines[2] = lines[2].split("\t")[0] + "\t?"  # a label no one checks in a predict file
  write_lines(tmp_path / "test.tsv", lines)
  processor = get_processor("cola", data_dir=str(tmp_path))
  test = processor.get_examples("test")
  assert len(test) == 100 and {e.label for e in test} == {None}
  write_lines(tmp_path / "train.tsv", ["index\tsentence", "0\tBill whistled.", ""])
  error = error_of(processor)
  assert str(error) == (
      "%s, line 1: this is CoLA's unlabelled test layout (index, sentence). Fix: use it as the "
      "predict file, and give a labelled file for training" % (tmp_path / "train.tsv"))


# --- labels read one way -----------------------------------------------------------------

def _labelled(tmp_path, labels_column, name="train.csv"):
  path = tmp_path / name
  path.write_text(u"text,label\n" + u"".join(
      u"row number %d,%s\n" % (i, label) for i, label in enumerate(labels_column)))
  return get_processor("csv", files={"train": str(path)}, text_column="text",
                       label_columns=["label"])


def test_spellings_of_one_label_are_one_class(tmp_path):
  numbers = _labelled(tmp_path, ["0", "1", "0.0", "1.0", " 1", "00", "1e0"])
  assert numbers.labels == ["0", "1"]
  assert [e.label for e in numbers.get_examples("train")] == ["0", "1", "0", "1", "1", "0", "1"]
  words = _labelled(tmp_path, ["True", "true", "TRUE", "False", "false", "FALSE"], "b.csv")
  assert words.labels == ["false", "true"]
  assert [e.label for e in words.get_examples("train")] == ["true"] * 3 + ["false"] * 3


@pytest.mark.one_runtime  # (Python's hashing, the same on both)
def test_the_class_order_does_not_depend_on_the_hash_seed(tmp_path):
  """Strings hash differently in each process (PYTHONHASHSEED); a set of labels sorted by
  value alone would order equal values by that. Two processes, two seeds, one order."""
  import subprocess
  import sys
  from conftest import ROOT
  path = tmp_path / "train.csv"
  path.write_text(u"text,label\n" + u"".join(u"t%d,%s\n" % (i, v) for i, v in enumerate(
      ["1.0", "0", "1", "0.0", "2", "2.00", "-1", "false", "TRUE", "b", "a"] * 3)))
  code = ("from data.processors import get_processor; print(get_processor('csv', files="
          "{'train': %r}, text_column='text', label_columns=['label']).labels)" % str(path))
  orders = {subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(
      os.environ, PYTHONHASHSEED=str(seed), TF_CPP_MIN_LOG_LEVEL="3"), stdout=subprocess.PIPE,
      universal_newlines=True, check=True).stdout.strip() for seed in (1, 2)}
  assert orders == {"['-1', '0', '1', '2', 'false', 'true', 'a', 'b']"}


def test_a_label_column_of_ids_is_refused(tmp_path):
  processor = _labelled(tmp_path, [str(1000 + i) for i in range(500)])
  with pytest.raises(DataError) as error:
    processor.labels
  assert str(error.value) == (
      "%s, column 'label': column label has 500 distinct values in 500 rows: most rows have a "
      "label of their own, as an id or a text column does, not a label. Fix: name the label "
      "column with --label_column (or list the classes with --labels; for numbers to "
      "predict, pass --head=regression)" % (tmp_path / "train.csv"))
  # Many classes with rows each are a classifier's labels.
  assert len(_labelled(tmp_path, [str(i % 40) for i in range(200)], "c.csv").labels) == 40


def test_a_column_named_twice_in_the_header_is_an_error(tmp_path):
  path = write_lines(tmp_path / "train.csv", ["id,text,label,text", "1,first,0,second",
                                               "2,third,1,fourth"])
  error = error_of(get_processor("csv", files={"train": path}, text_column="text",
                                 label_columns=["label"]))
  assert str(error) == ("%s, line 1, column 'text': the header names column 'text' 2 times "
                        "(positions 1, 3), so which one to read is unclear. Fix: rename the "
                        "columns so that each name appears once" % path)


def test_a_file_with_another_delimiter_is_told_its_delimiter(tmp_path):
  path = write_lines(tmp_path / "train.csv", ["id;text;label", "1;hello there;0",
                                               "2;good bye;1"])
  by_name = error_of(get_processor("csv", files={"train": path}, text_column="text",
                                   label_columns=["label"]))
  assert str(by_name).endswith(
      "there is no column 'label'; the header has: id;text;label. Fix: the file seems to be "
      "separated by ';', not a comma (its first line splits into id, text, label): pass "
      "--delimiter=';' (with --task_name=csv)")
  by_position = error_of(get_processor("csv", files={"train": path}, text_column="1",
                                       label_columns=["2"], has_header=False))
  assert "there is no column number 2: rows have 1 columns. Fix: the file seems to be " \
         "separated by ';'" in str(by_position)
  tsv = write_lines(tmp_path / "train.tsv", ["text,label", "hello,0", "bye,1"])
  assert "separated by a comma, not a tab" in str(error_of(
      get_processor("csv", files={"train": tsv}, text_column="text", label_columns=["label"])))


def test_a_file_whose_every_record_is_skipped_is_an_error(tmp_path):
  """Training on 0 rows said 'trained to step 2' and predicted with the random head, and
  an eval of 0 rows ended in the Estimator's ValueError."""
  path = write_lines(tmp_path / "train.csv", ["id,comment_text,toxic", "a,some text,",
                                              "b,more text,", ""])
  skipping = get_processor("csv", files={"train": path}, text_column="comment_text",
                           label_columns=["toxic"], labels=["0", "1"],
                           skip_malformed_rows=True)
  error = error_of(skipping)
  assert str(error) == (
      "%s: every record was skipped (2 skipped (a missing label)): no rows are left to read. "
      "Fix: correct the rows, or the column and label options that read them (the log names "
      "each cause)" % path)


@pytest.mark.parametrize("labels, message", [
    (["Pos", "pos", "Neg"], "the labels 'Pos', 'pos' differ only in case, quotes, Unicode "
                            "form (NFC or NFD: NFC / NFC), spacing or invisible characters: "
                            "one class written in 2 ways would be 2 classes"),
    (['"0"', "0", "1"], "the labels '\"0\"' hold their quotes"),
    (['"0"', '"1"'], "the labels '\"0\"', '\"1\"' hold their quotes (the file was read "
                     "without quote processing)")])
def test_one_class_written_two_ways_is_named(tmp_path, labels, message):
  """'Pos' and 'pos' made a 4-class model; a TSV's quoted labels kept their quotes."""
  path = write_lines(tmp_path / "train.tsv", ["text\tlabel"] + [
      "text %d\t%s" % (i, labels[i % len(labels)]) for i in range(12)] + [""])
  processor = get_processor("csv", files={"train": path}, text_column="text",
                            label_columns=["label"])
  assert message in str(error_of(processor))
  kept = get_processor("csv", files={"train": path}, text_column="text",
                       label_columns=["label"], labels=sorted(set(labels)))
  assert len(kept.get_examples("train")) == 12  # --labels keeps them apart


@pytest.mark.parametrize("header, rows, expected_ids", [
    ("idx\tsentence", ["0\tthe cat sat .", "1\tsat cat the ."], ["0", "1"]),
    ("sentence\tlabel", ["the cat sat .\t1", "sat cat the .\t0"], None)])
def test_a_cola_predict_files_header_is_read_by_its_names(tmp_path, header, rows, expected_ids):
  """Hugging Face's export heads CoLA's test file idx<TAB>sentence: its header was
  predicted as a row and every text was the index column."""
  path = write_lines(tmp_path / "test.tsv", [header] + rows + [""])
  processor = get_processor("cola", files={"test": path})
  examples = processor.get_examples("test")
  assert [e.text_a for e in examples] == ["the cat sat .", "sat cat the ."]
  if expected_ids:
    assert [e.guid for e in examples] == expected_ids
  train = get_processor("cola", files={"train": path})
  if "label" in header:
    assert [e.label for e in train.get_examples("train")] == ["1", "0"]
  else:
    assert "CoLA's unlabelled test layout (idx, sentence)" in str(error_of(train))


def test_numbers_are_read_as_data_files_write_them():
  """Python's float() reads 1_000 as 1000: a regression target '1_000' was accepted."""
  from spec.labels import LabelError, canonical_label, parse_number
  assert canonical_label("1_000") == "1_000" and canonical_label("+1.0") == "1"
  with pytest.raises(LabelError, match="'1_000' is not a number"):
    parse_number("1_000", 0, "a number")
  assert parse_number(" 1e3 ", 0, "a number") == 1000.0


def test_evaluating_the_file_it_predicts_is_said(caplog):
  """MRPC's original files have no dev file: msr_paraphrase_test.txt was evaluated, a best
  checkpoint chosen on it, and then predicted, without a word."""
  from conftest import TEST_DATA
  from pipeline.splits import check_files_of_splits
  from spec.config import RunConfig
  processor = get_processor("mrpc", data_dir=os.path.join(TEST_DATA, "datasets", "glue",
                                                          "MRPC"))
  check_files_of_splits(processor, RunConfig(do_eval=True, do_predict=True).modes)
  assert ("the dev split is the predict file, %s: the evaluation's figures" %
          processor.file_for("test")) in caplog.text


# The ways one class can be written twice that a reader would not see: its case, quotes,
# Unicode forms (composed and decomposed accents, full-width letters), invisible format
# characters (a zero-width space or joiner, a mark of direction).
VARIANTS = {
    "NFD": lambda t: unicodedata.normalize("NFD", t),
    "upper": lambda t: t.upper(),
    "zero-width space": lambda t: t[:1] + u"\u200b" + t[1:],
    "right-to-left mark": lambda t: u"\u200f" + t,
    "full-width": lambda t: "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c
                                    for c in t),
    "inner spaces": lambda t: t.replace(" ", "   "),
}


@settings(max_examples=40, deadline=None)
@given(word=st.sampled_from([u"caf\u00e9", u"na\u00efve", u"toxic", u"\u00c5ngstr\u00f6m",
                             u"se\u00f1or", u"ok", u"very good"]),
       variant=st.sampled_from(sorted(VARIANTS)))
def test_a_class_written_two_ways_of_any_kind_is_named(tmp_path_factory, word, variant):
  other = VARIANTS[variant](word)
  if other == word:
    return
  folder = tmp_path_factory.mktemp("labels")
  path = write_lines(folder / "train.tsv", ["text\tlabel"] + [
      "text %d\t%s" % (i, (word, other, "neutral")[i % 3]) for i in range(12)] + [""])
  processor = get_processor("csv", files={"train": path}, text_column="text",
                            label_columns=["label"])
  message = str(error_of(processor))
  assert "one class written in 2 ways would be 2 classes" in message, message
  assert "Fix: write each class one way" in message


@pytest.mark.parametrize("values", [["0", "0.1667", "0.2", "0.5", "1"], ["1.5", "2", "3.25"],
                                    ["0%", "50%", "100%"]])
def test_a_column_of_fractions_is_not_taken_for_classes(tmp_path, values):
  """Rater fractions made a 12-class classifier without a hint that other heads exist."""
  path = write_lines(tmp_path / "train.tsv", ["text\tscore"] + [
      "text %d\t%s" % (i, values[i % len(values)]) for i in range(20)] + [""])
  processor = get_processor("csv", files={"train": path}, text_column="text",
                            label_columns=["score"])
  message = str(error_of(processor))
  if "%" in values[0]:
    assert "column score holds percentages such as 0%, 100%, 50%" in message
    assert "write them as fractions (0.5 for 50%) and pass --head=soft_target" in message
    return
  assert "column score holds numbers such as" in message
  assert "pass --head=soft_target for fractions in [0, 1]" in message
  assert "or --head=regression for other numbers" in message
  assert len(get_processor("csv", files={"train": path}, text_column="text",
                           label_columns=["score"], head="classification")
             .get_examples("train")) == 20  # (a choice the user makes)
  assert len(get_processor("csv", files={"train": path}, text_column="text",
                           label_columns=["score"], head="regression")
             .get_examples("train")) == 20


def test_a_headered_predict_file_read_without_its_header_is_named(tmp_path):
  """Its header became a predicted row, exit 0."""
  path = write_lines(tmp_path / "test.csv", ["rev_id,comment"] + [
      "%d,text number %d" % (100 + i, i) for i in range(6)] + [""])
  processor = get_processor("csv", files={"test": path}, text_column="1", id_column="0",
                            has_header=False, label_columns=None)
  message = str(error_of(processor, "test"))
  assert message.startswith("%s, line 1: the first line looks like a header read as data: "
                            "its id 'rev_id' is a name, and the other lines' ids are numbers"
                            % path)
  confirmed = get_processor("csv", files={"test": path}, text_column="1", id_column="0",
                            has_header=False, split_headers={"test": False},
                            label_columns=None)
  assert len(confirmed.get_examples("test")) == 7  # (--nopredict_has_header: said so)
