"""The tokenizer gives the ids of Google's FullTokenizer, on every text in ../shared/datasets."""

import csv
import io
import os
import sys

import pytest

from conftest import DATASETS, google_bert, shared_path
from data import tokenization
from data.errors import DataError

csv.field_size_limit(2**31 - 1)


def _texts_of_delimited(path, delimiter, columns, skip_header, quoting=csv.QUOTE_MINIMAL):
  kwargs = {"delimiter": delimiter}
  if quoting == csv.QUOTE_NONE:
    kwargs.update(quoting=csv.QUOTE_NONE, quotechar=None)
  with io.open(path, encoding="utf-8-sig", newline="") as f:
    rows = list(csv.reader(f, **kwargs))
  if skip_header:
    rows = rows[1:]
  return [row[c] for row in rows for c in columns if c < len(row)]


def _lines(path):
  with io.open(path, encoding="utf-8") as f:
    return f.read().rstrip("\n").split("\n")


def all_shared_texts():
  """Every text field of every data set in ../shared/datasets, by file."""
  d = DATASETS
  tsv = csv.QUOTE_NONE
  return {
      "jigsaw_toxic_sample/train.csv": _texts_of_delimited(
          os.path.join(d, "jigsaw_toxic_sample/train.csv"), ",", [1], True),
      "jigsaw_toxic_sample/valid.csv": _texts_of_delimited(
          os.path.join(d, "jigsaw_toxic_sample/valid.csv"), ",", [1], True),
      "jigsaw_toxic_sample/test.csv": _texts_of_delimited(
          os.path.join(d, "jigsaw_toxic_sample/test.csv"), ",", [1], True),
      "jigsaw_toxic_balanced/comments.csv": _texts_of_delimited(
          os.path.join(d, "jigsaw_toxic_balanced/comments.csv"), ",", [0], False),
      "davidson_hate_offensive/labeled_data.csv": _texts_of_delimited(
          os.path.join(d, "davidson_hate_offensive/labeled_data.csv"), ",", [6], True),
      "tweeteval_offensive": sum((_lines(os.path.join(d, "tweeteval_offensive", name))
                                  for name in ("train_text.txt", "val_text.txt",
                                               "test_text.txt")), []),
      "glue/SST-2": sum((_texts_of_delimited(os.path.join(d, "glue/SST-2", name), "\t", [0],
                                             True, tsv)
                         for name in ("train.tsv", "dev.tsv", "test.tsv")), []),
      "glue/CoLA": sum((_texts_of_delimited(os.path.join(d, "glue/CoLA", name), "\t", [0],
                                            False, tsv)
                        for name in ("train.tsv", "dev.tsv")), []),
      "glue/MRPC": sum((_texts_of_delimited(os.path.join(d, "glue/MRPC", name), "\t", [3, 4],
                                            True, tsv)
                        for name in ("msr_paraphrase_train.txt", "msr_paraphrase_test.txt")),
                       []),
      "glue/RTE": sum((_texts_of_delimited(os.path.join(d, "glue/RTE", name), "\t", [0, 1],
                                           True, tsv)
                       for name in ("train.tsv", "dev.tsv", "test.tsv")), []),
  }


EXPECTED_TEXTS = {
    "jigsaw_toxic_sample/train.csv": 267, "jigsaw_toxic_sample/valid.csv": 25,
    "jigsaw_toxic_sample/test.csv": 33, "jigsaw_toxic_balanced/comments.csv": 12180,
    "davidson_hate_offensive/labeled_data.csv": 24783,
    "tweeteval_offensive": 11916 + 1324 + 860, "glue/SST-2": 60614 + 6735 + 872,
    "glue/CoLA": 8551 + 516, "glue/MRPC": 2 * (4076 + 1725), "glue/RTE": 2 * (2490 + 277 + 3000),
}


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_ids_match_google_full_tokenizer_on_all_shared_data(tiny_vocab, do_lower_case):
  shared_path("datasets")
  google = google_bert("tokenization").FullTokenizer(tiny_vocab, do_lower_case=do_lower_case)
  ours = tokenization.FullTokenizer(tiny_vocab, do_lower_case=do_lower_case)
  texts_by_file = all_shared_texts()
  # Every data set is read in full: row counts from ../shared/datasets/README.md.
  assert {name: len(texts) for name, texts in texts_by_file.items()} == EXPECTED_TEXTS
  for name, texts in sorted(texts_by_file.items()):
    for text in texts:
      expected = google.convert_tokens_to_ids(google.tokenize(text))
      actual = ours.convert_tokens_to_ids(ours.tokenize(text))
      assert actual == expected, "%s: %r" % (name, text[:200])
      assert ours.encode(text) == expected, "%s: %r" % (name, text[:200])  # the shortcut


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_shortcut_equals_general_path_on_all_shared_data(tiny_vocab, do_lower_case):
  shared_path("datasets")
  general = tokenization.FullTokenizer(tiny_vocab, do_lower_case=do_lower_case)
  shortcut = tokenization.ShortcutEncoder(general.vocab, do_lower_case)
  checked = declined = non_ascii = 0
  for name, texts in sorted(all_shared_texts().items()):
    for text in texts:
      non_ascii += not text.isascii()
      ids = shortcut.encode(text)
      if ids is None:
        declined += 1
        continue
      checked += 1
      assert ids == general.convert_tokens_to_ids(general.tokenize(text)), (name, text[:200])
  assert non_ascii > 5000  # the non-ASCII route is exercised...
  assert declined <= 2 and checked + declined == 151812  # ...and declines almost nothing


def test_shortcut_edge_cases(tiny_vocab):
  """Control characters vanish (joining their neighbours), tab/newline/CR separate,
  every printable non-alphanumeric character is its own token, 201-char words are [UNK],
  accents go only when lower-casing, capital sigma is left to the general path."""
  texts = [u"", u" ", u"a\x0bb c\x7fd e\x00f g\x1fh", u"a\tb\nc\rd", u"x" * 200, u"x" * 201,
           u"".join(chr(c) for c in range(32, 127)), u"Don't STOP 42nd! (ok)...",
           u"hello\x0cworld", u"UNAFFABLE unaffable ##able", u"caf\u00e9 CAF\u00c9\u2028x",
           u"e\u0301t\u00e9\u200b\u00a0\u4e2d\u6587\u3002\u2019s", u"\u0130stanbul \ufb01n",
           u"\u00e9" * 201, u"\x85\u2029\u3000end"]
  for do_lower_case in (True, False):
    general = tokenization.FullTokenizer(tiny_vocab, do_lower_case=do_lower_case)
    shortcut = tokenization.ShortcutEncoder(general.vocab, do_lower_case)
    for text in texts:
      assert shortcut.encode(text) == general.convert_tokens_to_ids(general.tokenize(text)), \
          repr(text)
  assert shortcut.encode(b"bytes") is None
  assert tokenization.ShortcutEncoder(general.vocab, True).encode(u"\u03a3\u03c3") is None
  assert tokenization.ShortcutEncoder(general.vocab, False).encode(u"\u03a3\u03c3") == \
      general.encode(u"\u03a3\u03c3")


def _code_point_texts():
  """Every code point from U+0080 to U+2FFFF (surrogates aside) inside a word, after an
  ASCII capital, alone and doubled; 40 code points to a text."""
  points = [chr(c) for c in range(0x80, 0x30000) if not 0xD800 <= c <= 0xDFFF]
  pieces = [u"Ab%scD %s%s " % (c, c, c) for c in points]
  return [u"".join(pieces[i:i + 40]) for i in range(0, len(pieces), 40)]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_shortcut_equals_google_on_every_code_point(tiny_vocab, do_lower_case):
  """The shortcut's per-character forms against Google's tokenizer itself (the reference),
  for all of Unicode up to plane 2, in context."""
  google = google_bert("tokenization").FullTokenizer(tiny_vocab, do_lower_case=do_lower_case)
  shortcut = tokenization.ShortcutEncoder(google.vocab, do_lower_case)
  declined = []
  for text in _code_point_texts():
    ids = shortcut.encode(text)
    if ids is not None:
      assert ids == google.convert_tokens_to_ids(google.tokenize(text)), repr(text)
      continue
    for piece in text.split(u" ")[::2]:  # one code point at a time: only its own may decline
      ids = shortcut.encode(piece)
      if ids is None:
        declined.append(piece[2])
      else:
        assert ids == google.convert_tokens_to_ids(google.tokenize(piece)), repr(piece)
  if do_lower_case:  # capital sigma, and about 130 that decompose to marks not dropped
    assert u"\u03a3" in declined and len(declined) < 200, len(declined)
  else:  # without lower-casing and accent stripping every character is independent
    assert declined == []


def test_exact_pieces_and_ids(tiny_vocab):
  tokenizer = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
  tokens = tokenizer.tokenize(u"Héllo,  WORLD!\tunaffable \u4e2d\u6587 \x00\ufffd")
  assert tokens == ["hello", ",", "world", "!", "una", "##ffa", "##ble", u"\u4e2d", u"\u6587"]
  assert tokenizer.convert_tokens_to_ids(tokens) == [7592, 1010, 2088, 999, 14477, 20961, 3468,
                                                    1746, 1861]


def test_cased_keeps_accents_and_case(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text(u"[UNK]\n[CLS]\n[SEP]\nH\n##é\n##llo\nhello\n")
  tokenizer = tokenization.FullTokenizer(str(vocab), do_lower_case=False)
  assert tokenizer.tokenize(u"Héllo hello HELLO") == ["H", "##é", "##llo", "hello", "[UNK]"]


def test_overlong_word_is_unknown(tiny_vocab):
  tokenizer = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
  assert tokenizer.tokenize("a" * 201) == ["[UNK]"]
  assert tokenizer.tokenize("") == [] and tokenizer.tokenize(" \t\n ") == []


def test_casing_warning_names_the_checkpoint_and_the_fix():
  message = tokenization.casing_mismatch_warning(
      False, "/models/uncased_L-12_H-768_A-12/bert_model.ckpt")
  assert "uncased_L-12_H-768_A-12" in message and "--do_lower_case=True" in message
  message = tokenization.casing_mismatch_warning(True, "gs://b/cased_L-12_H-768_A-12/bert_model.ckpt")
  assert "--do_lower_case=False" in message
  assert tokenization.casing_mismatch_warning(True, "/m/uncased_L-12_H-768_A-12/bert_model.ckpt") is None
  assert tokenization.casing_mismatch_warning(False, "/m/my_model/bert_model.ckpt") is None


def test_vocab_size_mismatch_with_config(tmp_path, tiny_vocab):
  with pytest.raises(DataError) as error:
    tokenization.check_vocab_matches_config(tiny_vocab, 28996, "cfg/bert_config.json")
  message = str(error.value)
  assert tiny_vocab in message
  assert "30522 tokens" in message and "vocab_size=28996" in message
  assert "Fix: use the vocab.txt shipped with the same checkpoint" in message
  assert tokenization.check_vocab_matches_config(tiny_vocab, 30522, "c") == 30522
