"""Windows against truncation on real long texts: the held-out ROC-AUC of a model that
reads long comments in windows (--doc_stride) against one that keeps their head and tail
(--truncation=head_tail), and what the windows cost in time.

  ./run.sh benchmark long-texts [--seeds 1,2,3 --seq 128 --doc_stride 64 ...]

The balanced Jigsaw Wikipedia comments (../shared/datasets/jigsaw_toxic_balanced, half of
them toxic): for each seed, the comments are shuffled (seeded); the first --test_rows
comments longer than --long_tokens WordPiece tokens (MiniLM's vocabulary) are held out as
the test set, and the next --train_rows comments of any length are the train set. On
each, all-MiniLM-L6-v2 (tools/assets.py) is fine-tuned for one epoch at --seq, once per
reading: head_tail truncation (--truncation_head_tokens a quarter of the room) and
windows (--doc_stride, aggregated by their mean and by their max: each its own
training). The test comments' ROC-AUC is computed here from test_results.tsv; the time
is the wall time of the training and prediction runs, and the windows are counted from
run_summary.json. Writes long_texts.md and long_texts.json to --out_dir.
"""

import argparse
import csv
import io
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from data.tokenization import FullTokenizer  # noqa: E402 (after the path)
from modeling.statistics import roc_auc  # noqa: E402
from tools import assets  # noqa: E402
from tools.benchmark import machine_description  # noqa: E402

DATA = os.path.join(os.path.dirname(ROOT), "shared", "datasets", "jigsaw_toxic_balanced",
                    "comments.csv")
READINGS = ("head_tail", "windows_mean", "windows_max")


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--data", default=DATA, help="comments.csv: text,label rows, no header")
  parser.add_argument("--seeds", default="1,2,3")
  parser.add_argument("--train_rows", type=int, default=3000)
  parser.add_argument("--test_rows", type=int, default=400)
  parser.add_argument("--long_tokens", type=int, default=220,
                      help="a test comment has more WordPiece tokens than this")
  parser.add_argument("--seq", type=int, default=128)
  parser.add_argument("--doc_stride", type=int, default=64)
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--learning_rate", type=float, default=5e-5)
  parser.add_argument("--readings", default=",".join(READINGS))
  parser.add_argument("--out_dir", default=os.path.join(ROOT, "output", "benchmark"))
  parser.add_argument("--work_dir", default=os.path.join(ROOT, ".cache", "long_texts_work"))
  return parser.parse_args(argv)


def read_comments(path):
  """[(text, label)] of the comments file; exits naming the line of a row that is not a
  text and a 0/1 label."""
  if not os.path.exists(path):
    sys.exit("long-texts: %s does not exist: pass --data, the balanced Jigsaw comments.csv"
             % path)
  rows = []
  with io.open(path, encoding="utf-8", newline="") as f:
    reader = csv.reader(f)
    for row in reader:
      if len(row) != 2 or row[1] not in ("0", "1"):
        sys.exit("long-texts: %s, line %d: not a text and a 0/1 label: %r" % (
            path, reader.line_num, row[:3]))
      rows.append((row[0], row[1]))
  return rows


def split_seed(rows, lengths, seed, args):
  """(train rows, test rows) of one seed: the test set the first --test_rows shuffled
  comments longer than --long_tokens, the train set the next --train_rows of the rest."""
  import random
  order = list(range(len(rows)))
  random.Random(seed).shuffle(order)
  test = [i for i in order if lengths[i] > args.long_tokens][:args.test_rows]
  held = set(test)
  train = [i for i in order if i not in held][:args.train_rows]
  if len(test) < args.test_rows or len(train) < args.train_rows:
    sys.exit("long-texts: %d comments are longer than %d tokens and %d others remain; "
             "pass a smaller --test_rows or --train_rows" % (len(test), args.long_tokens,
                                                             len(order) - len(test)))
  return [rows[i] for i in train], [rows[i] for i in test]


def write_csv(rows, path):
  with io.open(path, "w", encoding="utf-8", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["text", "label"])
    writer.writerows(rows)


def reading_flags(reading, args):
  if reading == "head_tail":
    return ["--truncation=head_tail"]
  return ["--doc_stride=%d" % args.doc_stride,
          "--window_aggregation=%s" % reading.split("_", 1)[1]]


def run_reading(args, reading, seed, model_dir, files):
  """One fine-tuning and prediction. Returns (the test rows' probability of 1, seconds,
  run_summary.json's windows of the two runs)."""
  output_dir = os.path.join(args.work_dir, "seed_%d_%s" % (seed, reading))
  common = [sys.executable, os.path.join(ROOT, "run_classifier.py"), "--task_name=csv",
            "--text_column=text", "--label_column=label", "--output_dir=" + output_dir,
            "--max_seq_length=%d" % args.seq] + reading_flags(reading, args)
  start = time.time()
  subprocess.run(common + [
      "--bert_config_file=" + os.path.join(model_dir, "bert_config.json"),
      "--vocab_file=" + os.path.join(model_dir, "vocab.txt"),
      "--init_checkpoint=" + os.path.join(model_dir, "bert_model.ckpt"),
      "--train_file=" + files["train"], "--do_train", "--num_train_epochs=1",
      "--train_batch_size=%d" % args.batch, "--learning_rate=%g" % args.learning_rate,
      "--seed=%d" % seed, "--dynamic_padding"], check=True)
  windows = {}
  with open(os.path.join(output_dir, "run_summary.json")) as f:
    windows.update(json.load(f)["results"]["windows"] or {})
  subprocess.run(common + ["--do_predict", "--predict_file=" + files["test"],
                           "--predict_batch_size=64"], check=True)
  seconds = time.time() - start
  with open(os.path.join(output_dir, "run_summary.json")) as f:
    windows.update(json.load(f)["results"]["windows"] or {})
  with io.open(os.path.join(output_dir, "test_results.tsv"), encoding="utf-8") as f:
    header = f.readline().rstrip("\n").split("\t")
    column = header.index("probability_1")
    scores = [float(line.rstrip("\n").split("\t")[column]) for line in f]
  return scores, seconds, windows


def main(argv=None):
  args = parse_args(argv)
  readings = args.readings.split(",")
  unknown = sorted(set(readings) - set(READINGS))
  if unknown:
    sys.exit("long-texts: --readings: %s is not one of %s" % (", ".join(unknown),
                                                              ", ".join(READINGS)))
  rows = read_comments(args.data)
  model_dir = assets.minilm_google_dir()
  tokenizer = FullTokenizer(os.path.join(model_dir, "vocab.txt"), True)
  lengths = [len(tokenizer.encode(text)) for text, _ in rows]
  os.makedirs(args.work_dir, exist_ok=True)
  results = []
  for seed in [int(s) for s in args.seeds.split(",")]:
    train, test = split_seed(rows, lengths, seed, args)
    files = {}
    for name, part in (("train", train), ("test", test)):
      files[name] = os.path.join(args.work_dir, "seed_%d_%s.csv" % (seed, name))
      write_csv(part, files[name])
    truth = [int(label) for _, label in test]
    for reading in readings:
      scores, seconds, windows = run_reading(args, reading, seed, model_dir, files)
      if len(scores) != len(truth):
        sys.exit("long-texts: %d predictions for %d test comments" % (len(scores),
                                                                      len(truth)))
      row = {"seed": seed, "reading": reading, "auc": roc_auc(scores, truth),
             "seconds": round(seconds, 1), "windows": windows}
      results.append(row)
      print(json.dumps(row), flush=True)
  write_report(args, results, lengths)


def write_report(args, results, lengths):
  os.makedirs(args.out_dir, exist_ok=True)
  with open(os.path.join(args.out_dir, "long_texts.json"), "w") as f:
    json.dump({"rows": results, "machine": machine_description(),
               "settings": {k: v for k, v in vars(args).items()
                            if k not in ("out_dir", "work_dir", "data")}},
              f, indent=2, sort_keys=True)
  long_share = sum(n > args.long_tokens for n in lengths) / float(len(lengths))
  lines = [
      "# Windows against truncation on long comments", "",
      "all-MiniLM-L6-v2 fine-tuned for one epoch (seq %d, batch %d, learning rate %g) on "
      "%d balanced Jigsaw Wikipedia comments of any length, then scored on %d held-out "
      "comments longer than %d WordPiece tokens (%.1f%% of the file's %d comments are); "
      "each seed its own shuffle of the comments. head_tail keeps the first quarter of "
      "the room and the end; windows reads the whole comment in windows of %d tokens "
      "starting every %d (`--doc_stride`), their outputs aggregated by their mean or max. "
      "Time is the wall time of the training and prediction runs. Made by `./run.sh "
      "benchmark long-texts` on %s." % (
          args.seq, args.batch, args.learning_rate, args.train_rows, args.test_rows,
          args.long_tokens, 100 * long_share, len(lengths), args.seq - 2, args.doc_stride,
          machine_description()), "",
      "| seed | reading | held-out ROC-AUC | train windows | test windows | seconds |",
      "|---|---|---|---|---|---|"]
  for r in results:
    w = r["windows"]
    lines.append("| %d | %s | %.4f | %s | %s | %.0f |" % (
        r["seed"], r["reading"], r["auc"], w.get("train", {}).get("windows", "-"),
        w.get("test", {}).get("windows", "-"), r["seconds"]))
  lines += ["", "Mean over the seeds:", "", "| reading | ROC-AUC | seconds |", "|---|---|---|"]
  for reading in args.readings.split(","):
    mine = [r for r in results if r["reading"] == reading]
    lines.append("| %s | %.4f | %.0f |" % (
        reading, sum(r["auc"] for r in mine) / len(mine),
        sum(r["seconds"] for r in mine) / len(mine)))
  readings = args.readings.split(",")
  if "head_tail" in readings:
    for reading in readings[1:] if readings[0] == "head_tail" else []:
      changes = ["%+.4f" % (r["auc"] - h["auc"]) for r in results for h in results
                 if r["reading"] == reading and h["reading"] == "head_tail" and
                 h["seed"] == r["seed"]]
      lines.append("")
      lines.append("%s against head_tail, ROC-AUC by seed: %s." % (reading, ", ".join(changes)))
  with open(os.path.join(args.out_dir, "long_texts.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  print("wrote %s" % os.path.join(args.out_dir, "long_texts.md"))


if __name__ == "__main__":
  main()
