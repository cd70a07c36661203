"""The fine-tuning benchmark's ratios over every run committed (or given), one column per
run with its host's matmul peak (the figures that depend on the host beside the one that
says how fast the host is), and the README's row of their ranges.

  ./run.sh benchmark hosts [RESULTS.csv ...] [--out docs/benchmark/hosts.md]

Without files it reads every results.csv under docs/benchmark/ (the first run's and each
later run's folder). Each ratio comes from one run, whose rows ran side by side on one
host; a run without a row a ratio needs leaves its cell empty.
"""

import argparse
import csv
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pipeline.machine import PEAK_SIZE  # noqa: E402 (plain Python)

BENCHMARK_DOCS = os.path.join(ROOT, "docs", "benchmark")
RUNTIMES = ("TF 1.15", "TF 2.15")  # (each ratio is given on both, as results.csv names them)

# (title, the variant whose rows carry the figure, the results.csv column, how a cell is
# written)
RATIOS = (
    ("this project, dynamic padding, over the fastest Hugging Face path", "ours",
     "speedup_vs_hf", "%.2fx"),
    ("this project, fixed padding, over Google's run_classifier", "ours_fixed",
     "speedup_vs_google", "%.2fx"),
    ("this project, dynamic padding, over Google's run_classifier", "ours",
     "speedup_vs_google", "%.2fx"),
    ("this project, dynamic padding: its step over its own matmul floor (host-free)", "ours",
     "step_over_matmul_floor", "%.2fx"),
    ("this project, dynamic padding: its fraction of the host's matmul peak in the precision "
     "it trains in (bfloat16 where the CPU has bfloat16 units and the runtime computes in "
     "them)", "ours", "fraction_of_peak", "%.0f%%"),
    ("this project, dynamic padding, in bfloat16 over the same run in float32 (a CPU with "
     "bfloat16 units: TF 2.15, and TF 1.15 where the fused kernels multiply on them)", "ours",
     "speedup_vs_fp32", "%.2fx"),
)


def read_run(path):
  """One run: {"name", "rows", "peaks": {runtime: float32 GFLOP/s}, "bf16": words}."""
  with open(path, newline="") as f:
    rows = list(csv.DictReader(f))
  if not rows or "speedup_vs_hf" not in rows[0]:
    raise SystemExit("%s is not a results.csv of ./run.sh benchmark (no speedup_vs_hf "
                     "column)" % path)
  folder = os.path.dirname(os.path.abspath(path))
  if folder == BENCHMARK_DOCS:
    name = "first run"
  elif os.path.dirname(folder) == BENCHMARK_DOCS:
    name = os.path.basename(folder).replace("_", " ")  # (second_run: "second run")
  else:
    name = os.path.dirname(path) or "."
  sizes = sorted(set(row.get("matmul_peak_size") or str(PEAK_SIZE) for row in rows) -
                 {str(PEAK_SIZE)})
  if sizes:  # (hosts are named by peaks of the same matrices; older runs' were all 2048)
    raise SystemExit("%s: its matmul peaks were measured on %sx%s matrices (--peak_size); "
                     "hosts are compared by peaks at the default %d: run ./run.sh benchmark "
                     "again without --peak_size" % (path, sizes[0], sizes[0], PEAK_SIZE))
  peaks = {}
  for row in rows:
    for runtime in RUNTIMES:
      if row["environment"].startswith(runtime) and row["matmul_peak_gflops"]:
        peaks.setdefault(runtime, float(row["matmul_peak_gflops"]))
  return {"name": name, "rows": rows,
          "peaks": peaks, "bf16": _bf16_words(os.path.join(folder, "results.md"))}


def _bf16_words(results_md):
  """The run's bfloat16 peak as its results.md names it (TF 2's, through oneDNN, where it
  measured one; else a runtime's measured one, where one runtime measured it and another
  could not), or why it has none."""
  if not os.path.exists(results_md):
    return "not recorded"
  with open(results_md) as f:
    text = f.read()
  measured = (re.search(r"on TF 2\.[^;]*?bfloat16 ([0-9][0-9.]* GFLOP/s)", text) or
              re.search(r"bfloat16 ([0-9][0-9.]* GFLOP/s)", text))
  if measured:
    return measured.group(1)
  found = re.search(r"bfloat16 (not measured: [^;\n]*?)(?:\. Data:|;|\n|$)", text)
  return found.group(1) if found else "not recorded"


def figure(run, variant, column, runtime, model, seq):
  for row in run["rows"]:
    if (row["variant"], row["model"], row["seq"]) == (variant, model, seq) and \
        row["environment"].startswith(runtime) and row.get(column):
      return float(row[column])
  return None


def cases(runs):
  """(model, seq) of every run, in the order first met."""
  found = []
  for run in runs:
    for row in run["rows"]:
      if (row["model"], row["seq"]) not in found:
        found.append((row["model"], row["seq"]))
  return found


def _cell(value, fmt):
  if value is None:
    return "-"
  return fmt % (100 * value) if fmt.endswith("%%") else fmt % value


def markdown(runs):
  lines = ["# Ratios over hosts", "",
           "Every committed run of `./run.sh benchmark`, side by side: each column is one run "
           "on one host, named by its float32 matrix-multiply peak (2048x2048, best of 5) "
           "and its bfloat16 one. The README gives each ratio's range for MiniLM. Made by "
           "`./run.sh benchmark hosts` from the runs' results.csv (a test fails when this "
           "page and those files disagree).", "",
           "| run | float32 peak, TF 1.15 | float32 peak, TF 2.15 | bfloat16 peak |",
           "|---|---|---|---|"]
  for run in runs:
    lines.append("| %s | %s | %s | %s |" % (
        run["name"], *["%.0f GFLOP/s" % run["peaks"][r] if r in run["peaks"] else "-"
                       for r in RUNTIMES], run["bf16"]))
  for title, variant, column, fmt in RATIOS:
    table = []
    for model, seq in cases(runs):
      for runtime in RUNTIMES:
        values = [figure(run, variant, column, runtime, model, seq) for run in runs]
        known = [v for v in values if v is not None]
        if not known:
          continue
        table.append("| %s | %s | %s | %s |" % (
            model, seq, runtime, " | ".join(_cell(v, fmt) for v in values)))
    if table:  # (a figure no run has, no section)
      lines += ["", "## %s" % title, "",
                "| model | seq | runtime | %s |" % " | ".join(r["name"] for r in runs),
                "|---|---|---|%s" % ("---|" * len(runs))] + table
  return "\n".join(lines) + "\n"


def _figures(run, runs, index, model="minilm"):
  """RATIOS[index]'s figures for model in one run, over every length and runtime."""
  _, variant, column, _ = RATIOS[index]
  return [v for m, seq in cases(runs) if m == model for runtime in RUNTIMES
          for v in [figure(run, variant, column, runtime, model, seq)] if v is not None]


def span(runs, index):
  """RATIOS[index]'s lowest and highest figure for MiniLM over every run, written as its
  cells are."""
  known = [v for run in runs for v in _figures(run, runs, index)]
  fmt = RATIOS[index][-1]
  if not known:  # (runs without MiniLM rows)
    return "-"
  return "%s to %s" % (_cell(min(known), fmt), _cell(max(known), fmt))


def measured_in(runs, index):
  """How many runs have RATIOS[index] for MiniLM."""
  return sum(1 for run in runs if _figures(run, runs, index))


def readme_line(runs):
  """The README's row of speed: the ratios' ranges for MiniLM over the runs."""
  peaks = [p for run in runs for p in run["peaks"].values()] or [float("nan")]
  bf16_runs = measured_in(runs, 5)
  bf16 = ("; on a CPU with bfloat16 units, bfloat16 trains %s as fast as "
          "float32 (%d run%s)" % (span(runs, 5), bf16_runs, "" if bf16_runs == 1 else "s")
          if bf16_runs else "")
  return ("| speed | MiniLM at 128 and 220 tokens on a 2-core CPU: with dynamic padding "
          "%s the fastest Hugging Face path (in either precision) and %s Google's "
          "`run_classifier`; with fixed padding (a TPU's shapes) %s Google's; %s of the "
          "host's matmul peak in the precision it trains in%s. Over %d runs (%d with fixed "
          "padding) on hosts whose float32 peak was %.0f to %.0f GFLOP/s: [ratios over "
          "hosts](docs/benchmark/hosts.md) |" % (
              span(runs, 0), span(runs, 2), span(runs, 1), span(runs, 4), bf16, len(runs),
              measured_in(runs, 1), min(peaks), max(peaks)))


def committed_results():
  return sorted(glob.glob(os.path.join(BENCHMARK_DOCS, "results.csv")) +
                glob.glob(os.path.join(BENCHMARK_DOCS, "*_run", "results.csv")),
                key=lambda p: (os.path.dirname(p) != BENCHMARK_DOCS, _run_order(p)))


_ORDINALS = ("second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
             "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth")


def _run_order(path):
  name = os.path.basename(os.path.dirname(path)).split("_")[0]
  return (_ORDINALS.index(name) if name in _ORDINALS else len(_ORDINALS), name)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("results", nargs="*", help="results.csv files (default: docs/benchmark's)")
  parser.add_argument("--out", help="write the page here (default: print it)")
  args = parser.parse_args(argv)
  paths = args.results or committed_results()
  missing = [p for p in paths if not os.path.isfile(p)]
  if missing:
    parser.error("not a file: %s (give results.csv files of ./run.sh benchmark)"
                 % ", ".join(missing))
  runs = [read_run(p) for p in paths]
  page = markdown(runs)
  print("the README's row:\n%s" % readme_line(runs), file=sys.stderr)
  if args.out:
    try:
      with open(args.out + ".partial", "w") as f:
        f.write(page)
      os.replace(args.out + ".partial", args.out)  # (never a half-written page)
    except OSError as error:
      sys.exit("host_ratios: cannot write %s (%s): choose another --out"
               % (args.out, error.strerror))
    print("wrote %s" % args.out)
  else:
    sys.stdout.write(page)


if __name__ == "__main__":
  main()
