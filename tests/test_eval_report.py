"""--eval_report (pipeline/eval_report.py): per-class figures, the confusion matrix, the
curves and calibration of the dev outputs, each against a reference computed by its
definition here and, on TF 2.15's environment, against scikit-learn's implementation."""

import csv
import io
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import common_flags, pairwise_auc, run_flags
from data.features import InputExample
from pipeline import eval_report
from spec.heads.classification import SingleLabel
from spec.heads.multi_label import MultiLabel
from spec.heads.regression import Regression
from spec.heads.soft_target import SoftTarget
from spec.run_errors import FlagError


def _average_precision(scores, positives):
  """Every distinct score as the threshold, from the highest down: the sum of precision
  times the rise in recall."""
  total, previous_recall = 0.0, 0.0
  for t in sorted(set(scores), reverse=True):
    tp = sum(1 for s, p in zip(scores, positives) if s >= t and p)
    fp = sum(1 for s, p in zip(scores, positives) if s >= t and not p)
    recall = tp / float(sum(positives))
    total += (recall - previous_recall) * tp / float(tp + fp)
    previous_recall = recall
  return total


def _calibration_error(predicted, observed, bins=10):
  """Bins (lo, hi] of width 1/bins (the first also holds 0): the rows' mean of the gap
  between their bin's mean outcome and mean prediction."""
  edges, groups = np.linspace(0.0, 1.0, bins + 1), {}
  for p, o in zip(predicted, observed):
    b = next(k for k in range(bins) if p <= edges[k + 1] or k == bins - 1)
    groups.setdefault(b, []).append((p, o))
  return sum(len(g) * abs(np.mean([o for _, o in g]) - np.mean([p for p, _ in g]))
             for g in groups.values()) / len(predicted)


SCORES = st.sampled_from([0.0, 0.05, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 1.0])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(SCORES, st.booleans()), min_size=1, max_size=25))
def test_curves_and_calibration_are_their_definitions(rows):
  scores, positives = [s for s, _ in rows], [p for _, p in rows]
  curve = eval_report.curves(scores, positives)
  assert curve["roc_auc"] == pytest.approx(pairwise_auc(scores, positives), abs=1e-12) if (
      pairwise_auc(scores, positives) is not None) else curve["roc_auc"] is None
  if any(positives):
    assert curve["average_precision"] == pytest.approx(_average_precision(scores, positives),
                                                       abs=1e-12)
  else:
    assert curve["average_precision"] is None and curve["pr"] is None
  table = eval_report.calibration(scores, positives)
  assert table["expected_calibration_error"] == pytest.approx(
      _calibration_error(scores, positives), abs=1e-12)
  assert sum(b["rows"] for b in table["bins"]) == len(rows)


def _examples(labels):
  return [InputExample("dev-%d" % i, "text", label=label) for i, label in enumerate(labels)]


def test_a_classification_report_counts_every_row_by_the_decided_class():
  spec = SingleLabel(["l"], ["a", "b", "c"])
  truth = ["a", "a", "b", "c", "c", "c", "b"]
  outputs = np.array([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4],
                      [0.6, 0.3, 0.1], [0.1, 0.1, 0.8], [0.4, 0.35, 0.25]])
  report = eval_report.class_report(spec, _examples(truth), outputs)
  # decided: a, b, b, c, a, c, a
  assert report["confusion"] == [[1, 1, 0], [1, 1, 0], [1, 0, 2]]
  assert report["accuracy"] == pytest.approx(4 / 7.0)
  rows = {r["name"]: r for r in report["per_class"]}
  assert (rows["a"]["precision"], rows["a"]["recall"], rows["a"]["support"]) == (
      pytest.approx(1 / 3.0), 0.5, 2)
  assert (rows["c"]["precision"], rows["c"]["recall"], rows["c"]["f1"]) == (
      1.0, pytest.approx(2 / 3.0), pytest.approx(0.8))
  assert report["averages"]["macro"]["recall"] == pytest.approx((0.5 + 0.5 + 2 / 3.0) / 3)
  top = outputs.max(axis=1)
  correct = [d == t for d, t in zip("abbcaca", truth)]
  assert report["calibration"]["expected_calibration_error"] == pytest.approx(
      _calibration_error(top, correct))
  assert rows["b"]["roc_auc"] == pytest.approx(pairwise_auc(outputs[:, 1],
                                                            [t == "b" for t in truth]))
  # A binary head decides by its tuned threshold, and calibrates the second class.
  binary = SingleLabel(["l"], ["0", "1"])
  binary.set_thresholds({"1": 0.3})
  outputs = np.array([[0.8, 0.2], [0.65, 0.35], [0.4, 0.6], [0.9, 0.1]])
  report = eval_report.class_report(binary, _examples(["0", "1", "1", "0"]), outputs)
  assert report["confusion"] == [[2, 0], [0, 2]]
  assert sorted(report["curves"]) == ["1"]
  assert report["calibration"]["of"] == "probability of 1"


def test_a_column_report_reads_each_column_at_its_threshold():
  spec = MultiLabel(["toxic", "insult"])
  spec.set_thresholds({"insult": 0.25})
  labels = [(1.0, 0.0), (0.0, 1.0), (1.0, 1.0), (0.0, 0.0)]
  outputs = np.array([[0.9, 0.2], [0.6, 0.3], [0.4, 0.7], [0.1, 0.1]])
  report = eval_report.column_report(spec, _examples(labels), outputs)
  rows = {r["name"]: r for r in report["per_class"]}
  assert [rows["toxic"][k] for k in ("tp", "fp", "fn", "tn", "threshold")] == [1, 1, 1, 1, 0.5]
  assert [rows["insult"][k] for k in ("tp", "fp", "fn", "tn", "threshold")] == [2, 0, 0, 2, 0.25]
  # A soft target's calibration compares with the fraction itself; its positives are >= 0.5.
  soft = SoftTarget(["target"])
  report = eval_report.column_report(soft, _examples([(0.2,), (0.6,), (0.5,)]),
                                     np.array([[0.15], [0.55], [0.45]]))
  assert report["per_class"][0]["support"] == 2
  assert report["calibration"]["target"]["expected_calibration_error"] == pytest.approx(0.05)


def test_any_class_name_gives_whole_files(tmp_path):
  """Names with a tab, a line break, a quote, Markdown's | and * or matplotlib's $ (which
  would start mathematics) are written as they are: the TSVs read back whole, the table
  keeps its columns, the plots draw."""
  names = ["$x^2$", "a|b", "tab\there", "new\nline", '"q"', "**bold**"]
  spec = SingleLabel(["l"], names)
  rng = np.random.RandomState(2)
  truth = [names[i % len(names)] for i in range(30)]
  folder = eval_report.write(str(tmp_path), spec, _examples(truth),
                             rng.dirichlet(np.ones(len(names)), 30))
  with io.open(os.path.join(folder, "per_class.tsv"), encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f, delimiter="\t"))
  assert [r[0] for r in rows[1:]] == names and {len(r) for r in rows} == {7}
  with io.open(os.path.join(folder, "confusion.tsv"), encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f, delimiter="\t"))
  assert rows[0][1:] == names and [r[0] for r in rows[1:]] == names
  assert sum(int(n) for r in rows[1:] for n in r[1:]) == 30
  with io.open(os.path.join(folder, "report.md"), encoding="utf-8") as f:
    table = [line for line in f.read().splitlines() if line.startswith("| ")]
  # (a cell's | is escaped: 8 unescaped bars a row)
  assert all(line.replace("\\|", "").count("|") == 8 for line in table), table
  for name in ("confusion.png", "roc.png", "pr.png", "reliability.png"):
    with open(os.path.join(folder, name), "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  # Many classes: the confusion plot stays a bounded image.
  many = SingleLabel(["l"], ["c%d" % i for i in range(40)])
  folder = eval_report.write(str(tmp_path / "many"), many,
                             _examples(["c%d" % (i % 40) for i in range(80)]),
                             rng.dirichlet(np.ones(40), 80))
  from test_benchmark import png_size
  width, height = png_size(os.path.join(folder, "confusion.png"))
  assert width <= 1600 and height <= 1400


@pytest.mark.one_runtime("tf2")  # (plain numpy against scikit-learn: the same on both)
def test_the_report_agrees_with_scikit_learn():
  from sklearn import calibration, metrics
  rng = np.random.RandomState(4)
  for _ in range(20):
    n = rng.randint(5, 60)
    scores = np.round(rng.rand(n), rng.randint(1, 4))  # (ties, at several precisions)
    positives = rng.rand(n) < rng.uniform(0.1, 0.9)
    if positives.all() or not positives.any():
      continue
    curve = eval_report.curves(scores, positives)
    assert curve["roc_auc"] == pytest.approx(metrics.roc_auc_score(positives, scores))
    assert curve["average_precision"] == pytest.approx(
        metrics.average_precision_score(positives, scores))
    fpr, tpr, _ = metrics.roc_curve(positives, scores, drop_intermediate=False)
    np.testing.assert_allclose(curve["roc"], [fpr, tpr])
    table = eval_report.calibration(scores, positives)
    observed, predicted = calibration.calibration_curve(positives, scores, n_bins=10)
    np.testing.assert_allclose([b["mean_observed"] for b in table["bins"]], observed)
    np.testing.assert_allclose([b["mean_predicted"] for b in table["bins"]], predicted)
    k = 3
    outputs = rng.dirichlet(np.ones(k), n)
    truth = rng.randint(0, k, n)
    spec = SingleLabel(["l"], ["x", "y", "z"])
    report = eval_report.class_report(spec, _examples([spec.classes[t] for t in truth]),
                                      outputs)
    decided = outputs.argmax(axis=1)
    np.testing.assert_array_equal(report["confusion"],
                                  metrics.confusion_matrix(truth, decided, labels=range(k)))
    p, r, f, support = metrics.precision_recall_fscore_support(
        truth, decided, labels=range(k), zero_division=0)
    np.testing.assert_allclose([[row[c] for c in ("precision", "recall", "f1")]
                                for row in report["per_class"]], np.array([p, r, f]).T)
    assert [row["support"] for row in report["per_class"]] == support.tolist()
    macro = metrics.precision_recall_fscore_support(truth, decided, average="macro",
                                                    zero_division=0)
    assert report["averages"]["macro"]["f1"] == pytest.approx(macro[2])


# (A run's report, its files and its figures against the eval's: tests/test_heads.py's
# multi-label run on Jigsaw Toxic, which passes --eval_report.)


def test_a_report_is_refused_where_it_has_nothing_to_read(tmp_path, tiny_checkpoint):
  base = common_flags(tiny_checkpoint, str(tmp_path / "out")) + ["--num_train_steps=1"]
  with pytest.raises(FlagError) as error:
    run_flags(*base + ["--do_train", "--eval_report"])
  assert str(error.value) == ("--eval_report reports on the dev split's evaluation: add "
                              "--do_eval")
  with pytest.raises(FlagError) as error:
    eval_report.check_head(Regression(["score"]), True)
  assert str(error.value) == ("--eval_report reads classes or 0/1 label columns; a regression "
                              "head on score has neither: drop --eval_report "
                              "(eval_results.json has its metrics)")
  eval_report.check_head(Regression(["score"]), False)  # (not asked: nothing to refuse)
