"""What every predictor of an export shares, whatever runs its model (TensorFlow in
serving/predictor.py, onnxruntime in serving/onnx_predictor.py): finding the export and
checking its files, the inputs it takes and refuses, batching texts of similar length,
and the results.

It needs no TensorFlow (data/gfile.py uses TensorFlow's file system where it is installed,
for buckets too), so the ONNX predictor runs where TensorFlow is not installed.
"""

import collections.abc
import logging
import math
import os

import numpy as np

from data.fast_tokenization import tokenizer_for
from data.features import InputExample, Truncation, convert_examples
from data.long_texts import Windowing, WindowSplitter, aggregate
from data.files import MANIFEST, NO_MANIFEST, file_sha256, manifest_problem
from data.gfile import gfile
from spec import calibration, model_card, signature
from spec.heads import from_card
from spec.run_errors import FlagError, NumericFault
from spec.thresholds import listed

log = logging.getLogger(__name__)


class ExportNotFound(FlagError):
  """The path holds no export of this project (a SavedModel, or its ONNX folder), or one
  that is damaged; the message says how to make one."""


def check_batch_size(batch_size):
  """batch_size, when it is a whole number of at least 1; else a ValueError saying so."""
  if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or (
      batch_size < 1):
    raise ValueError("batch_size=%r: give a whole number of texts, at least 1" % (batch_size,))
  return int(batch_size)


EXPORT_AGAIN = ("export the model again: run_classifier.py --do_export --output_dir=<its "
                "output_dir>")


def find_export(path):
  """The SavedModel directory of path: path itself when it holds saved_model.pb, else the
  newest version under path/export (a training --output_dir exported with --do_export).
  The newest is taken even when it is damaged (check_export_files then says how): an older
  one in its place would be another model, silently."""
  if gfile.exists(os.path.join(path, "saved_model.pb")):
    return path
  base = os.path.join(path, "export")
  versions = []
  if gfile.isdir(base):
    versions = sorted((name.rstrip("/") for name in gfile.listdir(base)
                       if name.rstrip("/").isdigit()), key=int)
  if versions:
    return os.path.join(base, versions[-1])
  raise ExportNotFound(
      "%s holds no SavedModel (no saved_model.pb, and no %s/<version>/saved_model.pb). Export "
      "the fine-tuned model first: run_classifier.py --do_export --output_dir=<its output_dir>"
      % (path, base))


def read_export_card(export_dir, files=("assets",)):
  """The model card in an export's files folder (assets/ of a SavedModel; the ONNX folder
  itself), with the vocabulary pointing at its own copy beside it, which must be the
  vocabulary the card records (its sha256)."""
  path = os.path.join(export_dir, *files, signature.CARD_ASSET)
  vocab = os.path.join(export_dir, *files, signature.VOCAB_ASSET)
  for needed in (path, vocab):
    if not gfile.exists(needed):
      raise ExportNotFound("%s is not an export of this project: it has no %s. Export it with "
                           "run_classifier.py --do_export" % (export_dir, needed))
  with gfile.GFile(path, "r") as f:
    card = model_card.from_json(f.read(), path)
  sha256 = file_sha256(vocab)
  if sha256 != card["vocab_sha256"]:
    raise ExportNotFound("%s is not the vocabulary the model was trained with: its sha256 is "
                         "%s, and %s records %s. Export the model again: run_classifier.py "
                         "--do_export --output_dir=<its output_dir>"
                         % (vocab, sha256, path, card["vocab_sha256"]))
  return dict(card, vocab_file=vocab)



def check_export_files(export_dir, again=EXPORT_AGAIN):
  """ExportNotFound unless the export holds exactly the files it was written with, each
  the one written (the manifest, files.json, that --do_export writes: sizes and sha256).
  The one check of an export's files: the Predictor, the ONNX predictor and --saved_model
  (which loads one) all make it. An export without a manifest (from a version before
  exports had one, or a copy that left it out) cannot be checked, and is refused. again:
  how to export it again, for the message."""
  problem = manifest_problem(export_dir)
  if problem == NO_MANIFEST:
    raise ExportNotFound(
        "%s has no %s, the list of its files and their sha256 that is checked before an "
        "export is loaded: copy the whole export again, or, if an earlier version exported "
        "it, %s" % (export_dir, MANIFEST, again))
  if problem:
    raise ExportNotFound("%s is damaged: %s. Copy the whole export again, or %s" % (
        export_dir, problem, again))


def padded_batch(features):
  """input_ids, input_mask, segment_ids [len(features), longest] of InputFeatures."""
  longest = max(len(f.token_ids) for f in features)
  ids = np.zeros([len(features), longest], np.int32)
  mask = np.zeros_like(ids)
  segments = np.zeros_like(ids)
  for row, f in enumerate(features):
    length = len(f.token_ids)
    ids[row, :length] = f.token_ids
    mask[row, :length] = 1
    segments[row, f.num_first_segment:length] = 1
  return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def length_runs(lengths, batch_size, overhead):
  """The runs of the model that predict texts of these token lengths in the least time:
  lists of indices into lengths, each of at most batch_size texts, in order of length.

  A run of n texts is padded to its longest, so it costs about overhead + n x longest
  tokens' worth of time: texts of similar length share a run, and texts far apart in
  length (as concurrent requests to a server are) run apart when the padding would cost
  more than the extra run. Found exactly, over the texts sorted by length (a run is a
  stretch of them): for each end, the cheapest start among the batch_size before it."""
  batch_size = check_batch_size(batch_size)
  if not (isinstance(overhead, (int, float)) and 0 <= overhead < math.inf):
    raise ValueError("overhead=%r: give a run's cost in tokens, a number >= 0" % (overhead,))
  order = sorted(range(len(lengths)), key=lengths.__getitem__)
  longest = np.array([lengths[i] for i in order], np.float64)
  # A run of texts start..end-1 costs best[start] + overhead + (end - start) x longest[end-1],
  # which is (best[start] - start x longest[end-1]) + end x longest[end-1] + overhead.
  best, cut = np.zeros(len(order) + 1), [0] * (len(order) + 1)
  starts = np.arange(len(order) + 1, dtype=np.float64)
  for end in range(1, len(order) + 1):
    low = max(0, end - batch_size)
    costs = best[low:end] - starts[low:end] * longest[end - 1]
    first = int(np.argmin(costs))  # (of equal costs, the longest run)
    best[end] = costs[first] + end * longest[end - 1] + overhead
    cut[end] = low + first
  runs, end = [], len(order)
  while end:
    runs.append(order[cut[end]:end])
    end = cut[end]
  return runs[::-1]


def _shown(item):
  text = repr(item)
  return text if len(text) <= 60 else text[:57] + "..."


class ExportPredictor(object):
  """Texts in, the head's outputs and results out, for the model of one export's card.

  card: the export's model card (read_export_card). tokenizer: 'auto', 'fast' or 'python'
  (the same ids). batch_size: texts per run of the model. A subclass loads the model and
  runs a batch (run_batch).
  """

  def __init__(self, card, tokenizer="auto", batch_size=32):
    self.batch_size = check_batch_size(batch_size)
    self.card = card
    self.label_spec = from_card(card["label_spec"])
    self.max_seq_length = card["max_seq_length"]
    self.truncation = Truncation.from_dict(card["truncation"])
    self.windowing = Windowing.from_dict(card["truncation"].get("windows"),
                                         self.max_seq_length)
    self.tokenizer = tokenizer_for(card["vocab_file"], card["do_lower_case"], tokenizer)
    self.output_name = signature.output_name(self.label_spec)
    if self.label_spec.temperature is not None:  # (the export's graph divides by it)
      log.info("the probabilities are calibrated: the logits are divided by the temperature "
               "fitted on the dev split, %s", calibration.listed(self.label_spec.temperature))
    if self.windowing is not None:
      log.info("a text longer than %d tokens is read as %s", self.windowing.room,
               self.windowing.describe())
    if self.label_spec.thresholds:  # (each result names its threshold, too)
      log.info("labels are decided at the thresholds tuned on the dev split: %s",
               listed(self.label_spec.thresholds))

  # What one run of the model costs beyond its texts' tokens, in tokens' worth of time
  # (length_runs); each backend measures its own.
  run_overhead_tokens = 32
  # The most texts one run of the model takes (None: batch_size), for a model whose
  # outputs for a text would depend on the texts run with it.
  max_run_texts = None

  def run_batch(self, batch):
    """The model's outputs [rows, outputs] (a numpy array) for one padded_batch."""
    raise NotImplementedError

  @property
  def labels(self):
    """The classes in the order of the outputs (classification), else None."""
    return self.label_spec.classes

  @property
  def output_names(self):
    """What each output is: a class, or a label column."""
    return self.label_spec.classes or list(self.label_spec.columns)

  def _run_batches(self, batches):
    """run_batch of each of batches, in order (a backend may make several at once)."""
    return map(self.run_batch, batches)

  def close(self):
    """Frees what the backend holds (a session)."""

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()

  @property
  def reads_pairs(self):
    """Whether the model was trained on pairs of texts (an input is then (text, text_b))."""
    return self.card["text_pair"]

  def predict(self, inputs, batch_size=None):
    """One result per input, in order. inputs: an ordered collection of texts, or of
    (text, text_b) pairs for a model trained on pairs: a list, a tuple, a 1-D numpy array
    or pandas Series (for pairs also an array of shape (n, 2)), an iterator or a
    generator. A mapping, a set or a table (DataFrame) is refused (a TypeError that says
    what to pass): iterating one gives its keys, no order, or its column names.

    Each result is the head's (its class's `result` in spec/heads/), for example
    classification: {"label": the most probable class, "probabilities": {class: p}};
    multi_label: {"labels": the columns with p >= 0.5, "probabilities": {column: p}};
    soft_target: {"probabilities": {column: p}}; regression: {"values": {column: v}}.
    """
    examples = [self.example(i, item) for i, item in enumerate(self._ordered(inputs))]
    return [self.result(outputs) for outputs in self.predict_outputs(examples, batch_size)]

  def predict_outputs(self, examples, batch_size=None):
    """The head's outputs (a list of floats per example; data/features InputExample),
    in input order: the values run_classifier writes into test_results.tsv. A model
    trained with windows (--doc_stride) predicts each long text's windows and aggregates
    their outputs, as run_classifier does."""
    batch_size = self.batch_size if batch_size is None else check_batch_size(batch_size)
    batch_size = min(batch_size, self.max_run_texts or batch_size)
    counts = []
    if self.windowing is not None:
      examples = list(WindowSplitter(self.windowing, self.tokenizer).examples(examples, counts))
    features = list(convert_examples(examples, self.label_spec, self.max_seq_length,
                                     self.tokenizer, strategy=self.truncation))
    outputs = [None] * len(features)
    runs = length_runs([len(f.token_ids) for f in features], batch_size,
                       self.run_overhead_tokens)
    batches = (padded_batch([features[i] for i in rows]) for rows in runs)
    done = 0
    for rows, values in zip(runs, self._run_batches(batches)):
      done += 1
      if len(values) != len(rows):
        raise RuntimeError("%s gave %d outputs for a batch of %d inputs" % (
            self.export_dir, len(values), len(rows)))
      for i, value in zip(rows, values.tolist()):
        if not all(math.isfinite(v) for v in value):
          raise NumericFault(
              "the model's outputs for input %s are %s, not numbers: %s is broken (a "
              "training that diverged, say). Fix: export a model whose eval and predict "
              "runs give numbers" % (examples[i].guid, value, self.export_dir))
        outputs[i] = value
    if done != len(runs):  # (no row is left without its outputs)
      raise RuntimeError("%s gave the outputs of %d of %d batches" % (
          self.export_dir, done, len(runs)))
    if self.windowing is not None:
      return aggregate(outputs, counts, self.windowing.aggregation,
                       self.label_spec.loss).tolist()
    return outputs

  def count_windows(self, examples, limit):
    """How many windows a model that reads long texts in windows (--doc_stride) makes of
    examples, counted until it passes limit (1 a text for other models)."""
    if self.windowing is None:
      return len(examples)
    splitter, total = WindowSplitter(self.windowing, self.tokenizer), 0
    for example in examples:
      total += len(splitter.windows_of(example))
      if total > limit:
        break
    return total

  def _ordered(self, inputs):
    """inputs as an iterable of its items in order, or a TypeError naming what was passed
    and what to pass instead. Tables and arrays are recognised by their attributes, so
    neither pandas nor numpy is needed to tell them."""
    kind = type(inputs).__name__
    refused = None
    if isinstance(inputs, (str, bytes)):  # (an iterable of characters: a result for each)
      refused = "one text: pass [text] to predict one"
    elif isinstance(inputs, collections.abc.Mapping):  # (iterating gives its keys)
      refused = ("a mapping (%s), whose keys iterating it gives: pass list(inputs.values()) "
                 "to predict its values" % kind)
    elif (isinstance(inputs, collections.abc.Set) and
          not isinstance(inputs, collections.abc.MappingView)):  # (a dict's keys are ordered)
      refused = ("a %s, which has no order (the results could not be matched to its "
                 "inputs): pass a list, e.g. sorted(inputs)" % kind)
    elif hasattr(inputs, "columns"):  # a table: a pandas (or polars) DataFrame
      refused = ("a table (%s), whose column names iterating it gives: pass %s" % (
          kind, 'a list of pairs, list(zip(df["<column>"], df["<column b>"]))'
          if self.reads_pairs else 'one column, df["<column>"]'))
    elif hasattr(inputs, "ndim") and hasattr(inputs, "shape"):  # a numpy array, a Series
      shape = tuple(inputs.shape)
      if inputs.ndim == 0:
        refused = "a 0-D array: pass a list of texts"
      elif inputs.ndim == 2 and self.reads_pairs and shape[1] == 2:
        return inputs.tolist()  # (one pair a row)
      elif inputs.ndim != 1 and self.reads_pairs:
        refused = ("a %d-D array (shape %s) for a model of pairs of texts: pass an array of "
                   "shape (n, 2), one (text, text_b) a row" % (inputs.ndim, shape))
      elif inputs.ndim != 1:
        refused = ("a %d-D array (shape %s) for a model of single texts: pass a 1-D array of "
                   "texts" % (inputs.ndim, shape))
    else:
      try:
        iter(inputs)
      except TypeError:
        refused = "%s: pass a list of texts" % kind
    if refused:
      raise TypeError("predict takes a list of inputs, not " + refused)
    return inputs

  def example(self, index, item):
    """The InputExample of one input: a text, or a pair for a model trained on pairs."""
    is_pair = isinstance(item, (tuple, list)) and len(item) == 2 and all(
        isinstance(text, str) for text in item)
    if not (isinstance(item, str) or is_pair):
      raise ValueError("input %d is %s: give %s" % (index, _shown(item), self._wanted()))
    if is_pair != self.reads_pairs:
      raise ValueError("input %d is %s, but the model (task %s) was trained on %s: give %s"
                       % (index, "a pair of texts" if is_pair else "one text",
                          self.card["task"], "pairs of texts" if self.reads_pairs else
                          "single texts", self._wanted()))
    return InputExample(index, *item) if is_pair else InputExample(index, item)

  def _wanted(self):
    return "a pair of texts (text, text_b)" if self.reads_pairs else "a text (str)"

  def result(self, outputs):
    """The result of one input (see predict) from the head's outputs for it."""
    return self.label_spec.result(self.output_names, outputs)
