"""tools/long_text_figures.py: which comments each seed trains and tests on, and the
refusals of a file it cannot use (the benchmark itself runs from ./run.sh benchmark)."""

import argparse

import pytest

from tools import long_text_figures as figures


def test_the_test_set_is_long_comments_held_out_from_the_train_set():
  rows = [("text %d" % i, str(i % 2)) for i in range(40)]
  lengths = [i % 10 * 30 for i in range(40)]  # (every tenth comment is 0 tokens long)
  args = argparse.Namespace(long_tokens=220, test_rows=5, train_rows=20)
  train, test = figures.split_seed(rows, lengths, 7, args)
  index = {row: i for i, row in enumerate(rows)}
  assert len(test) == 5 and all(lengths[index[row]] > 220 for row in test)
  assert len(train) == 20 and not set(train) & set(test)
  assert figures.split_seed(rows, lengths, 7, args) == (train, test)  # (seeded)
  assert figures.split_seed(rows, lengths, 8, args) != (train, test)
  with pytest.raises(SystemExit) as error:
    figures.split_seed(rows, lengths, 7, argparse.Namespace(long_tokens=220, test_rows=9,
                                                            train_rows=20))
  assert str(error.value) == ("long-texts: 8 comments are longer than 220 tokens and 32 "
                              "others remain; pass a smaller --test_rows or --train_rows")


def test_a_comments_file_it_cannot_use_is_refused_naming_the_line(tmp_path):
  path = tmp_path / "comments.csv"
  path.write_text('"a, b",1\n"multi\nline",0\nno label\n', encoding="utf-8")
  with pytest.raises(SystemExit) as error:
    figures.read_comments(str(path))
  assert str(error.value) == ("long-texts: %s, line 4: not a text and a 0/1 label: "
                              "['no label']" % path)
  path.write_text('"a, b",1\n"multi\nline",0\n', encoding="utf-8")
  assert figures.read_comments(str(path)) == [("a, b", "1"), ("multi\nline", "0")]
  with pytest.raises(SystemExit) as error:
    figures.main(["--data", str(tmp_path / "none.csv")])
  assert "long-texts: %s does not exist" % (tmp_path / "none.csv") in str(error.value)
  with pytest.raises(SystemExit) as error:
    figures.main(["--readings", "head,windows_mean"])
  assert str(error.value) == ("long-texts: --readings: head is not one of head_tail, "
                              "windows_mean, windows_max")
