"""The data path at Kaggle's size: featurisation time and peak memory with an empty cache,
the time to the first training step with a warm one, and prediction rows/s.

  ./run.sh benchmark scale [--rows=1804874] [--models=tiny,minilm] [--sizes=180000,1804874]

For each size it builds a Kaggle-shaped Jigsaw Unintended Bias file (tools/scale_data.py)
and runs the command a user would, `run_classifier.py --task_name=jigsaw_bias
--max_seq_length=220 --dynamic_padding`, as a child process:
  cold     --do_train for --steps steps, the cache empty;
  warm     the same command again, --steps more steps, the records cached;
  predict  --do_predict on the 97,320-row test file with the trained model.
Each run's peak memory is the largest proportional set size (PSS: shared pages divided
among the processes sharing them) of the run's whole process tree (the run and its
featurisation workers), sampled every 0.5 s. The figures are printed and written to
--out_dir (results.json, results.md).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tools import scale_data  # noqa: E402

TINY = os.path.join(ROOT, "tests", "data", "checkpoint_fixtures", "bert_tiny")
_STEP_LINE = re.compile(r"step (\d+)/(\d+)")


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--sizes", default="180000,%d" % scale_data.KAGGLE_TRAIN_ROWS,
                      help="train rows of each file measured (comma-separated)")
  parser.add_argument("--models", default="tiny,minilm",
                      help="tiny (BERT-Tiny's config, random weights: the data path "
                      "dominates) and/or minilm (the real all-MiniLM-L6-v2)")
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--test_rows", type=int, default=scale_data.KAGGLE_TEST_ROWS)
  parser.add_argument("--featurise_workers", type=int, default=0,
                      help="passed on (0: one per core)")
  parser.add_argument("--work_dir", default=os.path.join(ROOT, ".cache", "bench_scale"))
  parser.add_argument("--out_dir", default=os.path.join(ROOT, "docs", "scale"))
  return parser.parse_args(argv)


def model_flags(model):
  if model == "tiny":
    return ["--bert_config_file=" + os.path.join(TINY, "bert_config.json"),
            "--vocab_file=" + os.path.join(TINY, "vocab.txt")]
  from tools.assets import minilm_google_dir
  folder = minilm_google_dir()
  return ["--bert_config_file=" + os.path.join(folder, "bert_config.json"),
          "--vocab_file=" + os.path.join(folder, "vocab.txt"),
          "--init_checkpoint=" + os.path.join(folder, "bert_model.ckpt")]


def process_tree_pss(pid):
  """The summed PSS (bytes) of pid and its descendants, from /proc (each thread's list of
  the children it started)."""
  total, todo = 0, [pid]
  while todo:
    current = todo.pop()
    try:
      for thread in os.listdir("/proc/%d/task" % current):
        with open("/proc/%d/task/%s/children" % (current, thread)) as f:
          todo.extend(int(child) for child in f.read().split())
      with open("/proc/%d/smaps_rollup" % current) as f:
        for line in f:
          if line.startswith("Pss:"):
            total += int(line.split()[1]) * 1024
            break
    except (OSError, ValueError):
      pass  # (a process that has just ended)
  return total


def measured_run(command, log_path):
  """Runs command; returns wall seconds, peak PSS bytes, seconds to the first progress
  line of training (None without one), and the exit status."""
  peak = [0]
  first_step = [None]
  start = time.time()
  with open(log_path, "w") as log_file:
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             universal_newlines=True, cwd=ROOT)
    done = threading.Event()

    def sample():
      while not done.wait(0.5):
        peak[0] = max(peak[0], process_tree_pss(child.pid))

    sampler = threading.Thread(target=sample)
    sampler.start()
    for line in child.stdout:
      log_file.write(line)
      if first_step[0] is None and _STEP_LINE.search(line):
        first_step[0] = time.time() - start
    status = child.wait()
    done.set()
    sampler.join()
  return {"seconds": time.time() - start, "peak_pss_gb": peak[0] / 1e9,
          "to_first_step_line": first_step[0], "exit": status}


def summary_seconds(output_dir):
  with open(os.path.join(output_dir, "run_summary.json")) as f:
    summary = json.load(f)
  return summary.get("seconds", {}), summary.get("training") or {}


def tensorflow_import_seconds():
  start = time.time()
  subprocess.check_call([sys.executable, "-c", "import tensorflow"])
  return time.time() - start


def measure(args, rows, model):
  data_dir = os.path.join(args.work_dir, "data-%d" % rows)
  scale_data.write_files(rows, data_dir, args.test_rows)
  run_dir = os.path.join(args.work_dir, "run-%s-%d" % (model, rows))
  shutil.rmtree(run_dir, ignore_errors=True)
  os.makedirs(run_dir)
  output_dir = os.path.join(run_dir, "model")
  base = [sys.executable, os.path.join(ROOT, "run_classifier.py"), "--task_name=jigsaw_bias",
          "--data_dir=" + data_dir, "--output_dir=" + output_dir, "--max_seq_length=220",
          "--dynamic_padding", "--train_batch_size=32", "--log_every_steps=1",
          "--featurise_workers=%d" % args.featurise_workers] + model_flags(model)
  results = {"rows": rows, "model": model,
             "train_mb": os.path.getsize(os.path.join(data_dir, "train.csv")) / 1e6}
  for name, extra in (("cold", ["--do_train", "--num_train_steps=%d" % args.steps]),
                      ("warm", ["--do_train", "--num_train_steps=%d" % (2 * args.steps)]),
                      ("predict", ["--do_predict"])):
    if name == "predict" and rows != max(args.size_list):
      continue
    run = measured_run(base + extra, os.path.join(run_dir, name + ".log"))
    if run["exit"] != 0:
      raise SystemExit("bench_scale: the %s run failed (exit %d); see %s" % (
          name, run["exit"], os.path.join(run_dir, name + ".log")))
    seconds, training = summary_seconds(output_dir)
    run["featurisation_seconds"] = seconds.get("featurisation")
    run["training_startup_seconds"] = training.get("startup_seconds")
    if name == "predict":
      run["predict_seconds"] = seconds.get("predict")
      run["rows_per_second"] = args.test_rows / run["predict_seconds"] if run[
          "predict_seconds"] else None
    results[name] = run
    print("%-6s %-7s %9d rows: %7.1f s, peak %.2f GB%s" % (
        model, name, rows, run["seconds"], run["peak_pss_gb"],
        "" if run["to_first_step_line"] is None else
        ", first step line at %.1f s" % run["to_first_step_line"]), flush=True)
  return results


def write_results(results, args, import_seconds):
  if not os.path.isdir(args.out_dir):
    os.makedirs(args.out_dir)
  with open(os.path.join(args.out_dir, "results.json"), "w") as f:
    json.dump({"tensorflow_import_seconds": import_seconds, "runs": results}, f, indent=1,
              sort_keys=True)
  lines = ["| model | train rows (MB) | run | wall s | peak memory (PSS) GB | "
           "featurisation s | first step line s | predict rows/s |", "|---" * 8 + "|"]
  for r in results:
    for name in ("cold", "warm", "predict"):
      run = r.get(name)
      if not run:
        continue
      lines.append("| %s | %d (%.0f) | %s | %.1f | %.2f | %s | %s | %s |" % (
          r["model"], r["rows"], r["train_mb"], name, run["seconds"], run["peak_pss_gb"],
          _figure(run.get("featurisation_seconds")), _figure(run.get("to_first_step_line")),
          _figure(run.get("rows_per_second"), "%.0f")))
  with open(os.path.join(args.out_dir, "results.md"), "w") as f:
    f.write("\n".join(lines) + "\n\nTensorFlow's import: %.1f s\n" % import_seconds)
  print("\n".join(lines))


def _figure(value, form="%.1f"):
  return "-" if value is None else form % value


def main(argv=None):
  args = parse_args(argv)
  args.size_list = [int(n) for n in args.sizes.split(",")]
  import_seconds = tensorflow_import_seconds()
  print("TensorFlow's import: %.1f s" % import_seconds)
  results = [measure(args, rows, model) for model in args.models.split(",")
             for rows in args.size_list]
  write_results(results, args, import_seconds)


if __name__ == "__main__":
  main()
