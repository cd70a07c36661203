"""Bad input stops with an error naming the file, the line, the column and the fix."""

import pytest

from data.errors import DataError
from data.processors import get_processor


def _error(processor, split="train"):
  with pytest.raises(DataError) as error:
    processor.get_examples(split)
  return error.value, str(error.value)


def test_missing_column(tmp_path):
  path = tmp_path / "train.csv"
  path.write_text(u"id,text,toxic\n1,hello,0\n")
  err, message = _error(get_processor("jigsaw_toxic", data_dir=str(tmp_path)))
  assert (err.path, err.line, err.column) == (str(path), 1, "comment_text")
  assert "there is no column 'comment_text'; the header has: id, text, toxic" in message
  assert "Fix:" in message


def test_missing_column_in_generic_csv_names_the_flag(tmp_path):
  path = tmp_path / "train.csv"
  path.write_text(u"sentence,label\nhi,1\n")
  err, message = _error(get_processor("csv", data_dir=str(tmp_path), text_column="text",
                                      label_columns=["label"]))
  assert err.line == 1 and err.column == "text"
  assert "pass --text_column=<one of those names>" in message


def test_unknown_label(tmp_path):
  path = tmp_path / "train.tsv"
  path.write_text(u"sentence\tlabel\ngood\t1\nbad\t2\n")
  err, message = _error(get_processor("sst-2", data_dir=str(tmp_path)))
  assert (err.path, err.line, err.column) == (str(path), 3, "label")
  assert "task sst-2: unknown label '2'; the labels are 0, 1" in message


def test_unknown_label_after_a_multiline_comment_names_its_first_line(tmp_path):
  path = tmp_path / "train.csv"
  path.write_text(u'id,comment_text,toxic\na,"two\nlines",0\nb,"x",maybe\n')
  err, _ = _error(get_processor("jigsaw_toxic", data_dir=str(tmp_path)))
  assert (err.line, err.column) == (4, "toxic")


def test_nan_target(tmp_path):
  path = tmp_path / "train.csv"
  path.write_text(u"id,comment_text,target\n1,fine,0.1\n2,hmm,\n")
  err, message = _error(get_processor("jigsaw_bias", data_dir=str(tmp_path)))
  assert (err.path, err.line, err.column) == (str(path), 3, "target")
  assert "the value is empty" in message and "fill in a fraction in [0, 1], remove the row" \
      in message
  path.write_text(u"id,comment_text,target\n1,fine,nan\n")
  err, _ = _error(get_processor("jigsaw_bias", data_dir=str(tmp_path)))
  assert err.line == 2


def test_target_out_of_range(tmp_path):
  (tmp_path / "train.csv").write_text(u"id,comment_text,target\n1,fine,1.5\n")
  err, message = _error(get_processor("jigsaw_bias", data_dir=str(tmp_path)))
  assert err.line == 2 and "outside [0, 1]" in message


@pytest.mark.parametrize("content", [u"", u"\n\n  \n"])
def test_empty_file(tmp_path, content):
  path = tmp_path / "train.tsv"
  path.write_text(content)
  err, message = _error(get_processor("sst-2", data_dir=str(tmp_path)))
  assert err.path == str(path) and "the file is empty" in message


def test_header_only_file(tmp_path):
  (tmp_path / "train.tsv").write_text(u"sentence\tlabel\n")
  err, message = _error(get_processor("sst-2", data_dir=str(tmp_path)))
  assert err.line == 1 and "has a header but no data rows" in message


def test_invalid_utf8(tmp_path):
  path = tmp_path / "train.tsv"
  path.write_bytes(b"sentence\tlabel\nfine\t1\ncaf\xe9 au lait\t0\n")
  err, message = _error(get_processor("sst-2", data_dir=str(tmp_path)))
  assert (err.path, err.line) == (str(path), 3)
  assert "invalid UTF-8 (byte 0xe9 at byte 4 of the line)" in message
  assert "iconv" in message


def test_missing_file_names_the_flag(tmp_path):
  err, message = _error(get_processor("sst-2", data_dir=str(tmp_path)), split="dev")
  assert "no dev file for task sst-2 (looked for dev.tsv)" in message
  assert "--eval_file" in message


def test_short_row_is_an_error_or_a_counted_skip(tmp_path):
  path = tmp_path / "train.tsv"
  path.write_text(u"sentence1\tsentence2\tlabel\na\tb\t0\nbroken row\n")
  err, message = _error(get_processor("rte", data_dir=str(tmp_path)))
  assert err.line == 3 and "--skip_malformed_rows" in message
  processor = get_processor("rte", data_dir=str(tmp_path), skip_malformed_rows=True)
  assert len(processor.get_examples("train")) == 1
  assert processor.skipped == {"train": {"too few fields": 1}}


def test_empty_and_whitespace_texts_are_kept(tmp_path):
  (tmp_path / "test.csv").write_text(u'id,comment_text\na,""\nb,"   "\nc,"\n"\nd,ok\n')
  examples = get_processor("jigsaw_toxic", data_dir=str(tmp_path)).get_examples("test")
  assert [(e.guid, e.text_a) for e in examples] == [("a", ""), ("b", "   "), ("c", "\n"),
                                                    ("d", "ok")]
