"""InputExample -> InputFeatures: tokenize, truncate, add [CLS]/[SEP], pad."""

import logging
import time

from data.tokenization import CLS_TOKEN, SEP_TOKEN

log = logging.getLogger(__name__)

PADDING_EXAMPLE_ID = -1


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


def truncate_pair(tokens_a, tokens_b, max_length):
  """Trims the longer of two token lists one token at a time until both fit, in place.

  Taking from the longer one keeps more of the shorter text than cutting each in
  proportion would, which is what Google's BERT does.
  """
  while len(tokens_a) + len(tokens_b) > max_length:
    if len(tokens_a) > len(tokens_b):
      tokens_a.pop()
    else:
      tokens_b.pop()


def features_from_ids(ids_a, ids_b, label_id, example_id, max_seq_length, cls_id, sep_id):
  """[CLS] a [SEP] (b [SEP]), truncated to max_seq_length as Google does."""
  if ids_b is None:  # the common single-text case, built with as few list operations as possible
    token_ids = [cls_id]
    token_ids += ids_a[:max_seq_length - 2]
    token_ids.append(sep_id)
    return InputFeatures(token_ids, len(token_ids), max_seq_length, label_id, True, example_id)
  ids_a, ids_b = list(ids_a), list(ids_b)
  truncate_pair(ids_a, ids_b, max_seq_length - 3)
  return InputFeatures([cls_id] + ids_a + [sep_id] + ids_b + [sep_id], len(ids_a) + 2,
                       max_seq_length, label_id, True, example_id)


def label_value(example, label_spec):
  """The record value of an example's label (spec/labels.py), or the spec's value for rows
  whose labels are not read (predict files) when it has none."""
  if example.label is None:
    return label_spec.unlabelled_value()
  return label_spec.record_value(example.label)


def convert_example(example, example_id, label_spec, max_seq_length, tokenizer):
  """Builds the InputFeatures of one example."""
  ids_b = tokenizer.encode(example.text_b) if example.text_b is not None else None
  return features_from_ids(tokenizer.encode(example.text_a), ids_b,
                           label_value(example, label_spec), example_id, max_seq_length,
                           tokenizer.vocab[CLS_TOKEN], tokenizer.vocab[SEP_TOKEN])


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


def _prefix(text, limit):
  if len(text) <= limit:
    return text
  space = text.rfind(" ", 0, limit)
  return text[:space] if space > 0 else text


class TruncationCount(object):
  """How many examples were longer than max_seq_length, and the longest one's length in
  tokens ([CLS]/[SEP] included). A text encoded from a prefix (see encode_leading_tokens)
  has more tokens than its ids count, perhaps more than any other, so the longest length
  is exact only when no text was encoded from a prefix: longest_exact says which."""

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
                     report_every=20000, first_example_id=0, truncation=None):
  """Yields InputFeatures for each example in order, logging progress on long inputs.

  label_spec (spec/labels.py) gives each label's record value. Texts are encoded a chunk
  at a time with tokenizer.encode_batch, which the Rust tokenizer runs on all cores.
  truncation (a TruncationCount) counts the examples that did not fit.
  """
  cls_id, sep_id = tokenizer.vocab[CLS_TOKEN], tokenizer.vocab[SEP_TOKEN]
  start = time.time()
  next_report = report_every
  for first in range(0, len(examples), chunk_size):
    chunk = examples[first:first + chunk_size]
    partial_a, partial_b = set(), set()
    ids_a = encode_leading_tokens(tokenizer, [e.text_a for e in chunk], max_seq_length,
                                  partial_a)
    pairs = [i for i, e in enumerate(chunk) if e.text_b is not None]
    ids_b = dict(zip(pairs, encode_leading_tokens(tokenizer, [chunk[i].text_b for i in pairs],
                                                  max_seq_length, partial_b)))
    partial_b = set(pairs[j] for j in partial_b)
    for i, example in enumerate(chunk):
      if truncation is not None:
        pair = ids_b.get(i)
        length = len(ids_a[i]) + 2 + (len(pair) + 1 if pair is not None else 0)
        truncation.count(length, i not in partial_a and i not in partial_b, max_seq_length)
      yield features_from_ids(ids_a[i], ids_b.get(i), label_value(example, label_spec),
                              first_example_id + first + i, max_seq_length, cls_id, sep_id)
    done = first + len(chunk)
    if done >= next_report and done < len(examples):
      next_report += report_every
      rate = done / max(time.time() - start, 1e-9)
      log.info("featurised %d/%d examples (%.0f/s, about %.0f s left)", done, len(examples),
               rate, (len(examples) - done) / rate)
