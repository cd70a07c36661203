"""Prediction speed: the in-process predictor on an export against run_classifier's
--do_predict, on MiniLM (all-MiniLM-L6-v2 in Google's layout).

  ./run.sh benchmark predictor [--data comments.csv --rows 1000 --out_dir docs/predictor]

It fine-tunes MiniLM for a few steps on the data's first rows and exports it (not timed),
then measures, on the runtime it runs on:
  cli_one_row      `python run_classifier.py --do_predict` on a one-row file, wall time of
                   the process (what a user waits for one prediction);
  cli_rows         the same command on --rows real comments;
  predictor_load   Predictor(export) once;
  predictor_one    predict([text]) for one text, the median of --repeats calls over
                   different texts;
  predictor_rows   predict(texts) on the same --rows comments, batch --batch_size.
It checks that both paths give the same probabilities (within 1e-5) on those rows, and
writes results.md and results.json to --out_dir.
"""

import argparse
import csv
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tools import assets, bench_worker  # noqa: E402

SHARED_COMMENTS = os.path.join(os.path.dirname(ROOT), "shared", "datasets",
                               "jigsaw_toxic_balanced", "comments.csv")
SAMPLE_COMMENTS = os.path.join(ROOT, "tests", "data", "datasets", "jigsaw_toxic_balanced",
                               "comments.csv")


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--data", default=SHARED_COMMENTS if os.path.exists(SHARED_COMMENTS)
                      else SAMPLE_COMMENTS, help="CSV rows text,label without a header")
  parser.add_argument("--rows", type=int, default=1000, help="comments to score")
  parser.add_argument("--train_steps", type=int, default=10)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--repeats", type=int, default=30, help="single-text calls")
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--out_dir", default=os.path.join(ROOT, "output", "bench_predictor"))
  parser.add_argument("--work_dir", default=os.path.join(ROOT, ".cache", "bench_predictor"))
  parser.add_argument("--cache_dir", default=assets.DEFAULT_CACHE)
  return parser.parse_args(argv)


def read_rows(path, limit):
  rows = bench_worker.rows_or_exit(path, "bench_predictor")
  if len(rows) < limit:
    raise SystemExit("%s has %d rows; --rows=%d asks for more" % (path, len(rows), limit))
  return rows[:limit]


def write_rows(path, rows):
  with io.open(path, "w", encoding="utf-8", newline="") as f:
    csv.writer(f).writerows(rows)


def run_classifier(*flags):
  """Runs the CLI; returns its wall time in seconds."""
  start = time.time()
  done = subprocess.run([sys.executable, os.path.join(ROOT, "run_classifier.py")] + list(flags),
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        universal_newlines=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  seconds = time.time() - start
  if done.returncode:
    raise SystemExit("run_classifier failed:\n" + done.stderr[-3000:])
  return seconds


def cli_probabilities(output_dir):
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    return [[float(row["probability_0"]), float(row["probability_1"])]
            for row in csv.DictReader(f, delimiter="\t")]


def fine_tune_and_export(args, model_dir, train_file, output_dir):
  run_classifier(
      "--task_name=csv", "--train_file=" + train_file, "--text_column=0", "--label_column=1",
      "--nohas_header", "--labels=0,1",
      "--bert_config_file=" + os.path.join(model_dir, "bert_config.json"),
      "--vocab_file=" + os.path.join(model_dir, "vocab.txt"),
      "--init_checkpoint=" + os.path.join(model_dir, "bert_model.ckpt"),
      "--max_seq_length=%d" % args.max_seq_length, "--do_train", "--do_export",
      "--num_train_steps=%d" % args.train_steps, "--train_batch_size=16",
      "--dynamic_padding", "--output_dir=" + output_dir)


def main(argv=None):
  args = parse_args(argv)
  import numpy as np
  import tensorflow as tf
  from serving.predictor import Predictor

  rows = read_rows(args.data, args.rows)
  shutil.rmtree(args.work_dir, ignore_errors=True)
  os.makedirs(args.work_dir)
  os.makedirs(args.out_dir, exist_ok=True)
  all_rows, one_row = (os.path.join(args.work_dir, name) for name in ("rows.csv", "one.csv"))
  write_rows(all_rows, rows)
  write_rows(one_row, rows[:1])
  model = os.path.join(args.work_dir, "model")
  print("fine-tuning MiniLM for %d steps and exporting it (not timed)" % args.train_steps)
  fine_tune_and_export(args, assets.minilm_google_dir(args.cache_dir), all_rows, model)

  figures = {}
  print("run_classifier --do_predict, one row ...")
  figures["cli_one_row_s"] = run_classifier("--do_predict", "--output_dir=" + model,
                                            "--predict_file=" + one_row)
  print("run_classifier --do_predict, %d rows ..." % len(rows))
  figures["cli_rows_s"] = run_classifier("--do_predict", "--output_dir=" + model,
                                         "--predict_file=" + all_rows)
  expected = cli_probabilities(model)

  start = time.time()
  predictor = Predictor(model, batch_size=args.batch_size)
  figures["predictor_load_s"] = time.time() - start
  predictor.predict([rows[0][0]])  # the first run of a session allocates; not a user's steady state
  single = []
  for text, _ in rows[1:1 + args.repeats]:
    start = time.time()
    predictor.predict([text])
    single.append(time.time() - start)
  figures["predictor_one_ms"] = 1000 * statistics.median(single)
  start = time.time()
  results = predictor.predict([text for text, _ in rows])
  figures["predictor_rows_s"] = time.time() - start
  got = [[r["probabilities"]["0"], r["probabilities"]["1"]] for r in results]
  figures["max_abs_difference"] = float(np.abs(np.array(got) - np.array(expected)).max())
  if figures["max_abs_difference"] > 1e-5:
    raise SystemExit("the predictor and the CLI disagree by %g" % figures["max_abs_difference"])

  figures.update(
      rows=len(rows), batch_size=args.batch_size, max_seq_length=args.max_seq_length,
      cli_rows_per_s=len(rows) / figures["cli_rows_s"],
      predictor_rows_per_s=len(rows) / figures["predictor_rows_s"],
      latency_speedup=figures["cli_one_row_s"] / (figures["predictor_one_ms"] / 1000),
      throughput_speedup=figures["cli_rows_s"] / figures["predictor_rows_s"],
      tensorflow=tf.__version__, python=platform.python_version(),
      machine=machine(), data=os.path.relpath(args.data, os.path.dirname(ROOT)))
  write_results(args.out_dir, figures, results_markdown(figures))


def machine():
  return "%s, %d cores" % (platform.processor() or platform.machine(), os.cpu_count())


def write_results(out_dir, figures, table):
  """results.json (figures) and results.md (table) in out_dir; the table printed."""
  with open(os.path.join(out_dir, "results.json"), "w") as f:
    json.dump(figures, f, indent=2, sort_keys=True)
  with open(os.path.join(out_dir, "results.md"), "w") as f:
    f.write(table)
  print(table)


def results_markdown(f):
  return "\n".join([
      "# Prediction speed: the predictor on an export against `--do_predict`",
      "",
      "MiniLM (all-MiniLM-L6-v2, 6 layers, hidden 384), max_seq_length %d, TensorFlow %s, "
      "Python %s, %s; %d real comments from `%s`." % (
          f["max_seq_length"], f["tensorflow"], f["python"], f["machine"], f["rows"], f["data"]),
      "",
      "| | `run_classifier.py --do_predict` | `Predictor.predict` | ratio |",
      "|---|---:|---:|---:|",
      "| one text (latency) | %.1f s | %.1f ms | %.0fx lower |" % (
          f["cli_one_row_s"], f["predictor_one_ms"], f["latency_speedup"]),
      "| %d comments | %.1f s (%.0f rows/s) | %.1f s (%.0f rows/s) | %.1fx faster |" % (
          f["rows"], f["cli_rows_s"], f["cli_rows_per_s"], f["predictor_rows_s"],
          f["predictor_rows_per_s"], f["throughput_speedup"]),
      "",
      "The CLI's figures are the wall time of the whole process (start-up, graph, checkpoint, "
      "featurisation, prediction); the predictor's exclude its one-off load (%.1f s). "
      "Both gave the same probabilities on every row (largest difference %.1e). "
      "Batch size %d." % (f["predictor_load_s"], f["max_abs_difference"], f["batch_size"]),
      ""])


if __name__ == "__main__":
  main()
