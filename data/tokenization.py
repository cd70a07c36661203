"""WordPiece tokenization, id-for-id compatible with Google's BERT FullTokenizer.

The algorithm is Google's (clean text, split CJK characters, lower-case and strip
accents when asked, split on punctuation, then greedy longest-match-first
WordPiece). Three things make this one faster on real text: character classes
are memoised, the WordPiece split of each distinct word is cached, and texts take
a shortcut through C-level string methods, a per-character table and a regular
expression (ShortcutEncoder) that gives the same ids.
"""

import itertools
import re
import unicodedata

from data.vocabulary import UNK_TOKEN, load_vocab

MAX_CHARS_PER_WORD = 200

class FullTokenizer(object):
  """Basic tokenization followed by WordPiece, and id conversion."""

  def __init__(self, vocab_file, do_lower_case=True):
    self.vocab = load_vocab(vocab_file)
    self.do_lower_case = do_lower_case
    self._basic = BasicTokenizer(do_lower_case)
    self._wordpiece = WordpieceTokenizer(self.vocab)
    self._shortcut = ShortcutEncoder(self.vocab, do_lower_case)

  def tokenize(self, text):
    pieces = []
    for word in self._basic.tokenize(text):
      pieces.extend(self._wordpiece.tokenize_word(word))
    return pieces

  def convert_tokens_to_ids(self, tokens):
    return [self.vocab[t] for t in tokens]

  def encode(self, text):
    """Token ids of a text, without [CLS]/[SEP]."""
    ids = self._shortcut.encode(text)
    return ids if ids is not None else [self.vocab[t] for t in self.tokenize(text)]

  def encode_batch(self, texts):
    return [self.encode(text) for text in texts]


def _char_class(char):
  """One of 'drop', 'space', 'punct', 'cjk' or 'other', as Google's helpers decide."""
  cp = ord(char)
  if char in (" ", "\t", "\n", "\r"):
    return "space"
  if cp == 0 or cp == 0xFFFD:
    return "drop"
  cat = unicodedata.category(char)
  if cat in ("Cc", "Cf"):
    return "drop"
  if cat == "Zs":
    return "space"
  if (33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126 or
      cat.startswith("P")):
    return "punct"
  if _is_cjk(cp):
    return "cjk"
  return "other"


def _is_cjk(cp):
  return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or
          0x20000 <= cp <= 0x2A6DF or 0x2A700 <= cp <= 0x2B73F or
          0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or
          0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def _is_punctuation(char):
  cp = ord(char)
  return (33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126 or
          unicodedata.category(char).startswith("P"))


# On pure-ASCII text Google's basic tokenizer reduces to: drop the control
# characters, turn tab, newline and carriage return into spaces, lower-case if
# asked, and split into runs of letters and digits and single punctuation marks
# (every other printable ASCII character is punctuation to it).
_ASCII_CLEANUP = dict([(c, None) for c in list(range(9)) + [11, 12] + list(range(14, 32)) + [127]] +
                      [(c, " ") for c in (9, 10, 13)])
_ASCII_WORDS = {True: re.compile(r"[a-z0-9]+|[^a-z0-9 ]"),
                False: re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9 ]")}
# Other text: each character outside printable ASCII is first replaced by its
# form (_char_form); what is left splits into runs of non-space characters that
# are not ASCII punctuation, and single ASCII punctuation marks.
_NOT_PRINTABLE_ASCII = re.compile(r"[^\x20-\x7e]+")
_WORDS = re.compile(r"[^ !-/:-@\[-`{-~]+|[^ ]")
# The form of a character the shortcut cannot handle. A NUL of the text itself is
# dropped (its form is ''), so a NUL in a replaced text can only mean this.
_NO_SHORTCUT = "\x00"
_MAX_CACHED_WORDS = 1000000


class ShortcutEncoder(object):
  """Ids equal to FullTokenizer's, several times faster.

  Google's basic tokenizer works on whitespace-separated tokens, but what it does
  is, nearly always, character by character: drop, make a separator, lower-case
  and strip accents, pad punctuation and CJK with spaces. So every character gets
  its form once (cached), str.translate or a regular expression puts the forms in,
  str.lower handles ASCII capitals, one regular expression splits the words, and
  each distinct word's WordPiece ids are cached. The exceptions are the few
  characters whose handling depends on their neighbours (see _char_form): a text
  holding one makes encode() return None, and it needs the general path.
  """

  def __init__(self, vocab, do_lower_case=True):
    self._lower = do_lower_case
    self._ascii_words = _ASCII_WORDS[do_lower_case]
    self._ids = _WordIds(vocab)
    forms = _CharForms(do_lower_case)
    self._replace_run = lambda match: "".join(map(forms.__getitem__, match.group()))

  def encode(self, text):
    if not isinstance(text, str):
      return None
    if text.isascii():  # most text, and the fastest route: translate has a fast path for it
      text = text.translate(_ASCII_CLEANUP)
      words = self._ascii_words
    else:
      text = _NOT_PRINTABLE_ASCII.sub(self._replace_run, text)
      if _NO_SHORTCUT in text:
        return None
      words = _WORDS
    if self._lower:
      text = text.lower()  # the forms are lower-case already; this is for ASCII capitals
    # Iterating in C (map, chain) rather than a Python loop over the words.
    return list(itertools.chain.from_iterable(map(self._ids.__getitem__, words.findall(text))))


class _CharForms(dict):
  """char -> _char_form(char), computed on first use."""

  def __init__(self, do_lower_case):
    super(_CharForms, self).__init__()
    self._lower = do_lower_case

  def __missing__(self, char):
    form = self[char] = _char_form(char, self._lower)
    return form


def _char_form(char, do_lower_case):
  """What Google's basic tokenizer makes of one character, as a string to put in its place.

  '' for a dropped character, ' ' for a separator; otherwise the character
  lower-cased and stripped of accents when asked, each punctuation mark in that
  padded with spaces (so it becomes a word of its own), and a CJK character
  padded too. _NO_SHORTCUT for a character that this cannot express:
  - capital sigma, whose lower case depends on whether it ends a word;
  - a character that decomposes to a combining mark that is not dropped
    (not category Mn): decomposition reorders combining marks across the
    characters of a token, so these are not independent;
  - a character that lower-cases to something lower() would change again, or
    to a separator or a control character.
  """
  kind = _char_class(char)
  if kind == "drop":
    return ""
  if kind == "space" or char.isspace():  # str.split also splits on \u2028 and the like
    return " "
  if not do_lower_case:
    form = char
  elif char == "\u03a3":
    return _NO_SHORTCUT
  else:
    form = _strip_accents(char.lower())
    if form.lower() != form or any(unicodedata.combining(c) for c in form):
      return _NO_SHORTCUT
  if any(c.isspace() or _char_class(c) in ("drop", "space") for c in form):
    return _NO_SHORTCUT
  form = "".join(" %s " % c if _is_punctuation(c) else c for c in form)
  return " %s " % form if kind == "cjk" else form


class _WordIds(dict):
  """word -> its WordPiece ids, computed on first use (the cache stops growing at a limit).

  It starts with every vocabulary entry: a word that is itself in the vocabulary
  is its own single piece, and these are most of the words of real text.
  """

  def __init__(self, vocab):
    super(_WordIds, self).__init__(
        (word, [i]) for word, i in vocab.items() if len(word) <= MAX_CHARS_PER_WORD)
    self._vocab = vocab
    self._wordpiece = WordpieceTokenizer(vocab)

  def __missing__(self, word):
    vocab = self._vocab
    ids = [vocab[piece] for piece in self._wordpiece.split_word(word)]
    if len(self) < _MAX_CACHED_WORDS:
      self[word] = ids
    return ids


class BasicTokenizer(object):
  """Cleans text and splits it on whitespace, punctuation and CJK characters."""

  def __init__(self, do_lower_case=True):
    self.do_lower_case = do_lower_case
    self._classes = {}

  def _class_of(self, char):
    cls = self._classes.get(char)
    if cls is None:
      cls = self._classes[char] = _char_class(char)
    return cls

  def _clean(self, text):
    """Drops invalid and control characters, maps whitespace to ' ', pads CJK with spaces."""
    out = []
    for char in text:
      cls = self._class_of(char)
      if cls == "drop":
        continue
      if cls == "space":
        out.append(" ")
      elif cls == "cjk":
        out.append(" %s " % char)
      else:
        out.append(char)
    return "".join(out)

  def tokenize(self, text):
    if isinstance(text, bytes):
      text = text.decode("utf-8", "ignore")
    words = []
    for token in self._clean(text).split():
      if self.do_lower_case:
        token = _strip_accents(token.lower())
      words.extend(_split_on_punctuation(token))
    # Lower-casing and accent stripping can leave empty or whitespace pieces.
    return " ".join(words).split()


def _strip_accents(text):
  if text.isascii():  # nothing to strip; the common case, and much faster
    return text
  return "".join(c for c in unicodedata.normalize("NFD", text)
                 if unicodedata.category(c) != "Mn")


def _split_on_punctuation(text):
  pieces = []
  current = []
  for char in text:
    if _is_punctuation(char):
      if current:
        pieces.append("".join(current))
        current = []
      pieces.append(char)
    else:
      current.append(char)
  if current:
    pieces.append("".join(current))
  return pieces


class WordpieceTokenizer(object):
  """Greedy longest-match-first WordPiece over one vocabulary, with a per-word cache."""

  def __init__(self, vocab, unk_token=UNK_TOKEN, max_chars_per_word=MAX_CHARS_PER_WORD):
    self.vocab = vocab
    self.unk_token = unk_token
    self.max_chars_per_word = max_chars_per_word
    self._cache = {}
    # No candidate longer than the longest entry can match, so none is tried.
    self._longest_piece = max(len(piece) for piece in vocab)

  def tokenize_word(self, word):
    cached = self._cache.get(word)
    if cached is None:
      cached = self.split_word(word)
      if len(self._cache) < 1000000:
        self._cache[word] = cached
    return cached

  def split_word(self, word):
    """The WordPiece pieces of one word (uncached)."""
    if len(word) > self.max_chars_per_word:
      return [self.unk_token]
    if word in self.vocab:  # most words: one lookup
      return [word]
    vocab, longest = self.vocab, self._longest_piece
    pieces = []
    start = 0
    while start < len(word):
      end = min(len(word), start + longest)
      piece = None
      while start < end:
        candidate = word[start:end] if start == 0 else "##" + word[start:end]
        if candidate in vocab:
          piece = candidate
          break
        end -= 1
      if piece is None:
        return [self.unk_token]
      pieces.append(piece)
      start = end
    return pieces
