"""--eval_report: an evaluation a person can read, beside eval_results.json, from the dev
split's outputs (real rows only): per-class (or per-column) precision, recall, F1 and
support at the labels the model decides (its tuned thresholds, if any), the confusion
matrix, the ROC and precision-recall curves, and calibration (expected calibration error
and a reliability diagram). Written into <output_dir>/eval_report/ (plots:
pipeline/report_plots.py).

A classification head is read by class (one against the rest; a binary head by its
second class for the curves); a multi-label or soft-target head by column, a row
positive where its label is at least 0.5 (a soft target's calibration compares with the
fraction itself). Plain numpy.
"""

import json
import logging
import os

import numpy

from data.files import write_whole
from pipeline import report_plots
from pipeline.outputs import tsv_line
from spec.labels import float32_text
from spec.run_errors import FlagError
from spec.thresholds import figures_of_counts

log = logging.getLogger(__name__)

REPORT_DIR = "eval_report"
CALIBRATION_BINS = 10  # equal-width bins of [0, 1]


def check_head(label_spec, asked):
  """FlagError when --eval_report is asked of a head with no classes or 0/1 columns."""
  if asked and label_spec.class_weights_weigh is None:
    raise FlagError("--eval_report reads classes or 0/1 label columns; a %s has neither: "
                    "drop --eval_report (eval_results.json has its metrics)"
                    % label_spec.describe())


def curves(scores, positives):
  """The ROC curve (false and true positive rates) and the precision-recall curve
  (recall, precision) of predicting positive at or above each distinct score, from the
  highest down, with the ROC's area and the average precision (the sum over those
  thresholds of precision times the rise in recall). None where there is no positive (or,
  for the ROC, no negative) row."""
  scores = numpy.asarray(scores, numpy.float64)
  positives = numpy.asarray(positives, bool)
  order = numpy.argsort(-scores, kind="stable")
  scores, positives = scores[order], positives[order]
  # The last row of each run of equal scores: where a threshold can stop.
  ends = numpy.r_[numpy.nonzero(numpy.diff(scores))[0], len(scores) - 1]
  tp = numpy.cumsum(positives)[ends].astype(numpy.float64)
  fp = (ends + 1 - tp).astype(numpy.float64)
  num_positive, num_negative = positives.sum(), len(positives) - positives.sum()
  result = {"thresholds": scores[ends].tolist(), "roc": None, "pr": None, "roc_auc": None,
            "average_precision": None}
  if num_positive:
    recall, precision = tp / num_positive, tp / (tp + fp)
    result["pr"] = (recall.tolist(), precision.tolist())
    result["average_precision"] = float(numpy.sum(numpy.diff(numpy.r_[0.0, recall]) *
                                                  precision))
    if num_negative:
      fpr, tpr = numpy.r_[0.0, fp / num_negative], numpy.r_[0.0, tp / num_positive]
      result["roc"] = (fpr.tolist(), tpr.tolist())
      result["roc_auc"] = float(numpy.sum(numpy.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
  return result


def calibration(predicted, observed, bins=CALIBRATION_BINS):
  """Reliability by equal-width bins of predicted probability (a bin holds (lo, hi], the
  first also 0): each non-empty bin's rows, mean prediction and mean observed outcome (a
  0/1 label, or a fraction), and the expected calibration error, the rows' mean of
  |observed - predicted| over their bins."""
  predicted = numpy.asarray(predicted, numpy.float64)
  observed = numpy.asarray(observed, numpy.float64)
  edges = numpy.linspace(0.0, 1.0, bins + 1)
  which = numpy.searchsorted(edges[1:-1], predicted)
  table, error = [], 0.0
  for b in range(bins):
    chosen = which == b
    count = int(chosen.sum())
    if count:
      mean_predicted = float(predicted[chosen].mean())
      mean_observed = float(observed[chosen].mean())
      table.append({"bin": [float(edges[b]), float(edges[b + 1])], "rows": count,
                    "mean_predicted": mean_predicted, "mean_observed": mean_observed})
      error += count * abs(mean_observed - mean_predicted)
  return {"expected_calibration_error": error / len(predicted) if len(predicted) else None,
          "bins": table}


def _counts_figures(tp, fp, fn, tn):
  precision, recall, f1 = figures_of_counts(int(tp), int(fp), int(fn))
  return {"precision": precision, "recall": recall, "f1": f1, "support": int(tp + fn),
          "tp": int(tp), "fp": int(fp), "fn": int(fn), "tn": int(tn)}


def _averages(rows, total):
  """The macro (unweighted) and support-weighted means of the rows' precision, recall, F1."""
  names = ("precision", "recall", "f1")
  macro = {n: float(numpy.mean([r[n] for r in rows])) for n in names}
  weighted = {n: (sum(r[n] * r["support"] for r in rows) / float(total) if total else 0.0)
              for n in names}
  return {"macro": macro, "weighted": weighted}


def class_report(label_spec, examples, outputs):
  """The report of a classification head: per class, the confusion matrix (rows the true
  class, columns the decided one), curves one class against the rest, and the top
  label's calibration (a binary head's: the second class's probability)."""
  classes = label_spec.classes
  index = {name: i for i, name in enumerate(classes)}
  truth = numpy.array([index[e.label] for e in examples])
  decided = numpy.array([index[label_spec.decide(row)] for row in outputs])
  k = len(classes)
  confusion = numpy.zeros((k, k), numpy.int64)
  numpy.add.at(confusion, (truth, decided), 1)
  curve_of = {name: curves(outputs[:, i], truth == i) for i, name in enumerate(classes)}
  rows = []
  for i, name in enumerate(classes):
    tp = confusion[i, i]
    fp, fn = confusion[:, i].sum() - tp, confusion[i, :].sum() - tp
    row = dict(_counts_figures(tp, fp, fn, len(truth) - tp - fp - fn), name=name)
    row.update(_curve_figures(curve_of[name]))
    rows.append(row)
  if k == 2:
    reliability = calibration(outputs[:, 1], truth == 1)
    calibrated = "probability of %s" % classes[1]
  else:
    reliability = calibration(outputs.max(axis=1), decided == truth)
    calibrated = "the top class's probability"
  return {"kind": "classes", "per_class": rows, "accuracy": float(numpy.mean(decided == truth)),
          "confusion": confusion.tolist(), "averages": _averages(rows, len(truth)),
          "calibration": dict(reliability, of=calibrated),
          "curves": {name: curve_of[name] for i, name in enumerate(classes)
                     if k > 2 or i == 1}}


def _curve_figures(curve):
  return {"roc_auc": curve["roc_auc"], "average_precision": curve["average_precision"]}


def column_report(label_spec, examples, outputs):
  """The report of a multi-label or soft-target head: per column, at its threshold (0.5
  unless tuned), with a row positive where its label is at least 0.5."""
  labels = numpy.array([e.label for e in examples], numpy.float64).reshape(len(examples), -1)
  rows, curve_of, reliability = [], {}, {}
  for j, name in enumerate(label_spec.columns):
    positive = labels[:, j] >= 0.5
    decided = outputs[:, j] >= label_spec.threshold(name)
    tp = int((decided & positive).sum())
    fp, fn = int((decided & ~positive).sum()), int((~decided & positive).sum())
    curve_of[name] = curves(outputs[:, j], positive)
    row = dict(_counts_figures(tp, fp, fn, len(positive) - tp - fp - fn), name=name,
               threshold=label_spec.threshold(name))
    row.update(_curve_figures(curve_of[name]))
    rows.append(row)
    reliability[name] = calibration(outputs[:, j], labels[:, j])
  return {"kind": "columns", "per_class": rows, "averages": _averages(
      rows, sum(r["support"] for r in rows)), "curves": curve_of, "calibration": reliability}


def write(output_dir, label_spec, examples, outputs):
  """Writes the report of the dev examples and the head's outputs for them (rows in the
  same order) into output_dir/eval_report. Returns its folder."""
  outputs = numpy.asarray(outputs, numpy.float64)
  if len(outputs) != len(examples):
    raise ValueError("%d outputs for %d dev examples" % (len(outputs), len(examples)))
  report = (class_report if label_spec.has_classes else column_report)(
      label_spec, examples, outputs)
  folder = os.path.join(output_dir, REPORT_DIR)
  os.makedirs(folder, exist_ok=True)
  summary = {k: v for k, v in report.items() if k != "curves"}
  summary.update(head=label_spec.describe(), num_examples=len(examples),
                 thresholds=dict(label_spec.thresholds))
  write_whole(os.path.join(folder, "report.json"),
              json.dumps(summary, indent=2, sort_keys=True) + "\n")
  write_whole(os.path.join(folder, "per_class.tsv"), _per_class_tsv(report))
  write_whole(os.path.join(folder, "confusion.tsv"), _confusion_tsv(label_spec, report))
  for name, png in report_plots.pngs(label_spec, report).items():
    write_whole(os.path.join(folder, name), png)
  write_whole(os.path.join(folder, "report.md"), _markdown(label_spec, report, len(examples)))
  log.info("evaluation report of %d dev rows in %s (report.md)", len(examples), folder)
  return folder


PER_CLASS_COLUMNS = ("name", "precision", "recall", "f1", "support", "roc_auc",
                     "average_precision")


def _cell(value):
  return "" if value is None else float32_text(value) if isinstance(value, float) else str(
      value)


def _per_class_tsv(report):
  return "".join(tsv_line(cells) for cells in [PER_CLASS_COLUMNS] + [
      [_cell(row[c]) for c in PER_CLASS_COLUMNS] for row in report["per_class"]])


def _confusion_tsv(label_spec, report):
  """A classification head's matrix (a row per true class, a column per decided one), or
  a column head's counts, a row per column."""
  if report["kind"] == "classes":
    rows = [["true\\decided"] + label_spec.classes]
    rows += [[name] + [str(n) for n in counts]
             for name, counts in zip(label_spec.classes, report["confusion"])]
  else:
    rows = [["column", "threshold", "tp", "fp", "fn", "tn"]]
    rows += [[r["name"], float32_text(r["threshold"])] + [str(r[k]) for k in (
        "tp", "fp", "fn", "tn")] for r in report["per_class"]]
  return "".join(tsv_line(cells) for cells in rows)


def _md(name):
  """A class or column name as a Markdown table cell shows it."""
  return name.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace(
      "\r", " ").replace("*", "\\*").replace("_", "\\_")


def _markdown(label_spec, report, num_rows):
  """report.md: the tables a person reads first, and the plots."""
  def figure(value):
    return "n/a" if value is None else "%.4f" % value
  unit = "class" if report["kind"] == "classes" else "column"
  lines = ["# Evaluation report", "", "%s, %d dev rows%s." % (
      _md(label_spec.describe()), num_rows, "; accuracy %.4f" % report["accuracy"]
      if "accuracy" in report else ""), "",
           "| %s | precision | recall | F1 | support | ROC AUC | average precision |" % unit,
           "|---|---|---|---|---|---|---|"]
  for row in report["per_class"]:
    lines.append("| %s | %s | %s | %s | %d | %s | %s |" % (
        _md(row["name"]), figure(row["precision"]), figure(row["recall"]), figure(row["f1"]),
        row["support"], figure(row["roc_auc"]), figure(row["average_precision"])))
  for name in ("macro", "weighted"):
    means = report["averages"][name]
    lines.append("| %s mean | %s | %s | %s | | | |" % (
        name, figure(means["precision"]), figure(means["recall"]), figure(means["f1"])))
  if label_spec.decision_names() and (label_spec.thresholds or report["kind"] == "columns"):
    lines += ["", "Decided at: %s." % ", ".join("%s %.4g" % (_md(name),
                                                             label_spec.threshold(name))
                                              for name in label_spec.decision_names())]
  lines += ["", "Expected calibration error (%d equal bins): %s." % (
      CALIBRATION_BINS, _calibration_text(report, figure)), ""]
  lines += ["![%s](%s)" % (name[:-4], name) for name in report_plots.PLOTS]
  return "\n".join(lines) + "\n"


def _calibration_text(report, figure):
  if report["kind"] == "classes":
    return "%s (%s)" % (figure(report["calibration"]["expected_calibration_error"]),
                        report["calibration"]["of"])
  return ", ".join("%s %s" % (_md(name), figure(c["expected_calibration_error"]))
                   for name, c in sorted(report["calibration"].items()))
