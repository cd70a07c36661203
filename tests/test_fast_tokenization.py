"""The Rust WordPiece path gives Google's FullTokenizer ids, with and without the shortcut
(on every text of the data sets: tests/test_tokenization.py)."""

import pytest

from conftest import google_bert
from data import fast_tokenization
from data.tokenization import FullTokenizer


EDGE_CASES = [u"", u"   ", u"a" * 200, u"a" * 201, u"Héllo,\tWORLD!\x00\ufffd",
              u"\u4e2d\u6587 mixed", u"[CLS] [SEP]", u"don't", u"e\u0301t\u00e9",
              u"\u03a3\u03c3 \u03a3", u"a\x0bb\x7fc\u200bd", u"\u00e9" * 201, u"x\u2028y\u3000z"]


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_each_path_without_the_shortcut_equals_google(tiny_vocab, do_lower_case):
  """Both general paths on their own, and the public encode, against Google's tokenizer."""
  google = google_bert("tokenization").FullTokenizer(tiny_vocab, do_lower_case=do_lower_case)
  python = FullTokenizer(tiny_vocab, do_lower_case)
  fast = fast_tokenization.FastTokenizer(tiny_vocab, do_lower_case)
  expected = [google.convert_tokens_to_ids(google.tokenize(text)) for text in EDGE_CASES]
  assert fast.encode_batch_without_shortcut(EDGE_CASES) == expected
  assert [python.convert_tokens_to_ids(python.tokenize(t)) for t in EDGE_CASES] == expected
  assert [fast.encode(t) for t in EDGE_CASES] == expected
  assert fast.encode_batch(EDGE_CASES) == expected
  assert expected[3] == [100] and expected[0] == []  # a 201-character word is [UNK]
