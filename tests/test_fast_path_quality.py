"""The fast paths' quality benchmark (tools/fast_path_quality.py): its statistics and its
verdict, its metrics against independent computations, the identity templates, and the
committed measurement, which must be of the kernels as they are now and must back the
default of --fused_kernels."""

import json
import math
import os

import numpy as np
import pytest

from conftest import ROOT, pairwise_auc
from spec import option_index
from spec.task_names import SCORED_IDENTITY_COLUMNS
from tools import fast_path_quality as quality
from tools.bias_templates import IDENTITY_TERMS, NEUTRAL_TERMS, template_rows

COMMITTED = os.path.join(ROOT, "docs", "benchmark", "fast_paths.json")


def test_the_committed_measurement_is_of_the_kernels_as_they_are_and_backs_the_default():
  """A change to the kernels needs ./run.sh benchmark fast-paths run again (and its files
  committed); a path measured worse than TensorFlow's own ops may not be on by default."""
  with open(COMMITTED) as f:
    committed = json.load(f)
  assert committed["settings"]["kernels_sha256"] == quality.kernels_sha256(), (
      "the fused kernels changed since docs/benchmark/fast_paths.json was measured: run "
      "./run.sh benchmark fast-paths and commit its files")
  assert len(committed["seeds"]) >= 5
  assert set(committed["comparisons"]) == {"tf1", "tf2"}
  on_by_default = option_index.default("fused_kernels") in ("auto", "on")
  assert committed["verdicts"]["fused"] == "equal" or not on_by_default
  # bfloat16 (on the fused kernels) is chosen by default on a CPU with bfloat16 units, so it
  # too must be measured, on both runtimes (TF 1.15's by the kernels' own matmul), and hold.
  assert committed["verdicts"]["bf16"] == "equal"
  for runtime in ("tf1", "tf2"):
    assert set(committed["comparisons"][runtime]) == {"fused", "bf16"}
    bf16_auc = committed["comparisons"][runtime]["bf16"]["held_out_auc"]["mean_difference"]
    assert bf16_auc >= -quality.BF16_AUC_BOUND
  for runtime, paths in (("tf1", ["fused", "bf16"]), ("tf2", ["fused", "bf16"])):
    for path in paths:
      for metric, _ in quality.METRICS:
        comparison = committed["comparisons"][runtime][path][metric]
        assert comparison["seeds"] == committed["seeds"]
        assert comparison["ci_low"] <= comparison["mean_difference"] <= comparison["ci_high"]


def test_a_bf16_path_that_loses_auc_past_the_bound_is_worse():
  """Equal within the seeds' spread on every metric, yet 0.006 below the reference's
  ROC-AUC on average: the bfloat16 path is worse all the same (the fused one is not)."""
  reference = {1: 0.95, 2: 0.97, 3: 0.93, 4: 0.96, 5: 0.94}
  lower = {s: v - 0.006 + 0.01 * (-1) ** s for s, v in reference.items()}
  by_metric = {metric: quality.compare(reference, lower) for metric, _ in quality.METRICS}
  assert {c["verdict"] for c in by_metric.values()} == {"equal within the seeds' spread"}
  assert quality.verdicts({"tf2": {"fused": by_metric, "bf16": by_metric}}) == {
      "fused": "equal", "bf16": "worse"}


def test_the_verdict_holds_a_path_to_the_seeds_spread():
  reference = {1: 0.95, 2: 0.96, 3: 0.94, 4: 0.95, 5: 0.96}
  same = {s: v + d for (s, v), d in zip(sorted(reference.items()),
                                        (0.004, -0.003, 0.002, -0.002, 0.001))}
  result = quality.compare(reference, same)
  assert result["verdict"] == "equal within the seeds' spread"
  assert result["mean_difference"] == pytest.approx(0.0004)
  assert result["spread"] == pytest.approx(np.std(list(reference.values()), ddof=1))
  half = 2.776 * np.std([0.004, -0.003, 0.002, -0.002, 0.001], ddof=1) / math.sqrt(5)
  assert (result["ci_low"], result["ci_high"]) == pytest.approx((0.0004 - half, 0.0004 + half))
  # Worse by more than the spread, and worse consistently by less: both "worse".
  assert quality.compare(reference, {s: v - 0.02 for s, v in reference.items()})[
      "verdict"] == "worse"
  assert quality.compare(reference, {s: v - 0.005 + 0.0001 * s for s, v in reference.items()})[
      "verdict"] == "worse"
  with pytest.raises(ValueError):
    quality.compare({1: 0.9}, {1: 0.9})


def test_scores_are_those_of_independent_computations():
  rng = np.random.RandomState(0)
  templates = template_rows()
  labels = [int(x) for x in rng.randint(0, 2, 40)]
  probabilities = list(rng.rand(40 + len(templates)))
  scores = quality.scores_of(probabilities, labels, templates)
  assert scores["held_out_auc"] == pytest.approx(pairwise_auc(probabilities[:40], labels))
  on_templates = probabilities[40:]
  toxic = [target >= 0.5 for _, target, _ in templates]
  assert scores["bias_overall_auc"] == pytest.approx(pairwise_auc(on_templates, toxic))
  subgroup = []
  for name in SCORED_IDENTITY_COLUMNS:
    member = [row[2][name] >= 0.5 for row in templates]
    subgroup.append(pairwise_auc([p for p, m in zip(on_templates, member) if m],
                                 [t for t, m in zip(toxic, member) if m]))
  power = np.mean(np.power(subgroup, -5.0)) ** (-1 / 5.0)
  assert scores["bias_subgroup"] == pytest.approx(power)


def test_the_templates_cover_every_scored_identity_both_ways():
  rows = template_rows()
  assert len(rows) == len(set(text for text, _, _ in rows)) == 2070
  for name in SCORED_IDENTITY_COLUMNS:
    mine = [target for _, target, identities in rows if identities[name] == 1.0]
    assert 0 < sum(mine) < len(mine), name  # (toxic and non-toxic mentions)
  terms = len(NEUTRAL_TERMS) + sum(len(t) for t in IDENTITY_TERMS.values())
  background = [r for r in rows if not any(r[2].values())]  # (every term: as many rows)
  assert len(background) * terms == len(rows) * len(NEUTRAL_TERMS)


def test_bad_arguments_are_one_line(tmp_path):
  for argv, message in ((["--seeds", "1"], "--seeds=1: the seeds' spread needs at least 2"),
                        (["--seeds", "a,b"], "--seeds=a,b: give whole numbers"),
                        (["--runtimes", "tf3"], "--runtimes=tf3: choose from tf1, tf2"),
                        (["--paths", "bf17"], "--paths=bf17: choose from reference, fused, bf16")):
    with pytest.raises(quality.QualityError) as error:
      quality.parse_args(argv)
    assert str(error.value).startswith(message)
  args = quality.parse_args(["--data", str(tmp_path / "none.csv")])
  with pytest.raises(quality.QualityError) as error:
    quality.prepare_data(args, str(tmp_path / "work"))
  assert str(error.value).startswith("no data file %s" % (tmp_path / "none.csv"))


def test_the_journal_keeps_only_cells_of_the_same_settings(tmp_path):
  journal = tmp_path / "cells.jsonl"
  journal.write_text("\n".join([
      json.dumps({"settings": {"a": 1}, "cell": {"seed": 1}}),
      json.dumps({"settings": {"a": 2}, "cell": {"seed": 2}}),
      '{"settings": {"a": 1}, "cell": {"se']) + "\n")  # (cut short by a stop)
  assert quality.load_cells(str(journal), {"a": 1}) == [{"seed": 1}]
