"""The benchmark runs end to end and writes its table, CSV and plot (no timing is asserted)."""

import csv
import io
import os
import subprocess
import sys

from conftest import IS_TF1, ROOT, shared_path


def test_benchmark_writes_table_csv_and_plot(tmp_path):
  source = shared_path("datasets", "jigsaw_toxic_balanced", "comments.csv")
  data = tmp_path / "comments.csv"
  with io.open(source, encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f))[:160]
  with io.open(str(data), "w", encoding="utf-8", newline="") as f:
    csv.writer(f).writerows(rows)
  runtime = "tf1" if IS_TF1 else "tf2"
  out_dir = str(tmp_path / "bench")
  command = [sys.executable, "-m", "tools.benchmark", "--data", str(data), "--vocab",
             os.path.join(shared_path("checkpoint_fixtures", "bert_tiny"), "vocab.txt"),
             "--models", "tiny", "--seq_lengths", "32", "--steps", "2", "--warmup_steps", "1",
             "--batch_size", "8", "--runtimes", runtime, "--work_dir", str(tmp_path / "work"),
             "--featurise_repeats", "1"]

  def run(*extra):
    return subprocess.run(command + list(extra), cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=900)

  result = run("--variants", "google,ours", "--out_dir", out_dir)
  assert result.returncode == 0, result.stdout[-3000:]
  assert "matmul peak on TF" in result.stdout
  with open(os.path.join(out_dir, "results.csv")) as f:
    table = list(csv.DictReader(f))
  variants = [r["variant"] for r in table]
  assert variants == (["google", "ours"] if IS_TF1 else ["ours"])  # Google's path needs TF 1.15
  for row in table:
    assert float(row["examples_per_sec"]) > 0 and float(row["fraction_of_peak"]) > 0
    assert float(row["train_gflops_per_example"]) > 0
  if IS_TF1:
    assert float(table[1]["speedup_vs_google"]) > 0
    assert "x Google's" in result.stdout
  with open(os.path.join(out_dir, "results.md")) as f:
    markdown = f.read()
  assert "| environment / device | code | model | seq | wall time (s) | examples/sec |" in markdown
  assert "Featurisation of all 160 rows" in markdown
  featurisation = [line for line in markdown.splitlines() if "--tokenizer=" in line]
  assert len(featurisation) == 3  # python, auto, auto with 2 processes
  if IS_TF1:  # every row's features were compared with Google's records, and are equal
    assert all(line.endswith("| 160 of 160 |") for line in featurisation), featurisation
  assert os.path.getsize(os.path.join(out_dir, "results.png")) > 10000
  # A second run in the same work directory measures afresh: it neither reuses the
  # first run's records nor stops at once on its final checkpoint.
  again = run("--variants", "ours", "--skip_featurisation", "--out_dir", str(tmp_path / "again"))
  assert again.returncode == 0, again.stdout[-3000:]
  with open(os.path.join(str(tmp_path / "again"), "results.csv")) as f:
    assert float(next(csv.DictReader(f))["examples_per_sec"]) > 0
