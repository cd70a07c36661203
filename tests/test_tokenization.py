"""The tokenizer gives the ids of Google's FullTokenizer, on every text of the data sets
(the committed samples; the full sets in the extended tier)."""

import pytest

from conftest import (CORPUS_SIZES, corpus_cases, corpus_texts, forked_map, google_ids,
                      google_ids_function, google_tokenizer)
from data import fast_tokenization, tokenization, vocabulary
from data.data_error import DataError

# The full sets take about 20 s per casing. The tokenizer is the same Python on both
# runtimes, and what their Pythons differ in (the Unicode tables) is checked for every code
# point on each, so each casing's full sets run on one runtime (one each: the runtimes'
# suites run at the same time).
CASES = corpus_cases({True: "tf2", False: "tf1"})


@pytest.mark.parametrize("corpus,do_lower_case", CASES)
def test_every_path_gives_googles_ids_on_every_text(tiny_vocab, do_lower_case, corpus):
  """Google's FullTokenizer is the reference. Each of our paths on its own: the pure-Python
  general path, the shortcut (which may decline a text), the Rust path without the
  shortcut; and the public encode and encode_batch that combine them."""
  general = tokenization.FullTokenizer(tiny_vocab, do_lower_case=do_lower_case)
  shortcut = tokenization.ShortcutEncoder(general.vocab, do_lower_case)
  fast = fast_tokenization.FastTokenizer(tiny_vocab, do_lower_case)
  texts_by_file = corpus_texts(corpus)
  # Every data set is read in full: the row counts of its README.
  assert {name: len(texts) for name, texts in texts_by_file.items()} == CORPUS_SIZES[corpus]
  names = sorted(texts_by_file)
  texts = [text for name in names for text in texts_by_file[name]]
  where = ["%s: %r" % (name, text[:200]) for name in names for text in texts_by_file[name]]
  google = google_ids_function(google_tokenizer(tiny_vocab, do_lower_case))

  def reference_and_python_paths(text):  # Google's, our general path, the shortcut, both
    return (google(text), general.convert_tokens_to_ids(general.tokenize(text)),
            shortcut.encode(text), general.encode(text))

  # The Rust paths here (on every core), then the pure-Python ones in forked processes.
  rust = fast.encode_batch_without_shortcut(texts)
  combined = fast.encode_batch(texts)
  python = forked_map(reference_and_python_paths, texts)
  assert len(python) == len(rust) == len(combined) == len(texts)
  declined = 0
  for place, (expected, general_ids, shortcut_ids, encoded), rust_ids, fast_ids in zip(
      where, python, rust, combined):
    assert general_ids == expected, place
    assert rust_ids == expected, place
    declined += shortcut_ids is None
    assert shortcut_ids is None or shortcut_ids == expected, place
    assert encoded == expected and fast_ids == expected, place
  assert sum(not text.isascii() for text in texts) * 30 > len(texts)  # the non-ASCII
  # route is exercised (one text in 30)...
  assert declined <= 2  # ...and the shortcut declines almost nothing


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


@pytest.mark.slow
@pytest.mark.parametrize("do_lower_case", [True, False])
def test_shortcut_equals_google_on_every_code_point(tiny_vocab, do_lower_case):
  """The shortcut's per-character forms against Google's tokenizer itself (the reference),
  for all of Unicode up to plane 2, in context."""
  google = google_tokenizer(tiny_vocab, do_lower_case)
  shortcut = tokenization.ShortcutEncoder(google.vocab, do_lower_case)
  declined = []
  texts = _code_point_texts()
  for text, ids, expected in zip(texts, forked_map(shortcut.encode, texts, chunk=200),
                                 google_ids(tiny_vocab, do_lower_case, texts)):
    if ids is not None:
      assert ids == expected, repr(text)
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
  message = vocabulary.casing_mismatch_warning(
      False, "/models/uncased_L-12_H-768_A-12/bert_model.ckpt")
  assert "uncased_L-12_H-768_A-12" in message and "--do_lower_case=True" in message
  message = vocabulary.casing_mismatch_warning(True, "gs://b/cased_L-12_H-768_A-12/bert_model.ckpt")
  assert "--do_lower_case=False" in message
  assert vocabulary.casing_mismatch_warning(True, "/m/uncased_L-12_H-768_A-12/bert_model.ckpt") is None
  assert vocabulary.casing_mismatch_warning(False, "/m/my_model/bert_model.ckpt") is None


def test_vocab_size_mismatch_with_config(tmp_path, tiny_vocab):
  with pytest.raises(DataError) as error:
    vocabulary.check_vocab_matches_config(tiny_vocab, 28996, "cfg/bert_config.json")
  message = str(error.value)
  assert tiny_vocab in message
  assert "30522 tokens" in message and "vocab_size=28996" in message
  assert "Fix: use the vocab.txt shipped with the same checkpoint" in message
  assert vocabulary.check_vocab_matches_config(tiny_vocab, 30522, "c") == 30522
