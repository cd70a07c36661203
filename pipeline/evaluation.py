"""Evaluation and prediction of one model: which checkpoint holds its head, the dev
split's metrics, and the head's outputs for every row in input order."""

import collections
import logging
import math
import os

import numpy

from data.reread import read_again
from modeling.checkpoint import (EARLIER_CHECKPOINT_FIX, checkpoint_global_step, head_shape,
                                 newest_checkpoint, values_problem)
from modeling.checkpoint import files_problem as checkpoint_files_problem
from data.features import label_value
from data.long_texts import WindowLogits, logits_of
from modeling.metrics import metric_names, metrics_of
from pipeline import eval_history, stopping
from pipeline.outputs import paired, write_eval_results, write_test_results
from pipeline.progress import RateReport
from spec.run_errors import ArtefactFault, FlagError, NumericFault

log = logging.getLogger(__name__)

# Eval results that are no metric to choose a checkpoint by.
NOT_METRICS = ("checkpoint", "global_step", "num_examples", "majority_baseline_accuracy")


class Evaluator(object):
  """Evaluates and predicts splits (pipeline.splits.Split) of one model with its
  estimator, writing into output_dir. task (pipeline.task_extras) adds its own report to an
  evaluation; init_checkpoint is what the model_fn initialises from (a checkpoint named
  so is not restored again)."""

  def __init__(self, estimator, task, output_dir, eval_batch_size, init_checkpoint=None):
    self.estimator = estimator
    self.task = task
    self.label_spec = task.processor.label_spec
    self.output_dir = output_dir
    self.eval_batch_size = eval_batch_size
    self.init_checkpoint = init_checkpoint
    self._dev = None  # (the dev split, its checkpoint and its outputs: dev_outputs')

  def restore_path(self, checkpoint):
    """What the Estimator restores: a checkpoint of --output_dir (or its best/) by path;
    None for the initialisation from --init_checkpoint (a fine-tuned head there, or none
    at all), which the model_fn does."""
    return checkpoint if checkpoint and checkpoint != self.init_checkpoint else None

  def evaluate(self, split, checkpoint, outputs=None, name=None):
    """The dev split's metrics into eval_results. outputs, when the caller has predicted
    the split already (folds), spare the task's report a second pass. name puts the
    TensorBoard events in <output_dir>/eval_<name> (the best checkpoint's, which would
    otherwise sit out of order among the evaluations during training)."""
    examples, meta = split.examples, split.metadata
    steps = meta["num_records"] // self.eval_batch_size
    log.info("evaluating %d examples %s with %s%s", len(examples),
             "(+%d padding) in %d batches" % (meta["num_padding"], steps)
             if split.window_counts is None else "in %d windows" % split.num_examples,
             describe_checkpoint(checkpoint),
             "; the positive class of the binary metrics is %r" % self.label_spec.classes[1]
             if self.label_spec.has_classes and
             len(self.label_spec.classes) == 2 else "")
    if split.window_counts is not None:
      results = self._per_text_metrics(split, checkpoint)
    else:
      raw = self.estimator.evaluate(input_fn=split.input_fn(), steps=steps, name=name,
                                    checkpoint_path=self.restore_path(checkpoint),
                                    hooks=[stopping.session_hook()])
      stopping.check()  # (a signal ended the evaluation early: its figures are not written)
      results = {k: _plain(v) for k, v in raw.items()}
    # Estimator's own "loss" averages per-batch means, so a part-padded last batch would
    # weigh too much; eval_loss is the exact mean over real examples.
    results["loss"] = results.pop("eval_loss")
    if not math.isfinite(results["loss"]):
      raise NumericFault("the eval loss of %s on %s is %r: the model's outputs are not "
                         "numbers for some rows, so no metric means anything. Fix: train "
                         "again with a lower --learning_rate (or without --use_fp16); "
                         "--do_predict names the first row" % (
                             describe_checkpoint(checkpoint), split.path_description(),
                             results["loss"]))
    results["num_examples"] = int(round(results["num_examples"]))
    if results["num_examples"] != len(examples):
      raise RuntimeError("eval counted %d examples but the dev file has %d" %
                         (results["num_examples"], len(examples)))
    if self.label_spec.has_classes:
      results["majority_baseline_accuracy"] = majority_accuracy(examples)
    if self.task.reports_on(examples):
      if outputs is None:
        outputs = self.dev_outputs(split, checkpoint)
      results.update(self.task.evaluation_report(examples, outputs.tolist(), self.output_dir))
    for key in sorted(k for k, v in results.items() if isinstance(v, float) and math.isnan(v)):
      log.warning("eval %s is undefined on this dev set (e.g. an AUC of a column with no "
                  "positive or no negative row); recorded as null", key)
      results[key] = None
    results["checkpoint"] = checkpoint
    write_eval_results(self.output_dir, results)
    return results

  def _per_text_metrics(self, split, checkpoint):
    """An evaluation's metrics of a split of windows (--doc_stride): each text's windows
    predicted and aggregated, then the head's loss and metrics of the texts' outputs (the
    evaluation's own, in a scratch graph). No TensorBoard events are written for it."""
    outputs = self.dev_outputs(split, checkpoint)
    log.info("the metrics are of %d texts, from the outputs of their %d windows "
             "aggregated by their %s", split.num_texts, split.num_examples,
             split.windowing.aggregation)
    labels = [label_value(example, self.label_spec) for example in split.examples]
    raw = metrics_of(self.label_spec, logits_of(outputs, self.label_spec.loss), labels)
    results = {k: _plain(v) for k, v in raw.items()}
    results["global_step"] = checkpoint_global_step(checkpoint) if checkpoint else 0
    return results

  def predict(self, split, checkpoint):
    """test_results.tsv of the test split, whose examples are not held: the predict file
    is read again as the lines are written. Returns (its path, the outputs, their logits
    before any temperature)."""
    log.info("predicting %d examples (+%d padding) with %s", split.num_texts,
             split.metadata["num_padding"], describe_checkpoint(checkpoint))
    outputs, logits = self.predict_outputs(split, checkpoint, logits=True)
    processor = self.task.processor
    rows = read_again(processor, "test", split.metadata["source_sha256"])
    path = write_test_results(self.output_dir, processor, paired(rows, outputs),
                              {"checkpoint": checkpoint,
                               "global_step": checkpoint and checkpoint_global_step(checkpoint)})
    return path, outputs, logits

  def dev_outputs(self, split, checkpoint):
    """predict_outputs of the dev split at checkpoint, predicted once for what reads them
    after an evaluation (the calibration, the task's report, the thresholds, the
    evaluation report)."""
    return self._dev_predicted(split, checkpoint)[0]

  def dev_logits(self, split, checkpoint):
    """The head's logits for the dev split's rows (dev_outputs' rows), as they are before
    any temperature divides them."""
    return self._dev_predicted(split, checkpoint)[1]

  def forget_dev_outputs(self):
    """The next dev_outputs predicts again (the graph has changed: a new temperature)."""
    self._dev = None

  def _dev_predicted(self, split, checkpoint):
    if self._dev is None or self._dev[:2] != (split, checkpoint):
      self._dev = (split, checkpoint, self.predict_outputs(split, checkpoint, logits=True))
    return self._dev[2]

  def predict_outputs(self, split, checkpoint, logits=False):
    """The head's outputs for every example of a split, in input order (whatever order its
    records are in: each carries its example's place), as a float32 array of one row per
    example: 4 bytes per output, and a byte per row for whether it came back. Padding
    rows are dropped, and a row lost or predicted twice is an error. Batches are taken
    whole (not row by row, which cost more than BERT-Tiny's own computation); a progress
    line every 30 s. logits: (the outputs, the logits) instead. A split of windows
    (--doc_stride) gives one row per text, its windows aggregated (logits: the windows'
    own, as data.long_texts.WindowLogits, which a temperature divides before their outputs
    are aggregated)."""
    total = split.num_examples
    rows = seen = logit_rows = None
    done = 0
    progress = RateReport("predicted", total)
    for batch in self.estimator.predict(input_fn=split.input_fn(),
                                        yield_single_examples=False,
                                        checkpoint_path=self.restore_path(checkpoint)):
      stopping.check()
      real = numpy.asarray(batch["is_real_example"]).reshape(-1).astype(bool)
      ids = numpy.asarray(batch["example_id"]).reshape(-1)[real].astype(numpy.int64)
      values = numpy.asarray(batch["outputs"], dtype=numpy.float32)[real]
      if rows is None:
        rows = numpy.zeros((total, values.shape[1]), numpy.float32)
        seen = numpy.zeros(total, bool)
        logit_rows = numpy.zeros_like(rows) if logits else None
      _check_prediction_ids(ids, seen, total)
      rows[ids] = values
      if logits:
        logit_rows[ids] = numpy.asarray(batch["logits"], dtype=numpy.float32)[real]
      seen[ids] = True
      done += len(ids)
      progress(done)
    if done != total:
      raise RuntimeError("predicted %d rows for %d examples: rows were lost" % (done, total))
    if rows is None:
      rows = logit_rows = numpy.zeros((0, 0), numpy.float32)
    check_finite_outputs(rows, split, checkpoint)
    if split.window_counts is not None:
      rows = split.per_text(rows)
      logit_rows = WindowLogits(logit_rows, split.window_counts, split.windowing.aggregation,
                                self.label_spec.loss) if logits else None
    return (rows, logit_rows) if logits else rows


def check_finite_outputs(rows, split, checkpoint):
  """NumericFault naming the first example whose outputs are not finite numbers."""
  bad = ~numpy.isfinite(rows).all(axis=1)
  if bad.any():
    texts = split.texts_of(numpy.flatnonzero(bad))  # (ascending: the first is first)
    first, texts = int(texts[0]), set(texts.tolist())
    raise NumericFault(
        "the outputs of %s for %d of %d rows are not numbers (NaN or infinity), the first "
        "being row %d (counted from 1) of %s: nothing was written from them. Fix: the model is broken "
        "(a training that diverged): train again with a lower --learning_rate (or without "
        "--use_fp16)" % (describe_checkpoint(checkpoint), len(texts), split.num_texts,
                         first + 1, split.path_description()))


def _check_prediction_ids(ids, seen, total):
  """RuntimeError when a batch's example ids name no example, or one predicted before."""
  outside = ids[(ids < 0) | (ids >= total)]
  if len(outside):
    raise RuntimeError("a prediction names example %d of %d" % (outside[0], total))
  unique, counts = numpy.unique(ids, return_counts=True)
  again = numpy.concatenate([ids[seen[ids]], unique[counts > 1]])
  if len(again):
    raise RuntimeError("example %d was predicted twice" % again[0])


def metric_names_of(task, dev_examples):
  """The metrics an evaluation of this run reports (as in eval_results.json)."""
  names = {"loss" if n == "eval_loss" else n for n in metric_names(task.processor.label_spec)}
  names.update(task.report_metric_names(dev_examples))
  return sorted(names - set(NOT_METRICS))


def checkpoint_to_use(modes, output_dir, init_checkpoint, label_spec):
  """The checkpoint that a run without training evaluates, predicts or exports with
  (head_checkpoint; refused before any work); None for a run that trains."""
  if modes.do_train or not (modes.do_eval or modes.do_predict or modes.do_export):
    return None
  mode = "evaluate" if modes.do_eval else "predict" if modes.do_predict else "export"
  return head_checkpoint(output_dir, init_checkpoint,
                         modes.allow_untrained_head and not modes.do_export, mode, label_spec)


def head_checkpoint(output_dir, init_checkpoint, allow_untrained_head, mode, label_spec):
  """The checkpoint that eval and predict take the classifier head from, checked.

  That is the best checkpoint kept in --output_dir, else its newest, else
  --init_checkpoint when it holds a fine-tuned head. A head in no checkpoint has never
  been trained, and its predictions would be random: refused unless
  allow_untrained_head. A head with another number of outputs belongs to another task:
  refused.
  """
  kept = eval_history.read_best(output_dir)  # (verified: its checkpoint is whole)
  if kept:
    source = kept["checkpoint"]
    log.info("%s keeps the best checkpoint by %s (%s at step %d): using it", os.path.dirname(
        source), kept["metric"], format_metric(kept["value"]), kept["step"])
  else:
    source = newest_checkpoint(output_dir) or init_checkpoint
  problem = source and checkpoint_files_problem(source)
  if problem:
    raise FlagError("refusing to %s with %s: it cannot be read: %s. Restore its files, %s, "
                    "or point --output_dir or --init_checkpoint at another model" % (
                        mode, source, problem, EARLIER_CHECKPOINT_FIX))
  shape = head_shape(source) if source else None
  if shape is not None and source != init_checkpoint and init_checkpoint and head_shape(
      init_checkpoint) is not None:
    raise FlagError(
        "--init_checkpoint=%s is a fine-tuned model, and --output_dir=%s holds one too, "
        "which this run would %s with (%s), ignoring the first. Drop --init_checkpoint to "
        "use the folder's model, or pass an --output_dir without a model to use the "
        "checkpoint's" % (init_checkpoint, output_dir, mode, os.path.basename(source)))
  # A step-0 checkpoint has a head, as it was initialised: random.
  untrained_at_step_0 = shape is not None and checkpoint_global_step(source) == 0
  if shape is None or untrained_at_step_0:
    if allow_untrained_head:
      log.warning("--allow_untrained_head: the classifier head starts from random values, so "
                  "predictions are random")
      return source if untrained_at_step_0 else None
    raise FlagError(
        "refusing to %s with an untrained classifier head: %s. Fine-tune first (add "
        "--do_train, which saves the model in --output_dir), or point --output_dir at a "
        "fine-tuned model's folder or --init_checkpoint at a fine-tuned checkpoint. "
        "--allow_untrained_head runs anyway, with random predictions" % (
            mode, "%s was saved at step 0, before any training" % source
            if untrained_at_step_0 else "%s holds no fine-tuned model, and %s" % (
                output_dir,
                "--init_checkpoint=%s is a pre-trained encoder without a head" % init_checkpoint
                if init_checkpoint else "no --init_checkpoint was given")))
  if shape[0] != label_spec.num_outputs:
    raise FlagError("the classifier head in %s has %d outputs, but this run has %d (%s): the "
                    "checkpoint was trained for another task or label set. Use the labels it "
                    "was trained with, or another --output_dir" % (
                        source, shape[0], label_spec.num_outputs, label_spec.describe()))
  check_values(source, mode)
  return source


def check_values(checkpoint, mode):
  """Refuses to mode ("evaluate", "predict", "export") with a checkpoint whose model
  variables are damaged (ArtefactFault) or hold numbers that are not finite
  (NumericFault: every output would be NaN), naming the variable."""
  problem, numeric = values_problem(checkpoint)
  if problem and numeric:
    raise NumericFault(
        "refusing to %s with %s: %s, so every output would be NaN. Fix: the training "
        "diverged: train again (from an earlier checkpoint, %s) with a lower "
        "--learning_rate, or without --use_fp16" % (mode, checkpoint, problem,
                                                    EARLIER_CHECKPOINT_FIX))
  if problem:
    raise ArtefactFault("refusing to %s with %s: %s. Fix: restore the checkpoint's files, "
                        "%s, or train again" % (mode, checkpoint, problem,
                                                EARLIER_CHECKPOINT_FIX))


def describe_checkpoint(path):
  """'<path> (global step N)', for the log."""
  if path is None:
    return "no checkpoint (random head)"
  step = checkpoint_global_step(path)
  return "%s (global step %s)" % (path, step if step is not None else "unknown")


def format_metric(value):
  return "%.4f" % value if isinstance(value, float) else str(value)


def majority_accuracy(examples):
  counts = collections.Counter(e.label for e in examples if e.label is not None)
  return counts.most_common(1)[0][1] / float(sum(counts.values())) if counts else 0.0


def _plain(value):
  return value.item() if hasattr(value, "item") else value
