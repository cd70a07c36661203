"""tools/host_ratios.py: the benchmark's ratios over runs on several hosts, each run named
by its matmul peaks, with each ratio's range; and docs/benchmark/hosts.md is what it makes
of the committed runs."""

import csv
import os

import pytest

from conftest import ROOT
from tools import host_ratios
from tools.benchmark import environment_label, peaks_sentence

FIELDS = ["variant", "environment", "device", "model", "seq", "matmul_peak_gflops",
          "fraction_of_peak", "step_over_matmul_floor", "speedup_vs_google", "speedup_vs_hf"]
TF1 = dict(tensorflow="1.15.5", python="3.7.16", device={"kind": "CPU"})
TF2 = dict(tensorflow="2.15.1", python="3.11.7", device={"kind": "CPU"})


def _run(folder, peak, rows, bf16):
  """A run's results.csv and results.md as tools/benchmark.py writes their fields."""
  os.makedirs(folder)
  with open(os.path.join(folder, "results.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=FIELDS)
    writer.writeheader()
    for variant, runtime, model, seq, figures in rows:
      writer.writerow(dict(figures, variant=variant, environment=environment_label(runtime),
                           device="AMD EPYC, 2 cores", model=model, seq=seq,
                           matmul_peak_gflops=peak))
  sentence = peaks_sentence(dict(TF2, matmul_peak_gflops=peak, **bf16))
  with open(os.path.join(folder, "results.md"), "w") as f:
    f.write("# Fine-tuning speed\n\nMachine: Linux, AMD EPYC x2, 2 cores; %s. Data: "
            "`comments.csv`, 12180 rows.\n" % sentence)
  return os.path.join(folder, "results.csv")


def test_each_ratio_has_a_column_per_run_and_its_range(tmp_path):
  fast = _run(str(tmp_path / "fast"), 480.0, [
      ("ours", TF1, "minilm", 128, dict(speedup_vs_hf=2.5, speedup_vs_google=4.4,
                                         fraction_of_peak=0.7, step_over_matmul_floor=1.3)),
      ("ours_fixed", TF1, "minilm", 128, dict(speedup_vs_google=2.03)),
      ("google", TF1, "minilm", 128, {})],
      dict(bf16_matmul_peak_gflops=371.0, bf16_note="AVX512_BF16"))
  slow = _run(str(tmp_path / "slow"), 110.0, [
      ("ours", TF1, "minilm", 128, dict(speedup_vs_hf=1.6, speedup_vs_google=4.1,
                                         fraction_of_peak=0.66, step_over_matmul_floor=1.25)),
      ("ours", TF2, "minilm", 128, dict(speedup_vs_hf=1.5))],
      dict(bf16_note="no bfloat16 matmul instructions (AVX512_BF16, AMX_BF16)"))
  page = host_ratios.markdown([host_ratios.read_run(p) for p in (fast, slow)])
  names = [host_ratios.read_run(p)["name"] for p in (fast, slow)]
  assert "| %s | 480 GFLOP/s | - | 371.0 GFLOP/s |" % names[0] in page
  assert ("| %s | 110 GFLOP/s | 110 GFLOP/s | not measured: no bfloat16 matmul instructions "
          "(AVX512_BF16, AMX_BF16) |" % names[1]) in page
  sections = page.split("\n## ")[1:]
  hf, fixed, google, floor, peak = sections
  assert "| minilm | 128 | TF 1.15 | 2.50x | 1.60x | 1.60x to 2.50x |" in hf
  assert "| minilm | 128 | TF 2.15 | - | 1.50x | 1.50x |" in hf
  assert "| minilm | 128 | TF 1.15 | 2.03x | - | 2.03x |" in fixed
  assert "TF 2.15" not in fixed  # (no run has the figure)
  assert "| minilm | 128 | TF 1.15 | 4.40x | 4.10x | 4.10x to 4.40x |" in google
  assert "| minilm | 128 | TF 1.15 | 1.30x | 1.25x | 1.25x to 1.30x |" in floor
  assert "| minilm | 128 | TF 1.15 | 70% | 66% | 66% to 70% |" in peak


def test_a_file_that_is_no_benchmark_result_is_refused(tmp_path):
  other = tmp_path / "results.csv"
  other.write_text("a,b\n1,2\n")
  with pytest.raises(SystemExit, match="is not a results.csv of ./run.sh benchmark"):
    host_ratios.read_run(str(other))
  with pytest.raises(SystemExit):
    host_ratios.main([str(tmp_path / "missing.csv")])


def test_the_committed_page_is_made_from_the_committed_runs():
  with open(os.path.join(ROOT, "docs", "benchmark", "hosts.md")) as f:
    assert f.read() == host_ratios.markdown(
        [host_ratios.read_run(p) for p in host_ratios.committed_results()]), (
            "docs/benchmark/hosts.md is stale: ./run.sh benchmark hosts --out "
            "docs/benchmark/hosts.md")
