"""The real-data benchmark of --calibrate and --tune_thresholds (tools/decision_figures.py):
its pure parts, the held-out figures from written probabilities and the reading of
TweetEval's files (the runs themselves are the benchmark's, never a test's)."""

import numpy as np
import pytest

from tools import decision_figures


def test_the_held_out_figures_undo_the_temperature_and_decide_at_each_threshold():
  rng = np.random.RandomState(0)
  margin = rng.normal(0, 3, 400)
  truth = (rng.uniform(size=400) < 1 / (1 + np.exp(-margin / 3))).astype(float)
  temperature = 3.0
  calibrated = 1 / (1 + np.exp(-margin / temperature))
  probabilities = np.stack([1 - calibrated, calibrated], axis=1)
  figures = decision_figures.held_out_figures(probabilities, truth, temperature, 0.4)
  raw = 1 / (1 + np.exp(-margin))
  assert figures["nll_before"] == pytest.approx(
      -np.mean(truth * np.log(raw) + (1 - truth) * np.log(1 - raw)), rel=1e-6)
  assert figures["nll_after"] < figures["nll_before"]
  assert figures["ece_after"] < figures["ece_before"]
  from sklearn.metrics import f1_score
  assert figures["f1_at_0.5"] == pytest.approx(f1_score(truth, raw >= 0.5))
  assert figures["f1_at_threshold"] == pytest.approx(f1_score(truth, calibrated >= 0.4))
  same = decision_figures.held_out_figures(probabilities, truth, 1.0, 0.5)
  assert same["nll_before"] == pytest.approx(same["nll_after"])


def test_a_split_pairs_each_line_with_a_0_or_1_label(tmp_path):
  (tmp_path / "val_text.txt").write_text("a tweet\nanother\n", encoding="utf-8")
  (tmp_path / "val_labels.txt").write_text("0\n1\n")
  assert decision_figures.read_split(str(tmp_path), "val") == [("a tweet", "0"),
                                                               ("another", "1")]
  (tmp_path / "val_labels.txt").write_text("0\n")
  with pytest.raises(SystemExit) as error:
    decision_figures.read_split(str(tmp_path), "val")
  assert str(error.value) == ("decisions: %s and %s do not pair one 0/1 label with each line"
                              % (tmp_path / "val_text.txt", tmp_path / "val_labels.txt"))
  with pytest.raises(SystemExit, match="test_text.txt does not exist: pass --data_dir"):
    decision_figures.read_split(str(tmp_path), "test")
