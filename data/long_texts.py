"""Windows over texts longer than max_seq_length (--doc_stride, --window_aggregation).

A text whose tokens do not fit is split into windows of whole words, each at most
max_seq_length - 2 tokens ([CLS] and [SEP] take the rest), a window starting about every
doc_stride tokens (at the first word that starts there or after: word_spans), so
neighbours overlap by about max_seq_length - 2 - doc_stride tokens and no token is left
out. Each window is an
example carrying its text's label, guid and extras, and a window_weight of 1/k (k
windows), so a long text weighs in training as much as a short one. A text that fits is
one window, unchanged. A pair of texts that does not fit keeps its shorter text in
every window and splits the longer (WindowSplitter.windows_of).

A window's text is the text itself from its first word to its last, verbatim (words as
the basic tokenizer splits them: on whitespace, punctuation and CJK characters), so the
tokenizer reads each window as it reads the whole text, and the window's token ids are
those of the same words in the whole text (tests/test_long_texts.py checks it with both
tokenizers). Only a character whose lower case depends on its neighbours (a capital
sigma before an apostrophe and a letter) can read otherwise at a window's edge.

At eval and predict the windows' outputs are aggregated back to one row per text
(aggregate): their mean, the first window's, or the max (per column for sigmoid and
regression heads; for a two-class softmax head, the window with the highest probability
of the second class, whose distribution is taken whole).

Pure Python and numpy: the featurisation workers and the predictors run it.
"""

import numpy

from data.tokenization import _char_class
from spec.model_card import WINDOW_AGGREGATIONS as AGGREGATIONS
from spec.run_errors import FlagError


def max_problem(loss, num_outputs):
  """Why --window_aggregation=max has no meaning for a head (its loss, LabelSpec.loss,
  and its outputs), or None: a softmax head of more than two classes."""
  if loss == "softmax_cross_entropy" and num_outputs != 2:
    return ("--window_aggregation=max takes a softmax head's window most likely of its "
            "second class, and this head has %d classes: use mean or first" % num_outputs)
  return None


class Windowing(object):
  """How texts are split into windows and their outputs put back together (the model
  card's "windows" entry)."""

  def __init__(self, doc_stride, aggregation, max_seq_length):
    room = max_seq_length - 2
    if not isinstance(doc_stride, int) or isinstance(doc_stride, bool) or not (
        0 < doc_stride <= room):
      raise FlagError("--doc_stride=%r must be a whole number from 1 to max_seq_length - 2 "
                      "= %d (the tokens a window holds besides [CLS] and [SEP])" % (
                          doc_stride, room))
    if aggregation not in AGGREGATIONS:
      raise FlagError("--window_aggregation=%r is not one of %s" % (
          aggregation, ", ".join(AGGREGATIONS)))
    self.doc_stride, self.aggregation, self.room = doc_stride, aggregation, room

  def as_dict(self):
    return {"doc_stride": self.doc_stride, "aggregation": self.aggregation}

  @classmethod
  def from_dict(cls, values, max_seq_length):
    """The Windowing of a card's entry (None for a card without one)."""
    if values is None:
      return None
    return cls(values.get("doc_stride"), values.get("aggregation"), max_seq_length)

  def describe(self):
    return "windows of %d tokens every %d, aggregated by their %s" % (
        self.room, self.doc_stride, self.aggregation)


class WindowSplitter(object):
  """Splits texts into window texts with a tokenizer (encode(text) -> ids) of one
  casing."""

  def __init__(self, windowing, tokenizer):
    self.windowing = windowing
    self.tokenizer = tokenizer
    self._word_lengths = {}
    self._classes = {}

  def texts(self, text, room=None):
    """The texts of text's windows of room tokens (default: the windowing's), in order
    (one, text itself, when it fits)."""
    room = self.windowing.room if room is None else room
    if len(self.tokenizer.encode(text)) <= room:
      return [text]
    return self._split(text, room)

  def windows_of(self, example):
    """[(text_a, text_b)] of an example's windows, in order (text_b None for a single
    text). A pair (text_b) shares the room with the separator between its texts: one
    token less. A pair that does not fit keeps its shorter text (text_b, of two of equal
    length) whole in every window, up to half the room (the featuriser cuts it to that, as
    Google's rule cuts a pair), and splits the longer into windows of the room left."""
    if example.text_b is None:
      return [(text, None) for text in self.texts(example.text_a)]
    room = self.windowing.room - 1
    a, b = example.text_a, example.text_b
    length_a, length_b = len(self.tokenizer.encode(a)), len(self.tokenizer.encode(b))
    if length_a + length_b <= room:
      return [(a, b)]
    # (the shorter keeps up to half the room, rounded up: Google's rule, cutting the
    # longer of the two a token at a time, then cuts only the shorter text, never a window)
    half = (room + 1) // 2
    if length_b > length_a:
      return [(a, window) for window in self._split(b, room - min(length_a, half))]
    return [(window, b) for window in self._split(a, room - min(length_b, half))]

  def _split(self, text, room):
    bounds = self.word_bounds(text)
    lengths = [self._length(text[start:end]) for start, end in bounds]
    return [text[bounds[first][0]:bounds[last - 1][1]]
            for first, last in word_spans(lengths, room, self.windowing.doc_stride)]

  def word_bounds(self, text):
    """[start, end) character spans of text's words as the basic tokenizer splits them:
    runs of characters between whitespace, each punctuation mark and CJK character a
    word alone; a character it drops (a control or format character) joins its
    neighbours."""
    bounds, start, last = [], None, 0
    for i, char in enumerate(text):
      kind = self._classes.get(char)
      if kind is None:
        kind = self._classes[char] = _char_class(char)
      if kind == "drop":
        continue
      if kind in ("space", "punct", "cjk"):
        if start is not None:
          bounds.append((start, last))
          start = None
        if kind != "space":
          bounds.append((i, i + 1))
        continue
      if start is None:
        start = i
      last = i + 1
    if start is not None:
      bounds.append((start, last))
    return bounds

  def _length(self, word):
    length = self._word_lengths.get(word)
    if length is None:
      length = len(self.tokenizer.encode(word))
      if len(self._word_lengths) < 1000000:
        self._word_lengths[word] = length
    return length

  def examples(self, examples, counts):
    """Each example's windows as examples (window_weight 1/k), in order; counts gets each
    example's number of windows appended as it is read."""
    for example in examples:
      windows = self.windows_of(example)
      counts.append(len(windows))
      for i, (text_a, text_b) in enumerate(windows):
        yield window_example(example, text_a, text_b, 1.0 / len(windows), i == 0)


def window_example(example, text_a, text_b, weight, start):
  """example with text_a and text_b (a window's), window_weight = weight and window_start
  = start (whether it is its text's first window); its other fields shared."""
  window = type(example)(example.guid, text_a, text_b, example.label, example.extras)
  window.window_weight, window.window_start = weight, start
  return window


def word_spans(lengths, room, stride):
  """[start, end) spans of words (of lengths tokens each) for windows of at most room
  tokens, each the longest run of whole words from its start that fits (a word longer
  than room is a window alone, truncated when featurised). The next window starts at the
  first word stride tokens or more after the last one's start, or later while the window
  from there would end where the last one ends (it would add no word), and never after
  the last one's end (no word is skipped)."""
  offsets, total = [], 0
  for length in lengths:
    offsets.append(total)
    total += length
  n = len(lengths)

  def end_from(start):
    end, used = start, 0
    while end < n and used + lengths[end] <= room:
      used += lengths[end]
      end += 1
    return max(end, start + 1)

  spans, start = [], 0
  while True:
    end = end_from(start)
    spans.append((start, end))
    if end >= n:
      return spans
    following = start + 1
    while following < end and (offsets[following] < offsets[start] + stride or
                                end_from(following) <= end):
      following += 1
    start = following


def starts_of(counts):
  """The index of each text's first window among all windows (counts per text)."""
  counts = numpy.asarray(counts, numpy.int64)
  return numpy.concatenate([[0], numpy.cumsum(counts)[:-1]]).astype(numpy.int64) if len(
      counts) else numpy.zeros(0, numpy.int64)


def _checked_counts(counts, rows):
  """counts (windows per text) as an array, checked against the rows of the windows."""
  counts = numpy.asarray(counts, numpy.int64)
  if int(counts.sum()) != rows or (counts < 1).any():
    raise ValueError("%d window rows for %d windows" % (rows, int(counts.sum())))
  return counts


def aggregate(outputs, counts, aggregation, loss, dtype=numpy.float32):
  """One row per text from its windows' rows of outputs [windows, n] (counts: windows per
  text, in order), by aggregation; loss names the head's loss (LabelSpec.loss), which says
  what max means. [texts, n] of dtype (float32, as the predictors give them)."""
  outputs = numpy.asarray(outputs, dtype)
  counts = _checked_counts(counts, len(outputs))
  starts = starts_of(counts)
  if not len(counts):
    return outputs[:0]
  if aggregation == "first":
    return outputs[starts]
  if aggregation == "mean":
    sums = numpy.add.reduceat(outputs.astype(numpy.float64), starts, axis=0)
    return (sums / counts[:, None]).astype(dtype)
  if loss != "softmax_cross_entropy":
    return numpy.maximum.reduceat(outputs, starts, axis=0)
  problem = max_problem(loss, outputs.shape[1])
  if problem:
    raise FlagError(problem)
  owner = numpy.repeat(numpy.arange(len(counts)), counts)
  # (the first window of a text holding its highest second-class probability)
  order = numpy.lexsort((numpy.arange(len(outputs)), -outputs[:, 1], owner))
  return outputs[order[starts]]


def logits_of(outputs, loss):
  """Logits whose outputs are outputs (aggregated probabilities or values), for the
  head's loss and metrics: log p for softmax, log(p / (1 - p)) for sigmoid, the values
  themselves for squared error. Probabilities are held off 0 and 1 by float32's
  smallest step, so every logit is finite."""
  outputs = numpy.asarray(outputs, numpy.float64)
  if loss == "squared_error":
    return outputs.astype(numpy.float32)
  tiny = numpy.finfo(numpy.float32).tiny
  p = numpy.clip(outputs, tiny, 1.0 - numpy.finfo(numpy.float32).epsneg)
  if loss == "softmax_cross_entropy":
    return numpy.log(p).astype(numpy.float32)
  return (numpy.log(p) - numpy.log1p(-p)).astype(numpy.float32)


class WindowLogits(object):
  """The logits of a split's windows, before any temperature divides them, with what
  puts their outputs back together: logits [windows, n], counts (windows per text, in
  order), the aggregation and the head's loss. A temperature divides each window's logits
  before its outputs are aggregated (as the graph and every predictor do), so fitting one
  needs the windows' logits, not those of the texts' aggregated outputs. Iterating gives
  each text's windows' rows."""

  def __init__(self, logits, counts, aggregation, loss):
    self.logits = numpy.asarray(logits, numpy.float32)
    self.counts = _checked_counts(counts, len(self.logits))
    self.aggregation, self.loss = aggregation, loss

  def __len__(self):
    return len(self.counts)

  def __iter__(self):
    starts = starts_of(self.counts)
    return (self.logits[s:s + k] for s, k in zip(starts, self.counts))

  def of_texts(self, texts):
    """WindowLogits of texts (each text's windows' rows, as iterating gives them), read
    as these are."""
    texts = list(texts)
    width = self.logits.shape[1] if self.logits.ndim == 2 else 0
    return WindowLogits(numpy.concatenate(texts) if texts else numpy.zeros((0, width)),
                        [len(t) for t in texts], self.aggregation, self.loss)

  def aggregated(self, window_outputs, dtype=numpy.float32):
    """One row per text of the windows' outputs (of these logits, at some temperature)."""
    return aggregate(window_outputs, self.counts, self.aggregation, self.loss, dtype)
