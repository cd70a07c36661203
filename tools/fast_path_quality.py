"""Does a fast training path train models as good as TensorFlow's own ops? Over several
seeds, on both runtimes, on held-out real data.

  ./run.sh benchmark fast-paths [--seeds 1,2,3,4,5] [--runtimes tf1,tf2]
                                [--paths reference,fused] [--data COMMENTS.csv]

Each cell (runtime, path, seed) is one run of run_classifier.py as a user runs it: the real
all-MiniLM-L6-v2 (tools/assets.py) fine-tuned for --epochs on --train_rows comments of
--data (a CSV of text,label rows without a header, by default the 12,180 Jigsaw comments
of ../shared/datasets; shuffled once with a fixed seed), --dynamic_padding, then asked to
predict two sets it never trained on:
  - the next --eval_rows comments: the held-out ROC-AUC;
  - the identity template sentences of tools/bias_templates.py (Dixon et al.'s method):
    the Jigsaw Unintended Bias final metric (pipeline/bias_metrics.py) and its parts.
The paths differ in their options (PATHS): `reference` is TensorFlow's own ops in float32,
`fused` the fused kernels in float32, `bf16` the fused kernels in bfloat16 (what a run
chooses on a CPU with bfloat16 units: on TF 2.15 through oneDNN, on TF 1.15 the dense
layers by the fused kernels' own matmul, on AMX or AVX512_BF16). The seed
(--seed) sets the head's initial weights, the dropout and the order of the rows; every
path runs every seed, so differences are paired.

The verdict on a path, for each runtime and metric: its paired difference from the
reference (mean over seeds, and its 95% confidence interval by Student's t), against the
seeds' spread (the standard deviation of the reference's metric over the seeds). A path is
WORSE when its mean difference is below minus that spread, or when the interval lies
below zero; else it is equal within the seeds' spread. The bfloat16 path is held besides
to a mean held-out ROC-AUC within BF16_AUC_BOUND of the reference. Cells already measured
with the
same settings (work_dir/cells.jsonl) are not run again, so an interrupted benchmark goes
on where it stopped. Writes fast_paths.md, fast_paths.csv and fast_paths.json to
--out_dir.
"""

import argparse
import csv
import hashlib
import io
import json
import math
import os
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tools import bench_hf  # noqa: E402 (after the path; it loads no torch until used)
from tools.bench_worker import read_rows  # noqa: E402
from tools.benchmark import machine_description, python_of  # noqa: E402
from tools.bias_templates import template_rows  # noqa: E402
from tools.time_to_quality import (GOOGLE_LAYOUT, drop_checkpoints,  # noqa: E402
                                   environment_versions, run_timed, split_rows, write_rows)

# Each path: (its flags, what it is, the runtimes it runs on). `reference` is what every
# other path is held to.
PATHS = {
    "reference": (["--fused_kernels=off", "--use_bf16=false"],
                  "TensorFlow's own ops in float32", ("tf1", "tf2")),
    "fused": (["--fused_kernels=on", "--use_bf16=false"],
              "the fused CPU kernels (modeling/kernels) in float32", ("tf1", "tf2")),
    "bf16": (["--fused_kernels=on", "--use_bf16"],
             "the fused CPU kernels with the encoder in bfloat16, float32 master weights "
             "and loss (as a run chooses on a CPU with bfloat16 units; on TF 1.15 its dense "
             "layers' bfloat16 products, between float32 activations, by the fused "
             "kernels' own matmul)", ("tf1", "tf2")),
}
RUNTIMES = ("tf1", "tf2")
# The bound for bfloat16: its mean held-out ROC-AUC at most this far below float32.
BF16_AUC_BOUND = 0.005
DEFAULT_DATA = os.path.join(os.path.dirname(ROOT), "shared", "datasets",
                            "jigsaw_toxic_balanced", "comments.csv")
# The sources whose change calls for a new measurement (tests/test_fast_path_quality.py
# checks that the committed one was made with them as they are).
# The fast paths' sources, and the optimizer's (the fused kernels' update and the
# reference's): a change to any needs the measurement again.
KERNEL_SOURCES = ("modeling/kernels/fused_ops.cc", "modeling/kernels/bf16_matmul.cc",
                  "modeling/fused.py", "modeling/optimization.py")
METRICS = (("held_out_auc", "held-out ROC-AUC"),
           ("bias_final", "bias final metric"),
           ("bias_overall_auc", "templates' overall AUC"))
# Student's t, two-sided 95%, by degrees of freedom (for the paired differences).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
       9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131}


class QualityError(Exception):
  """A mistake in the command's input, reported as one line."""


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--data", default=DEFAULT_DATA,
                      help="CSV of text,label rows (0/1) without a header")
  parser.add_argument("--train_rows", type=int, default=4000)
  parser.add_argument("--eval_rows", type=int, default=2000)
  parser.add_argument("--seeds", default="1,2,3,4,5", help="comma-separated, at least 2")
  parser.add_argument("--runtimes", default=",".join(RUNTIMES))
  parser.add_argument("--paths", default=",".join(PATHS), help="from %s" % ", ".join(PATHS))
  parser.add_argument("--seq", type=int, default=128)
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--predict_batch", type=int, default=64)
  parser.add_argument("--epochs", type=float, default=1.0)
  parser.add_argument("--learning_rate", type=float, default=2e-5)
  parser.add_argument("--model_dir", help="the model in Google's layout (bert_config.json, "
                      "vocab.txt, bert_model.ckpt; default: all-MiniLM-L6-v2, converted once)")
  parser.add_argument("--out_dir", default=os.path.join(ROOT, "output", "benchmark"))
  parser.add_argument("--work_dir", default=os.path.join(ROOT, ".cache", "fast_path_work"))
  args = parser.parse_args(argv)
  args.seed_list = parse_seeds(args.seeds)
  args.runtime_list = names_of(args.runtimes, RUNTIMES, "--runtimes")
  args.path_list = names_of(args.paths, PATHS, "--paths")
  if "reference" not in args.path_list:
    args.path_list.insert(0, "reference")  # (what the others are held to)
  return args


def parse_seeds(text):
  try:
    seeds = [int(s) for s in text.split(",")]
  except ValueError:
    raise QualityError("--seeds=%s: give whole numbers separated by commas, e.g. 1,2,3,4,5"
                       % text)
  if len(set(seeds)) < 2:
    raise QualityError("--seeds=%s: the seeds' spread needs at least 2 different seeds "
                       "(5 or more for a verdict worth having)" % text)
  return sorted(set(seeds))


def names_of(text, known, flag):
  names = [n for n in text.split(",") if n]
  unknown = [n for n in names if n not in known]
  if unknown or not names:
    raise QualityError("%s=%s: choose from %s" % (flag, text, ", ".join(known)))
  return names


# --- The data: train rows, and the rows every model predicts ----------------------------

def prepare_data(args, work_dir):
  """Writes train.csv and predict.csv (the held-out comments, then the templates) into
  work_dir; returns (train path, predict path, held-out labels, template rows)."""
  if not os.path.isfile(args.data):
    raise QualityError("no data file %s: pass --data=a CSV of text,label rows (0/1, no "
                       "header)" % args.data)
  try:
    rows = read_rows(args.data, 0)
  except ValueError as e:
    raise QualityError(str(e))
  try:
    train, held_out = split_rows(rows, args.train_rows, args.eval_rows, args.data)
  except Exception as e:  # (time_to_quality's QualityError: one line)
    raise QualityError(str(e))
  templates = template_rows()
  os.makedirs(work_dir, exist_ok=True)
  train_path, predict_path = (os.path.join(work_dir, "train.csv"),
                              os.path.join(work_dir, "predict.csv"))
  write_rows(train, train_path)
  write_rows(list(held_out) + [(text, "%d" % target) for text, target, _ in templates],
             predict_path)
  return train_path, predict_path, [int(label) for _, label in held_out], templates


def kernels_sha256():
  """The sha256 of the kernels' sources (KERNEL_SOURCES) as they are now."""
  digest = hashlib.sha256()
  for name in KERNEL_SOURCES:
    with open(os.path.join(ROOT, name), "rb") as f:
      digest.update(f.read())
  return digest.hexdigest()


def settings_of(args, model_dir):
  """What a cell's result depends on besides its runtime, path and seed."""
  return {"data": os.path.abspath(args.data), "train_rows": args.train_rows,
          "eval_rows": args.eval_rows, "seq": args.seq, "batch": args.batch,
          "epochs": args.epochs, "learning_rate": args.learning_rate,
          "model_dir": os.path.abspath(model_dir), "kernels_sha256": kernels_sha256(),
          "templates": len(template_rows())}


# --- One cell ----------------------------------------------------------------------------

def cell_command(runtime, path, seed, args, files, model_dir, output_dir):
  steps = bench_hf.schedule(args.train_rows, args.batch, args.epochs)[0]
  return [python_of(runtime), os.path.join(ROOT, "run_classifier.py"), "--task_name=csv",
          "--train_file=" + files[0], "--predict_file=" + files[1], "--nohas_header",
          "--text_column=0", "--label_column=1", "--labels=0,1", "--do_train",
          "--do_predict", "--dynamic_padding",
          "--bert_config_file=" + os.path.join(model_dir, "bert_config.json"),
          "--vocab_file=" + os.path.join(model_dir, "vocab.txt"),
          "--init_checkpoint=" + os.path.join(model_dir, "bert_model.ckpt"),
          "--max_seq_length=%d" % args.seq, "--train_batch_size=%d" % args.batch,
          "--predict_batch_size=%d" % args.predict_batch, "--num_train_steps=%d" % steps,
          "--learning_rate=%s" % args.learning_rate, "--seed=%d" % seed,
          "--save_checkpoints_steps=%d" % steps, "--output_dir=" + output_dir
          ] + PATHS[path][0]


def runs_on(path, runtime):
  return runtime in PATHS[path][2]


def positive_probabilities(results_path, expected_rows):
  """probability_1 of every row of a test_results.tsv, in order; every one finite."""
  with io.open(results_path, encoding="utf-8", newline="") as f:
    rows = list(csv.DictReader(f, delimiter="\t"))
  if len(rows) != expected_rows:
    raise RuntimeError("%s has %d rows, not %d" % (results_path, len(rows), expected_rows))
  values = [float(row["probability_1"]) for row in rows]
  bad = [i for i, v in enumerate(values) if not math.isfinite(v)]
  if bad:
    raise RuntimeError("%s: row %d's probability is %r" % (results_path, bad[0] + 1,
                                                           values[bad[0]]))
  return values


def scores_of(probabilities, held_out_labels, templates):
  """The cell's metrics from its predictions: held-out AUC, and the bias metric on the
  templates."""
  from modeling.statistics import roc_auc
  from pipeline.bias_metrics import bias_report
  from spec.task_names import SCORED_IDENTITY_COLUMNS
  n = len(held_out_labels)
  on_templates = probabilities[n:]
  _, summary = bias_report(on_templates, [target for _, target, _ in templates],
                           {name: [row[2][name] for row in templates]
                            for name in SCORED_IDENTITY_COLUMNS})
  return {"held_out_auc": roc_auc(probabilities[:n], held_out_labels),
          "bias_final": summary["final_metric"],
          "bias_overall_auc": summary["overall_auc"],
          "bias_subgroup": summary["power_mean_subgroup_auc"],
          "bias_bpsn": summary["power_mean_bpsn_auc"],
          "bias_bnsp": summary["power_mean_bnsp_auc"]}


def measure_cell(runtime, path, seed, args, files, labels, templates, model_dir, work_dir):
  name = "%s_%s_seed%d" % (runtime, path, seed)
  output_dir = os.path.join(work_dir, "runs", name)
  shutil.rmtree(output_dir, ignore_errors=True)  # (from nothing, as a first run)
  os.makedirs(os.path.dirname(output_dir), exist_ok=True)
  command = cell_command(runtime, path, seed, args, files, model_dir, output_dir)
  print("running %s" % name)
  sys.stdout.flush()
  seconds = run_timed(name, command, output_dir + ".log")
  probabilities = positive_probabilities(os.path.join(output_dir, "test_results.tsv"),
                                         len(labels) + len(templates))
  with open(os.path.join(output_dir, "run_summary.json")) as f:
    summary = json.load(f)
  drop_checkpoints(output_dir)
  cell = dict(runtime=runtime, path=path, seed=seed, wall_seconds=seconds,
              train_seconds=summary["seconds"].get("training"),
              fused_log=fused_line(output_dir + ".log"),
              precision_log=logged(output_dir + ".log", "encoder precision:"),
              **scores_of(probabilities, labels, templates))
  print("%s: held-out AUC %.4f, bias final %.4f (%s)" % (
      name, cell["held_out_auc"], cell["bias_final"], cell["fused_log"]))
  return cell


def fused_line(log_path):
  """The run's own 'fused CPU kernels: ...' line: which ops the path really ran."""
  return logged(log_path, "fused CPU kernels:")


def logged(log_path, mark):
  """What the run's log says after mark (its first such line), or 'not logged'."""
  with open(log_path) as f:
    for line in f:
      if mark in line:
        return line.split(mark, 1)[1].strip()
  return "not logged"


# --- Statistics and the verdict -----------------------------------------------------------

def mean_sd(values):
  n = len(values)
  mean = sum(values) / n
  sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else float("nan")
  return mean, sd


def compare(reference, other):
  """The paired comparison of one metric over seeds: reference and other are {seed: value}
  over the same seeds. Returns a dict: mean difference (other - reference), its 95%
  interval, the seeds' spread (the reference's sd) and the verdict."""
  seeds = sorted(set(reference) & set(other))
  if len(seeds) < 2:
    raise ValueError("a comparison needs at least 2 seeds measured on both paths")
  differences = [other[s] - reference[s] for s in seeds]
  mean, sd = mean_sd(differences)
  half = T95.get(len(seeds) - 1, 1.96) * sd / math.sqrt(len(seeds))
  spread = mean_sd([reference[s] for s in seeds])[1]
  worse = mean < -spread or mean + half < 0
  return {"seeds": seeds, "mean_difference": mean, "ci_low": mean - half,
          "ci_high": mean + half, "spread": spread,
          "verdict": "worse" if worse else "equal within the seeds' spread"}


def summarise(cells, runtimes, paths):
  """{runtime: {path: {metric: comparison with the reference}}} over the measured cells."""
  result = {}
  for runtime in runtimes:
    by_path = {p: {c["seed"]: c for c in cells if c["runtime"] == runtime and c["path"] == p}
               for p in paths}
    result[runtime] = {}
    for path in paths:
      if path == "reference" or not runs_on(path, runtime):
        continue
      result[runtime][path] = {
          metric: compare({s: c[metric] for s, c in by_path["reference"].items()},
                          {s: c[metric] for s, c in by_path[path].items()})
          for metric, _ in METRICS}
  return result


def report(cells, comparisons, args, machine, versions):
  seeds = ", ".join(str(s) for s in args.seed_list)
  lines = [
      "# Fast paths against TensorFlow's own ops: quality over seeds", "",
      "Machine: %s. %s fine-tuned for %g epoch(s) on %d Jigsaw comments "
      "(`%s`, a seeded shuffle), batch %d, learning rate %g with 10%% warm-up, "
      "max_seq_length %d, `--dynamic_padding`; seeds %s. Held out: the next %d comments "
      "(ROC-AUC), and %d identity template sentences (`tools/bias_templates.py`: the "
      "Jigsaw bias final metric and the templates' overall AUC). Written by `./run.sh "
      "benchmark fast-paths`." % (
          machine, "`%s`" % args.model_dir if args.model_dir else "all-MiniLM-L6-v2",
          args.epochs, args.train_rows, os.path.basename(args.data), args.batch,
          args.learning_rate, args.seq, seeds, args.eval_rows, len(template_rows())), ""]
  lines += ["## Each path, mean ± sd over the seeds", "",
            "| runtime | path | " + " | ".join(label for _, label in METRICS) +
            " | training (s) |", "|---" * (3 + len(METRICS)) + "|"]
  for runtime in args.runtime_list:
    for path in args.path_list:
      mine = [c for c in cells if c["runtime"] == runtime and c["path"] == path]
      if not mine:
        continue
      figures = ["%.4f ± %.4f" % mean_sd([c[m] for c in mine]) for m, _ in METRICS]
      lines.append("| %s (%s) | %s | %s | %.0f |" % (
          runtime, versions.get(runtime, "?"), path, " | ".join(figures),
          mean_sd([c["train_seconds"] or 0.0 for c in mine])[0]))
  lines += ["", "## Paired differences from the reference (path - reference)", "",
            "| runtime | path | metric | mean difference | 95% interval | seeds' spread | "
            "verdict |", "|---|---|---|---|---|---|---|"]
  for runtime, by_path in comparisons.items():
    for path, by_metric in by_path.items():
      for metric, label in METRICS:
        c = by_metric[metric]
        lines.append("| %s | %s | %s | %+.4f | [%+.4f, %+.4f] | %.4f | %s |" % (
            runtime, path, label, c["mean_difference"], c["ci_low"], c["ci_high"],
            c["spread"], c["verdict"]))
  lines += ["", "## Every run", "", "| runtime | path | seed | " +
            " | ".join(label for _, label in METRICS) + " | kernels as logged |",
            "|---" * (4 + len(METRICS)) + "|"]
  for c in sorted(cells, key=lambda c: (c["runtime"], c["path"], c["seed"])):
    lines.append("| %s | %s | %d | %s | %s; %s |" % (
        c["runtime"], c["path"], c["seed"], " | ".join("%.4f" % c[m] for m, _ in METRICS),
        c["fused_log"], c.get("precision_log", "precision not logged")))
  lines += ["", "The paths: " + "; ".join(
      "`%s`, %s (%s)" % (path, PATHS[path][1], " and ".join(
          r for r in PATHS[path][2] if r in args.runtime_list))
      for path in args.path_list), "",
            "A path is worse when its mean difference from the reference is below "
            "minus the seeds' spread (the sd of the reference's metric over the seeds), or "
            "when the 95% interval of the paired difference lies below zero. The bf16 "
            "path is worse besides when its mean held-out ROC-AUC is more than " +
            "%g below the reference's." % BF16_AUC_BOUND]
  return "\n".join(lines)


def verdicts(comparisons):
  """{path: 'worse' or 'equal'} over every runtime and metric (bf16 held besides to
  BF16_AUC_BOUND)."""
  result = {}
  for by_path in comparisons.values():
    for path, by_metric in by_path.items():
      worse = any(c["verdict"] == "worse" for c in by_metric.values()) or (
          path == "bf16" and by_metric["held_out_auc"]["mean_difference"] < -BF16_AUC_BOUND)
      if worse or path not in result:
        result[path] = "worse" if worse else "equal"
  return result


# --- main ----------------------------------------------------------------------------------

def load_cells(path, settings):
  """The cells measured before with these settings."""
  cells = []
  if os.path.exists(path):
    with open(path) as f:
      for line in f:
        try:
          record = json.loads(line)
        except ValueError:
          continue  # (a line cut short by an interrupted run: measured again)
        if record.get("settings") == settings:
          cells.append(record["cell"])
  return cells


def main(argv=None):
  try:
    args = parse_args(argv)
    missing = [r for r in args.runtime_list if not os.path.exists(python_of(r))]
    if missing:
      raise QualityError("no environment for %s (.venvs/%s): ./run.sh setup creates it"
                         % (", ".join(missing), missing[0]))
    try:
      bench_hf.schedule(args.train_rows, args.batch, args.epochs)
    except bench_hf.InputError as e:
      raise QualityError(str(e))
    missing = [name for name in GOOGLE_LAYOUT if args.model_dir and not os.path.isfile(
        os.path.join(args.model_dir, name))]
    if missing:
      raise QualityError("--model_dir %s has no %s (it needs %s)" % (
          args.model_dir, ", ".join(missing), ", ".join(GOOGLE_LAYOUT)))
    files = prepare_data(args, args.work_dir)
  except QualityError as e:
    sys.exit("fast paths: %s" % e)
  train_path, predict_path, labels, templates = files
  from tools import assets
  model_dir = args.model_dir or assets.minilm_google_dir()
  settings = settings_of(args, model_dir)
  journal = os.path.join(args.work_dir, "cells.jsonl")
  cells = load_cells(journal, settings)
  started = time.time()
  for runtime in args.runtime_list:
    for seed in args.seed_list:
      for path in args.path_list:
        if not runs_on(path, runtime) or any(
            c["runtime"] == runtime and c["path"] == path and c["seed"] == seed for c in cells):
          continue
        try:
          cell = measure_cell(runtime, path, seed, args, (train_path, predict_path), labels,
                              templates, model_dir, args.work_dir)
        except RuntimeError as e:
          sys.exit("fast paths: %s" % e)
        cells.append(cell)
        with open(journal, "a") as f:
          f.write(json.dumps({"settings": settings, "cell": cell}) + "\n")
  cells = [c for c in cells if c["runtime"] in args.runtime_list and
           c["path"] in args.path_list and c["seed"] in args.seed_list]
  comparisons = summarise(cells, args.runtime_list, args.path_list)
  versions = {r: environment_versions(r) for r in args.runtime_list}
  text = report(cells, comparisons, args, machine_description(), versions)
  os.makedirs(args.out_dir, exist_ok=True)
  with open(os.path.join(args.out_dir, "fast_paths.md"), "w") as f:
    f.write(text + "\n")
  with open(os.path.join(args.out_dir, "fast_paths.csv"), "w", newline="") as f:
    fields = ["runtime", "path", "seed", "held_out_auc", "bias_final", "bias_overall_auc",
              "bias_subgroup", "bias_bpsn", "bias_bnsp", "train_seconds", "wall_seconds",
              "fused_log", "precision_log"]
    writer = csv.DictWriter(f, fieldnames=fields)
    writer.writeheader()
    writer.writerows(sorted(cells, key=lambda c: (c["runtime"], c["path"], c["seed"])))
  with open(os.path.join(args.out_dir, "fast_paths.json"), "w") as f:
    json.dump({"settings": dict(settings, data=os.path.basename(args.data),
                                model_dir=os.path.basename(model_dir)),
               "seeds": args.seed_list, "comparisons": comparisons,
               "verdicts": verdicts(comparisons)}, f, indent=2, sort_keys=True)
  print()
  print(text)
  print("\nverdicts: %s" % ", ".join("%s %s" % kv for kv in sorted(verdicts(comparisons).items())))
  print("wrote fast_paths.md, .csv and .json to %s (%.0f s)" % (args.out_dir,
                                                                time.time() - started))


if __name__ == "__main__":
  main()
