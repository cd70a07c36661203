"""Evaluation during training: the history of evaluations, the best checkpoint, early
stopping and the learning curve.

Plain Python on files (tf.io.gfile, so an output_dir in a bucket works as on disk);
pipeline/training.py runs the train/evaluate loop and hands results here. The history file is
also the loop's memory: a resumed run reads which steps were evaluated, which was best
and how many evaluations have passed without improvement.
"""

import csv
import io
import json
import math
import os

import tensorflow.compat.v1 as tf

from data.files import write_whole

HISTORY_CSV = "eval_history.csv"
CURVE_PNG = "learning_curve.png"
BEST_DIR = "best"
BEST_JSON = "best_checkpoint.json"
# The history's own columns; the eval metrics come between train_loss and best.
FIRST_COLUMNS = ("step", "train_loss")
LAST_COLUMNS = ("best", "checkpoint", "train_seconds_so_far", "eval_seconds_so_far")


def lower_is_better(metric):
  """Losses and squared errors improve downwards; every other metric (accuracy, AUC, F1,
  MCC, correlations, the bias metric) upwards."""
  return metric == "loss" or metric.startswith(("mse", "mean_mse"))


class Goal(object):
  """The metric that picks the best checkpoint, and its direction."""

  def __init__(self, metric):
    self.metric = metric
    self.lower = lower_is_better(metric)

  def describe(self):
    return "%s (%s is better)" % (self.metric, "lower" if self.lower else "higher")

  def improves(self, value, best):
    """Whether value beats best (None: no value yet). An undefined value never does."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
      return False
    if best is None:
      return True
    return value < best if self.lower else value > best


def _cell(value):
  if value is None:
    return ""
  if isinstance(value, float):
    return repr(value)  # the shortest text that reads back as the same value
  return str(value)


def _value(text):
  if text == "":
    return None
  try:
    number = float(text)
  except ValueError:
    return text
  return int(number) if number.is_integer() and "." not in text and "e" not in text else number


class EvalHistory(object):
  """The rows of eval_history.csv: one per evaluation, in step order."""

  def __init__(self, path, rows=None):
    self.path = path
    self.rows = list(rows or [])

  @classmethod
  def load(cls, path, up_to_step):
    """The history at path, without rows past up_to_step (the checkpoint training
    resumes from: later rows belong to checkpoints that are gone)."""
    if not tf.io.gfile.exists(path):
      return cls(path)
    with tf.io.gfile.GFile(path, "r") as f:
      rows = [{k: _value(v) for k, v in row.items()} for row in csv.DictReader(f)]
    return cls(path, [r for r in rows if r["step"] <= up_to_step])

  def steps(self):
    return [row["step"] for row in self.rows]

  def append(self, row):
    """Adds a row (step, train_loss, metrics..., best, checkpoint, seconds) and rewrites
    the file, so that it is complete after every evaluation."""
    self.rows.append(dict(row))
    self.write()

  def columns(self):
    metrics = sorted(set(k for row in self.rows for k in row) -
                     set(FIRST_COLUMNS) - set(LAST_COLUMNS))
    return list(FIRST_COLUMNS) + metrics + list(LAST_COLUMNS)

  def write(self):
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    columns = self.columns()
    writer.writerow(columns)
    for row in self.rows:
      writer.writerow([_cell(row.get(column)) for column in columns])
    write_whole(self.path, text.getvalue())

  def last(self, column, default=None):
    """The last row's value of column (default when there is no row)."""
    return self.rows[-1].get(column, default) if self.rows else default

  def best_row(self, goal):
    """The first row with the best value of goal's metric, or None."""
    best = None
    for row in self.rows:
      if goal.improves(row.get(goal.metric), best and best[goal.metric]):
        best = row
    return best

  def best_value(self, goal):
    """The best value of goal's metric so far, or None."""
    best = self.best_row(goal)
    return best[goal.metric] if best else None

  def evaluations_since_best(self, goal):
    """How many evaluations came after the best one (all of them when none is best)."""
    best = self.best_row(goal)
    if best is None:
      return len(self.rows)
    return len(self.rows) - 1 - self.rows.index(best)


def best_dir(output_dir):
  return os.path.join(output_dir, BEST_DIR)


def read_best(output_dir):
  """The record of the best checkpoint kept in <output_dir>/best (metric, value, step,
  checkpoint: its path under output_dir as given now), or None."""
  path = os.path.join(best_dir(output_dir), BEST_JSON)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path, "r") as f:
    record = json.load(f)
  # The file names the checkpoint relative to best/, so a moved or copied folder keeps it.
  record["checkpoint"] = os.path.join(best_dir(output_dir), record["checkpoint_name"])
  return record


def keep_best(checkpoint, output_dir, goal, value, step):
  """Copies checkpoint's files into <output_dir>/best (where the Estimator's rotation of
  old checkpoints cannot delete them), then records it, then removes the previous best:
  an interruption at any point leaves a complete best checkpoint on record. Returns the
  path of the copy."""
  folder = best_dir(output_dir)
  tf.io.gfile.makedirs(folder)
  name = os.path.basename(checkpoint)
  for source in tf.io.gfile.glob(checkpoint + ".*"):
    tf.io.gfile.copy(source, os.path.join(folder, os.path.basename(source)), overwrite=True)
  kept = os.path.join(folder, name)
  record = {"metric": goal.metric, "value": value, "step": step, "checkpoint_name": name,
            "lower_is_better": goal.lower}
  write_whole(os.path.join(folder, BEST_JSON), json.dumps(record, indent=2, sort_keys=True))
  for path in tf.io.gfile.glob(os.path.join(folder, "model.ckpt-*")):
    if not os.path.basename(path).startswith(name + "."):
      tf.io.gfile.remove(path)
  return kept


def learning_curve_png(rows, metric):
  """PNG bytes of the history rows against step: the training loss (the mean over the
  steps since the previous evaluation) and the eval loss on the left axis, metric on the
  right, the best evaluation marked."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  figure = Figure(figsize=(8, 4.8))
  FigureCanvasAgg(figure)
  left = figure.add_subplot(1, 1, 1)
  for column, style, color, label in (("train_loss", ".-", "#9bbbd9", "train loss"),
                                      ("loss", "o-", "#3b75af", "eval loss")):
    points = [r for r in rows if r.get(column) is not None]
    left.plot([r["step"] for r in points], [r[column] for r in points], style, color=color,
              label=label)
  left.set_xlabel("global step")
  left.set_ylabel("loss")
  handles, labels = left.get_legend_handles_labels()
  if metric != "loss":
    right = left.twinx()
    points = [r for r in rows if r.get(metric) is not None]
    right.plot([r["step"] for r in points], [r[metric] for r in points], "s-",
               color="#d9822b", label="eval " + metric)
    right.set_ylabel(metric)
    more_handles, more_labels = right.get_legend_handles_labels()
    handles, labels = handles + more_handles, labels + more_labels
    axis = right
  else:
    axis = left
  best = [r for r in rows if r.get("best")]
  if best:
    axis.plot([best[-1]["step"]], [best[-1][metric]], "*", markersize=16, color="#c0392b",
              label="best")
    handles, labels = handles + axis.get_legend_handles_labels()[0][-1:], labels + ["best"]
  left.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=4)
  left.set_title("learning curve: %s against global step" % metric)
  left.grid(alpha=0.3)
  figure.tight_layout()
  png = io.BytesIO()
  figure.savefig(png, format="png", dpi=100)
  return png.getvalue()
