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


def convert_example(example, example_id, label_map, max_seq_length, tokenizer):
  """Builds the InputFeatures of one example.

  label_map is None for regression (the label is a float). An unlabelled example
  (label None) gets label 0: only predict reads it, and predict ignores labels.
  """
  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = tokenizer.tokenize(example.text_b) if example.text_b is not None else None
  if tokens_b is not None:
    truncate_pair(tokens_a, tokens_b, max_seq_length - 3)  # [CLS] a [SEP] b [SEP]
  else:
    del tokens_a[max_seq_length - 2:]  # [CLS] a [SEP]

  tokens = [CLS_TOKEN] + tokens_a + [SEP_TOKEN]
  segment_ids = [0] * len(tokens)
  if tokens_b is not None:
    tokens += tokens_b + [SEP_TOKEN]
    segment_ids += [1] * (len(tokens_b) + 1)
  input_ids = tokenizer.convert_tokens_to_ids(tokens)
  input_mask = [1] * len(input_ids)
  padding = [0] * (max_seq_length - len(input_ids))

  if example.label is None:
    label_id = 0.0 if label_map is None else 0
  elif label_map is None:
    label_id = float(example.label)
  else:
    label_id = label_map[example.label]
  return InputFeatures(input_ids + padding, input_mask + padding, segment_ids + padding,
                       label_id, True, example_id)


def padding_features(max_seq_length, is_regression):
  """An all-zero row with is_real_example=False, used to fill the last batch."""
  zeros = [0] * max_seq_length
  return InputFeatures(zeros, zeros, zeros, 0.0 if is_regression else 0, False,
                       PADDING_EXAMPLE_ID)


def num_padding_rows(num_examples, multiple):
  """How many padding rows make num_examples a whole number of batches."""
  return (-num_examples) % multiple if multiple else 0


def convert_examples(examples, labels, max_seq_length, tokenizer, report_every=5000):
  """Yields InputFeatures for each example in order, logging progress on long inputs."""
  label_map = label_map_for(labels)
  start = time.time()
  for i, example in enumerate(examples):
    if i and i % report_every == 0:
      rate = i / max(time.time() - start, 1e-9)
      log.info("featurised %d/%d examples (%.0f/s, about %.0f s left)", i, len(examples), rate,
               (len(examples) - i) / rate)
    yield convert_example(example, i, label_map, max_seq_length, tokenizer)
