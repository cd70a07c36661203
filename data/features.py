"""InputExample -> InputFeatures: tokenize, truncate, add [CLS]/[SEP], pad."""

import logging
import numbers
import time

from data.vocabulary import CLS_TOKEN, SEP_TOKEN
from spec.run_errors import FlagError
from spec.model_card import TRUNCATION_MODES

log = logging.getLogger(__name__)

PADDING_EXAMPLE_ID = -1


class InputExample(object):
  """One row of input.

  guid: the id written next to its prediction (the file's id column, else the row number).
  label: the value its label spec parsed from the label cells (a class name, or a tuple
    of floats), or None for a row whose labels are not read (a predict file).
  extras: other columns carried through to the outputs (e.g. Jigsaw identity columns).
  """

  def __init__(self, guid, text_a, text_b=None, label=None, extras=None):
    self.guid = guid
    self.text_a = text_a
    self.text_b = text_b
    self.label = label
    self.extras = extras or {}

  def __repr__(self):
    return "InputExample(guid=%r, text_a=%r, text_b=%r, label=%r)" % (
        self.guid, self.text_a[:40], (self.text_b or "")[:40] or None, self.label)


class InputFeatures(object):
  """The tensors of one example, kept compact.

  token_ids are the real tokens ([CLS] a [SEP] (b [SEP])) without padding, and the
  first num_first_segment of them are segment 0. input_ids, input_mask and
  segment_ids are the padded max_seq_length lists the model reads, built on
  demand: the record writer needs only the compact form, and building three
  padded lists per row was a third of featurisation time.
  label_id is the label's record value (spec/labels.py): an int class index, or a tuple
  of floats, one per label column.
  is_real_example is False for the rows added to fill the last batch.
  example_id is the example's position in its split (PADDING_EXAMPLE_ID for padding),
  so predictions can be put back in input order and counted.
  """

  __slots__ = ("token_ids", "num_first_segment", "max_seq_length", "label_id",
               "is_real_example", "example_id")

  def __init__(self, token_ids, num_first_segment, max_seq_length, label_id,
               is_real_example=True, example_id=0):
    if len(token_ids) > max_seq_length or not 0 <= num_first_segment <= len(token_ids):
      raise ValueError("%d tokens (%d in the first segment) do not fit max_seq_length %d" %
                       (len(token_ids), num_first_segment, max_seq_length))
    self.token_ids = token_ids
    self.num_first_segment = num_first_segment
    self.max_seq_length = max_seq_length
    self.label_id = label_id
    self.is_real_example = is_real_example
    self.example_id = example_id

  @property
  def num_padding(self):
    return self.max_seq_length - len(self.token_ids)

  @property
  def input_ids(self):
    return self.token_ids + [0] * self.num_padding

  @property
  def input_mask(self):
    return [1] * len(self.token_ids) + [0] * self.num_padding

  @property
  def segment_ids(self):
    return ([0] * self.num_first_segment + [1] * (len(self.token_ids) - self.num_first_segment) +
            [0] * self.num_padding)

  def as_dict(self):
    return {name: getattr(self, name) for name in self.__slots__}


HEAD, TAIL, HEAD_TAIL = TRUNCATION_MODES


class Truncation(object):
  """Which ids of a text longer than its room (the slots it may fill) are kept.

  head (the default) keeps the first ids, as Google's BERT does. tail keeps the last
  ones: the end of a review or a forum reply often carries its verdict. head_tail keeps
  the first head_tokens ids and the last ones that still fit, dropping the middle: the
  Jigsaw competition winners kept the start and the end of long comments (head 128 +
  tail 382 of 510 is a common choice).

  head_tokens is only for head_tail. Left out, it is a quarter of the room rounded down
  (127 of 510, 3 of 14), so one strategy suits every max_seq_length. When head_tokens is
  at least the room, that text keeps its head only (the room is all head): the room
  varies between max_seq_length values and between the two texts of a pair, and one
  setting should serve them all rather than fail on some examples. 0 keeps the end only,
  as tail does. A text that fits is kept whole in every mode.
  """

  MODES = (HEAD, TAIL, HEAD_TAIL)

  def __init__(self, mode=HEAD, head_tokens=None):
    if not isinstance(mode, str) or mode not in self.MODES:
      raise FlagError("truncation mode %r is not one of %s" % (mode, ", ".join(self.MODES)))
    if head_tokens is not None:
      if mode != HEAD_TAIL:
        raise FlagError("head_tokens=%r is only for truncation mode %s, not %s" %
                        (head_tokens, HEAD_TAIL, mode))
      if (isinstance(head_tokens, bool) or not isinstance(head_tokens, numbers.Integral) or
          head_tokens < 0):
        raise FlagError("head_tokens must be a whole number of tokens >= 0 (or None for a "
                        "quarter of the room), not %r" % (head_tokens,))
      head_tokens = int(head_tokens)
    self.mode = mode
    self.head_tokens = head_tokens

  def head_length(self, room):
    """How many of the kept ids of a text longer than room come from its start."""
    if self.mode == HEAD:
      return room
    if self.mode == TAIL:
      return 0
    return min(room, room // 4 if self.head_tokens is None else self.head_tokens)

  def keep(self, ids, room):
    """The ids of one text kept in room slots: all of them when they fit, else head_length
    ids from its start and the rest from its end."""
    room = max(room, 0)
    if len(ids) <= room:
      return ids
    head = self.head_length(room)
    return ids[:head] + ids[len(ids) - (room - head):]

  def as_dict(self):
    """What the records depend on, for the record cache's fingerprint and the card."""
    if self.mode == HEAD_TAIL:
      return {"mode": self.mode, "head_tokens": self.head_tokens}
    return {"mode": self.mode}

  @classmethod
  def from_dict(cls, values):
    return cls(values["mode"], values.get("head_tokens"))

  def __eq__(self, other):
    if not isinstance(other, Truncation):
      return NotImplemented
    return self.as_dict() == other.as_dict()

  def __ne__(self, other):
    equal = self.__eq__(other)
    return equal if equal is NotImplemented else not equal

  def __hash__(self):
    return hash((self.mode, self.head_tokens))

  def __repr__(self):
    if self.mode == HEAD_TAIL:
      return "Truncation(%r, head_tokens=%r)" % (self.mode, self.head_tokens)
    return "Truncation(%r)" % (self.mode,)


def _keeps_head_only(strategy):
  """True for head (None): only a text's leading ids matter, so it may be encoded from a
  prefix."""
  return strategy is None or strategy.mode == HEAD


def truncate_pair(tokens_a, tokens_b, max_length):
  """Trims the longer of two token lists one token at a time until both fit, in place.

  Taking from the longer one keeps more of the shorter text than cutting each in
  proportion would, which is what Google's BERT does. Tokens go from the end: the head
  strategy. pair_lengths gives the same lengths without the lists.
  """
  while len(tokens_a) + len(tokens_b) > max_length:
    if len(tokens_a) > len(tokens_b):
      tokens_a.pop()
    else:
      tokens_b.pop()


def pair_lengths(len_a, len_b, max_length):
  """How many ids of each text truncate_pair keeps, in closed form.

  Google's rule takes one token at a time from the longer text (from b on a tie). So
  when the shorter text fits in half the room the longer one gets what it leaves;
  otherwise both end up at half the room, a taking the odd one. Every strategy keeps
  these lengths and differs only in which ids fill them; the loop would take one step
  per dropped token of a whole-text encoding.
  """
  if len_a + len_b <= max_length:
    return len_a, len_b
  if len_a > len_b and max_length - len_b >= len_b:
    return max_length - len_b, len_b
  if len_a <= len_b and max_length - len_a >= len_a:
    return len_a, max_length - len_a
  return max_length - max_length // 2, max_length // 2


def features_from_ids(ids_a, ids_b, label_id, example_id, max_seq_length, cls_id, sep_id,
                      strategy=None):
  """[CLS] a [SEP] (b [SEP]), truncated to max_seq_length.

  strategy (a Truncation, None for head) says which ids a truncated text keeps. A single
  text has max_seq_length - 2 slots. A pair has max_seq_length - 3, shared by Google's
  rule (pair_lengths): the longer text is trimmed one token at a time. Each text then
  keeps its allotted length as the strategy says, as if it were a single text with that
  room: tail drops ids from its start, head_tail from its middle (keeping head_tokens, or
  a quarter of its allotted length, from its start). head is Google's code path, unchanged.
  """
  if strategy is None or strategy.mode == HEAD:  # inline: this runs once per example
    if ids_b is None:  # the common single-text case, built with as few list operations
      token_ids = [cls_id]
      token_ids += ids_a[:max_seq_length - 2]
      token_ids.append(sep_id)
      return InputFeatures(token_ids, len(token_ids), max_seq_length, label_id, True, example_id)
    ids_a, ids_b = list(ids_a), list(ids_b)
    truncate_pair(ids_a, ids_b, max_seq_length - 3)
  elif ids_b is None:
    token_ids = [cls_id]
    token_ids += strategy.keep(ids_a, max_seq_length - 2)
    token_ids.append(sep_id)
    return InputFeatures(token_ids, len(token_ids), max_seq_length, label_id, True, example_id)
  else:
    keep_a, keep_b = pair_lengths(len(ids_a), len(ids_b), max_seq_length - 3)
    ids_a, ids_b = list(strategy.keep(ids_a, keep_a)), list(strategy.keep(ids_b, keep_b))
  return InputFeatures([cls_id] + ids_a + [sep_id] + ids_b + [sep_id], len(ids_a) + 2,
                       max_seq_length, label_id, True, example_id)


def label_value(example, label_spec):
  """The record value of an example's label (spec/labels.py), or the spec's value for rows
  whose labels are not read (predict files) when it has none."""
  if example.label is None:
    return label_spec.unlabelled_value()
  return label_spec.record_value(example.label)


def convert_example(example, example_id, label_spec, max_seq_length, tokenizer, strategy=None):
  """Builds the InputFeatures of one example from its whole texts; strategy (a Truncation,
  None for head) says which ids a long text keeps."""
  ids_b = tokenizer.encode(example.text_b) if example.text_b is not None else None
  return features_from_ids(tokenizer.encode(example.text_a), ids_b,
                           label_value(example, label_spec), example_id, max_seq_length,
                           tokenizer.vocab[CLS_TOKEN], tokenizer.vocab[SEP_TOKEN], strategy)


def padding_features(max_seq_length, unlabelled):
  """An all-zero row with is_real_example=False, used to fill the last batch."""
  return InputFeatures([], 0, max_seq_length, unlabelled, False, PADDING_EXAMPLE_ID)


def num_padding_rows(num_examples, multiple):
  """How many padding rows make num_examples a whole number of batches."""
  return (-num_examples) % multiple if multiple else 0


# A token is rarely longer than this many characters on average; prefixes of
# CHARS_PER_TOKEN * max_seq_length characters almost always hold enough tokens.
CHARS_PER_TOKEN = 8


def encode_leading_tokens(tokenizer, texts, max_tokens, from_prefix=None):
  """Token ids of each text, exact in at least their first max_tokens ids.

  Long texts are encoded from a prefix cut at a space. Tokenization never joins
  characters across a space, so the prefix's ids are the leading ids of the whole
  text; when a prefix yields fewer than max_tokens ids the whole text is encoded.
  Only the leading ids matter, since longer texts are truncated anyway. from_prefix,
  if given, is a set that receives the indices of the texts encoded from a prefix
  (their length in ids is a lower bound).
  """
  limit = CHARS_PER_TOKEN * max_tokens
  cut = [_prefix(text, limit) for text in texts]
  ids = tokenizer.encode_batch(cut)
  redo = [i for i, (text, part, got) in enumerate(zip(texts, cut, ids))
          if len(part) < len(text) and len(got) < max_tokens]
  for i, full in zip(redo, tokenizer.encode_batch([texts[i] for i in redo])):
    ids[i] = full
  if from_prefix is not None:
    redone = set(redo)
    from_prefix.update(i for i, (text, part) in enumerate(zip(texts, cut))
                       if len(part) < len(text) and i not in redone)
  return ids


def encode_kept_tokens(tokenizer, texts, max_tokens, strategy=None, from_prefix=None):
  """Token ids of each text, exact in every id the strategy can keep of it.

  head keeps leading ids only, so texts go through encode_leading_tokens' fast prefix
  path (from_prefix receives the indices encoded from a prefix). tail and head_tail keep
  the end of a text, so texts are encoded whole: a text's last ids cannot be told from a
  prefix, and whole texts give exact lengths (from_prefix receives nothing).
  """
  if _keeps_head_only(strategy):
    return encode_leading_tokens(tokenizer, texts, max_tokens, from_prefix)
  return tokenizer.encode_batch(texts)


def _prefix(text, limit):
  if len(text) <= limit:
    return text
  space = text.rfind(" ", 0, limit)
  return text[:space] if space > 0 else text


class TruncationCount(object):
  """How many examples were longer than max_seq_length, and the longest one's length in
  tokens ([CLS]/[SEP] included). A text encoded from a prefix (see encode_leading_tokens)
  has more tokens than its ids count, perhaps more than any other, so the longest length
  is exact only when no text was encoded from a prefix: longest_exact says which. Only
  the head strategy encodes prefixes, and a prefix is used only when it holds at least
  max_seq_length ids, so the truncated count is the same for every strategy, and the
  longest length is always exact with tail and head_tail."""

  def __init__(self, truncated=0, longest=0, longest_exact=True):
    self.truncated = truncated
    self.longest = longest
    self.longest_exact = bool(longest_exact)

  def count(self, length, exact, max_seq_length):
    self.truncated += length > max_seq_length
    self.longest = max(self.longest, length)
    self.longest_exact = self.longest_exact and exact

  def add(self, other):
    self.truncated += other.truncated
    self.longest = max(self.longest, other.longest)
    self.longest_exact = self.longest_exact and other.longest_exact

  def as_dict(self):
    return {"truncated": self.truncated, "longest_tokens": self.longest,
            "longest_tokens_exact": self.longest_exact}



def convert_examples(examples, label_spec, max_seq_length, tokenizer, chunk_size=2048,
                     report_every=20000, first_example_id=0, truncation=None, strategy=None):
  """Yields InputFeatures for each example in order, logging progress on long inputs.

  label_spec (spec/labels.py) gives each label's record value. Texts are encoded a chunk
  at a time with tokenizer.encode_batch, which the Rust tokenizer runs on all cores.
  truncation (a TruncationCount) counts the examples that did not fit. strategy (a
  Truncation, None for head) says which ids of a long text are kept; with tail and
  head_tail texts are encoded whole (encode_kept_tokens).
  """
  cls_id, sep_id = tokenizer.vocab[CLS_TOKEN], tokenizer.vocab[SEP_TOKEN]
  start = time.time()
  next_report = report_every
  for first in range(0, len(examples), chunk_size):
    chunk = examples[first:first + chunk_size]
    partial_a, partial_b = set(), set()
    ids_a = encode_kept_tokens(tokenizer, [e.text_a for e in chunk], max_seq_length, strategy,
                               partial_a)
    pairs = [i for i, e in enumerate(chunk) if e.text_b is not None]
    ids_b = dict(zip(pairs, encode_kept_tokens(tokenizer, [chunk[i].text_b for i in pairs],
                                               max_seq_length, strategy, partial_b)))
    partial_b = set(pairs[j] for j in partial_b)
    for i, example in enumerate(chunk):
      if truncation is not None:
        pair = ids_b.get(i)
        length = len(ids_a[i]) + 2 + (len(pair) + 1 if pair is not None else 0)
        truncation.count(length, i not in partial_a and i not in partial_b, max_seq_length)
      yield features_from_ids(ids_a[i], ids_b.get(i), label_value(example, label_spec),
                              first_example_id + first + i, max_seq_length, cls_id, sep_id,
                              strategy)
    done = first + len(chunk)
    if done >= next_report and done < len(examples):
      next_report += report_every
      rate = done / max(time.time() - start, 1e-9)
      log.info("featurised %d/%d examples (%.0f/s, about %.0f s left)", done, len(examples),
               rate, (len(examples) - done) / rate)
