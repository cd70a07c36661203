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

from data.files import read_written, write_whole
from modeling.checkpoint import files_problem as checkpoint_files_problem
from spec.run_errors import ArtefactFault

HISTORY_CSV = "eval_history.csv"
CURVE_PNG = "learning_curve.png"
BEST_DIR = "best"
BEST_JSON = "best_checkpoint.json"
# The history's own columns; the eval metrics come between train_loss and best.
FIRST_COLUMNS = ("step", "train_loss")
LAST_COLUMNS = ("best", "checkpoint", "train_seconds_so_far", "eval_seconds_so_far")
# The way forward from a history or best record that cannot be used as it is.
HISTORY_FIX = ("it was cut short or edited (re-saved by a spreadsheet, say): restore it, or "
               "delete it to begin a new history at the next evaluation (the best "
               "checkpoint in best/ is kept), or train into a new --output_dir")
BEST_FIX = ("restore the best/ folder as it was written, or delete it (the next evaluations "
            "choose a best checkpoint again), or train into a new --output_dir")


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
  def load(cls, path, up_to_step, needs=None):
    """The history at path, without rows past up_to_step (the checkpoint training
    resumes from: later rows belong to checkpoints that are gone). Verified first (its
    columns, every row's cells and steps): ArtefactFault names the line and the way
    forward. A byte-order mark and Windows line ends (a spreadsheet's re-save) are read.
    needs: a metric whose column the history must have (--best_metric's)."""
    text = read_written(path, HISTORY_FIX)
    if text is None:
      return cls(path)
    rows = parse_history(path, text.lstrip("\ufeff"))
    if needs and rows and not any(needs in row for row in rows):
      raise ArtefactFault("%s has no column %s, the metric the best checkpoint is chosen by: "
                          "its evaluations so far could not be compared. Fix: %s"
                          % (path, needs, HISTORY_FIX))
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


def parse_history(path, text):
  """The rows of a history file's text, each cell as written (numbers, None for empty);
  ArtefactFault for anything this program would not have written."""
  def fault(problem, line=None):
    return ArtefactFault("%s%s: %s. Fix: %s" % (path, ", line %d" % line if line else "",
                                                problem, HISTORY_FIX))
  if not text.strip():
    raise fault("it is empty")
  try:
    records = list(csv.reader(io.StringIO(text, newline="")))
  except csv.Error as e:
    raise fault("it is not CSV (%s)" % e)
  header, body = records[0], [(n, r) for n, r in enumerate(records[1:], 2) if r]
  if (tuple(header[:len(FIRST_COLUMNS)]) != FIRST_COLUMNS or
      tuple(header[-len(LAST_COLUMNS):]) != LAST_COLUMNS or len(set(header)) != len(header)):
    raise fault("its header is %s, not the columns %s ... %s that eval_history.csv has "
                "(a spreadsheet that changed the separator or the names?)" % (
                    ",".join(header)[:120], ",".join(FIRST_COLUMNS), ",".join(LAST_COLUMNS)),
                1)
  rows, previous = [], 0
  for line, record in body:
    if len(record) != len(header):
      raise fault("the row has %d cells, and the header %d" % (len(record), len(header)),
                  line)
    row = dict(zip(header, (_value(cell) for cell in record)))
    step = row["step"]
    if not isinstance(step, int) or step <= previous:
      raise fault("step %r is not a whole number above the row before's (%d)" % (
          record[0], previous), line)
    previous = step
    for name, value in row.items():
      if name == "checkpoint":
        if value is not None and not isinstance(value, str):
          raise fault("its checkpoint cell is %r, not a checkpoint's path" % record[
              header.index(name)], line)
      elif value is not None and (not isinstance(value, (int, float)) or
                                  (name != "step" and math.isinf(value))):
        raise fault("column %s holds %r, not a number" % (name, record[header.index(name)]),
                    line)
    if row["best"] not in (0, 1):
      raise fault("column best holds %r, not 0 or 1" % row["best"], line)
    rows.append(row)
  return rows


def best_dir(output_dir):
  return os.path.join(output_dir, BEST_DIR)


# A best record's entries and what each holds.
BEST_FIELDS = {"metric": str, "value": (int, float), "step": int, "checkpoint_name": str,
               "lower_is_better": bool}


def read_best(output_dir):
  """The record of the best checkpoint kept in <output_dir>/best (metric, value, step,
  checkpoint: its path under output_dir as given now), or None. Verified first: the
  record as this program writes it, and the checkpoint it names complete. ArtefactFault
  names what is wrong: a best checkpoint that is gone is never replaced by another
  unsaid."""
  path = os.path.join(best_dir(output_dir), BEST_JSON)
  text = read_written(path, BEST_FIX)
  if text is None:
    if tf.io.gfile.exists(best_dir(output_dir)) and tf.io.gfile.glob(
        os.path.join(best_dir(output_dir), "model.ckpt-*")):
      raise ArtefactFault("%s: the best checkpoint's record %s is missing. Fix: %s" % (
          best_dir(output_dir), BEST_JSON, BEST_FIX))
    return None
  try:
    record = json.loads(text)
  except ValueError as e:
    raise ArtefactFault("%s: it is not JSON (%s). Fix: %s" % (path, e, BEST_FIX))
  problem = _best_record_problem(record)
  if problem:
    raise ArtefactFault("%s: %s. Fix: %s" % (path, problem, BEST_FIX))
  # The file names the checkpoint relative to best/, so a moved or copied folder keeps it.
  record["checkpoint"] = os.path.join(best_dir(output_dir), record["checkpoint_name"])
  problem = checkpoint_files_problem(record["checkpoint"])
  if problem:
    raise ArtefactFault("%s names the best checkpoint %s (step %d), which cannot be used: "
                        "%s. Fix: %s" % (path, record["checkpoint"], record["step"], problem,
                                         BEST_FIX))
  return record


def _best_record_problem(record):
  """What makes a best record one this program did not write, or None."""
  if not isinstance(record, dict):
    return "it is not a JSON object"
  for name, kind in sorted(BEST_FIELDS.items()):
    value = record.get(name)
    if name not in record:
      return "it has no entry %s" % name
    if value is None or isinstance(value, bool) != (kind is bool) or not isinstance(
        value, kind):
      return "its entry %s is %r, not %s" % (name, value, {
          str: "a name", int: "a whole number", bool: "true or false"}.get(kind, "a number"))
  if not math.isfinite(record["value"]):
    return "its value is %r, not a finite number" % record["value"]
  if record["checkpoint_name"] != "model.ckpt-%d" % record["step"]:
    return "it names the checkpoint %r for step %d" % (record["checkpoint_name"],
                                                       record["step"])
  return None


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
