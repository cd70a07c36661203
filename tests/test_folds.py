"""k-fold cross-validation: stratified, seeded fold assignment, and a run that gives
every train row an out-of-fold prediction and the mean and std of each metric."""

import csv
import io
import json
import os

import numpy as np
import pytest
import scipy.optimize

from conftest import JIGSAW, assert_auc_of_scores, common_flags, run_flags, sample_path
from data import fold_assignment
from data.processors import get_processor
from spec import thresholds


def test_folds_are_stratified_balanced_and_seeded():
  examples = get_processor("sst-2", data_dir=sample_path("glue", "SST-2")).get_examples("train")
  labels = [e.label for e in examples]
  assignment = fold_assignment.assign_folds(labels, 5, seed=3)
  assert sorted(set(assignment)) == [0, 1, 2, 3, 4]
  sizes = [assignment.count(i) for i in range(5)]
  assert sizes == [60] * 5  # 300 rows
  for label in ("0", "1"):
    per_fold = [sum(1 for l, a in zip(labels, assignment) if l == label and a == i)
                for i in range(5)]
    assert max(per_fold) - min(per_fold) <= 1, (label, per_fold)  # stratified
  assert fold_assignment.assign_folds(labels, 5, seed=3) == assignment  # seeded
  assert fold_assignment.assign_folds(labels, 5, seed=4) != assignment
  with pytest.raises(ValueError, match="needs at least 2 folds"):
    fold_assignment.assign_folds(labels, 1, 0)
  with pytest.raises(ValueError, match="--num_folds=400 is more than the 300 train rows"):
    fold_assignment.assign_folds(labels, 400, 0)


def test_quantile_bins_and_fold_statistics():
  assert fold_assignment.quantile_bins([5.0, 1.0, 3.0, 2.0, 4.0], 5) == [4, 0, 2, 1, 3]
  mean, std = fold_assignment.mean_and_std([0.8, 0.9, 1.0])
  assert mean == pytest.approx(0.9) and std == pytest.approx(0.1)
  assert fold_assignment.mean_and_std([0.7]) == (0.7, 0.0)


def _tsv(path):
  with io.open(path, encoding="utf-8", newline="") as f:
    return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


@pytest.mark.slow
# The folds are Python around runs whose training and prediction the other end-to-end
# tests run on both runtimes.
@pytest.mark.one_runtime("tf1")  # (the suites' balance)
def test_three_folds_in_one_command(tmp_path, tiny_checkpoint):
  output_dir = str(tmp_path / "cv")
  result = run_flags(*common_flags(tiny_checkpoint, output_dir) + [
      "--num_folds=3", "--do_train", "--do_predict", "--num_train_steps=3",
      "--eval_batch_size=16", "--predict_batch_size=16", "--tune_thresholds=f1",
      "--eval_report", "--calibrate", "--do_export"])
  train = os.path.join(JIGSAW, "train.csv")
  with io.open(train, encoding="utf-8", newline="") as f:
    truth = list(csv.DictReader(f))
  oof = _tsv(os.path.join(output_dir, "oof_predictions.tsv"))
  # Every train row once, in file order, with the fold it was held out in.
  assert [r["id"] for r in oof] == [t["id"] for t in truth]
  assert sorted(set(r["fold"] for r in oof)) == ["0", "1", "2"]
  with open(os.path.join(output_dir, "folds_summary.json")) as f:
    summary = json.load(f)
  assert summary["fold_sizes"] == [sum(1 for r in oof if r["fold"] == str(i)) for i in range(3)]
  assert sum(summary["fold_sizes"]) == 267 and max(summary["fold_sizes"]) - min(
      summary["fold_sizes"]) <= 1
  aucs = []
  for i in range(3):
    fold_dir = os.path.join(output_dir, "fold_%d" % i)
    with open(os.path.join(fold_dir, "eval_results.json")) as f:
      results = json.load(f)
    rows = [(float(r["probability_1"]), t["toxic"] == "1") for r, t in zip(oof, truth)
            if r["fold"] == str(i)]
    assert results["num_examples"] == len(rows)
    # Each fold's eval is that of its own held-out rows' written predictions.
    assert_auc_of_scores(results["auc"], *zip(*rows))
    aucs.append(results["auc"])
    assert os.path.exists(os.path.join(fold_dir, "model_card.json"))
  # --calibrate: one temperature fitted on every train row's out-of-fold logits, recorded
  # in every fold's card: the written out-of-fold probabilities are those no further
  # scaling of their log-odds makes more likely (scipy's minimum is at 1).
  scores = [float(np.float32(r["probability_1"])) for r in oof]
  positives = [t["toxic"] == "1" for t in truth]
  calibrated = summary["calibration"]
  assert 0.01 < calibrated["temperature"] < 100
  assert calibrated["nll_calibrated"] < calibrated["nll_uncalibrated"]
  log_odds = np.log(np.float64(scores)) - np.log1p(-np.float64(scores))
  truth_01 = np.array(positives, np.float64)
  def nll(s):
    return float(np.mean(np.logaddexp(0, -s * log_odds) * truth_01 +
                         np.logaddexp(0, s * log_odds) * (1 - truth_01)))
  assert scipy.optimize.minimize_scalar(nll, bounds=(0.2, 5), method="bounded",
                                        options={"xatol": 1e-9}).x == pytest.approx(1, abs=2e-3)
  assert nll(1) == pytest.approx(calibrated["nll_calibrated"], abs=1e-6)
  for i in range(3):
    with open(os.path.join(output_dir, "fold_%d" % i, "model_card.json")) as f:
      assert json.load(f)["label_spec"]["temperature"] == calibrated["temperature"]
  # --tune_thresholds: tuned on every train row's out-of-fold probability (calibrated, and
  # read back as the float32 each was), the best F1 of every candidate, recorded in every
  # fold's card.
  threshold = summary["thresholds"]["threshold"]
  best = max(thresholds.figures_at(scores, positives, t)[2] for t in set(scores))
  assert thresholds.figures_at(scores, positives, threshold)[2] == best
  assert summary["thresholds"]["f1_at_threshold"] == best
  assert summary["thresholds"]["threshold_objective"] == "f1"
  for i in range(3):  # (every fold's files decide as its card does)
    fold_dir = os.path.join(output_dir, "fold_%d" % i)
    with open(os.path.join(fold_dir, "model_card.json")) as f:
      assert json.load(f)["label_spec"]["thresholds"] == {"1": threshold}
    own = _tsv(os.path.join(fold_dir, "oof_predictions.tsv"))
    assert [r["prediction"] for r in own] == [r["prediction"] for r in oof
                                              if r["fold"] == str(i)]
    with open(os.path.join(fold_dir, "eval_results.json")) as f:
      assert json.load(f)["thresholds_from"] == "model card"
    with open(os.path.join(fold_dir, "eval_report", "report.json")) as f:
      report = json.load(f)
    assert report["thresholds"] == {"1": threshold}
    positives_decided = sum(1 for r in own if r["prediction"] == "1")
    assert sum(row[1] for row in report["confusion"]) == positives_decided
    for row in _tsv(os.path.join(fold_dir, "test_results.tsv")):
      assert row["prediction"] == ("1" if np.float32(row["probability_1"]) >= threshold
                                   else "0")
  assert [r["prediction"] for r in oof] == ["1" if p >= threshold else "0" for p in scores]
  # --do_export: each fold's export is made after the fits, and decides by them; the
  # fold's run_summary.json stays its training's.
  for i in range(3):
    with open(os.path.join(output_dir, "fold_%d" % i, "run_summary.json")) as f:
      assert json.load(f)["results"]["eval"]["num_examples"] == summary["fold_sizes"][i]
    exports = os.path.join(output_dir, "fold_%d" % i, "export")
    (only,) = os.listdir(exports)
    with open(os.path.join(exports, only, "assets", "model_card.json")) as f:
      spec = json.load(f)["label_spec"]
    assert (spec["temperature"], spec["thresholds"]) == (calibrated["temperature"],
                                                         {"1": threshold})
  assert summary["metrics"]["auc"]["mean"] == pytest.approx(np.mean(aucs))
  assert summary["metrics"]["auc"]["std"] == pytest.approx(np.std(aucs, ddof=1))
  assert result.oof_predictions.endswith("oof_predictions.tsv")
  # --do_predict: each fold's model predicts the test file, and test_results.tsv beside
  # the folds averages their probabilities, row by row, in file order.
  with io.open(os.path.join(JIGSAW, "test.csv"), encoding="utf-8", newline="") as f:
    test_ids = [r["id"] for r in csv.DictReader(f)]
  mean = _tsv(result.predictions)
  per_fold = [_tsv(os.path.join(output_dir, "fold_%d" % i, "test_results.tsv"))
              for i in range(3)]
  assert [r["id"] for r in mean] == test_ids and len(test_ids) > 0
  assert all([r["id"] for r in fold] == test_ids for fold in per_fold)
  for k, row in enumerate(mean):
    for column in ("probability_0", "probability_1"):
      assert float(row[column]) == pytest.approx(
          np.mean([float(fold[k][column]) for fold in per_fold]), abs=1e-6)
    mean_score = float(row["probability_1"])  # (at the tuned threshold; 9 digits of a mean)
    assert abs(mean_score - threshold) < 1e-6 or row["prediction"] == (
        "1" if mean_score >= threshold else "0")
  # (Three barely trained models disagree: the mean is not any one fold's prediction.)
  assert any(len(set(fold[k]["probability_1"] for fold in per_fold)) == 3
             for k in range(len(test_ids)))
  with open(os.path.join(output_dir, "test_results.json")) as f:
    written = json.load(f)
  assert written["combined"] == "the mean of the 3 folds' outputs"
  assert written["rows"] == len(test_ids)
  assert [os.path.dirname(p) for p in written["checkpoints"]] == [
      os.path.join(output_dir, "fold_%d" % i) for i in range(3)]
  # The folds decided again, without a new fit of the temperature: trained already, they
  # predict by their cards' temperature, which their cards keep beside the new thresholds
  # (the same, up to float32's last digits between the graph's division by the temperature
  # and numpy's, which wrote the first run's outputs).
  run_flags(*common_flags(tiny_checkpoint, output_dir) + [
      "--num_folds=3", "--do_train", "--num_train_steps=3", "--eval_batch_size=16",
      "--tune_thresholds=f1"])
  with open(os.path.join(output_dir, "folds_summary.json")) as f:
    again = json.load(f)["thresholds"]["threshold"]
  assert again == pytest.approx(threshold, abs=1e-6)
  for i in range(3):
    with open(os.path.join(output_dir, "fold_%d" % i, "model_card.json")) as f:
      spec = json.load(f)["label_spec"]
    assert (spec["temperature"], spec["thresholds"]) == (calibrated["temperature"],
                                                         {"1": again})
  # One fold alone (as on its own machine) trains on the same rows: the same figures, up
  # to the CPU's multi-threaded rounding, which can flip near-ties of this barely trained
  # model.
  again = run_flags(*common_flags(tiny_checkpoint, str(tmp_path / "one")) + [
      "--num_folds=3", "--fold=1", "--do_train", "--num_train_steps=3",
      "--eval_batch_size=16", "--predict_batch_size=16"])
  assert again.folds[1]["auc"] == pytest.approx(aucs[1], abs=0.02)
  assert again.folds[1]["num_examples"] == summary["fold_sizes"][1]
  assert sorted(os.listdir(str(tmp_path / "one"))) == ["fold_1"]  # nothing beside it
