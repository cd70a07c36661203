"""The vocabulary as an input of its own kind: ids are line numbers as Google's load_vocab
gives them, a token listed twice is named, a file that is no BERT vocabulary is refused
in one line, and a casing that contradicts the vocabulary stops the run before any work."""

import logging
import os

import pytest

from conftest import TINY_VOCAB, google_tokenizer, write_small_vocab
from data.data_error import DataError
from data.tokenization import FullTokenizer
from data.vocabulary import casing_problem, load_vocab, vocab_casing, vocab_size
from spec.run_errors import FlagError


def test_ids_are_line_numbers_and_a_repeated_token_is_named(tmp_path, caplog):
  caplog.set_level(logging.WARNING)
  path = write_small_vocab(str(tmp_path / "vocab.txt"), ["the", "cat", "the", "sat"])
  vocab = load_vocab(path)
  # [PAD] [UNK] [CLS] [SEP] [MASK] the cat the sat: "the" is lines 6 and 8, ids 5 and 7.
  assert vocab["the"] == 7 and vocab["cat"] == 6 and vocab["sat"] == 8
  assert vocab_size(vocab) == 9
  assert ("%s lists the token 'the' twice, on lines 6 and 8: ids are line numbers (rows of "
          "the model's embeddings), and the token reads as line 8's, as Hugging Face's "
          "tokenizer reads it" % path) in caplog.text
  # Every tokenizer of the project reads it so (bert-tensorflow 1.0.4 would give "sat" id
  # 7, the row of the second "the": the embeddings' rows would no longer be the tokens').
  assert FullTokenizer(path).tokenize("the cat sat") == ["the", "cat", "sat"]
  assert FullTokenizer(path).convert_tokens_to_ids(["the", "cat", "sat"]) == [7, 6, 8]
  assert google_tokenizer(path, True).convert_tokens_to_ids(["sat"]) == [7]


@pytest.mark.parametrize("content, problem", [
    (b"", "the vocabulary file is empty"),
    (b"[PAD]\n[UNK]\n[SEP]\nhello\n", "the vocabulary has no [CLS] token, which every example "
     "needs (its 4 lines are not a BERT vocabulary)"),
    (b"[PAD]\nhello\n", "the vocabulary has no [CLS] or [SEP] or [UNK] token, which every "
     "example needs (its 2 lines are not a BERT vocabulary)"),
    (b"[CLS]\n[SEP]\n[UNK]\ncaf\xe9\n", "line 4: the vocabulary is not UTF-8 text (byte 0xe9)"),
])
def test_a_file_that_is_no_vocabulary_is_one_line(tmp_path, content, problem):
  path = tmp_path / "vocab.txt"
  path.write_bytes(content)
  with pytest.raises(DataError) as error:
    load_vocab(str(path))
  assert str(error.value).replace(", line", ": line") == "%s: %s. Fix: pass the vocab.txt " \
      "that belongs to the checkpoint" % (path, problem)


@pytest.mark.parametrize("make, problem", [
    (lambda p: os.mkdir(p), "it is a folder, not a file"),
    (lambda p: os.mkfifo(p), "it is a pipe, not a file (reading it would wait for a writer "
                             "for ever)"),
    (lambda p: None, "the file does not exist"),
])
def test_a_vocabulary_path_that_is_no_file_is_one_line(tmp_path, make, problem):
  path = str(tmp_path / "vocab.txt")
  make(path)
  with pytest.raises(DataError) as error:
    load_vocab(path)
  assert str(error.value) == "%s: %s. Fix: pass the vocab.txt that belongs to the " \
      "checkpoint" % (path, problem)


def test_casing_is_read_from_the_vocabulary(tmp_path):
  uncased = load_vocab(TINY_VOCAB)
  assert vocab_casing(uncased) == "uncased"
  cased = load_vocab(write_small_vocab(str(tmp_path / "cased.txt"),
                                       ["The", "cat", "Paris", "sat", "##s"] * 1))
  assert vocab_casing(cased) == "cased"
  assert casing_problem(uncased, "u.txt", True) is None
  assert casing_problem(cased, "c.txt", False) is None
  assert casing_problem(cased, "c.txt", True) == (
      "c.txt is a cased vocabulary (tokens such as 'The' hold capitals), and "
      "--do_lower_case=True lower-cases every text, so the model would never see them. Pass "
      "--do_lower_case=False for a cased model, or the uncased model's vocab.txt")
  assert casing_problem(uncased, "u.txt", False) == (
      "u.txt is an uncased vocabulary (none of its tokens holds a capital), and "
      "--do_lower_case=False keeps capitals, so every capitalised word would be split into "
      "pieces or read as [UNK]. Pass --do_lower_case=True for an uncased model")


def test_a_run_whose_casing_contradicts_its_vocabulary_stops_before_any_work(
    tiny_checkpoint, tmp_path):
  from conftest import common_flags, run_flags
  with pytest.raises(FlagError) as error:
    run_flags(*(common_flags(tiny_checkpoint, str(tmp_path / "out")) +
                ["--do_train", "--num_train_steps=1", "--do_lower_case=false"]))
  assert str(error.value).startswith("%s is an uncased vocabulary" % TINY_VOCAB)
  assert not os.path.exists(str(tmp_path / "out" / "features"))


def test_a_special_token_listed_twice_is_refused_and_blank_lines_are_named(tmp_path, caplog):
  caplog.set_level(logging.WARNING)
  path = write_small_vocab(str(tmp_path / "vocab.txt"), ["the", "[CLS]"])
  with pytest.raises(DataError) as error:
    load_vocab(path)
  assert str(error.value) == (
      "%s, line 7: the token [CLS] is listed twice, on lines 3 and 7: every example's [CLS] "
      "would read as another id than the model was trained with. Fix: pass the vocab.txt "
      "that belongs to the checkpoint" % path)
  blank = write_small_vocab(str(tmp_path / "blank.txt"), ["the", "", "cat", ""])
  vocab = load_vocab(blank)
  assert vocab["cat"] == 7 and vocab_size(vocab) == 9
  assert ("%s: lines 7, 9 are blank, each read as a token no text gives (its id is its "
          "line's, so the ids after it stay the model's)" % blank) in caplog.text
  assert "twice" not in caplog.text
