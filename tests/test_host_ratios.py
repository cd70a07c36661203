"""tools/host_ratios.py: the benchmark's ratios over runs on several hosts, each run named
by its matmul peaks, and the README's row of their ranges; docs/benchmark/hosts.md and
that row are what it makes of the committed runs."""

import csv
import os

import pytest

from conftest import ROOT
from tools import host_ratios
from tools.benchmark import environment_label, peaks_sentence

FIELDS = ["variant", "environment", "device", "model", "seq", "matmul_peak_gflops",
          "matmul_peak_size",
          "fraction_of_peak", "step_over_matmul_floor", "speedup_vs_google", "speedup_vs_hf",
          "speedup_vs_fp32"]
TF1 = dict(tensorflow="1.15.5", python="3.7.16", device={"kind": "CPU"})
TF2 = dict(tensorflow="2.15.1", python="3.11.7", device={"kind": "CPU"})


def _run(folder, peak, rows, bf16, peak_size=2048):
  """A run's results.csv and results.md as tools/benchmark.py writes their fields (a run
  from before the size was recorded: peak_size None)."""
  os.makedirs(folder)
  with open(os.path.join(folder, "results.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=FIELDS)
    writer.writeheader()
    for variant, runtime, model, seq, figures in rows:
      writer.writerow(dict(figures, variant=variant, environment=environment_label(runtime),
                           device="AMD EPYC, 2 cores", model=model, seq=seq,
                           matmul_peak_gflops=peak, matmul_peak_size=peak_size))
  sentences = "; ".join(peaks_sentence(dict(runtime, matmul_peak_gflops=peak, **bf16))
                        for runtime in (TF1, TF2))  # (as the machine line names each)
  with open(os.path.join(folder, "results.md"), "w") as f:
    f.write("# Fine-tuning speed\n\nMachine: Linux, AMD EPYC x2, 2 cores; %s. Data: "
            "`comments.csv`, 12180 rows.\n" % sentences)
  return os.path.join(folder, "results.csv")


def test_each_ratio_has_a_column_per_run_and_its_range(tmp_path):
  fast = _run(str(tmp_path / "fast"), 480.0, [
      ("ours", TF1, "minilm", 128, dict(speedup_vs_hf=2.5, speedup_vs_google=4.4,
                                         fraction_of_peak=0.7, step_over_matmul_floor=1.3)),
      ("ours_fixed", TF1, "minilm", 128, dict(speedup_vs_google=2.03)),
      ("ours", TF2, "minilm", 220, dict(speedup_vs_fp32=2.21, fraction_of_peak=0.2)),
      ("google", TF1, "minilm", 128, {})],
      dict(bf16_matmul_peak_gflops=371.0, bf16_note="AVX512_BF16"))
  slow = _run(str(tmp_path / "slow"), 110.0, [
      ("ours", TF1, "minilm", 128, dict(speedup_vs_hf=1.6, speedup_vs_google=4.1,
                                         fraction_of_peak=0.66, step_over_matmul_floor=1.25)),
      ("ours", TF2, "minilm", 128, dict(speedup_vs_hf=1.5))],
      dict(bf16_note="no bfloat16 matmul instructions (AVX512_BF16, AMX_BF16)"))
  page = host_ratios.markdown([host_ratios.read_run(p) for p in (fast, slow)])
  names = [host_ratios.read_run(p)["name"] for p in (fast, slow)]
  assert "| %s | 480 GFLOP/s | 480 GFLOP/s | 371.0 GFLOP/s |" % names[0] in page
  assert ("| %s | 110 GFLOP/s | 110 GFLOP/s | not measured: no bfloat16 matmul instructions "
          "(AVX512_BF16, AMX_BF16) |" % names[1]) in page
  sections = page.split("\n## ")[1:]
  hf, fixed, google, floor, peak, bf16 = sections
  assert "| minilm | 128 | TF 1.15 | 2.50x | 1.60x |" in hf
  assert "| minilm | 128 | TF 2.15 | - | 1.50x |" in hf
  assert "| minilm | 128 | TF 1.15 | 2.03x | - |" in fixed
  assert "TF 2.15" not in fixed  # (no run has the figure)
  assert "| minilm | 128 | TF 1.15 | 4.40x | 4.10x |" in google
  assert "| minilm | 128 | TF 1.15 | 1.30x | 1.25x |" in floor
  assert "| minilm | 128 | TF 1.15 | 70% | 66% |" in peak
  assert "| minilm | 220 | TF 2.15 | 20% | - |" in peak
  assert bf16.splitlines()[-1] == "| minilm | 220 | TF 2.15 | 2.21x | - |"
  runs = [host_ratios.read_run(p) for p in (fast, slow)]
  assert host_ratios.readme_line(runs) == (
      "| speed | MiniLM at 128 and 220 tokens on a 2-core CPU: with dynamic padding 1.50x to "
      "2.50x the fastest Hugging Face path (in either precision) and 4.10x to 4.40x Google's "
      "`run_classifier`; with fixed padding (a TPU's shapes) 2.03x to 2.03x Google's; 20% to "
      "70% of the host's matmul peak in the precision it trains in; on a CPU with bfloat16 "
      "units, bfloat16 trains 2.21x to 2.21x as fast as float32 (1 run). Over 2 "
      "runs (1 with fixed padding) on hosts whose float32 peak was 110 to 480 GFLOP/s: "
      "[ratios over hosts](docs/benchmark/hosts.md) |")


def test_a_run_whose_peaks_were_measured_on_other_matrices_is_refused(tmp_path):
  """Hosts are named and compared by peaks of 2048 x 2048 matrices: a run measured with
  another --peak_size stops the page with one line naming it; one from before the size
  was recorded was measured at 2048."""
  rows = [("ours", TF1, "minilm", 128, dict(speedup_vs_hf=3.0))]
  small = _run(str(tmp_path / "small"), 100.0, rows, dict(bf16_note="none"), peak_size=256)
  with pytest.raises(SystemExit) as stopped:
    host_ratios.main([small])
  assert str(stopped.value) == (
      "%s: its matmul peaks were measured on 256x256 matrices (--peak_size); hosts are "
      "compared by peaks at the default 2048: run ./run.sh benchmark again without "
      "--peak_size" % small)
  for size in (2048, None):
    run = host_ratios.read_run(_run(str(tmp_path / str(size)), 100.0, rows,
                                    dict(bf16_note="none"), peak_size=size))
    assert run["peaks"] == {"TF 1.15": 100.0}


def test_a_file_that_is_no_benchmark_result_is_refused(tmp_path):
  other = tmp_path / "results.csv"
  other.write_text("a,b\n1,2\n")
  with pytest.raises(SystemExit, match="is not a results.csv of ./run.sh benchmark"):
    host_ratios.read_run(str(other))
  for not_a_file in (str(tmp_path / "missing.csv"), str(tmp_path)):
    with pytest.raises(SystemExit):
      host_ratios.main([not_a_file])
  tiny_only = _run(str(tmp_path / "tiny"), 100.0, [
      ("ours", TF1, "tiny", 128, dict(speedup_vs_hf=3.0))], dict(bf16_note="none"))
  assert "dynamic padding - the fastest" in host_ratios.readme_line(
      [host_ratios.read_run(tiny_only)])  # (no MiniLM rows: no range, no traceback)
  under_a_file = os.path.join(tiny_only, "hosts.md")  # (a folder that is a file)
  with pytest.raises(SystemExit, match="^host_ratios: cannot write %s " % under_a_file):
    host_ratios.main([tiny_only, "--out", under_a_file])


def test_the_committed_page_and_the_readme_s_row_are_made_from_the_committed_runs():
  runs = [host_ratios.read_run(p) for p in host_ratios.committed_results()]
  with open(os.path.join(ROOT, "docs", "benchmark", "hosts.md")) as f:
    assert f.read() == host_ratios.markdown(runs), (
        "docs/benchmark/hosts.md is stale: ./run.sh benchmark hosts --out "
        "docs/benchmark/hosts.md")
  with open(os.path.join(ROOT, "README.md")) as f:
    assert host_ratios.readme_line(runs) in f.read().splitlines(), (
        "README.md's row of speed is stale: ./run.sh benchmark hosts prints it")
