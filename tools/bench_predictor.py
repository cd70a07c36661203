"""Prediction speed: the in-process predictor on an export against run_classifier's
--do_predict, on MiniLM (all-MiniLM-L6-v2 in Google's layout).

  ./run.sh benchmark predictor [--data comments.csv --rows 1000 --out_dir docs/predictor]

It fine-tunes MiniLM for --train_steps steps on --rows of the data's rows (drawn in a seeded
order) and exports it with its ONNX model (not timed),
then measures, on the runtime it runs on:
  cli_one_row      `python run_classifier.py --do_predict` on a one-row file, wall time of
                   the process (what a user waits for one prediction);
  cli_rows         the same command on --rows real comments;
  predictor_load   Predictor(export) once;
  predictor_one    predict([text]) for one text, the median of --repeats calls over
                   different texts;
  predictor_rows   predict(texts) on the same --rows comments, batch --batch_size;
  onnx_*, int8_*   the same for the export's ONNX model in onnxruntime
                   (serving.onnx_predictor.OnnxPredictor), fp32 and int8;
  eval_*           ROC-AUC and accuracy of the TensorFlow predictor, the fp32 and the int8
                   ONNX model on --eval_rows held-out comments (the rows after --rows).
It checks that the predictor gives the CLI's probabilities (within 1e-5) and the fp32 ONNX
model within 1e-4 on those rows, and writes results.md and results.json to --out_dir.
"""

import argparse
import csv
import io
import json
import os
import platform
import random
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
  parser.add_argument("--eval_rows", type=int, default=2000,
                      help="held-out comments (after --rows) for the metric of each model; "
                      "at least 2")
  parser.add_argument("--train_steps", type=int, default=60,
                      help="fine-tuning steps of 16 rows (60: about an epoch of --rows)")
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--repeats", type=int, default=30, help="single-text calls")
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--out_dir", default=os.path.join(ROOT, "output", "bench_predictor"))
  parser.add_argument("--work_dir", default=os.path.join(ROOT, ".cache", "bench_predictor"))
  parser.add_argument("--cache_dir", default=assets.DEFAULT_CACHE)
  args = parser.parse_args(argv)
  if args.eval_rows < 2:
    parser.error("--eval_rows=%d: ROC-AUC needs at least 2 held-out rows" % args.eval_rows)
  return args


def read_rows(path, limit=None, shuffle=False, program="bench_predictor"):
  """The first limit rows of path (None: all of them); with shuffle, drawn in a seeded
  order (a file sorted by label, as Jigsaw's balanced comments are, then gives both labels
  to the training rows and to the held-out ones). program: who stops, in its message."""
  rows = bench_worker.rows_or_exit(path, program)
  if limit is None:
    limit = len(rows)
  elif len(rows) < limit:
    raise SystemExit("%s has %d rows; --rows and --eval_rows ask for %d" % (
        path, len(rows), limit))
  if shuffle:
    random.Random(0).shuffle(rows)
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


# How the benchmarks' files are laid out: rows text,label without a header.
LAYOUT = ("--task_name=csv", "--text_column=0", "--nohas_header")


def fine_tune_and_export(args, model_dir, train_file, output_dir, export_format="saved_model",
                         eval_file=None):
  """Fine-tunes for args.train_steps and exports; with eval_file, evaluates on it too (an
  export with its ONNX model then measures its int8 model's quality on those rows)."""
  evaluate = ["--do_eval", "--eval_file=" + eval_file] if eval_file else []
  run_classifier(*evaluate + list(LAYOUT) + [
      "--train_file=" + train_file, "--label_column=1", "--labels=0,1",
      "--bert_config_file=" + os.path.join(model_dir, "bert_config.json"),
      "--vocab_file=" + os.path.join(model_dir, "vocab.txt"),
      "--init_checkpoint=" + os.path.join(model_dir, "bert_model.ckpt"),
      "--max_seq_length=%d" % args.max_seq_length, "--do_train", "--do_export",
      "--num_train_steps=%d" % args.train_steps, "--train_batch_size=16",
      "--dynamic_padding", "--export_format=" + export_format, "--output_dir=" + output_dir])


def main(argv=None):
  args = parse_args(argv)
  import tensorflow as tf
  from serving.onnx_predictor import OnnxPredictor
  from serving.predictor import Predictor

  rows = read_rows(args.data, args.rows + args.eval_rows, shuffle=True)
  rows, held_out = rows[:args.rows], rows[args.rows:]
  if len(set(label for _, label in held_out)) < 2:
    raise SystemExit("the %d held-out rows have one label only: ROC-AUC needs both (give more "
                     "--eval_rows, or a file with both labels)" % len(held_out))
  onnx_problem = onnx_unavailable()
  shutil.rmtree(args.work_dir, ignore_errors=True)
  os.makedirs(args.work_dir)
  os.makedirs(args.out_dir, exist_ok=True)
  all_rows, one_row = (os.path.join(args.work_dir, name) for name in ("rows.csv", "one.csv"))
  write_rows(all_rows, rows)
  write_rows(one_row, rows[:1])
  model = os.path.join(args.work_dir, "model")
  print("fine-tuning MiniLM for %d steps and exporting it with its ONNX model (not timed)"
        % args.train_steps)
  fine_tune_and_export(args, assets.minilm_google_dir(args.cache_dir), all_rows, model,
                       "saved_model" if onnx_problem else "saved_model,onnx")

  figures = {}
  predict = ("--do_predict", "--output_dir=" + model) + LAYOUT  # (the run gives the layout)
  print("run_classifier --do_predict, one row ...")
  figures["cli_one_row_s"] = run_classifier(*predict + ("--predict_file=" + one_row,))
  print("run_classifier --do_predict, %d rows ..." % len(rows))
  figures["cli_rows_s"] = run_classifier(*predict + ("--predict_file=" + all_rows,))
  expected = cli_probabilities(model)

  predictors = (("predictor", "the TensorFlow predictor", 1e-5, lambda: Predictor(
      model, batch_size=args.batch_size)),
                ("onnx", "the ONNX model in onnxruntime", 1e-4, lambda: OnnxPredictor(
                    model, batch_size=args.batch_size)),
                ("int8", "the int8 ONNX model in onnxruntime", None, lambda: OnnxPredictor(
                    model, int8=True, batch_size=args.batch_size)))
  held_out_scores = {}
  if onnx_problem:
    print("the ONNX model is not measured: " + onnx_problem)
    predictors = predictors[:1]
  for prefix, name, tolerance, make in predictors:
    print(name + " ...")
    measured, held_out_scores[prefix] = predictor_figures(prefix, make, rows, held_out,
                                                          expected, args.repeats)
    figures.update(measured)
    difference = figures[prefix + "_max_abs_difference"]
    if tolerance is not None and difference > tolerance:
      raise SystemExit("%s and the CLI disagree by %g" % (name, difference))
  if not onnx_problem:
    from serving.onnx_predictor import find_onnx_folder
    folder = find_onnx_folder(model)
    figures.update(int8_against_fp32(held_out_scores["int8"], held_out_scores["onnx"]),
                   onnxruntime=onnxruntime_version(), onnx_mb=megabytes(folder, "model.onnx"),
                   int8_mb=megabytes(folder, "model.int8.onnx"))

  figures.update(
      rows=len(rows), eval_rows=len(held_out),
      batch_size=args.batch_size, max_seq_length=args.max_seq_length,
      cli_rows_per_s=len(rows) / figures["cli_rows_s"],
      latency_speedup=figures["cli_one_row_s"] / (figures["predictor_one_ms"] / 1000),
      throughput_speedup=figures["cli_rows_s"] / figures["predictor_rows_s"],
      tensorflow=tf.__version__, python=platform.python_version(),
      machine=machine(), data=os.path.relpath(args.data, os.path.dirname(ROOT)))
  write_results(args.out_dir, figures, results_markdown(figures))


def positive_probabilities(predictor, texts):
  return [r["probabilities"]["1"] for r in predictor.predict(texts)]


def predictor_figures(prefix, make, rows, held_out, expected, repeats):
  """One predictor's figures, each name starting with prefix: its load (make() makes it),
  one text's latency (the median of repeats calls), the rows' time, its largest
  difference from the CLI's probabilities (expected), and its ROC-AUC and accuracy (at
  0.5) on the held-out rows; and its probabilities of those rows."""
  import numpy as np
  from modeling.statistics import roc_auc
  figures = {}
  start = time.time()
  predictor = make()
  figures[prefix + "_load_s"] = time.time() - start
  predictor.predict([rows[0][0]])  # the first run of a session allocates; not a user's steady state
  single = []
  for text, _ in rows[1:1 + repeats]:
    start = time.time()
    predictor.predict([text])
    single.append(time.time() - start)
  figures[prefix + "_one_ms"] = 1000 * statistics.median(single)
  start = time.time()
  got = positive_probabilities(predictor, [text for text, _ in rows])
  figures[prefix + "_rows_s"] = time.time() - start
  figures[prefix + "_rows_per_s"] = len(rows) / figures[prefix + "_rows_s"]
  figures[prefix + "_max_abs_difference"] = float(
      np.abs(np.array(got) - np.array([p for _, p in expected])).max())
  labels = [int(label) for _, label in held_out]
  scores = positive_probabilities(predictor, [text for text, _ in held_out])
  figures[prefix + "_auc"] = roc_auc(scores, labels)
  figures[prefix + "_accuracy"] = sum(
      (p >= 0.5) == bool(y) for p, y in zip(scores, labels)) / len(labels)
  predictor.close()
  return figures, scores


def int8_against_fp32(int8, fp32):
  """How far the int8 model's held-out probabilities are from the fp32 model's: the mean
  and largest difference, and how many answers (at 0.5) change."""
  differences = [abs(a - b) for a, b in zip(int8, fp32)]
  return {"int8_mean_difference": sum(differences) / len(differences),
          "int8_largest_difference": max(differences),
          "int8_changed_answers": sum((a >= 0.5) != (b >= 0.5) for a, b in zip(int8, fp32))}


def megabytes(folder, name):
  return os.path.getsize(os.path.join(folder, name)) / 1e6


def onnx_unavailable():
  """Why this runtime cannot export and run ONNX models, or None when it can."""
  from pipeline.onnx_export import check_onnx_export
  from spec.run_errors import FlagError
  try:
    check_onnx_export()
  except FlagError as e:
    return str(e)
  return None


def onnxruntime_version():
  import onnxruntime
  return onnxruntime.__version__


def machine():
  """The host, with its matmul peaks (tools.benchmark.machine_description)."""
  from tools.benchmark import machine_description
  return machine_description()


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
      "Batch size %d." % (f["predictor_load_s"], f["predictor_max_abs_difference"],
                          f["batch_size"]),
      ""] + (onnx_markdown(f) if "onnx_one_ms" in f else [
          "Held-out ROC-AUC %.4f, accuracy %.4f (%d comments). The export's ONNX model was "
          "not measured on this runtime." % (f["predictor_auc"], f["predictor_accuracy"],
                                              f["eval_rows"]), ""]))


def onnx_markdown(f):
  return [
      "## The export's ONNX model in onnxruntime (`serving.onnx_predictor.OnnxPredictor`)",
      "",
      "| | `Predictor` (TensorFlow) | ONNX fp32 | ONNX int8 |",
      "|---|---:|---:|---:|",
      "| one text (latency) | %.1f ms | %.1f ms | %.1f ms |" % (
          f["predictor_one_ms"], f["onnx_one_ms"], f["int8_one_ms"]),
      "| %d comments | %.1f s (%.0f rows/s) | %.1f s (%.0f rows/s) | %.1f s (%.0f rows/s) |" % (
          f["rows"], f["predictor_rows_s"], f["predictor_rows_per_s"], f["onnx_rows_s"],
          f["onnx_rows_per_s"], f["int8_rows_s"], f["int8_rows_per_s"]),
      "| load | %.1f s | %.1f s | %.1f s |" % (
          f["predictor_load_s"], f["onnx_load_s"], f["int8_load_s"]),
      "| model file | | %.0f MB | %.0f MB |" % (f["onnx_mb"], f["int8_mb"]),
      "| largest difference from the CLI's probabilities | %.1e | %.1e | %.1e |" % (
          f["predictor_max_abs_difference"], f["onnx_max_abs_difference"],
          f["int8_max_abs_difference"]),
      "| ROC-AUC, %d held-out comments | %.4f | %.4f | %.4f |" % (
          f["eval_rows"], f["predictor_auc"], f["onnx_auc"], f["int8_auc"]),
      "| accuracy, the same comments | %.4f | %.4f | %.4f |" % (
          f["predictor_accuracy"], f["onnx_accuracy"], f["int8_accuracy"]),
      "",
      "Against the fp32 model on the held-out comments, the int8 model's probabilities "
      "differ by %.4f on average and by %.2f at most, and %d of its %d answers (at 0.5) "
      "change." % (f["int8_mean_difference"], f["int8_largest_difference"],
                   f["int8_changed_answers"], f["eval_rows"]),
      "",
      "The same tokenizer in all three, and the same batching in TensorFlow and ONNX "
      "fp32 (texts of similar length in one run of the model, padded to its longest; "
      "where runs are cut follows each backend's cost of a run), on every core; the int8 "
      "model runs one text at a time (so that a text's answer does not depend on the "
      "texts run with it), on each core at once. onnxruntime %s with its default graph "
      "optimisations. The held-out comments are the %d rows after the "
      "first %d, in a seeded order of the file's rows." % (
          f["onnxruntime"], f["eval_rows"], f["rows"]),
      ""]


if __name__ == "__main__":
  main()
