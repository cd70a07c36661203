"""InputExample -> InputFeatures: tokenize, truncate, add [CLS]/[SEP], pad."""

import logging
import time

from data.tokenization import CLS_TOKEN, SEP_TOKEN

log = logging.getLogger(__name__)

PADDING_EXAMPLE_ID = -1


class InputFeatures(object):
  """The tensors of one example.

  label_id is an int class index, or a float target for regression.
  is_real_example is False for the rows added to fill the last batch.
  example_id is the example's position in its split (PADDING_EXAMPLE_ID for padding),
  so predictions can be put back in input order and counted.
  """

  def __init__(self, input_ids, input_mask, segment_ids, label_id, is_real_example=True,
               example_id=0):
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.label_id = label_id
    self.is_real_example = is_real_example
    self.example_id = example_id


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


def label_map_for(labels):
  return {label: i for i, label in enumerate(labels)} if labels else None


def label_id_for(label, label_map):
  """The class index (or float target when label_map is None) of a label.

  An unlabelled example (label None) gets 0: only predict reads it, and predict
  ignores labels.
  """
  if label is None:
    return 0.0 if label_map is None else 0
  if label_map is None:
    return float(label)
  return label_map[label]


def features_from_ids(ids_a, ids_b, label_id, example_id, max_seq_length, cls_id, sep_id):
  """[CLS] a [SEP] (b [SEP]), truncated to max_seq_length as Google does, then zero-padded."""
  if ids_b is None:  # the common single-text case, built with as few list operations as possible
    input_ids = [cls_id]
    input_ids += ids_a[:max_seq_length - 2]
    input_ids.append(sep_id)
    length = len(input_ids)
    padding = max_seq_length - length
    input_ids += [0] * padding
    return InputFeatures(input_ids, [1] * length + [0] * padding, [0] * max_seq_length,
                         label_id, True, example_id)
  ids_a, ids_b = list(ids_a), list(ids_b)
  truncate_pair(ids_a, ids_b, max_seq_length - 3)
  input_ids = [cls_id] + ids_a + [sep_id] + ids_b + [sep_id]
  segment_ids = [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)
  padding = [0] * (max_seq_length - len(input_ids))
  return InputFeatures(input_ids + padding, [1] * len(input_ids) + padding,
                       segment_ids + padding, label_id, True, example_id)


def convert_example(example, example_id, label_map, max_seq_length, tokenizer):
  """Builds the InputFeatures of one example. label_map is None for regression."""
  ids_b = tokenizer.encode(example.text_b) if example.text_b is not None else None
  return features_from_ids(tokenizer.encode(example.text_a), ids_b,
                           label_id_for(example.label, label_map), example_id, max_seq_length,
                           tokenizer.vocab[CLS_TOKEN], tokenizer.vocab[SEP_TOKEN])


def padding_features(max_seq_length, is_regression):
  """An all-zero row with is_real_example=False, used to fill the last batch."""
  zeros = [0] * max_seq_length
  return InputFeatures(zeros, zeros, zeros, 0.0 if is_regression else 0, False,
                       PADDING_EXAMPLE_ID)


def num_padding_rows(num_examples, multiple):
  """How many padding rows make num_examples a whole number of batches."""
  return (-num_examples) % multiple if multiple else 0


# A token is rarely longer than this many characters on average; prefixes of
# CHARS_PER_TOKEN * max_seq_length characters almost always hold enough tokens.
CHARS_PER_TOKEN = 8


def encode_leading_tokens(tokenizer, texts, max_tokens):
  """Token ids of each text, exact in at least their first max_tokens ids.

  Long texts are encoded from a prefix cut at a space. Tokenization never joins
  characters across a space, so the prefix's ids are the leading ids of the whole
  text; when a prefix yields fewer than max_tokens ids the whole text is encoded.
  Only the leading ids matter, since longer texts are truncated anyway.
  """
  limit = CHARS_PER_TOKEN * max_tokens
  cut = [_prefix(text, limit) for text in texts]
  ids = tokenizer.encode_batch(cut)
  redo = [i for i, (text, part, got) in enumerate(zip(texts, cut, ids))
          if len(part) < len(text) and len(got) < max_tokens]
  for i, full in zip(redo, tokenizer.encode_batch([texts[i] for i in redo])):
    ids[i] = full
  return ids


def _prefix(text, limit):
  if len(text) <= limit:
    return text
  space = text.rfind(" ", 0, limit)
  return text[:space] if space > 0 else text


def convert_examples(examples, labels, max_seq_length, tokenizer, chunk_size=2048,
                     report_every=20000, first_example_id=0):
  """Yields InputFeatures for each example in order, logging progress on long inputs.

  Texts are encoded a chunk at a time with tokenizer.encode_batch, which the
  Rust tokenizer runs on all cores.
  """
  label_map = label_map_for(labels)
  cls_id, sep_id = tokenizer.vocab[CLS_TOKEN], tokenizer.vocab[SEP_TOKEN]
  start = time.time()
  next_report = report_every
  for first in range(0, len(examples), chunk_size):
    chunk = examples[first:first + chunk_size]
    ids_a = encode_leading_tokens(tokenizer, [e.text_a for e in chunk], max_seq_length)
    pairs = [i for i, e in enumerate(chunk) if e.text_b is not None]
    ids_b = dict(zip(pairs, encode_leading_tokens(tokenizer, [chunk[i].text_b for i in pairs],
                                                  max_seq_length)))
    for i, example in enumerate(chunk):
      yield features_from_ids(ids_a[i], ids_b.get(i), label_id_for(example.label, label_map),
                              first_example_id + first + i, max_seq_length, cls_id, sep_id)
    done = first + len(chunk)
    if done >= next_report and done < len(examples):
      next_report += report_every
      rate = done / max(time.time() - start, 1e-9)
      log.info("featurised %d/%d examples (%.0f/s, about %.0f s left)", done, len(examples),
               rate, (len(examples) - done) / rate)
