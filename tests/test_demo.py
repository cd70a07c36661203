"""The one-command demo's own path, run for real on a short schedule: the real pre-trained
MiniLM and the real rated sentences, trained, evaluated and used to predict."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, fetched

# Of 16 sentences, at most 32 tokens: the full demo trains 528 steps of 32 sentences of at
# most 64 tokens (two epochs).
SHORT_RUN_STEPS = 40


@pytest.mark.slow
@pytest.mark.one_runtime  # ./run.sh demo runs on TF 2.15 where it can, as this test does
def test_demo_short_run_beats_the_majority_baseline(tmp_path):
  from tools import assets
  fetched(assets.minilm_google_dir)
  fetched(assets.vader_movie_reviews)
  output_dir = str(tmp_path / "demo")
  command = [sys.executable, "-m", "tools.demo", "--output_dir", output_dir, "--",
             "--num_train_steps=%d" % SHORT_RUN_STEPS, "--train_batch_size=16",
             "--max_seq_length=32"]
  result = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=1800)
  out = result.stdout
  assert result.returncode == 0, out[-4000:]
  for stage in ("[1/5] pre-trained model", "[2/5] data", "[3/5] fine-tune",
                "[4/5] evaluation on 2111 held-out sentences", "[5/5] a few predictions"):
    assert stage in out
  assert "initialising 103 of 105 variables" in out  # the whole encoder from real weights
  assert "step %d/%d  loss" % (SHORT_RUN_STEPS, SHORT_RUN_STEPS) in out
  assert "majority-class baseline (always negative): accuracy 0.5017" in out
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    results = json.load(f)
  assert results["num_examples"] == 2111 and results["global_step"] == SHORT_RUN_STEPS
  assert results["majority_baseline_accuracy"] == pytest.approx(0.5017, abs=1e-4)
  # 640 training sentences already lift the real model's ROC-AUC well above chance (0.5;
  # with 2,111 held-out sentences chance stays below about 0.53). A run this short varies
  # with its seed: 0.64 to 0.84 over seeds 1, 2, 3 and 12345 (this run's), so the bound
  # says only that it learned; the full demo's figures are in the README.
  assert results["auc"] >= 0.6, results
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    assert len(f.read().splitlines()) == 1 + 12
