"""The one-command demo, run for real: real weights, real data, train, eval, predict."""

import json
import os
import subprocess
import sys

import pytest

from conftest import IS_TF1, ROOT, fetched


def test_demo_beats_the_majority_baseline(tmp_path):
  """On TF 2.15 (the demo's runtime) the full demo; on TF 1.15 a short run of the same path."""
  from tools import assets
  fetched(assets.minilm_google_dir)
  fetched(assets.vader_movie_reviews)
  output_dir = str(tmp_path / "demo")
  command = [sys.executable, "-m", "tools.demo", "--output_dir", output_dir]
  if IS_TF1:
    command += ["--", "--num_train_steps=20"]
  result = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=1800)
  out = result.stdout
  assert result.returncode == 0, out[-4000:]
  for stage in ("[1/5] pre-trained model", "[2/5] data", "[3/5] fine-tune",
                "[4/5] evaluation on 2111 held-out sentences", "[5/5] a few predictions"):
    assert stage in out
  assert "initialising 103 of 105 variables" in out  # the whole encoder from real weights
  assert "examples/sec  ETA" in out
  assert "majority-class baseline (always negative): accuracy 0.5017" in out
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    results = json.load(f)
  assert results["num_examples"] == 2111
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    assert len(f.read().splitlines()) == 1 + 12
  if not IS_TF1:
    assert results["accuracy"] > results["majority_baseline_accuracy"] + 0.2
