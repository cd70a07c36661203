"""WordPiece in Rust (Hugging Face `tokenizers`), configured to give Google's ids.

Google's BasicTokenizer maps to BertNormalizer (clean text, pad CJK characters,
lower-case and strip accents only when uncased) plus BertPreTokenizer
(whitespace and punctuation), and its WordpieceTokenizer to the WordPiece model
with the same 200-character word limit. tests/test_fast_tokenization.py checks
the ids against FullTokenizer on every text in ../shared/datasets.
"""

from data.tokenization import MAX_CHARS_PER_WORD, ShortcutEncoder
from data.vocabulary import CLS_TOKEN, SEP_TOKEN, UNK_TOKEN, load_vocab
from spec.options import TOKENIZERS


def available():
  try:
    import tokenizers  # noqa: F401
    return True
  except ImportError:
    return False


def tokenizer_for(vocab_file, do_lower_case, choice="auto"):
  """A tokenizer of vocab_file: choice 'fast' (Rust), 'python', or 'auto' (fast when the
  tokenizers package is installed). Both give Google's FullTokenizer ids."""
  from data.tokenization import FullTokenizer
  if choice not in TOKENIZERS:
    raise ValueError("tokenizer %r is not one of %s" % (choice, ", ".join(TOKENIZERS)))
  use_fast = choice == "fast" or (choice == "auto" and available())
  return (FastTokenizer if use_fast else FullTokenizer)(vocab_file, do_lower_case)


def rust_tokenizer(vocab, do_lower_case):
  """A tokenizers.Tokenizer of vocab ({token: id}) that gives Google's ids (without
  [CLS]/[SEP])."""
  from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
  tokenizer = Tokenizer(models.WordPiece(
      vocab, unk_token=UNK_TOKEN, max_input_chars_per_word=MAX_CHARS_PER_WORD))
  tokenizer.normalizer = normalizers.BertNormalizer(
      clean_text=True, handle_chinese_chars=True, strip_accents=do_lower_case,
      lowercase=do_lower_case)
  tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
  return tokenizer


def tokenizer_json(vocab, do_lower_case, max_length=None, keep_end=False):
  """The tokenizer.json of a transformers BERT tokenizer with Google's ids: the Rust
  tokenizer, with [CLS] a [SEP] (b [SEP]) and its segments added. (transformers' own BERT
  tokenizer spells words of at most 100 characters, Google's of at most 200.) With
  max_length, it truncates a single text to that many ids, [CLS] and [SEP] included,
  keeping its start (its end with keep_end), as training did."""
  from tokenizers import decoders, processors
  tokenizer = rust_tokenizer(vocab, do_lower_case)
  if max_length:
    tokenizer.enable_truncation(max_length, direction="left" if keep_end else "right")
  tokenizer.post_processor = processors.TemplateProcessing(
      single="%s $A %s" % (CLS_TOKEN, SEP_TOKEN),
      pair="%s $A %s $B:1 %s:1" % (CLS_TOKEN, SEP_TOKEN, SEP_TOKEN),
      special_tokens=[(token, vocab[token]) for token in (CLS_TOKEN, SEP_TOKEN)])
  tokenizer.decoder = decoders.WordPiece(prefix="##")
  return tokenizer.to_str()


class FastTokenizer(object):
  """encode/encode_batch give token ids without [CLS]/[SEP], like FullTokenizer's ids."""

  def __init__(self, vocab_file, do_lower_case=True):
    self.vocab = load_vocab(vocab_file)
    self.do_lower_case = do_lower_case
    self._tokenizer = rust_tokenizer(self.vocab, do_lower_case)
    # Rust pays for offset tracking that we never read: the exact shortcut is
    # several times cheaper, and Rust is left the rare texts the shortcut declines.
    self._shortcut = ShortcutEncoder(self.vocab, do_lower_case)

  def encode(self, text):
    ids = self._shortcut.encode(text)
    return ids if ids is not None else self._tokenizer.encode(text, add_special_tokens=False).ids

  def encode_batch(self, texts):
    """Ids of many texts at once; those the shortcut declines are encoded in parallel on all
    cores."""
    ids = [self._shortcut.encode(text) for text in texts]
    rest = [i for i, found in enumerate(ids) if found is None]
    if rest:
      encoded = self._tokenizer.encode_batch([texts[i] for i in rest], add_special_tokens=False)
      for i, encoding in zip(rest, encoded):
        ids[i] = encoding.ids
    return ids

  def encode_batch_without_shortcut(self, texts):
    """Every text through the Rust tokenizer (tests compare this with the shortcut)."""
    return [e.ids for e in self._tokenizer.encode_batch(list(texts), add_special_tokens=False)]
