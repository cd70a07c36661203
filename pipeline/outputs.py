"""The files a run writes into --output_dir (a local folder or a bucket): the eval
results, the predictions, report files and the run summary; and what a run returns."""

import dataclasses
import json
import logging
import os
import platform
import re
import time
from typing import Any, Dict, List, Optional

import tensorflow.compat.v1 as tf

from data.files import staged_file, write_whole
from modeling.checkpoint import checkpoint_global_step
from pipeline import stopping
from pipeline.machine import describe_device
from pipeline.progress import format_seconds

log = logging.getLogger(__name__)

RUN_SUMMARY = "run_summary.json"


@dataclasses.dataclass
class ModelRun(object):
  """What one model's run produced (None: not asked for, or not this task's part)."""
  eval: Optional[Dict[str, Any]] = None  # the eval results, as in eval_results.json
  predictions: Optional[str] = None  # test_results.tsv
  test_outputs: Any = None  # the head's outputs per test row (a float32 array)
  test_sha256: Optional[str] = None  # of the predict files the test outputs are of
  checkpoint: Optional[str] = None  # the checkpoint that eval, predict and export used
  export: Optional[str] = None  # the SavedModel's folder
  summary: Optional[str] = None  # run_summary.json
  train_progress: List[tuple] = dataclasses.field(default_factory=list)  # (step, loss, ex/s)
  train_losses: List[tuple] = dataclasses.field(default_factory=list)  # (step, loss)
  oof: Any = None  # a fold's outputs on its held-out rows (a float32 array)
  oof_logits: Any = None  # their logits, before any temperature divides them
  test_logits: Any = None  # the test rows' logits, before any temperature divides them
  evaluated_to_step: Optional[int] = None  # a cluster's evaluator: the last step it evaluated
  windows: Optional[Dict[str, Any]] = None  # --doc_stride: each split's texts and windows


@dataclasses.dataclass
class FoldsRun(object):
  """What k-fold cross-validation produced."""
  folds: Dict[int, Dict[str, Any]]  # each fold's eval results
  summary: Optional[Dict[str, Any]] = None  # folds_summary.json's content
  oof_predictions: Optional[str] = None  # oof_predictions.tsv
  predictions: Optional[str] = None  # test_results.tsv, the folds' mean


class timed(object):
  """with timed(seconds, "phase"): records the block's wall time in seconds["phase"], and
  names the phase for a stop's report (pipeline.stopping)."""

  def __init__(self, seconds, phase):
    self.seconds, self.phase = seconds, phase
    self._named = stopping.phase(phase)

  def __enter__(self):
    self._named.__enter__()
    self.start = time.time()

  def __exit__(self, *exc):
    self.seconds[self.phase] = time.time() - self.start
    return self._named.__exit__(*exc)


def write_files(output_dir, files):
  """Writes [(name, bytes)] into output_dir, each whole. Returns their paths."""
  paths = []
  for name, content in files:
    paths.append(os.path.join(output_dir, name))
    write_whole(paths[-1], content)
  return paths


def json_text(value):
  """value as the JSON every tool reads: a NaN or infinity (which json.dumps would write
  as NaN, a token no JSON parser accepts) is a ValueError, never written."""
  return json.dumps(value, indent=2, sort_keys=True, allow_nan=False, default=str)


def write_eval_results(output_dir, results):
  """eval_results.txt (key = value lines) and eval_results.json, each whole; each result
  logged."""
  write_whole(os.path.join(output_dir, "eval_results.json"), json_text(results))
  write_whole(os.path.join(output_dir, "eval_results.txt"),
              "".join("%s = %s\n" % (key, results[key]) for key in sorted(results)))
  for key in sorted(results):
    log.info("  eval %s = %s", key, results[key])


def write_test_results(output_dir, processor, predictions, model):
  """test_results.tsv (one line per predict row) and test_results.json (what predicted
  them: model, e.g. the checkpoint and its step). predictions: (example, its outputs)
  for every predict row in file order, an iterable read as the lines are written.
  Returns the .tsv's path."""
  path = os.path.join(output_dir, "test_results.tsv")
  rows = write_predictions(path, predictions, processor.label_spec,
                           processor.carried_columns("test"))
  write_whole(os.path.join(output_dir, "test_results.json"), json_text(dict(
      model, predict_file=processor.file_for("test"), rows=rows,
      labels=processor.label_spec.classes, label_spec=processor.label_spec.to_card())))
  log.info("wrote %d predictions to %s", rows, path)
  return path


def write_predictions(path, predictions, label_spec, carried=()):
  """One line per (example, outputs) of predictions, in their order: id, the label spec's
  prediction columns (e.g. per-class probabilities and the predicted class), then the
  carried columns (names of the examples' extras). Every cell is written as it is, quoted
  as CSV quotes (tsv_cell) where it holds a tab, a line break or a quote. The file is
  written whole (staged, read back as Python's csv module reads it, then renamed) once
  predictions end. Returns the number of lines."""
  header = ["id"] + label_spec.prediction_header() + list(carried)
  count = [0]
  with staged_file(path, verify=lambda staging: check_tsv(staging, len(header), count[0])) \
      as out:
    out.write(tsv_line(header))
    for example, values in predictions:
      out.write(tsv_line([example.guid] + label_spec.prediction_cells(values) +
                         [example.extras.get(k, "") for k in carried]))
      count[0] += 1
  return count[0]


def paired(examples, outputs):
  """(example, its outputs) for examples (an iterable in file order) and outputs (one row
  each, in the same order). RuntimeError when their numbers differ; the examples are
  read to their end first, so that a reader's own checks there still run."""
  count = 0
  for example in examples:
    if count < len(outputs):
      yield example, outputs[count]
    count += 1
  if count != len(outputs):
    raise RuntimeError("the predict file has %d rows, but %d were predicted" %
                       (count, len(outputs)))


def write_fold_predictions(path, examples, fold_of, outputs, label_spec):
  """Out-of-fold predictions: id, fold, the head's prediction columns, one line per row."""
  header = ["id", "fold"] + label_spec.prediction_header()
  count = [0]
  with staged_file(path, verify=lambda staging: check_tsv(staging, len(header), count[0])) \
      as out:
    out.write(tsv_line(header))
    for example, fold, values in zip(examples, fold_of, outputs):
      out.write(tsv_line([example.guid, str(fold)] + label_spec.prediction_cells(values)))
      count[0] += 1


# What makes a TSV cell need quotes for Python's csv module and pandas to read it back as
# it was: a tab, a line break, or a quote.
_NEEDS_QUOTES = re.compile(u'[\t\n\r"]')


def tsv_cell(text):
  """text as one TSV cell that csv and pandas read back unchanged: as it is, or quoted
  (its quotes doubled) where it holds a tab, a line break or a quote."""
  text = str(text)
  return u'"%s"' % text.replace(u'"', u'""') if _NEEDS_QUOTES.search(text) else text


def tsv_line(cells):
  return u"\t".join(tsv_cell(cell) for cell in cells) + u"\n"


def check_tsv(path, width, rows):
  """Reads a TSV just written as Python's csv module does: RuntimeError unless it has a
  header and rows lines of width cells each (a writer's bug must not reach a user)."""
  import csv
  csv.field_size_limit(2 ** 31 - 1)
  with tf.io.gfile.GFile(path, "r") as f:  # (lines end at \n alone: a quoted \r stays)
    count = -1
    for count, record in enumerate(csv.reader(f, delimiter="\t")):
      if len(record) != width:
        raise RuntimeError("%s: line %d reads back as %d cells, not %d" % (
            path, count + 1, len(record), width))
  if count != rows:
    raise RuntimeError("%s reads back as %d rows, not %d" % (path, count, rows))


def write_run_summary(c, started, seconds, progress, bert_config, result, best=None,
                      cluster=None):
  """run_summary.json in --output_dir: the wall times (start-up and steady training
  apart), examples/sec, the device, the runtime versions, what the run produced (result,
  a ModelRun; best: the kept best checkpoint's record) and every option, so that runs of
  one command on several machines compare row by row (tools/run_table.py). (A task of a
  cluster trains on every GPU its machine has; otherwise --num_gpus says how many.)"""
  import numpy
  device, output_dir = c.device, c.outputs.output_dir
  summary = {
      "format": "bert-text-classifier-run-summary", "version": 1,
      "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
      "total_seconds": time.time() - started,
      "seconds": seconds, "training": training_figures(progress, seconds, output_dir),
      "device": describe_device(device.use_tpu, device.tpu_name, device.master,
                                device.num_tpu_cores,
                                None if cluster is not None else device.num_gpus),
      "versions": {"python": platform.python_version(), "tensorflow": tf.__version__,
                   "numpy": numpy.__version__, "platform": platform.platform()},
      "model": ("hub module %s" % c.model.bert_hub_module_handle
                if c.model.bert_hub_module_handle else
                "BERT L=%d H=%d A=%d" % (bert_config.num_hidden_layers, bert_config.hidden_size,
                                         bert_config.num_attention_heads)),
      "results": {"eval": result.eval, "predictions": result.predictions,
                  "export": result.export, "checkpoint": result.checkpoint, "best": best,
                  "windows": result.windows},
      "flags": c.as_dict(), "given_flags": sorted(c.given),
  }
  path = os.path.join(output_dir, RUN_SUMMARY)
  write_whole(path, json_text(summary))
  log.info("run summary in %s: %s", path, ", ".join(
      "%s %s" % (phase, format_seconds(s)) for phase, s in sorted(seconds.items())))
  return path


def training_figures(progress, seconds, output_dir):
  """The summary's training figures from the progress hook (None when nothing trained)."""
  if progress is None:
    return None
  measured_steps, measured_seconds = progress.measured()
  global_step = checkpoint_global_step(tf.train.latest_checkpoint(output_dir))
  return {
      "steps": progress.total_steps, "batch_size": progress.batch_size,
      "global_step": global_step,
      # The steps this run trained (a resumed run's steps before it were another's; none
      # when the folder's model had its steps already).
      "steps_trained": max(0, (global_step or 0) - (progress.start_step or 0)),
      "wall_seconds": seconds["training"],
      # train() to the end of its first step; on a TPU its first loop.
      "startup_seconds": progress.startups[0] if progress.startups else seconds["training"],
      # Evaluation during training calls train() again after each evaluation, and each
      # call builds its graph and restores the checkpoint anew.
      "restarts": max(0, len(progress.startups) - 1),
      "restart_seconds": sum(progress.startups[1:]),
      "examples_per_second": progress.steady_examples_per_second(),
      "measured_seconds": measured_seconds if measured_steps else None,
      "measured_steps": measured_steps}
