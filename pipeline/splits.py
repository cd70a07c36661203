"""Every split the modes need, read, checked and featurised before the first training step:
processor -> InputExamples -> InputFeatures -> TFRecords, and the input_fn that reads them
back. A bad eval or predict file stops the run in seconds, not after training."""

import dataclasses
import logging
import math
import os
from typing import Optional

import numpy

from data import vocabulary
from data.input_fn import input_fn_builder
from data.files import files_sha256
from data.file_lists import same_file_key
from data.reread import check_rereadable, read_twice, refuse_changed
from data.tfrecord import build_records
from data.long_texts import WindowSplitter, aggregate
from pipeline.build import truncation_of, windowing_of
from pipeline.training_order import LengthOrder, TrainingOrder, log_class_weights
from spec.cores import usable_cores
from spec.run_errors import FlagError
from spec.rows import format_rows, overlap

log = logging.getLogger(__name__)


class Split(object):
  """One split, read, validated and featurised: its record files and their metadata, how
  its records are read (input_fn), and its examples where later steps need them (the
  dev split's; those of the train and predict splits are never held: num_examples counts
  them)."""

  def __init__(self, examples, metadata, reading, windowing=None):
    self.examples = examples
    self.metadata = metadata
    self.num_examples = metadata["num_examples"]  # (records of real rows: windows, if any)
    self.record_files = metadata["files"]
    self._reading = reading  # input_fn_builder's max_seq_length, label_spec, seed, padding
    # With --doc_stride, each text's number of windows (of an eval or predict split).
    self.windowing = windowing
    self.window_counts = (metadata.get("read") or {}).get("windows") if windowing else None
    self.num_texts = (len(self.window_counts) if self.window_counts is not None
                      else self.num_examples)

  def texts_of(self, records):
    """The place of the text (counted from 0) of each of records (the split's records'
    places, an array): a window's text, else the record's own place."""
    records = numpy.asarray(records, numpy.int64)
    if self.window_counts is None:
      return records
    return numpy.searchsorted(numpy.cumsum(self.window_counts), records, side="right")

  def per_text(self, outputs):
    """outputs of the split's records (one row per window, in order) as one row per text,
    aggregated as --window_aggregation says; outputs themselves without windows."""
    if self.window_counts is None:
      return outputs
    return aggregate(outputs, self.window_counts, self.windowing.aggregation,
                     self._reading["label_spec"].loss)

  def path_description(self):
    """The file(s) the split was read from, for messages."""
    return str(self.metadata.get("source_file") or "the split's file")

  def input_fn(self, is_training=False, skip_examples=0):
    """The input_fn of the split's records (training: shuffled, repeated, skipping the
    examples a resumed run's steps have used)."""
    return input_fn_builder(self.record_files, is_training=is_training,
                            weighted=self.metadata["weighted"], skip_examples=skip_examples,
                            **self._reading)


@dataclasses.dataclass
class Splits(object):
  """A run's featurised splits; None where its modes need none."""
  train: Optional[Split] = None
  dev: Optional[Split] = None
  test: Optional[Split] = None

  def windows(self):
    """{split: {"texts": n, "windows": m}} of a run with --doc_stride (run_summary.json's
    count of the windows, of the texts read: --train_fraction trains on some), else
    None."""
    counted = {name: {"texts": split.num_texts, "windows": int(sum(split.window_counts))}
               for name, split in (("train", self.train), ("dev", self.dev),
                                   ("test", self.test))
               if split is not None and split.window_counts is not None}
    return counted or None


def prepare_splits(c, task, tokenizer, vocab_file, fold=None, own_shards=None):
  """The Splits the modes need. With fold (a pipeline.cross_validation.FoldPlan) the train file's
  rows of the other folds are the train split and its own fold's rows the dev split. The
  train file is read as its records are written, and not at all when they are cached.
  own_shards (a task of a cluster) writes only those train record shards: the file is
  then read twice, first for the order, then to featurise the shards' rows alone."""
  processor = task.processor
  training = c.training
  featurise = Featuriser(c, processor, tokenizer, vocab_file, own_shards)
  splits = {}
  check_hashed_then_read(processor, [split for split, wanted in (
      ("train", c.modes.do_train or fold is not None), ("dev", c.modes.do_eval and fold is None),
      ("test", c.modes.do_predict)) if wanted])
  if fold is None:
    check_files_of_splits(processor, c.modes)
  if fold is not None:
    all_train, held_out = fold.split(processor.get_examples("train"))
    splits["dev"] = featurise("dev", held_out, _lcm(training.eval_batch_size,
                                                    training.predict_batch_size), fold=fold)
  if c.modes.do_train:
    train_rows = (all_train if fold is not None else
                  processor.iter_examples("train") if own_shards is None else
                  read_twice(processor, "train"))
    splits["train"] = featurise("train", train_rows, 0, order=TrainingOrder(
        training, task, windowed=c.model.doc_stride > 0), fold=fold, keep_examples=False)
  # A task whose evaluation also predicts the dev split (as one of windows does) pads its records for both sizes.
  dev_multiple = (_lcm(training.eval_batch_size, training.predict_batch_size)
                  if task.evaluation_predicts or c.model.doc_stride else
                  training.eval_batch_size)
  for split, wanted, multiple in (("dev", c.modes.do_eval, dev_multiple),
                                  ("test", c.modes.do_predict, training.predict_batch_size)):
    if wanted and split not in splits:
      if split == "test":  # (predictions are written as the file is read again)
        order = LengthOrder() if c.device.dynamic_padding else None
        splits[split] = featurise(split, processor.iter_examples(split), multiple, order=order,
                                  keep_examples=False)
      else:
        splits[split] = featurise(split, processor.get_examples(split), multiple)
  return Splits(splits.get("train"), splits.get("dev"), splits.get("test"))


# Why a split's file must be one that can be read twice (a regular file).
HASHED_THEN_READ = ("it is read twice: hashed first, to find its records in the cache, then "
                    "read for its rows")


def check_hashed_then_read(processor, splits):
  """Every file of the splits (names) is hashed, then read: each must be a regular file,
  refused in one line before any is read (a FIFO no one writes to would block the first
  read for ever, and a pipe's second read is empty)."""
  for split in splits:
    check_rereadable(processor.read_files(split), HASHED_THEN_READ)


def check_files_of_splits(processor, modes):
  """A file read as train rows and as eval rows through a train glob or list that takes
  it in would score the model on rows it trained on: refused, naming it (one file named
  as both is a choice: said). A run that evaluates and predicts one file (MRPC's original
  files have no dev file, so its test file is found for both) says so: its figures, and
  a best checkpoint chosen by them, are those of the rows it predicts."""
  def keys(split):
    return {same_file_key(path): path for path in processor.files_of(split)}
  if modes.do_train and modes.do_eval:
    train, dev = keys("train"), keys("dev")
    shared = sorted(set(train) & set(dev))
    if shared and len(train) > 1:  # (a pattern or a list that takes in the eval file)
      raise FlagError("%s is both a train file (--train_file=%s) and the eval file: the "
                      "evaluation would score rows the model trained on. Name the train "
                      "files so that the eval file is not among them"
                      % (dev[shared[0]], processor.file_for("train")))
    ranges = processor.row_ranges
    if shared and len(train) == len(dev) == 1 and "train" in ranges and "dev" in ranges and (
        not overlap(ranges["train"], ranges["dev"])):  # (rows counted in the one file)
      log.info("the eval file is the train file, %s: its rows %s are held out from "
               "training's %s", processor.file_for("dev"), format_rows(ranges["dev"]),
               format_rows(ranges["train"]))
    elif shared:  # (one file named for both: a choice, said)
      log.warning("the eval file is the train file, %s: the evaluation scores rows the "
                  "model trained on", processor.file_for("dev"))
  if modes.do_eval and modes.do_predict and set(keys("dev")) & set(keys("test")):
    log.warning("the dev split is the predict file, %s: the evaluation's figures, and a best "
                "checkpoint chosen by them, are those of the rows predicted. Pass --eval_file "
                "for a held-out dev file", processor.file_for("dev"))


class Featuriser(object):
  """Writes (or reuses) a split's TFRecords in the cache (--cache_dir, else
  <output_dir>/features): featuriser(split, examples, pad_to_multiple, order, fold) is
  its Split. With fold, the train and dev splits both come from the train file."""

  def __init__(self, c, processor, tokenizer, vocab_file, own_shards=None):
    self.processor, self.tokenizer = processor, tokenizer
    self.own_shards = own_shards  # (of the train split)
    self.data, self.model, self.training, self.device = c.data, c.model, c.training, c.device
    self.cache_dir = c.outputs.features_dir()
    self.vocab_sha256 = vocabulary.vocab_fingerprint(vocab_file)
    self.reading = dict(max_seq_length=c.model.max_seq_length,
                        label_spec=processor.label_spec, seed=c.training.seed,
                        dynamic_padding=c.device.dynamic_padding)
    self.windowing = windowing_of(c.model)

  def __call__(self, split, examples, pad_to_multiple, order=None, fold=None,
               keep_examples=True):
    """examples: a list, or an iterable read only when the records are not cached (then
    kept only with keep_examples). With --doc_stride each example's windows are
    featurised, and the metadata's read entry keeps each text's number of windows."""
    record_path = os.path.join(self.cache_dir, "%s.tf_record" % split)
    source_split = "train" if fold is not None else split
    settings = self.settings(split, fold, order)
    counts = []
    featurised = examples
    if self.windowing is not None:
      splitter = WindowSplitter(self.windowing, self.tokenizer)
      def afresh():  # (a cluster's task reads the rows twice: the counts are of one pass)
        del counts[:]
        return splitter.examples(examples(), counts)
      featurised = afresh if callable(examples) else splitter.examples(examples, counts)

    def accounts():
      read = self._read_as_hashed(source_split, settings["source_sha256"])
      if self.windowing is None:
        return read
      log.info("%s: %d texts in %d windows (--doc_stride=%d)", split, len(counts),
               sum(counts), self.windowing.doc_stride)
      return dict(read or {}, windows=counts)
    metadata = build_records(
        featurised, record_path, settings, self.tokenizer,
        pad_to_multiple, num_shards=self.device.num_record_shards,
        num_workers=featurise_workers(self.device.featurise_workers), order=order,
        accounts=accounts)
    return Split(examples if keep_examples else None, metadata, self.reading, self.windowing)

  def _read_as_hashed(self, split, sha256):
    """What reading the split's files found, once they are read; a file whose bytes
    changed between the hash that names its records and the read (a file still being
    written) is refused: the records would be cached under the other bytes' name."""
    refuse_changed(self.processor, split, sha256, "the file changed while it was read (its "
                   "sha256 before reading and of the bytes read differ)")
    return self.processor.accounts.get(split)

  def settings(self, split, fold, order=None):
    """Everything that shapes a split's records, known before its file is read: what a
    cached copy must match."""
    processor, data = self.processor, self.data
    source_split = "train" if fold is not None else split
    check_rereadable(processor.read_files(source_split), HASHED_THEN_READ)
    settings = {
        "task": processor.name, "split": split, "source_file": processor.file_for(source_split),
        "source_sha256": files_sha256(processor.read_files(source_split)),
        "label_spec": processor.label_spec.head_entry(),
        "truncation": truncation_of(self.model).as_dict(),
        "max_seq_length": self.model.max_seq_length, "vocab_sha256": self.vocab_sha256,
        "do_lower_case": self.tokenizer.do_lower_case,
        # (the label columns are the label spec's)
        "columns": [data.text_column, data.text_b_column, data.id_column,
                    processor.has_header_for(source_split), data.delimiter, data.quoting,
                    data.skip_malformed_rows],
    }
    if self.windowing is not None:
      settings.update(windows=self.windowing.as_dict())
    if processor.row_selection():  # (which rows of the file the options keep)
      settings.update(rows=processor.row_selection())
    if source_split in processor.row_ranges:  # (--train_rows, --eval_rows)
      settings.update(row_range=format_rows(processor.row_ranges[source_split]))
    if order is not None:
      settings.update(order.settings())
    if split == "train" and self.own_shards is not None:
      settings.update(own_shards=list(self.own_shards))
    if fold is not None:
      settings.update(fold=fold.index, num_folds=fold.num_folds, fold_seed=self.training.seed)
    return settings


def class_weights_of(train, label_spec):
  """The train split's resolved --class_weights ({class or label column: weight}), as
  its records' metadata keeps them (and the log says), or None (also without a train
  split)."""
  weights = train.metadata.get("class_weights") if train is not None else None
  log_class_weights(weights, label_spec)
  return weights


def featurise_workers(asked):
  """The featurisation processes: as asked, or (0) one per core this process may use."""
  return asked or usable_cores()


def _lcm(a, b):
  return a * b // math.gcd(a, b)
