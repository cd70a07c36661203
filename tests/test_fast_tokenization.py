"""The Rust WordPiece path gives the pure-Python tokenizer's ids on all of ../shared/datasets."""

import pytest

from conftest import shared_path
from data.tokenization import FullTokenizer
from test_tokenization import EXPECTED_TEXTS, all_shared_texts

fast_tokenization = pytest.importorskip("data.fast_tokenization")
pytest.importorskip("tokenizers")


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_fast_ids_equal_python_ids_on_all_shared_data(tiny_vocab, do_lower_case):
  shared_path("datasets")
  python = FullTokenizer(tiny_vocab, do_lower_case)
  fast = fast_tokenization.FastTokenizer(tiny_vocab, do_lower_case)
  texts_by_file = all_shared_texts()
  assert {name: len(texts) for name, texts in texts_by_file.items()} == EXPECTED_TEXTS
  for name, texts in sorted(texts_by_file.items()):
    # The general path of each tokenizer, with no ASCII shortcut on either side.
    rust = fast.encode_batch_without_shortcut(texts)
    for text, ids, rust_ids in zip(texts, fast.encode_batch(texts), rust):
      expected = python.convert_tokens_to_ids(python.tokenize(text))
      assert rust_ids == expected, "%s: %r" % (name, text[:200])
      assert ids == expected, "%s: %r" % (name, text[:200])


def test_edge_cases(tiny_vocab):
  python = FullTokenizer(tiny_vocab, True)
  fast = fast_tokenization.FastTokenizer(tiny_vocab, True)
  for text in [u"", u"   ", u"a" * 200, u"a" * 201, u"Héllo,\tWORLD!\x00\ufffd",
               u"\u4e2d\u6587 mixed", u"[CLS] [SEP]", u"don't", u"e\u0301t\u00e9"]:
    assert fast.encode(text) == python.encode(text), repr(text)
  assert fast.encode_batch([u"a b", u""]) == [python.encode(u"a b"), []]
