"""The export's in-graph tokenizer (data/graph_tokenizer.py) gives Google's FullTokenizer ids
on every shipped text and every code point (where it cannot, exactly where), and lays the
ids out as training does for single texts, pairs and every truncation."""

import sys
import unicodedata

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import CORPUS_SIZES, TINY_VOCAB, corpus_cases, corpus_texts, google_ids
from data.features import InputExample, Truncation, convert_examples
from data.graph_tokenizer import GraphTokenizer, pair_lengths
from data.tokenization import FullTokenizer
from serving.predicting import padded_batch
from spec.heads.classification import SingleLabel
from test_tokenization import _code_point_texts

HAND_MADE = [u"", u"   ", u"a" * 200, u"a" * 201, u"\u0434" * 200, u"\u0434" * 201,
             u"H\u00e9llo,\tWORLD!\x00\ufffd", u"\u4e2d\u6587mixed\u3002",
             u"[CLS] [SEP] [UNK]", u"don't STOP 42nd! (ok)...", u"e\u0301t\u00e9 CAF\u00c9",
             u"\u03a3\u03c3 \u039f\u0394\u039f\u03a3.",
             u"a\x0bb\x7fc\u200bd\u00ade", u"x\u2028y\u2029z\u3000w\u00a0v", u"\u0130stanbul \ufb01n",
             u"\u1e9e \u1f88\u1fbc \u2c2f\ua7c0 \U00010570", u"A\u0898\u03a3 A\u03a3\u0898b",
             u"\U00011938", u"\U0001f600 emoji\U0001f44d\U0001f3fd", u"UNAFFABLE ##able",
             u"".join(chr(c) for c in range(32, 127))]
LAYOUT_TEXTS = [u"short", u"a somewhat longer text of several words here",
                u"one two three four five six seven eight nine ten eleven twelve thirteen",
                u"", u"caf\u00e9 \u4e2d\u6587 text, with punctuation!"]
STRATEGIES = [None, Truncation("tail"), Truncation("head_tail"),
              Truncation("head_tail", head_tokens=2), Truncation("head_tail", head_tokens=0)]


def graph_ids(vocab_file, do_lower_case, texts, batch=512):
  """The graph's ids of every text (without [CLS]/[SEP]), run batch texts at a time."""
  result = []
  with tf.Graph().as_default():
    tokenizer = GraphTokenizer.from_vocab_file(vocab_file, do_lower_case, 128)
    strings = tf.placeholder(tf.string, [None])
    ids, lengths = tokenizer.token_ids(strings)
    with tf.Session() as session:
      session.run(tf.tables_initializer())
      for start in range(0, len(texts), batch):
        flat, counts = session.run([ids, lengths], {strings: texts[start:start + batch]})
        ends = np.cumsum(counts)
        result += [flat[end - count:end].tolist() for count, end in zip(counts, ends)]
  return result


def graph_features(vocab_file, max_seq_length, texts, texts_b=None, truncation=None):
  return graph_features_of(vocab_file, texts, texts_b, [(max_seq_length, truncation)])[0]


def graph_features_of(vocab_file, texts, texts_b, layouts):
  """The graph's features of texts (and texts_b) in each (max_seq_length, truncation)
  layout: one tokenizer's token ids laid out each way (building the tokenizer's ops is
  most of the time)."""
  with tf.Graph().as_default():
    tokenizer = GraphTokenizer.from_vocab_file(vocab_file, True, 128)
    strings = tf.placeholder(tf.string, [None])
    strings_b = None if texts_b is None else tf.placeholder(tf.string, [None])
    ids = tokenizer.token_ids(strings)
    ids_b = None if texts_b is None else tokenizer.token_ids(strings_b)
    fetches = [tokenizer.with_layout(length, truncation).features_of_ids(ids, ids_b)
               for length, truncation in layouts]
    feed = {strings: texts}
    if texts_b is not None:
      feed[strings_b] = texts_b
    with tf.Session() as session:
      session.run(tf.tables_initializer())
      return session.run(fetches, feed)


# The full sets take about 15 s per casing, on one runtime each (as test_tokenization's,
# the other way round: the runtimes' suites run at the same time).
CASES = corpus_cases({True: "tf1", False: "tf2"})


@pytest.mark.parametrize("corpus,do_lower_case", CASES)
def test_googles_ids_on_every_text(tiny_vocab, corpus, do_lower_case):
  texts_by_file = corpus_texts(corpus)
  assert {name: len(texts) for name, texts in texts_by_file.items()} == CORPUS_SIZES[corpus]
  names = sorted(texts_by_file)
  texts = [text for name in names for text in texts_by_file[name]]
  where = ["%s: %r" % (name, text[:200]) for name in names for text in texts_by_file[name]]
  expected = google_ids(tiny_vocab, do_lower_case, texts)
  for place, got, ids in zip(where, graph_ids(tiny_vocab, do_lower_case, texts), expected):
    assert got == ids, place
  assert sum(not text.isascii() for text in texts) * 30 > len(texts)


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_hand_made_texts_for_each_step(tiny_vocab, do_lower_case):
  """Cleaning, CJK, casing and accents, punctuation, white space Python splits at, the
  200-character word limit (in characters: 200 Cyrillic letters are 400 bytes), the
  capitals TensorFlow lower-cases wrongly, a final sigma beside a mark TF 2.15 does not
  know: the words before WordPiece, and the ids."""
  from conftest import google_tokenizer
  basic = google_tokenizer(tiny_vocab, do_lower_case).basic_tokenizer
  assert graph_words(do_lower_case, HAND_MADE) == [basic.tokenize(t) for t in HAND_MADE]
  expected = google_ids(tiny_vocab, do_lower_case, HAND_MADE)
  assert graph_ids(tiny_vocab, do_lower_case, HAND_MADE) == expected
  assert expected[3] == expected[5] == [100] and expected[0] == expected[1] == []
  assert len(expected[2]) > 1 and len(expected[4]) > 1  # 200 characters are spelt out


def graph_words(do_lower_case, texts, batch=512):
  """The words the graph's basic tokenization makes of each text (before WordPiece)."""
  result = []
  with tf.Graph().as_default():
    tokenizer = GraphTokenizer.from_vocab_file(TINY_VOCAB, do_lower_case, 128)
    strings = tf.placeholder(tf.string, [None])
    words = tokenizer.words(strings)
    with tf.Session() as session:
      for start in range(0, len(texts), batch):
        value = session.run(words, {strings: texts[start:start + batch]})
        result += [[w.decode("utf-8") for w in row] for row in value.to_list()]
  return result


def _sigma_texts():
  """A capital sigma after and before every non-spacing mark this Python knows: whether it
  ends a word (a final sigma once lower-cased) depends on the marks being skipped."""
  marks = [chr(c) for c in range(0x300, 0x30000) if not 0xD800 <= c <= 0xDFFF and
           unicodedata.category(chr(c)) == "Mn"]
  pieces = [u"A%s\u03a3 \u03a3%sb " % (m, m) for m in marks]
  return [u"".join(pieces[i:i + 40]) for i in range(0, len(pieces), 40)]


@pytest.mark.slow
@pytest.mark.parametrize("do_lower_case", [True, False])
def test_every_code_point_differs_only_where_pythons_tables_are_older(do_lower_case):
  """Every code point up to U+2FFFF in context, and a capital sigma beside every mark: the
  graph's words (before WordPiece, so that no difference hides in an [UNK]) differ from
  those of Google's BasicTokenizer only for code points Python's own Unicode tables leave
  unassigned (Cn), which TensorFlow's newer tables know; on Python 3.7 (TF 1.15) nowhere."""
  from conftest import forked_map, google_tokenizer
  basic = google_tokenizer(TINY_VOCAB, do_lower_case).basic_tokenizer
  texts = _code_point_texts() + _sigma_texts()
  differing = []
  for text, got, expected in zip(texts, graph_words(do_lower_case, texts),
                                 forked_map(basic.tokenize, texts, chunk=200)):
    if got != expected:
      pieces = [piece for piece in text.split(u" ") if piece]
      for piece, words in zip(pieces, graph_words(do_lower_case, pieces)):
        if words != basic.tokenize(piece):
          differing.append(piece)
  unassigned = [piece for piece in differing
                if any(unicodedata.category(c) == "Cn" for c in piece)]
  assert sorted(set(differing) - set(unassigned)) == []
  if sys.version_info < (3, 8):
    assert differing == []
  assert len(differing) < 150, len(differing)


def test_layout_equals_training(tiny_vocab):
  """[CLS] a [SEP] (b [SEP]), Google's pair rule and the card's truncation: the features
  training makes, padded to the longest row, for single texts and pairs, in every
  truncation at every length (one graph for the single texts and one for the pairs, each
  laying the same ids out every way)."""
  tokenizer = FullTokenizer(tiny_vocab, True)
  spec = SingleLabel(["label"], ["0", "1"])
  pairs = list(zip(LAYOUT_TEXTS, LAYOUT_TEXTS[::-1]))
  layouts = [(length, truncation) for truncation in STRATEGIES for length in (6, 9, 64)]
  for examples, texts_b in (
      ([InputExample(i, text) for i, text in enumerate(LAYOUT_TEXTS)], None),
      ([InputExample(i, a, b) for i, (a, b) in enumerate(pairs)], [b for _, b in pairs])):
    got = graph_features_of(tiny_vocab, LAYOUT_TEXTS, texts_b, layouts)
    for (max_seq_length, truncation), features in zip(layouts, got):
      case = "%s, %r at %d" % ("single texts" if texts_b is None else "pairs", truncation,
                               max_seq_length)
      expected = padded_batch(list(convert_examples(examples, spec, max_seq_length, tokenizer,
                                                    strategy=truncation)))
      assert sorted(features) == sorted(expected), case
      for name in expected:
        np.testing.assert_array_equal(features[name], expected[name],
                                      err_msg="%s of %s" % (name, case))


def test_a_head_longer_than_any_room_keeps_the_head(tiny_vocab):
  """head_tokens past the room, even past int32, is the head alone (as in training)."""
  tokenizer = FullTokenizer(tiny_vocab, True)
  spec = SingleLabel(["label"], ["0", "1"])
  text = u"one two three four five six seven eight nine ten"
  truncations = [Truncation("head_tail", head_tokens=n) for n in (6, 2**31, 2**40)]
  for examples, texts_b in (([InputExample(0, text)], None),
                            ([InputExample(0, text, text)], [text])):
    got = graph_features_of(tiny_vocab, [text], texts_b, [(5, t) for t in truncations])
    for truncation, features in zip(truncations, got):
      expected = padded_batch(list(convert_examples(examples, spec, 5, tokenizer,
                                                    strategy=truncation)))
      np.testing.assert_array_equal(features["input_ids"], expected["input_ids"])


def test_an_empty_batch_has_no_rows(tiny_vocab):
  got = graph_features(tiny_vocab, 16, [])
  assert {name: value.shape for name, value in got.items()} == {
      "input_ids": (0, 2), "input_mask": (0, 2), "segment_ids": (0, 2)}


def test_pair_lengths_is_googles_rule():
  from data.features import pair_lengths as python_rule
  lengths = [(a, b) for a in range(12) for b in range(12)]
  with tf.Graph().as_default(), tf.Session() as session:
    a, b = session.run(pair_lengths(tf.constant([x for x, _ in lengths]),
                                    tf.constant([y for _, y in lengths]), 9))
  assert list(zip(a.tolist(), b.tolist())) == [python_rule(x, y, 9) for x, y in lengths]


def test_a_vocabulary_without_the_special_tokens_is_refused(tmp_path):
  # (load_vocab refuses such a file first: tests/test_vocabulary.py; a vocabulary given
  # as a mapping is checked here too)
  with tf.Graph().as_default(), pytest.raises(ValueError, match=r"it has no \[UNK\] token"):
    GraphTokenizer({u"[CLS]": 0, u"[SEP]": 1, u"hello": 2}, True, 16)
