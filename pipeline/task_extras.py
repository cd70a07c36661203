"""What a task adds to the pipeline around its processor: extra training weights, and a
report of its own after an evaluation. Most tasks add nothing; Jigsaw Unintended Bias adds
its identity weights and the competition's bias metric."""

import logging
import math

from data import weights as weights_lib
from data.data_error import DataError
from pipeline import bias_metrics
from pipeline.outputs import write_files
from spec.run_errors import FlagError
from spec.task_names import SCORED_IDENTITY_COLUMNS

log = logging.getLogger(__name__)


class Task(object):
  """The pipeline's view of a task, whose processor (data/tasks/) reads its files:
  nothing beyond the head's own loss and metrics."""

  # Whether its evaluation also predicts the dev split (whose records are then padded to
  # whole batches of both sizes).
  evaluation_predicts = False

  def __init__(self, processor):
    self.processor = processor

  def identity_fact(self, example):
    """What identity weights read of a train row (--identity_weights)."""
    raise FlagError("--identity_weights is for task jigsaw_bias (its identity columns)")

  def report_metric_names(self, dev_examples):
    """The names of the figures evaluation_report adds to the eval results."""
    return []

  def reports_on(self, dev_examples):
    """Whether an evaluation of these dev examples writes a report (which then needs the
    dev split's predictions too)."""
    return False

  def evaluation_report(self, examples, outputs, output_dir):
    """The task's own figures of an evaluation, from the dev examples and their outputs;
    any report files go into output_dir."""
    return {}


class JigsawBiasTask(Task):
  """Kaggle's Jigsaw Unintended Bias: rows weighted by identity, and its bias metric (a
  table per identity in bias_metrics.csv, a chart in bias_metrics.png, and the summary
  figures in the eval results, prefixed bias_)."""

  # The bias metric's summary figures in eval results (prefixed bias_).
  FIGURES = ("final_metric", "overall_auc", "power_mean_subgroup_auc",
             "power_mean_bpsn_auc", "power_mean_bnsp_auc")
  evaluation_predicts = True  # the bias metric scores the dev split's predictions

  def identity_fact(self, example):
    """(whether the row is toxic: target >= 0.5, whether it mentions an identity: any of
    the scored identity values >= 0.5, the scored identity columns it carries)."""
    present = [name for name in SCORED_IDENTITY_COLUMNS if name in example.extras]
    return (self.target(example) >= 0.5,
            any(identity_value(example.extras[name]) >= 0.5 for name in present), present)

  def identity_weights(self, toxic, mentions, present):
    """data/weights.identity_weights of the train rows' identity facts (present: the
    scored identity columns any row carries)."""
    path = self.processor.file_for("train")
    if not present:
      raise DataError(path, "--identity_weights needs the identity columns (%s), and the "
                      "train file has none" % ", ".join(SCORED_IDENTITY_COLUMNS),
                      "add them, or drop --identity_weights")
    (log.info if any(mentions) else log.warning)(
        "identity weights: %d of %d train rows mention an identity (%s)", sum(mentions),
        len(mentions), ", ".join(present))
    return weights_lib.identity_weights(toxic, mentions)

  def targets(self, examples):
    return [self.target(e) for e in examples]

  def target(self, example):
    """A row's target: the fraction (soft target: the first label column), or 1.0 and 0.0
    for the classes of target >= 0.5 (classification)."""
    if self.processor.label_spec.has_classes:
      return float(example.label)
    return example.label[0]

  def report_metric_names(self, dev_examples):
    return ["bias_" + k for k in self.FIGURES] if identity_columns_in(dev_examples) else []

  def reports_on(self, dev_examples):
    if identity_columns_in(dev_examples):
      return True
    log.warning("%s has none of the identity columns %s: no bias metric",
                self.processor.file_for("dev"), ", ".join(SCORED_IDENTITY_COLUMNS))
    return False

  def evaluation_report(self, examples, outputs, output_dir):
    """The competition's bias metric on the dev split, from its outputs."""
    spec = self.processor.label_spec
    # The toxicity score: the target column's output (soft target: it comes first), or
    # the probability of class "1" (classification of target >= 0.5).
    toxic_output = spec.classes.index("1") if spec.has_classes else 0
    scores = [o[toxic_output] for o in outputs]
    values = {name: [identity_value(e.extras.get(name, "")) for e in examples]
              for name in identity_columns_in(examples)}
    table, summary = bias_metrics.bias_report(scores, self.targets(examples), values)
    csv_path, png_path = write_files(output_dir, bias_metrics.bias_report_files(table, summary))
    log.info("bias metric (Jigsaw Unintended Bias): final %.4f, overall AUC %.4f, power "
             "means: subgroup %.4f, BPSN %.4f, BNSP %.4f, over %s; per identity in %s and %s",
             summary["final_metric"], summary["overall_auc"],
             summary["power_mean_subgroup_auc"], summary["power_mean_bpsn_auc"],
             summary["power_mean_bnsp_auc"], ", ".join(summary["identities_scored"]),
             csv_path, png_path)
    for metric, names in sorted(summary["undefined"].items()):
      if names:
        log.warning("bias metric: %s is undefined for %s (no positive or no negative row); "
                    "the power mean is over the others", metric, ", ".join(names))
    if summary["note"]:
      log.warning("bias metric: %s", summary["note"])
    return {"bias_" + k: None if math.isnan(summary[k]) else summary[k] for k in self.FIGURES}


TASKS = {"jigsaw_bias": JigsawBiasTask}


def task_of(processor):
  """The Task of a processor's task."""
  return TASKS.get(processor.name, Task)(processor)


def identity_columns_in(examples):
  """The scored identity columns the examples carry (in their extras)."""
  return [name for name in SCORED_IDENTITY_COLUMNS if any(name in e.extras for e in examples)]


def identity_value(cell):
  """An identity column's cell as a fraction; NaN when empty (not annotated)."""
  return float(cell) if cell.strip() else float("nan")
