"""Google's FullTokenizer as TensorFlow ops (tensorflow-text), for an export that takes text.

Each of Google's steps has its counterpart in the graph:
- clean: tab, newline, carriage return and every space separator (Zs) become a space;
  U+FFFD and every control and format character (Cc, Cf) are dropped;
- a space either side of each CJK ideograph;
- uncased models: lower case (full Unicode mapping), NFD, and no non-spacing marks (Mn);
- split at white space and punctuation (ASCII symbols count as punctuation), keeping
  each punctuation character as a word;
- WordPiece, greedy longest match first with "##" continuations, and [UNK] for a word
  longer than 200 characters or one the vocabulary cannot spell.

Character classes come from the regular-expression engine's Unicode tables, not from
Python's unicodedata, so a character added to Unicode after either side's tables was
made may be classed differently (docs/guide/export_and_serving.md, "Text in"). TensorFlow's lower() and NFD get a
few characters wrong on one runtime or the other: those are replaced first by Python's
forms of them. tests/test_graph_tokenizer.py checks the words and ids against Google's
FullTokenizer on every shipped sample text, on hand-made texts for each step and on
every code point.

Then the ids are laid out as training laid them out: [CLS] a [SEP] (b [SEP]), the pair
rule of Google's BERT and the card's truncation (head, tail or head_tail), padded to the
longest row of the batch.
"""

import copy
import unicodedata

import tensorflow.compat.v1 as tf

from data.data_error import DataError
from data.tokenization import MAX_CHARS_PER_WORD
from data.vocabulary import CLS_TOKEN, SEP_TOKEN, UNK_TOKEN, load_vocab

_WHITESPACE = r"[\t\n\r\p{Zs}]"
_DROPPED = r"[\x{FFFD}\p{Cc}\p{Cf}]"
_CJK = (r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
        r"\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}]")
_PUNCTUATION = r"[!-/:-@\[-`{-~]|\p{P}"
# After cleaning, the only white space left that Python's str.split() splits at besides
# the space is U+2028 and U+2029 (Zl, Zp): \p{Z} is exactly those three.
_SPLIT_AT = r"\p{Z}|" + _PUNCTUATION + "|" + _CJK
_KEPT_AT = _PUNCTUATION + "|" + _CJK
# Capitals whose lower case TensorFlow's lower() gets wrong: TF 1.15 maps U+1E9E and the
# Greek capitals with prosgegrammeni to unrelated letters; TF 2.15's tables predate
# Unicode 14's capitals (U+2C2F, U+A7C0, U+A7D0, U+A7D6, U+A7D8, Vithkuqi). Each is
# replaced first by Python's lower() of it (where this Python knows the character).
_LOWERED_WRONG = [0x1E9E, 0x1FBC, 0x1FCC, 0x1FFC, 0x2C2F, 0xA7C0, 0xA7D0, 0xA7D6, 0xA7D8] + (
    list(range(0x1F88, 0x1F90)) + list(range(0x1F98, 0x1FA0)) + list(range(0x1FA8, 0x1FB0)) +
    list(range(0x10570, 0x10596)))
# Characters whose canonical decomposition TF 2.15's NFD leaves out (Unicode 13 added it).
_DECOMPOSED_WRONG = [0x11938]
# A word's UTF-8 bytes: 4 at most for each of its (at most 200) characters.
_MAX_BYTES_PER_WORD = 4 * MAX_CHARS_PER_WORD


def text_ops():
  """The tensorflow_text module, whose ops an export that takes text needs wherever it is
  loaded; a one-line error naming the package when it is missing."""
  try:
    import tensorflow_text
  except ImportError as e:
    raise DataError("tensorflow_text", "the package is not installed (%s)" % e,
                    "install the project's requirements: ./run.sh setup")
  return tensorflow_text


class GraphTokenizer(object):
  """Texts (string tensors [batch]) to the model's int32 inputs, in graph ops.

  vocab: {token: id} (data.tokenization.load_vocab). truncation: a data.features
  Truncation, or None for head. Call inside the graph that will hold the lookup table; the
  table needs tf.tables_initializer() once per session (an export's main op).
  """

  def __init__(self, vocab, do_lower_case, max_seq_length, truncation=None):
    self._text = text_ops()
    for token in (CLS_TOKEN, SEP_TOKEN, UNK_TOKEN):
      if token not in vocab:
        raise DataError("the vocabulary", "it has no %s token" % token,
                        "pass the vocab.txt that belongs to the checkpoint")
    self.do_lower_case = do_lower_case
    self.max_seq_length = max_seq_length
    self.truncation = truncation
    self._cls, self._sep = vocab[CLS_TOKEN], vocab[SEP_TOKEN]
    tokens = sorted(vocab, key=vocab.get)
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(tokens, tf.string), tf.constant([vocab[t] for t in tokens], tf.int64)),
        default_value=-1)
    self._lowered = _python_forms(_LOWERED_WRONG, lambda c: c.lower())
    self._decomposed = _python_forms(_DECOMPOSED_WRONG,
                                     lambda c: unicodedata.normalize("NFD", c))
    self._wordpiece = self._text.WordpieceTokenizer(
        table, suffix_indicator="##", max_bytes_per_word=_MAX_BYTES_PER_WORD,
        token_out_type=tf.int64, unknown_token=UNK_TOKEN)

  @classmethod
  def from_vocab_file(cls, vocab_file, do_lower_case, max_seq_length, truncation=None):
    return cls(load_vocab(vocab_file), do_lower_case, max_seq_length, truncation)

  def words(self, texts):
    """The words Google's BasicTokenizer makes of each text: a RaggedTensor [batch, words]
    of strings."""
    texts = tf.strings.regex_replace(texts, _WHITESPACE, " ")
    texts = tf.strings.regex_replace(texts, _DROPPED, "")
    texts = tf.strings.regex_replace(texts, "(" + _CJK + ")", r" \1 ")
    if self.do_lower_case:
      # Marks go first too: lower() decides a final sigma by the letters around it, and
      # takes marks its tables do not know (TF 2.15: Unicode 14's) for letters.
      texts = tf.strings.regex_replace(texts, r"\p{Mn}", "")
      texts = tf.strings.lower(_replaced(texts, self._lowered), encoding="utf-8")
      texts = _replaced(self._text.normalize_utf8(texts, "NFD"), self._decomposed)
      texts = tf.strings.regex_replace(texts, r"\p{Mn}", "")
    return self._text.regex_split(texts, _SPLIT_AT, _KEPT_AT)

  def token_ids(self, texts):
    """(ids, lengths): every text's WordPiece ids, without [CLS]/[SEP], as one flat int32
    vector, and each text's count of them."""
    words = self.words(texts)
    flat = words.flat_values
    # A word longer than Google's limit is one [UNK]: it is replaced by the token itself,
    # which WordPiece then finds whole in the vocabulary.
    too_long = tf.strings.length(flat, unit="UTF8_CHAR") > MAX_CHARS_PER_WORD
    flat = tf.where(too_long, tf.fill(tf.shape(flat), UNK_TOKEN), flat)
    pieces = self._wordpiece.tokenize(flat)
    per_word = tf.cast(pieces.row_lengths(), tf.int32)
    lengths = tf.math.unsorted_segment_sum(per_word, tf.cast(words.value_rowids(), tf.int32),
                                           tf.cast(words.nrows(), tf.int32))
    return tf.cast(pieces.flat_values, tf.int32), lengths

  def features(self, texts, texts_b=None):
    """{input_ids, input_mask, segment_ids}: int32 [batch, longest row] of texts (string
    [batch]) or of the pairs (texts, texts_b), laid out as training laid them out."""
    return self.features_of_ids(self.token_ids(texts),
                                None if texts_b is None else self.token_ids(texts_b))

  def with_layout(self, max_seq_length, truncation=None):
    """This tokenizer (its table and ops shared) laying out max_seq_length tokens, long
    texts truncated as truncation says."""
    other = copy.copy(self)
    other.max_seq_length, other.truncation = max_seq_length, truncation
    return other

  def features_of_ids(self, token_ids, token_ids_b=None):
    """features() of texts already made into token_ids ((ids, lengths) of token_ids())."""
    ids_a, lengths_a = token_ids
    if token_ids_b is None:
      keep_a = tf.minimum(lengths_a, self.max_seq_length - 2)
      ids_a = self._kept(ids_a, lengths_a, keep_a)
      return self._laid_out([(ids_a, keep_a)])
    ids_b, lengths_b = token_ids_b
    keep_a, keep_b = pair_lengths(lengths_a, lengths_b, self.max_seq_length - 3)
    return self._laid_out([(self._kept(ids_a, lengths_a, keep_a), keep_a),
                           (self._kept(ids_b, lengths_b, keep_b), keep_b)])

  def _head_length(self, room):
    """data.features.Truncation.head_length, for a vector of rooms."""
    mode = "head" if self.truncation is None else self.truncation.mode
    if mode == "head":
      return room
    if mode == "tail":
      return tf.zeros_like(room)
    head = self.truncation.head_tokens
    # (Never more than the room: a larger value, 2**31 even, means the head alone.)
    head = room // 4 if head is None else min(head, self.max_seq_length)
    return tf.minimum(room, head)

  def _kept(self, ids, lengths, keep):
    """The ids each text keeps in keep[i] slots (Truncation.keep): all of a text that fits,
    else its head_length first ids and the rest from its end."""
    row, position = _rows_and_positions(ids, lengths)
    length, kept = tf.gather(lengths, row), tf.gather(keep, row)
    head = tf.gather(tf.where(lengths <= keep, lengths, self._head_length(keep)), row)
    return tf.boolean_mask(ids, (position < head) | (position >= length - (kept - head)))

  def _laid_out(self, parts):
    """[CLS] part [SEP] (part [SEP]) per row, zero-padded: parts are (kept ids, count per
    row) of a, then of b."""
    batch = tf.size(parts[0][1])
    first_length = parts[0][1] + 2  # [CLS] a [SEP]
    columns, values, rows_of = [], [], []
    lengths = tf.ones([batch], tf.int32)  # [CLS], then each part and its [SEP]
    for ids, counts in parts:
      row, position = _rows_and_positions(ids, counts)
      columns += [tf.gather(lengths, row) + position, lengths + counts]
      values += [ids, tf.fill([batch], self._sep)]
      rows_of += [row, tf.range(batch)]
      lengths = lengths + counts + 1
    columns.append(tf.zeros([batch], tf.int32))
    values.append(tf.fill([batch], self._cls))
    rows_of.append(tf.range(batch))
    width = tf.reduce_max(tf.concat([lengths, [2]], 0))  # (2 for an empty batch)
    indices = tf.stack([tf.concat(rows_of, 0), tf.concat(columns, 0)], 1)
    input_ids = tf.scatter_nd(indices, tf.concat(values, 0), tf.stack([batch, width]))
    column = tf.range(width)[tf.newaxis, :]
    input_mask = tf.cast(column < lengths[:, tf.newaxis], tf.int32)
    segment_ids = input_mask * tf.cast(column >= first_length[:, tf.newaxis], tf.int32)
    return {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}


def _python_forms(code_points, form):
  """{character: Python's form of it} for those of code_points whose form differs from the
  character (a character this Python's tables do not know is left as it is)."""
  forms = {chr(c): form(chr(c)) for c in code_points}
  return {c: changed for c, changed in forms.items() if changed != c}


def _replaced(texts, forms):
  """texts with each character of forms replaced by its form: one pass of regular
  expressions, one per distinct form."""
  by_form = {}
  for character, replacement in sorted(forms.items()):
    by_form.setdefault(replacement, []).append(character)
  for replacement, characters in sorted(by_form.items()):
    pattern = "[%s]" % "".join("\\x{%X}" % ord(c) for c in characters)
    texts = tf.strings.regex_replace(texts, pattern, replacement.replace("\\", "\\\\"))
  return texts


def _rows_and_positions(ids, counts):
  """For each of the flat ids (rows of counts[i] ids, one after another): its row, and its
  place in that row."""
  row = tf.ragged.row_splits_to_segment_ids(tf.concat([[0], tf.cumsum(counts)], 0),
                                            out_type=tf.int32)
  return row, tf.range(tf.size(ids)) - tf.gather(tf.cumsum(counts, exclusive=True), row)


def pair_lengths(lengths_a, lengths_b, room):
  """data.features.pair_lengths for vectors of lengths: Google's rule, which trims the
  longer text of a pair one id at a time (b on a tie) until both fit in room."""
  fits = lengths_a + lengths_b <= room
  a_longer = (lengths_a > lengths_b) & (room - lengths_b >= lengths_b)
  b_longer = (lengths_a <= lengths_b) & (room - lengths_a >= lengths_a)
  half = tf.fill(tf.shape(lengths_a), room // 2)
  keep_a = tf.where(fits, lengths_a, tf.where(a_longer, room - lengths_b, tf.where(
      b_longer, lengths_a, room - half)))
  keep_b = tf.where(fits, lengths_b, tf.where(a_longer, lengths_b, tf.where(
      b_longer, room - lengths_a, half)))
  return keep_a, keep_b
