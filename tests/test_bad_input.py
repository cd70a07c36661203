"""Bad input stops with an error naming the file, the line, the column and the fix."""

import pytest

from data.data_error import DataError
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


# -- files joined, re-encoded or written by Excel -----------------------------------------

CSV_FILE = b"text,label\nhi,1\nho,0\n"


def _csv_error(tmp_path, raw, **settings):
  path = tmp_path / "train.csv"
  path.write_bytes(raw)
  settings = dict(dict(text_column="text", label_columns=["label"]), **settings)
  err, message = _error(get_processor("csv", data_dir=str(tmp_path), **settings))
  assert err.path == str(path)
  return err, message.replace(str(path), "train.csv")


@pytest.mark.parametrize("second", [CSV_FILE, b"\xef\xbb\xbf" + CSV_FILE,
                                    b" text , label \r\nhi,1\n"])
def test_a_header_repeated_inside_the_data_is_refused(tmp_path, second):
  """`cat a.csv a.csv`: the second header would be a row of class 'label' (a 3-class
  model), also with a BOM before it or spaces around its names."""
  err, message = _csv_error(tmp_path, CSV_FILE + second)
  assert err.line == 4
  assert message == ("train.csv, line 4: the header appears again at line 4 (files joined "
                     "with cat?). Fix: remove the repeated header lines (to join files with "
                     "headers, take all but the first's with `tail -n +2`)")


def test_a_repeated_header_in_a_tsv_task_is_refused(tmp_path):
  (tmp_path / "train.tsv").write_text(u"sentence\tlabel\ngood\t1\nsentence\tlabel\nbad\t0\n")
  err, message = _error(get_processor("sst-2", data_dir=str(tmp_path)))
  assert err.line == 3 and "the header appears again at line 3" in message


def test_a_header_like_row_that_differs_is_data(tmp_path):
  (tmp_path / "train.csv").write_text(u"text,label\nhi,1\ntext,0\nlabel,1\n")
  processor = get_processor("csv", data_dir=str(tmp_path), text_column="text",
                            label_columns=["label"])
  assert [e.text_a for e in processor.get_examples("train")] == ["hi", "text", "label"]


def test_headerless_files_joined_a_bom_in_a_text_is_kept_in_a_label_refused(tmp_path):
  """Headerless files joined: the second one's BOM sticks to its first cell. In a text it
  is kept (the tokenizer drops it); in a label it would be a class of its own."""
  (tmp_path / "train.csv").write_bytes(b"hi,1\nho,0\n\xef\xbb\xbfhey,1\n")
  processor = get_processor("csv", data_dir=str(tmp_path), text_column="0",
                            label_columns=["1"], has_header=False)
  assert [e.text_a for e in processor.get_examples("train")] == ["hi", "ho", u"\ufeffhey"]
  err, message = _csv_error(tmp_path, b"1,hi\n0,ho\n\xef\xbb\xbf1,hey\n", text_column="1",
                            label_columns=["0"], has_header=False)
  assert (err.line, err.column) == (3, "0")
  assert "the cell '\\ufeff1' starts with an invisible byte-order mark (U+FEFF)" in message


@pytest.mark.parametrize("task", ["csv", "sst-2"])
def test_a_label_that_starts_with_a_byte_order_mark_is_refused(tmp_path, task):
  """'\ufeff1' would be a class of its own beside '1' (csv), or an unknown label."""
  if task == "csv":
    err, message = _csv_error(tmp_path, b"text,label\nhi,1\nho,\xef\xbb\xbf0\n")
  else:
    (tmp_path / "train.tsv").write_bytes(b"sentence\tlabel\nhi\t1\nho\t\xef\xbb\xbf0\n")
    err, message = _error(get_processor("sst-2", data_dir=str(tmp_path)))
    message = message.replace(str(tmp_path / "train.tsv"), "train.csv")
  assert (err.line, err.column) == (3, "label")
  assert message == ("train.csv, line 3, column 'label': the cell '\\ufeff0' starts with an "
                     "invisible byte-order mark (U+FEFF). Fix: remove the mark (a file's "
                     "first bytes, pasted or joined into this one?)")


@pytest.mark.parametrize("encoding,iconv,sign", [
    ("utf-16", "utf-16", "it starts with the byte-order mark ff fe"),
    ("utf-16-be-bom", "utf-16", "it starts with the byte-order mark fe ff"),
    ("utf-32", "utf-32", "it starts with the byte-order mark ff fe 00 00"),
    ("utf-16-le", "utf-16le", "every other byte is NUL, at odd offsets: UTF-16 without a "
     "byte-order mark"),
    ("utf-16-be", "utf-16be", "every other byte is NUL, at even offsets: UTF-16 without a "
     "byte-order mark"),
])
def test_a_utf16_or_utf32_file_gets_iconv_from_its_encoding(tmp_path, encoding, iconv, sign):
  text = CSV_FILE.decode("ascii")
  raw = (b"\xfe\xff" + text.encode("utf-16-be") if encoding == "utf-16-be-bom"
         else text.encode(encoding))
  err, message = _csv_error(tmp_path, raw)
  assert err.line is None
  assert message == ("train.csv: the file is %s, not UTF-8 (%s). Fix: re-save the file as "
                     "UTF-8, e.g. `iconv -f %s -t utf-8 in.csv > out.csv`"
                     % (iconv.upper(), sign, iconv))


@pytest.mark.parametrize("name", ["train.csv", "train.tsv"])
def test_a_nul_byte_is_refused_on_every_python(tmp_path, name):
  """Python 3.7's csv module stops at a NUL ("line contains NUL"), 3.11's reads it into
  the text: both runtimes refuse it the same way, naming the line."""
  path = tmp_path / name
  path.write_bytes(b"sentence\tlabel\nfine\t1\nf\x00ne\t0\n".replace(
      b"\t", b"," if name.endswith(".csv") else b"\t"))
  processor = (get_processor("csv", data_dir=str(tmp_path), text_column="sentence",
                             label_columns=["label"]) if name.endswith(".csv")
               else get_processor("sst-2", data_dir=str(tmp_path)))
  err, message = _error(processor)
  assert err.line == 3
  assert message == ("%s, line 3: the line holds a NUL byte (character 2 of the line): the "
                     "file is probably not a text file, or a text in another encoding than "
                     "UTF-8. Fix: give the CSV/TSV file itself, re-saved as UTF-8 text (or "
                     "remove the NUL bytes: `tr -d '\\000' < in.csv > out.csv`)" % path)


@pytest.mark.parametrize("line,flag", [(b"sep=;", "';'"), (b"sep=\t", "tab"),
                                       (b"sep=,", "','")])
def test_excels_sep_line_is_refused_naming_the_delimiter(tmp_path, line, flag):
  err, message = _csv_error(tmp_path, line + b"\r\ntext;label\r\nhi;1\r\nho;0\r\n")
  assert err.line == 1
  assert message == ("train.csv, line 1: the first line is %r, Excel's line naming the "
                     "delimiter, not a header or a row. Fix: remove that line (e.g. `tail -n "
                     "+2 in.csv > out.csv`) and pass --delimiter=%s (with --task_name=csv)"
                     % (line.decode("ascii"), flag))


# -- floats for float32 records ----------------------------------------------------------

@pytest.mark.parametrize("cell", ["1e39", "-1e39", "3.5e38"])
def test_a_regression_target_beyond_float32_is_refused(tmp_path, cell):
  """Finite in float64, but struct cannot pack it as float32 (it was an OverflowError in
  featurisation)."""
  err, message = _csv_error(tmp_path, b"text,label\nhi,1\nho,%s\n" % cell.encode("ascii"),
                            head="regression")
  assert (err.line, err.column) == (3, "label")
  assert message == ("train.csv, line 3, column 'label': the value %r is beyond the range of "
                     "a 32-bit float (at most 3.4e38 in magnitude). Fix: give a number of at "
                     "most 3.4e38 in magnitude (rescale the column?)" % cell)


def test_the_largest_float32_is_a_valid_target(tmp_path):
  (tmp_path / "train.csv").write_text(u"text,label\nhi,3.4028234663852886e38\nho,-1\n")
  processor = get_processor("csv", data_dir=str(tmp_path), text_column="text",
                            label_columns=["label"], head="regression")
  assert [e.label for e in processor.get_examples("train")] == [(3.4028234663852886e38,),
                                                                (-1.0,)]


def test_a_sample_weight_beyond_float32_is_refused_naming_its_line(tmp_path):
  err, message = _csv_error(tmp_path, b"text,label,w\nhi,1,1\nho,0,1e39\n", weight_column="w")
  assert (err.line, err.column) == (3, "w")
  assert message == ("train.csv, line 3, column 'w': the value '1e39' is beyond the range of "
                     "a 32-bit float (at most 3.4e38 in magnitude). Fix: give weights of at "
                     "most 3.4e38 (rescale the column?), or drop --sample_weight_column")


@pytest.mark.parametrize("cell", ["-1", "heavy", "inf", ""])
def test_a_bad_sample_weight_is_refused_naming_its_line(tmp_path, cell):
  err, message = _csv_error(tmp_path, b"text,label,w\nhi,1,1\nho,0,%s\n" % cell.encode("ascii"),
                            weight_column="w")
  assert message == ("train.csv, line 3, column 'w': the weight %r is not a number >= 0. "
                     "Fix: fix the cell, or drop --sample_weight_column" % cell)


def test_every_float_column_shares_one_float32_check():
  from data.record_format import FLOAT32_MAX, float32_problem
  import struct
  assert float32_problem(FLOAT32_MAX) is None and float32_problem(-FLOAT32_MAX) is None
  struct.pack("<f", FLOAT32_MAX)  # what the check lets through, the record can hold
  assert float32_problem(1e39) == ("is beyond the range of a 32-bit float (at most 3.4e38 "
                                   "in magnitude)")
  assert float32_problem(float("nan")) == "is NaN"
  assert float32_problem(float("-inf")) == "is infinite"
