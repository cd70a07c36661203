"""Calibration and tuned thresholds on real data: what --calibrate and --tune_thresholds
change in the held-out figures of the real MiniLM.

  ./run.sh benchmark decisions [--seeds 1,2,3 --train_rows 4000 --seq 64 ...]

The OffensEval 2019 tweets of TweetEval (../shared/datasets/tweeteval_offensive: train,
val and test, a third of them offensive): for each seed, all-MiniLM-L6-v2 (tools/assets.py)
fine-tuned on --train_rows train tweets (seeded), evaluated on the val tweets with
--calibrate --tune_thresholds=f1, then the test tweets predicted by the calibrated, tuned
model. From the test predictions alone, computed here: the F1 of the model as trained
(at 0.5) against the F1 at the tuned threshold, and the log-loss and expected calibration
error (10 equal bins, as --eval_report's) of the probabilities before the temperature
(the calibrated ones' logs times it, through a softmax) and after. Writes decisions.md
and decisions.json to --out_dir.
"""

import argparse
import io
import json
import os
import subprocess
import sys
import time

import numpy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pipeline.eval_report import calibration  # noqa: E402 (after the path)
from spec.thresholds import figures_at  # noqa: E402
from tools import assets  # noqa: E402
from tools.benchmark import machine_description  # noqa: E402

DATA = os.path.join(os.path.dirname(ROOT), "shared", "datasets", "tweeteval_offensive")


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--data_dir", default=DATA, help="TweetEval's offensive folder "
                      "({train,val,test}_text.txt and _labels.txt)")
  parser.add_argument("--seeds", default="1,2,3")
  parser.add_argument("--train_rows", type=int, default=4000)
  parser.add_argument("--seq", type=int, default=64)
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--learning_rate", type=float, default=5e-5)
  parser.add_argument("--out_dir", default=os.path.join(ROOT, "output", "benchmark"))
  parser.add_argument("--work_dir", default=os.path.join(ROOT, ".cache", "decisions_work"))
  return parser.parse_args(argv)


def read_split(data_dir, split):
  """[(text, label)] of one TweetEval split: a tweet a line, its 0/1 label a line."""
  paths = [os.path.join(data_dir, "%s_%s.txt" % (split, part)) for part in ("text", "labels")]
  for path in paths:
    if not os.path.exists(path):
      sys.exit("decisions: %s does not exist: pass --data_dir, TweetEval's offensive folder"
               % path)
  with io.open(paths[0], encoding="utf-8") as f, io.open(paths[1], encoding="utf-8") as g:
    texts, labels = f.read().splitlines(), g.read().split()
  if len(texts) != len(labels) or set(labels) - {"0", "1"}:
    sys.exit("decisions: %s and %s do not pair one 0/1 label with each line" % tuple(paths))
  return list(zip(texts, labels))


def write_csv(rows, path):
  import csv
  with io.open(path, "w", encoding="utf-8", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["text", "label"])
    writer.writerows(rows)


def run_seed(args, seed, model_dir, files):
  """One seed's fine-tuning, calibration and tuning, then its test predictions. Returns
  (eval_results.json, the test rows' calibrated probability of 1, the threshold, seconds)."""
  output_dir = os.path.join(args.work_dir, "seed_%d" % seed)
  common = [sys.executable, os.path.join(ROOT, "run_classifier.py"), "--task_name=csv",
            "--text_column=text", "--label_column=label", "--output_dir=" + output_dir,
            "--max_seq_length=%d" % args.seq]
  start = time.time()
  subprocess.run(common + [
      "--bert_config_file=" + os.path.join(model_dir, "bert_config.json"),
      "--vocab_file=" + os.path.join(model_dir, "vocab.txt"),
      "--init_checkpoint=" + os.path.join(model_dir, "bert_model.ckpt"),
      "--train_file=" + files["train"], "--eval_file=" + files["val"], "--do_train",
      "--do_eval", "--calibrate", "--tune_thresholds=f1", "--num_train_epochs=1",
      "--train_batch_size=%d" % args.batch, "--learning_rate=%g" % args.learning_rate,
      "--seed=%d" % seed, "--dynamic_padding", "--eval_batch_size=64"], check=True)
  subprocess.run(common + ["--do_predict", "--predict_file=" + files["test"],
                           "--predict_batch_size=64"], check=True)
  seconds = time.time() - start
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    results = json.load(f)
  with io.open(os.path.join(output_dir, "test_results.tsv"), encoding="utf-8") as f:
    header = f.readline().rstrip("\n").split("\t")
    rows = [line.rstrip("\n").split("\t") for line in f]
  column = header.index("probability_1")
  probabilities = numpy.array([[float(r[header.index("probability_0")]), float(r[column])]
                               for r in rows])
  return results, probabilities, seconds


def held_out_figures(probabilities, truth, temperature, threshold):
  """The test figures before and after: F1, log-loss and ECE."""
  raw = numpy.exp(temperature * numpy.log(numpy.clip(probabilities, 1e-30, 1.0)))
  raw /= raw.sum(axis=1, keepdims=True)
  figures = {}
  for name, p in (("before", raw[:, 1]), ("after", probabilities[:, 1])):
    p = numpy.clip(p, 1e-12, 1 - 1e-12)
    figures["nll_" + name] = float(-numpy.mean(truth * numpy.log(p) +
                                               (1 - truth) * numpy.log(1 - p)))
    figures["ece_" + name] = calibration(p, truth)["expected_calibration_error"]
  figures["f1_at_0.5"] = figures_at(raw[:, 1], truth.astype(bool), 0.5)[2]
  figures["f1_at_threshold"] = figures_at(probabilities[:, 1], truth.astype(bool),
                                          threshold)[2]
  return figures


def main(argv=None):
  args = parse_args(argv)
  splits = {name: read_split(args.data_dir, name) for name in ("train", "val", "test")}
  os.makedirs(args.work_dir, exist_ok=True)
  model_dir = assets.minilm_google_dir()
  seeds = [int(s) for s in args.seeds.split(",")]
  truth = numpy.array([int(label) for _, label in splits["test"]], numpy.float64)
  rows = []
  for seed in seeds:
    shuffled = list(splits["train"])
    numpy.random.RandomState(seed).shuffle(shuffled)
    files = {}
    for name, part in (("train", shuffled[:args.train_rows]), ("val", splits["val"]),
                       ("test", splits["test"])):
      files[name] = os.path.join(args.work_dir, "seed_%d_%s.csv" % (seed, name))
      write_csv(part, files[name])
    results, probabilities, seconds = run_seed(args, seed, model_dir, files)
    if len(probabilities) != len(truth):
      sys.exit("decisions: %d test predictions for %d test rows" % (len(probabilities),
                                                                   len(truth)))
    figures = held_out_figures(probabilities, truth, results["temperature"] or 1.0,
                               results["threshold"] if results["threshold"] is not None
                               else 0.5)
    figures.update(seed=seed, temperature=results["temperature"],
                   threshold=results["threshold"], seconds=round(seconds, 1),
                   val_ece_before=results["ece_uncalibrated"],
                   val_ece_after=results.get("ece_calibrated"))
    rows.append(figures)
    print(json.dumps(figures), flush=True)
  write_report(args, rows, len(truth), float(truth.mean()))


def write_report(args, rows, test_rows, positive_share):
  os.makedirs(args.out_dir, exist_ok=True)
  with open(os.path.join(args.out_dir, "decisions.json"), "w") as f:
    json.dump({"rows": rows, "machine": machine_description(), "train_rows": args.train_rows,
               "seq": args.seq, "batch": args.batch, "learning_rate": args.learning_rate},
              f, indent=2, sort_keys=True)
  lines = [
      "# Calibration and tuned thresholds on held-out tweets", "",
      "all-MiniLM-L6-v2 fine-tuned for one epoch on %d OffensEval 2019 train tweets "
      "(TweetEval; seq %d, batch %d, learning rate %g), calibrated and tuned for F1 on the "
      "val tweets; the figures are of the %d test tweets (%.0f%% offensive), each seed "
      "its own train tweets and initialisation. Made by `./run.sh benchmark decisions` "
      "on %s." % (args.train_rows, args.seq, args.batch, args.learning_rate, test_rows,
                  100.0 * positive_share, machine_description()), "",
      "| seed | temperature | threshold | F1 at 0.5 | F1 at threshold | log-loss before | "
      "log-loss after | ECE before | ECE after |", "|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    lines.append("| %d | %.3f | %.3f | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f |" % (
        r["seed"], r["temperature"] or 1.0, r["threshold"] if r["threshold"] is not None
        else 0.5, r["f1_at_0.5"], r["f1_at_threshold"], r["nll_before"], r["nll_after"],
        r["ece_before"], r["ece_after"]))
  def mean_change(before, after):
    return sum(r[after] - r[before] for r in rows) / len(rows)
  lines += ["", "Mean change over the seeds, tuned and calibrated against as trained: F1 "
            "%+.4f, log-loss %+.4f, expected calibration error %+.4f (negative log-loss and "
            "error changes are improvements)." % (
                mean_change("f1_at_0.5", "f1_at_threshold"),
                mean_change("nll_before", "nll_after"), mean_change("ece_before", "ece_after"))]
  with open(os.path.join(args.out_dir, "decisions.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  print("wrote %s" % os.path.join(args.out_dir, "decisions.md"))


if __name__ == "__main__":
  main()
