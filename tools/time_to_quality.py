"""Time to quality: how long each code path takes to fine-tune the real MiniLM, and how good
the result is.

  ./run.sh benchmark quality --data COMMENTS.csv [--train_rows 4000 --eval_rows 2000 ...]

--data is a CSV of `text,label` rows without a header (labels 0/1), e.g. the 12,180
Jigsaw comments the speed benchmark also reads. Its rows are shuffled with a fixed seed
(such files are often sorted by label); the first --train_rows train and the next
--eval_rows are held out. Every code path gets the same two files and fine-tunes
all-MiniLM-L6-v2 (from PyPI, see tools/assets.py) for --epochs epochs at batch --batch,
learning rate --learning_rate with 10% warm-up, then predicts the held-out rows:
  google     Google's bert-tensorflow run_classifier path (its features, model_fn and
             TPUEstimator with use_tpu=False) on TF 1.15, fixed padding;
  ours_tf1,  this project's run_classifier.py as a user runs it (--do_train --do_predict
  ours_tf2   --dynamic_padding), on each runtime;
  hf         Hugging Face's Trainer on PyTorch (tools/bench_hf.py, the optional .venvs/hf).
Each path is one command, timed from its start to its last prediction written (start-up,
featurisation, training and prediction included). The ROC-AUC of every path's held-out
probabilities is computed here, by one function. Writes quality.md and quality.csv to
--out_dir.
"""

import argparse
import csv
import glob
import io
import json
import os
import random
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tools import bench_hf  # noqa: E402 (after the path; it loads no torch until used)
from tools.bench_worker import read_rows  # noqa: E402
from tools.benchmark import (PEAK_SIZE, child_environment, machine_description,  # noqa: E402
                             positive_int, python_of)

PATHS = {  # name -> (environment, label)
    "google": ("tf1", "Google run_classifier (fixed padding)"),
    "ours_tf1": ("tf1", "this project, run_classifier.py --dynamic_padding"),
    "ours_tf2": ("tf2", "this project, run_classifier.py --dynamic_padding"),
    "hf": ("hf", "Hugging Face Trainer (random order, padding per batch)"),
}
SPLIT_SEED = 0
PROGRESS_WORDS = ("step", "loss")  # the children's lines worth echoing while they run


class QualityError(Exception):
  """A mistake in the command's input, reported as one line."""


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--data", help="CSV of text,label rows (0/1) without a header")
  parser.add_argument("--train_rows", type=int, default=4000)
  parser.add_argument("--eval_rows", type=int, default=2000)
  parser.add_argument("--seq", type=int, default=128)
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--predict_batch", type=int, default=64)
  parser.add_argument("--epochs", type=float, default=1.0)
  parser.add_argument("--learning_rate", type=float, default=2e-5)
  parser.add_argument("--paths", default=",".join(PATHS), help="from %s" % ", ".join(PATHS))
  parser.add_argument("--model_dir", help="the model in Google's layout (bert_config.json, "
                      "vocab.txt, bert_model.ckpt) for Google's path and ours (default: "
                      "all-MiniLM-L6-v2, converted once)")
  parser.add_argument("--hf_model_dir", help="the same model as a Hugging Face folder, for "
                      "the hf path (default: all-MiniLM-L6-v2)")
  parser.add_argument("--skip_hf", action="store_true",
                      help="leave out the Hugging Face path (no .venvs/hf needed)")
  parser.add_argument("--out_dir", default=os.path.join(ROOT, "output", "benchmark"))
  parser.add_argument("--work_dir", default=os.path.join(ROOT, ".cache", "quality_work"))
  parser.add_argument("--peak_size", type=positive_int, default=PEAK_SIZE,
                      help="the side of the square matrices that measure the host's matmul "
                           "peak for the report (smaller: a quicker, lower peak)")
  parser.add_argument("--worker", choices=["google"], help=argparse.SUPPRESS)
  parser.add_argument("--train_file", help=argparse.SUPPRESS)
  parser.add_argument("--eval_file", help=argparse.SUPPRESS)
  parser.add_argument("--worker_out", help=argparse.SUPPRESS)
  return parser.parse_args(argv)


# --- The data: one shuffled split that every path reads ----------------------------------

def split_rows(rows, train_rows, eval_rows, source):
  """(train, held-out): a seeded shuffle of rows, then the first train_rows and the next
  eval_rows. Both must hold both labels, or the AUC would mean nothing."""
  if len(rows) < train_rows + eval_rows:
    raise QualityError(
        "%s has %d rows, fewer than --train_rows %d + --eval_rows %d; pass a larger file "
        "or smaller counts" % (source, len(rows), train_rows, eval_rows))
  for number, (_, label) in enumerate(rows, 1):
    if label not in ("0", "1"):
      raise QualityError("%s row %d: label %r; the labels must be 0 or 1" % (
          source, number, label))
  shuffled = list(rows)
  random.Random(SPLIT_SEED).shuffle(shuffled)
  train, held_out = shuffled[:train_rows], shuffled[train_rows:train_rows + eval_rows]
  for name, part in (("train", train), ("held-out", held_out)):
    if len(set(label for _, label in part)) < 2:
      raise QualityError("the %s rows of %s hold one label only" % (name, source))
  return train, held_out


def write_rows(rows, path):
  with io.open(path, "w", encoding="utf-8", newline="") as f:
    csv.writer(f).writerows(rows)


# --- Google's path, in the TF 1.15 environment ----------------------------------------

def google_config(model_dir):
  """Google's BertConfig of the model. Google's code has only the tanh GELU ("gelu"), so
  a checkpoint trained with the exact one runs with the tanh form there, as a user of
  that code would have to."""
  from bert import modeling
  config = modeling.BertConfig.from_json_file(os.path.join(model_dir, "bert_config.json"))
  if config.hidden_act == "gelu_exact":
    config.hidden_act = "gelu"
  return config


def google_worker(args):
  """Google's run_classifier steps, as its main() takes them, on CPU."""
  import tensorflow as tf
  from absl import flags
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
  from bert import run_classifier, tokenization
  tf.logging.set_verbosity(tf.logging.INFO)  # its progress lines (loss, steps/sec)
  tokenizer = tokenization.FullTokenizer(os.path.join(args.model_dir, "vocab.txt"), True)

  def examples(path):
    return [run_classifier.InputExample(str(i), text, None, label)
            for i, (text, label) in enumerate(read_rows(path, 0))]

  train, held_out = examples(args.train_file), examples(args.eval_file)
  workdir = os.path.dirname(args.worker_out)
  train_record = os.path.join(workdir, "google_train.tf_record")
  predict_record = os.path.join(workdir, "google_predict.tf_record")
  run_classifier.file_based_convert_examples_to_features(train, ["0", "1"], args.seq,
                                                         tokenizer, train_record)
  steps, warmup = bench_hf.schedule(args.train_rows, args.batch, args.epochs)
  model_fn = run_classifier.model_fn_builder(
      bert_config=google_config(args.model_dir), num_labels=2,
      init_checkpoint=os.path.join(args.model_dir, "bert_model.ckpt"),
      learning_rate=args.learning_rate, num_train_steps=steps,
      num_warmup_steps=warmup, use_tpu=False, use_one_hot_embeddings=False)
  run_config = tf.contrib.tpu.RunConfig(
      model_dir=os.path.join(workdir, "google_model"), save_checkpoints_steps=1000,
      tpu_config=tf.contrib.tpu.TPUConfig(iterations_per_loop=1000, num_shards=8))
  estimator = tf.contrib.tpu.TPUEstimator(
      use_tpu=False, model_fn=model_fn, config=run_config, train_batch_size=args.batch,
      eval_batch_size=args.predict_batch, predict_batch_size=args.predict_batch)
  started = time.time()
  estimator.train(run_classifier.file_based_input_fn_builder(train_record, args.seq, True, True),
                  max_steps=steps)
  trained = time.time()
  run_classifier.file_based_convert_examples_to_features(held_out, ["0", "1"], args.seq,
                                                         tokenizer, predict_record)
  predictions = estimator.predict(run_classifier.file_based_input_fn_builder(
      predict_record, args.seq, False, False))
  probabilities = [float(p["probabilities"][1]) for p in predictions]
  if len(probabilities) != len(held_out):
    raise RuntimeError("Google's path predicted %d of %d rows" % (len(probabilities),
                                                                 len(held_out)))
  return dict(probabilities=probabilities, steps=steps, train_seconds=trained - started,
              predict_seconds=time.time() - trained, tensorflow=tf.__version__)


# --- Running each path ------------------------------------------------------------------

def path_command(name, args, files, model_dirs, out):
  """The one command a path runs, and the JSON or TSV its probabilities land in."""
  python = python_of(PATHS[name][0])
  if name == "google":
    json_out = os.path.join(out, "google.json")
    return [python, "-m", "tools.time_to_quality", "--worker", "google", "--train_file",
            files[0], "--eval_file", files[1], "--model_dir", model_dirs["google"],
            "--worker_out", json_out, "--train_rows", str(args.train_rows)] + shared_flags(args), json_out
  if name == "hf":
    json_out = os.path.join(out, "hf.json")
    return [python, "-m", "tools.bench_hf", "--time_to_quality", "--model_dir",
            model_dirs["hf"], "--train_file", files[0], "--eval_file", files[1],
            "--seq", str(args.seq), "--batch", str(args.batch), "--epochs", str(args.epochs),
            "--learning_rate", str(args.learning_rate), "--predict_batch",
            str(args.predict_batch), "--out", json_out], json_out
  model = model_dirs["google"]
  output_dir = os.path.join(out, name)
  return [python, os.path.join(ROOT, "run_classifier.py"), "--task_name=csv",
          "--train_file=" + files[0], "--predict_file=" + files[1], "--has_header=false",
          "--text_column=0", "--label_column=1", "--do_train", "--do_predict",
          "--dynamic_padding", "--bert_config_file=" + os.path.join(model, "bert_config.json"),
          "--vocab_file=" + os.path.join(model, "vocab.txt"),
          "--init_checkpoint=" + os.path.join(model, "bert_model.ckpt"),
          "--max_seq_length=%d" % args.seq, "--train_batch_size=%d" % args.batch,
          "--predict_batch_size=%d" % args.predict_batch,
          # Google's count of steps (rows / batch x epochs, rounded down), so that every
          # path takes the same number of steps, and the same warm-up.
          "--num_train_steps=%d" % bench_hf.schedule(args.train_rows, args.batch, args.epochs)[0],
          "--learning_rate=%s" % args.learning_rate,
          "--output_dir=" + output_dir], os.path.join(output_dir, "test_results.tsv")


def shared_flags(args):
  return ["--seq", str(args.seq), "--batch", str(args.batch), "--predict_batch",
          str(args.predict_batch), "--epochs", str(args.epochs), "--learning_rate",
          str(args.learning_rate)]


def run_timed(name, command, log_path):
  """Runs a path's command; returns its wall seconds. Progress lines are echoed as they
  come; the whole output goes to log_path."""
  started = time.time()
  env = child_environment(PYTHONUNBUFFERED="1")
  with open(log_path, "w") as log:
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, universal_newlines=True)
    for line in process.stdout:
      log.write(line)
      if any(word in line for word in PROGRESS_WORDS):
        print("  [%s %4.0fs] %s" % (name, time.time() - started, line.rstrip()[-150:]))
        sys.stdout.flush()
    status = process.wait()
  seconds = time.time() - started
  if status:
    with open(log_path) as f:
      tail = f.read()[-3000:]
    raise RuntimeError("the %s path failed (exit %d); its output is in %s:\n%s" % (
        name, status, log_path, tail))
  return seconds


def probabilities_of(name, result_path):
  """The positive class's probability per held-out row, in row order."""
  if result_path.endswith(".json"):
    with open(result_path) as f:
      return json.load(f)["probabilities"]
  with io.open(result_path, encoding="utf-8", newline="") as f:
    rows = list(csv.DictReader(f, delimiter="\t"))
  return [float(r["probability_1"]) for r in rows]


VERSION_OF = {  # environment -> the code that prints its versions
    "tf1": "import platform, tensorflow as t; print('TF %s / Python %s' % (t.__version__, "
           "platform.python_version()))",
    "hf": "import platform, torch, transformers as t; print('PyTorch %s / transformers %s / "
          "Python %s' % (torch.__version__, t.__version__, platform.python_version()))",
}
VERSION_OF["tf2"] = VERSION_OF["tf1"]


def environment_versions(environment):
  return subprocess.check_output([python_of(environment), "-c", VERSION_OF[environment]],
                                 env=child_environment(TF_CPP_MIN_LOG_LEVEL="3"),
                                 universal_newlines=True).strip().splitlines()[-1]


def drop_checkpoints(folder):
  """Deletes a measured path's checkpoints; its predictions, logs and summaries stay.
  Nothing reads them again, and each path would leave half a gigabyte."""
  for path in glob.glob(os.path.join(folder, "model.ckpt-*")):
    os.remove(path)


def measure_path(name, args, files, model_dirs, labels, work):
  from modeling.statistics import roc_auc
  out = os.path.join(work, "runs")
  os.makedirs(out, exist_ok=True)
  command, result_path = path_command(name, args, files, model_dirs, out)
  # From nothing, as a first run: an earlier run's checkpoints would skip the training
  # and its records the featurisation.
  for leftover in (os.path.join(out, name), os.path.join(out, name + "_model"), result_path):
    if os.path.isdir(leftover):
      shutil.rmtree(leftover)
    elif os.path.exists(leftover):
      os.remove(leftover)
  print("running %s: %s" % (name, " ".join(command[1:])))
  sys.stdout.flush()
  seconds = run_timed(name, command, os.path.join(out, name + ".log"))
  probabilities = probabilities_of(name, result_path)
  if len(probabilities) != len(labels):
    raise RuntimeError("%s predicted %d rows of %d" % (name, len(probabilities), len(labels)))
  for folder in (os.path.join(out, name), os.path.join(out, name + "_model")):
    drop_checkpoints(folder)
  auc = roc_auc(probabilities, [int(label) for label in labels])
  print("%s: %.0f s from start to predictions, held-out ROC-AUC %.4f" % (name, seconds, auc))
  return dict(path=name, environment=environment_versions(PATHS[name][0]), label=PATHS[name][1],
              wall_seconds=seconds, auc=auc)


def report(results, args, machine, source):
  google = [r for r in results if r["path"] == "google"]
  for r in results:
    r["auc_minus_google"] = r["auc"] - google[0]["auc"] if google else None
    r["speedup_vs_google"] = google[0]["wall_seconds"] / r["wall_seconds"] if google else None
  lines = ["# Time to quality", "",
           "Machine: %s. %s fine-tuned for %g epoch(s) on %d rows of `%s` "
           "(a seeded shuffle), batch %d, learning rate %g with 10%% warm-up, "
           "max_seq_length %d; ROC-AUC on the next %d rows, held out. Wall time runs from "
           "each command's start to its predictions (start-up, featurisation, training and "
           "prediction). Written by `./run.sh benchmark quality`." % (
               machine, "`%s`" % args.model_dir if args.model_dir else "all-MiniLM-L6-v2",
               args.epochs, args.train_rows, os.path.basename(source), args.batch,
               args.learning_rate, args.seq, args.eval_rows), "",
           "| code path | environment | wall time (s) | vs Google | held-out ROC-AUC | "
           "AUC - Google's |", "|---|---|---|---|---|---|"]
  for r in results:
    lines.append("| %s | %s | %.0f | %s | %.4f | %s |" % (
        r["label"], r["environment"], r["wall_seconds"],
        "%.2fx" % r["speedup_vs_google"] if r["speedup_vs_google"] else "-", r["auc"],
        "%+.4f" % r["auc_minus_google"] if r["auc_minus_google"] is not None else "-"))
  lines += ["", "Differences a user of each path gets by default, kept as they are: Google's "
            "code has only the tanh GELU, so it runs the model with that instead of the exact "
            "GELU the checkpoint was trained with; this project and Google's train with "
            "AdamWeightDecay (no bias correction, epsilon 1e-6, the learning rate decaying "
            "from the first step), Hugging Face with torch's AdamW (bias correction, epsilon "
            "1e-8, decaying after the warm-up); this project batches training rows of similar "
            "length (--dynamic_padding), Hugging Face in random order padded per batch, "
            "Google's in random order padded to max_seq_length; the TensorFlow paths predict "
            "from the checkpoint they wrote, Hugging Face from the model in memory. Each "
            "path is one run, with its own random head, dropout and order: AUCs of one path "
            "vary between seeds too."]
  return "\n".join(lines)


GOOGLE_LAYOUT = ("bert_config.json", "vocab.txt", "bert_model.ckpt.index")
HF_LAYOUT = ("config.json", "vocab.txt", "model.safetensors")


def check_model_dirs(google_dir, hf_dir):
  for folder, layout, flag in ((google_dir, GOOGLE_LAYOUT, "--model_dir"),
                               (hf_dir, HF_LAYOUT, "--hf_model_dir")):
    missing = [name for name in layout if folder and not os.path.isfile(
        os.path.join(folder, name))]
    if missing:
      raise QualityError("%s %s has no %s (it needs %s)" % (
          flag, folder, ", ".join(missing), ", ".join(layout)))


def main(argv=None):
  args = parse_args(argv)
  if args.worker:
    with open(args.worker_out, "w") as f:
      json.dump(google_worker(args), f)
    return
  try:
    if not args.data or not os.path.isfile(args.data):
      raise QualityError("pass --data=a CSV of text,label rows (0/1, no header); %s" % (
          "no file %s" % args.data if args.data else "none was given"))
    try:
      rows = read_rows(args.data, 0)
    except ValueError as e:
      raise QualityError(str(e))
    train, held_out = split_rows(rows, args.train_rows, args.eval_rows, args.data)
    try:  # every path's count of steps and warm-up (a --num_train_steps of 0 means epochs)
      bench_hf.schedule(args.train_rows, args.batch, args.epochs)
    except bench_hf.InputError as e:
      raise QualityError(str(e))
    names = [n for n in args.paths.split(",") if not (args.skip_hf and n == "hf")]
    if args.model_dir and "hf" in names and not args.hf_model_dir:
      raise QualityError("with --model_dir, the hf path needs the same model as a Hugging "
                         "Face folder (--hf_model_dir), or leave it out (--skip_hf)")
    check_model_dirs(args.model_dir, args.hf_model_dir)
    unknown = [n for n in names if n not in PATHS]
    if unknown:
      raise QualityError("unknown path %s; known: %s" % (unknown[0], ", ".join(PATHS)))
    missing = [n for n in names if not os.path.exists(python_of(PATHS[n][0]))]
    if missing:
      raise QualityError("no environment for %s (.venvs/%s); ./run.sh benchmark quality "
                         "creates them" % (", ".join(missing), PATHS[missing[0]][0]))
  except QualityError as e:
    sys.exit("time to quality: %s" % e)
  from tools import assets
  model_dirs = {"google": args.model_dir or assets.minilm_google_dir(),
                "hf": args.hf_model_dir or ("hf" in names and assets.minilm_hf_dir())}
  os.makedirs(args.work_dir, exist_ok=True)
  files = (os.path.join(args.work_dir, "train.csv"), os.path.join(args.work_dir, "held_out.csv"))
  write_rows(train, files[0])
  write_rows(held_out, files[1])
  labels = [label for _, label in held_out]
  try:
    results = [measure_path(name, args, files, model_dirs, labels, args.work_dir)
               for name in names]
  except RuntimeError as e:
    sys.exit("time to quality: %s" % e)
  text = report(results, args, machine_description(peak_size=args.peak_size), args.data)
  os.makedirs(args.out_dir, exist_ok=True)
  with open(os.path.join(args.out_dir, "quality.md"), "w") as f:
    f.write(text + "\n")
  with open(os.path.join(args.out_dir, "quality.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=["path", "label", "environment", "wall_seconds",
                                           "speedup_vs_google", "auc", "auc_minus_google"])
    writer.writeheader()
    writer.writerows(results)
  print()
  print(text)
  print("\nwrote quality.md and quality.csv to %s" % args.out_dir)


if __name__ == "__main__":
  main()
