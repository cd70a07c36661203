"""The order and the weights of a split's records, found as its rows are read: a train
split's (--train_fraction's seeded subset in a seeded random order, each row's loss weight
and the class weights resolved from the rows trained on) and a predict split's (shortest
first). data/tfrecord.py's build_records asks an order for them."""

import array
import logging
import math
import random

from data import weights as weights_lib
from spec.run_errors import FlagError
from spec.task_names import SCORED_IDENTITY_COLUMNS

log = logging.getLogger(__name__)


class TrainingOrder(object):
  """The train rows' order and weights, found without holding the rows: what the weights
  read of each row (WeightInputs, a few bytes) is kept as it is read, when weights are
  asked for; then arrange gives the records' order (--train_fraction's seeded subset, in a
  seeded random order) and their weights."""

  def __init__(self, training, task, windowed=False):
    self.training, self.task = training, task
    spec = task.processor.label_spec
    if training.class_weights and spec.class_weights_weigh is None:
      raise FlagError("--class_weights weighs the classes of a classification head, or the "
                      "positives of each multi-label or soft-target column; a %s head has "
                      "neither. Use --sample_weight_column for per-row weights" % spec.kind)
    # (a column's weight is its positives' in the loss; a class's, its rows' in the records)
    self.weighted = bool(training.class_weights and spec.class_weights_weigh == "classes" or
                         training.sample_weight_column is not None or
                         training.identity_weights or windowed)
    self.balanced = training.class_weights == ("balanced",)
    self.inputs = (WeightInputs(training, task, windowed) if self.weighted or self.balanced
                   else None)
    # Weights given are read now, before the rows; balanced ones from the rows trained on
    # (arrange).
    self.class_weights = None if self.balanced else resolved_class_weights(training, spec,
                                                                           None)

  file_ids = False  # (a train record's example_id is its place in training order)

  def settings(self):
    training = self.training
    return dict(train_fraction=training.train_fraction, seed=training.seed,
                order="in_training_order(seed)",
                weights=[list(training.class_weights or ()),
                         training.sample_weight_column and str(training.sample_weight_column),
                         bool(training.identity_weights)],
                # (the records' metadata keeps the resolved class weights: records made
                # before it did are made again)
                **({"class_weights_kept": True} if training.class_weights else {}))

  def observe(self, example):
    if self.inputs is not None:
      self.inputs.add(example)

  def recorded(self):
    """What the records' metadata keeps of the order: the class weights it resolved
    ({class or label column: weight}), which a run reading cached records needs."""
    return {"class_weights": self.class_weights} if self.class_weights else {}

  def arrange(self, staged):
    """(the staged examples' indices in training order, their weights or None)."""
    training = self.training
    num_examples = staged.num_examples
    windows = self.inputs.first if self.inputs is not None and self.inputs.windowed else None
    if windows is None:
      chosen = fraction_indices(num_examples, training.train_fraction, training.seed)
      num_rows, kept = num_examples, len(chosen)
    else:  # (the subset's texts, each with all its windows)
      chosen, num_rows, kept = windows_of_texts(windows, training.train_fraction,
                                                training.seed)
    if len(chosen) != num_examples:
      log.info("--train_fraction=%g: training on %d of %d rows%s", training.train_fraction,
               kept, num_rows, "" if windows is None else " (%d of %d windows)" % (
                   len(chosen), num_examples))
    weights = None
    if self.inputs is not None:
      inputs, self.inputs = self.inputs.subset(chosen), None
      if self.balanced:  # (counted over texts: each text's first window)
        self.class_weights = resolved_class_weights(
            training, self.task.processor.label_spec, inputs.texts(),
            weights_lib.TRAIN_FILE_ROWS if len(chosen) == num_examples else
            "the %d rows --train_fraction=%g keeps have" % (kept, training.train_fraction))
      if self.weighted:
        weights = training_weights(training, self.task, inputs, self.class_weights)
    positions, weights = in_training_order(chosen, weights, training.seed)
    return array.array("q", positions), weights


class LengthOrder(object):
  """A predict split's records shortest first (with dynamic padding, each batch is then
  computed only as long as rows of about one length), each keeping its place in the file
  as its example_id, by which the predictions are written back in file order."""

  weighted = False
  file_ids = True

  def settings(self):
    return {"order": "length"}

  def recorded(self):
    return {}

  def observe(self, example):
    pass

  def arrange(self, staged):
    indices = sorted(range(staged.num_examples), key=staged.length)
    return array.array("q", indices), None


class WeightInputs(object):
  """What the training weights read of each train row, kept in arrays as the rows are
  read: its class (an index), its weight cell, and whether it is toxic and mentions an
  identity (Jigsaw Unintended Bias), each only when a weight asked for reads it."""

  def __init__(self, training, task, windowed=False):
    self.training, self.task = training, task
    spec = task.processor.label_spec
    self.windowed = windowed  # (each row a window: its window_weight, and whether it is first)
    self.window, self.first = array.array("d"), array.array("b")
    self.classes = spec.classes
    self._class_index = {name: i for i, name in enumerate(self.classes or ())}
    self.labels, self.column = array.array("i"), array.array("d")
    # (each row's label values, for a column head's --class_weights=balanced)
    self.width = len(spec.columns) if (training.class_weights == ("balanced",) and
                                       spec.class_weights_weigh == "positives") else 0
    self.targets = array.array("d")
    self.num_rows = 0
    self.toxic, self.mentions = array.array("b"), array.array("b")
    self.present = set()  # the scored identity columns any row carries

  def add(self, example):
    training = self.training
    self.num_rows += 1
    if self.classes is not None:
      self.labels.append(self._class_index[example.label])
    if self.width:
      self.targets.extend(example.label)
    if training.sample_weight_column is not None:  # (read_weight checked the cell)
      self.column.append(float(example.extras[str(training.sample_weight_column)]))
    if self.windowed:
      self.window.append(example.window_weight)
      self.first.append(example.window_start)
    if training.identity_weights:
      toxic, mentions, present = self.task.identity_fact(example)
      self.toxic.append(toxic)
      self.mentions.append(mentions)
      self.present.update(present)

  def subset(self, indices):
    """The inputs of the rows at indices (a subset of the rows, in order)."""
    chosen = WeightInputs(self.training, self.task, self.windowed)
    chosen.present = self.present
    for name in ("labels", "column", "toxic", "mentions", "window", "first"):
      values = getattr(self, name)
      if values:
        setattr(chosen, name, array.array(values.typecode, (values[i] for i in indices)))
    width = self.width
    for i in indices if width else ():
      chosen.targets.extend(self.targets[i * width:(i + 1) * width])
    chosen.num_rows = len(indices)
    return chosen

  def texts(self):
    """The inputs of each text's first window (of all rows, without windows)."""
    if not self.windowed:
      return self
    return self.subset([i for i, first in enumerate(self.first) if first])

  def column_sums(self):
    """Each label column's sum over the rows (a soft target's fractions add up)."""
    return [math.fsum(self.targets[k::self.width]) for k in range(self.width)]

  def class_names(self):
    return [self.classes[i] for i in self.labels] if self.classes is not None else None


def weight_inputs(training, task, examples):
  """The WeightInputs of a list of examples."""
  inputs = WeightInputs(training, task)
  for example in examples:
    inputs.add(example)
  return inputs


def fraction_indices(num_examples, fraction, seed):
  """A seeded random subset of round(fraction * n) of the n examples' indices (at least
  one), in file order."""
  if fraction >= 1.0:
    return range(num_examples)
  keep = max(1, int(round(num_examples * fraction)))
  return sorted(random.Random(seed).sample(range(num_examples), keep))


def windows_of_texts(first, fraction, seed):
  """(the windows of fraction_indices' texts, in file order; the number of texts; the
  number kept) of windows in file order, first[i] true where window i opens its text: the
  texts a run without windows would train on, each with all its windows."""
  text_of, texts = [], -1
  for opens in first:
    texts += bool(opens)
    text_of.append(texts)
  kept = set(fraction_indices(texts + 1, fraction, seed))
  return [i for i, text in enumerate(text_of) if text in kept], texts + 1, len(kept)


def take_fraction(examples, fraction, seed):
  """fraction_indices' examples."""
  return [examples[i] for i in fraction_indices(len(examples), fraction, seed)]


def in_training_order(examples, weights, seed):
  """The train rows (and their weights) in a seeded random order, the order their records
  are written in. The input's shuffle mixes only rows within its buffer, and record
  shards are runs of rows, so a file sorted by label would otherwise train on one label
  for thousands of rows at a time and give each machine of a cluster a skewed part."""
  order = list(range(len(examples)))
  random.Random(seed).shuffle(order)
  return ([examples[i] for i in order],
          [weights[i] for i in order] if weights is not None else None)


def resolved_class_weights(training, spec, inputs, rows=weights_lib.TRAIN_FILE_ROWS):
  """--class_weights as {class or label column: weight} for the rows of inputs
  (WeightInputs; rows names them in a message): as given, or balanced from their counts;
  None when not asked for."""
  if not training.class_weights:
    return None
  of_columns = spec.class_weights_weigh == "positives"
  names = list(spec.columns) if of_columns else spec.classes
  if training.class_weights != ("balanced",):
    return weights_lib.parse_class_weights(training.class_weights, names, of_columns)
  if of_columns:
    return weights_lib.balanced_positive_weights(inputs.column_sums(), inputs.num_rows, names,
                                                 rows)
  return weights_lib.balanced_class_weights(inputs.class_names(), names, rows)


def check_folds_balanced(training, task, examples, assignment, num_folds):
  """--class_weights=balanced with k-fold: FlagError, naming the fold, before any fold
  trains, when some fold's train rows (the other folds') leave a class or a column
  without rows to weigh."""
  if training.class_weights != ("balanced",):
    return
  spec = task.processor.label_spec
  for fold in range(num_folds):
    inputs = weight_inputs(training, task, (e for e, a in zip(examples, assignment)
                                            if a != fold))
    resolved_class_weights(training, spec, inputs,
                           "fold %d's train rows (the other folds') have" % fold)


def log_class_weights(weights, spec):
  """The log line of a run's resolved class weights, in the head's order."""
  if weights:
    names = spec.classes or list(spec.columns)
    log.info("%s: %s", "class weights" if spec.has_classes else
             "positive weights of the label columns",
             ", ".join("%s %.4g" % (name, weights[name]) for name in names))


def training_weights(training, task, inputs, class_weights=None):
  """Each train row's loss weight from its WeightInputs: the product of the class weights
  of a classification head (class_weights: resolved_class_weights', found from inputs
  when not given), column and identity weights asked for (None when none is). FlagError
  for weights that leave a class with none."""
  processor = task.processor
  spec = processor.label_spec
  labels = inputs.class_names()
  if class_weights is None:
    class_weights = resolved_class_weights(training, spec, inputs)
  parts = []
  if class_weights and spec.class_weights_weigh == "classes":
    parts.append(weights_lib.class_weighted(labels, class_weights))
  if training.sample_weight_column is not None:
    parts.append(weights_lib.column_weights(inputs.column, str(training.sample_weight_column),
                                            processor.file_for("train")))
  if training.identity_weights:
    present = [name for name in SCORED_IDENTITY_COLUMNS if name in inputs.present]
    parts.append(task.identity_weights(inputs.toxic, inputs.mentions, present))
  if inputs.windowed:  # (a text's k windows share its weight; the weights average 1)
    texts = sum(inputs.first)
    parts.append([w * len(inputs.window) / texts for w in inputs.window])
  if not parts:
    return None
  combined = weights_lib.combined(parts, spec, labels)
  log.info("training weights: min %.4g, mean %.4g, max %.4g over %d rows", min(combined),
           sum(combined) / len(combined), max(combined), len(combined))
  return combined
