"""The Jigsaw Unintended Bias in Toxicity Classification metric, as Kaggle scored it.

Plain numpy/pandas (and matplotlib for the chart); no TensorFlow, so it runs on any
predictions file.

Labels and subgroups. Each row has a true `target`, the fraction of raters who called
the text toxic, and a predicted score. A row is *toxic* (positive) when target >= 0.5.
Each identity column (male, female, ..., psychiatric_or_mental_illness) holds the
fraction of raters who said the text mentions that identity, or NaN where the row was
not annotated for identities. A row is in the identity's *subgroup* when that fraction
is >= 0.5; NaN counts as not in it (as in Kaggle's benchmark kernel, where `NaN >= 0.5`
is False). The rows not in the subgroup are its *background*. Kaggle scored the nine
identities of IDENTITY_COLUMNS, those with at least 500 test examples.

Three AUCs per identity s (every AUC is the ROC AUC: the probability that a random
positive row scores above a random negative row, ties counting half):

  Subgroup AUC_s: on the rows in the subgroup only. Low when the model cannot tell
      toxic from non-toxic comments that mention the identity.
  BPSN AUC_s (background positive, subgroup negative): on the rows that are in the
      subgroup and not toxic, or not in the subgroup and toxic. Low when non-toxic
      mentions of the identity score higher than toxic comments elsewhere (false
      positives for the subgroup).
  BNSP AUC_s (background negative, subgroup positive): on the rows that are in the
      subgroup and toxic, or not in the subgroup and not toxic. Low when toxic mentions
      score lower than non-toxic comments elsewhere (false negatives).

Each is summarised over the identities by the generalised (power) mean

  M_p(m) = ( (1/N) sum_s m_s^p )^(1/p),   p = -5,

which leans towards the worst identity (p -> -inf would be the minimum). The final
score is

  final = w * AUC_overall + (1 - w) * (M_p(subgroup) + M_p(BPSN) + M_p(BNSP)) / 3,

with w = 0.25 and AUC_overall the AUC on all rows.

Undefined AUCs. An AUC is undefined when its rows lack positives or negatives (e.g. an
identity whose mentions are all non-toxic has no subgroup AUC and no BNSP AUC). Kaggle's
kernel got NaN there and a NaN final score; Kaggle's test set never had that case. Here
such an AUC is NaN in the table, its identity is named in summary["undefined"][metric],
and each power mean is taken over the identities where that AUC is defined (N counts
only those). If a power mean has no defined value at all, or the overall AUC is
undefined, the final metric is NaN and summary["note"] says why; nothing is dropped
without being listed.
"""

import io
import math

import numpy as np
import pandas as pd

from modeling.statistics import roc_auc
from spec.task_names import SCORED_IDENTITY_COLUMNS as IDENTITY_COLUMNS
METRICS = ("subgroup_auc", "bpsn_auc", "bnsp_auc")
TABLE_COLUMNS = ("identity", "subgroup_size") + METRICS
THRESHOLD = 0.5  # toxic when target >= 0.5; in a subgroup when its identity value >= 0.5
CSV_NAME = "bias_metrics.csv"
PNG_NAME = "bias_metrics.png"


def power_mean(values, power):
  """(mean(values ** power)) ** (1 / power); for power < 0 any zero gives 0 (the limit)."""
  values = np.asarray(values, dtype=np.float64)
  if power < 0 and np.any(values == 0):
    return 0.0
  return float(np.mean(values ** power) ** (1.0 / power))


def _vector(name, values, length=None):
  array = np.asarray(values, dtype=np.float64)
  if array.ndim != 1:
    raise ValueError("%s must be one-dimensional, got shape %s" % (name, array.shape))
  if length is not None and len(array) != length:
    raise ValueError("%s has %d values but scores has %d" % (name, len(array), length))
  return array


def _check_fractions(name, array, allow_nan):
  bad = np.isnan(array) if not allow_nan else np.zeros(len(array), dtype=bool)
  with np.errstate(invalid="ignore"):
    bad |= (array < 0) | (array > 1) | np.isinf(array)
  if bad.any():
    first = int(np.flatnonzero(bad)[0])
    what = "in [0, 1]" + (" or NaN" if allow_nan else "")
    raise ValueError("%s must be %s; %d value(s) are not, the first at row %d: %r"
                     % (name, what, int(bad.sum()), first, float(array[first])))


def _validate(scores, targets, identities, power, overall_weight):
  scores = _vector("scores", scores)
  if not np.all(np.isfinite(scores)):
    first = int(np.flatnonzero(~np.isfinite(scores))[0])
    raise ValueError("scores must be finite; row %d is %r" % (first, float(scores[first])))
  targets = _vector("targets", targets, len(scores))
  _check_fractions("targets", targets, allow_nan=False)
  if not isinstance(identities, dict) or not identities:
    raise ValueError("identities must be a non-empty dict {identity name: values}, got %s"
                     % ("an empty dict" if isinstance(identities, dict)
                        else type(identities).__name__))
  names = [n for n in IDENTITY_COLUMNS if n in identities]
  names += [n for n in identities if n not in IDENTITY_COLUMNS]
  columns = {}
  for name in names:
    label = "identity %r" % (name,)
    columns[name] = _vector(label, identities[name], len(scores))
    _check_fractions(label, columns[name], allow_nan=True)
  if not isinstance(power, (int, float, np.integer, np.floating)) or power == 0 or \
      not math.isfinite(power):
    raise ValueError("power must be a finite non-zero number (Kaggle used -5), got %r"
                     % (power,))
  if not 0 <= overall_weight <= 1:
    raise ValueError("overall_weight must be in [0, 1] (Kaggle used 0.25), got %r"
                     % (overall_weight,))
  return scores, targets, names, columns


def bias_report(scores, targets, identities, power=-5, overall_weight=0.25):
  """The per-identity bias AUCs and Kaggle's final score.

  Args:
    scores: predicted toxicity, one float per row.
    targets: each row's true toxicity fraction in [0, 1]; toxic when >= 0.5.
    identities: {identity name: fractions in [0, 1], NaN where not annotated}; a row is in
      the subgroup when its value >= 0.5. Identities of IDENTITY_COLUMNS come first in
      that order, then any others in the order given.
    power: the power mean's exponent (Kaggle: -5).
    overall_weight: the overall AUC's weight in the final score (Kaggle: 0.25).

  Returns:
    (table, summary). table: a DataFrame with one row per identity and the columns
    identity, subgroup_size, subgroup_auc, bpsn_auc, bnsp_auc (NaN where undefined).
    summary: a dict with overall_auc, power_mean_subgroup_auc, power_mean_bpsn_auc,
    power_mean_bnsp_auc, final_metric, identities_scored (the table's identities),
    undefined ({metric: [identities whose AUC is undefined]}), power, overall_weight and
    note (None, or why final_metric is NaN).

  Raises:
    ValueError naming the problem: lengths differ, a target outside [0, 1] or NaN, an
    identity value outside [0, 1], a non-finite score, no identities, a bad power or
    weight.
  """
  scores, targets, names, columns = _validate(scores, targets, identities, power,
                                              overall_weight)
  toxic = targets >= THRESHOLD
  rows = []
  for name in names:
    with np.errstate(invalid="ignore"):  # NaN >= 0.5 is False: not in the subgroup
      member = columns[name] >= THRESHOLD
    bpsn = (member & ~toxic) | (~member & toxic)
    bnsp = (member & toxic) | (~member & ~toxic)
    rows.append((name, int(member.sum()), roc_auc(scores[member], toxic[member]),
                 roc_auc(scores[bpsn], toxic[bpsn]), roc_auc(scores[bnsp], toxic[bnsp])))
  table = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
  table["subgroup_size"] = table["subgroup_size"].astype(np.int64)
  for metric in METRICS:
    table[metric] = table[metric].astype(np.float64)

  overall = roc_auc(scores, toxic)
  summary = {"overall_auc": overall}
  undefined = {}
  reasons = []
  if math.isnan(overall):
    reasons.append("the overall AUC is undefined: every row is %s"
                   % ("toxic" if toxic.all() else "non-toxic"))
  means = []
  for metric in METRICS:
    values = table[metric].to_numpy()
    defined = ~np.isnan(values)
    undefined[metric] = table["identity"][~defined].tolist()
    mean = power_mean(values[defined], power) if defined.any() else float("nan")
    if not defined.any():
      reasons.append("no identity has a defined %s" % metric)
    summary["power_mean_" + metric] = mean
    means.append(mean)
  summary["final_metric"] = (float("nan") if reasons else
                             float(overall_weight * overall +
                                   (1 - overall_weight) * np.mean(means)))
  summary["identities_scored"] = list(names)
  summary["undefined"] = undefined
  summary["power"] = power
  summary["overall_weight"] = overall_weight
  summary["note"] = ("final_metric is NaN: " + "; ".join(reasons)) if reasons else None
  return table, summary


def _format(value):
  return "undefined" if value is None or math.isnan(value) else "%.4f" % value


def bias_report_files(table, summary):
  """[(CSV_NAME, bytes), (PNG_NAME, bytes)]: the table as CSV and a bar chart of the AUCs,
  for the caller to write anywhere (pipeline.outputs.write_files: a local disk or a
  bucket).

  The CSV holds the table only, floats as their shortest exact decimal (repr; pandas
  reads them back exactly with float_precision="round_trip", to the last bit or so with
  its default parser), undefined AUCs as empty cells. The chart draws the three AUCs per identity,
  marks undefined ones "n/a", and its title gives the final metric.
  """
  # Figure + FigureCanvasAgg directly: no pyplot, no change to anyone's backend.
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  csv_text = io.StringIO(newline="")
  table.to_csv(csv_text, index=False, columns=list(TABLE_COLUMNS))  # floats: shortest repr

  names = table["identity"].tolist()
  figure = Figure(figsize=(max(6.0, 1.1 * len(names) + 3.0), 4.8))
  FigureCanvasAgg(figure)
  axes = figure.add_subplot(1, 1, 1)
  width = 0.27
  positions = np.arange(len(names), dtype=np.float64)
  labels = {"subgroup_auc": "subgroup AUC", "bpsn_auc": "BPSN AUC", "bnsp_auc": "BNSP AUC"}
  for i, metric in enumerate(METRICS):
    x = positions + (i - 1) * width
    heights = table[metric].to_numpy(dtype=np.float64)
    axes.bar(x, np.nan_to_num(heights), width, label=labels[metric])
    for xi, height in zip(x, heights):
      if math.isnan(height):
        axes.text(xi, 0.02, "n/a", rotation=90, ha="center", va="bottom", fontsize=7)
  axes.set_xticks(positions)
  axes.set_xticklabels([n.replace("_", " ") for n in names], rotation=30, ha="right",
                       fontsize=8)
  axes.set_ylim(0.0, 1.05)
  axes.set_ylabel("AUC")
  axes.axhline(0.5, color="grey", linewidth=0.8, linestyle="--")
  axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
  title = "Jigsaw bias metric: final %s (overall AUC %s, power %s)" % (
      _format(summary.get("final_metric")), _format(summary.get("overall_auc")),
      summary.get("power", -5))
  if table[list(METRICS)].isna().to_numpy().any():
    title += "\nn/a: AUC undefined (its rows lack a class); the power means skip it"
  axes.set_title(title, fontsize=10)
  figure.tight_layout()
  png = io.BytesIO()
  figure.savefig(png, format="png", dpi=100)
  return [(CSV_NAME, csv_text.getvalue().encode("utf-8")), (PNG_NAME, png.getvalue())]
