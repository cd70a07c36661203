"""Builds the demo's binary sentiment CSVs from VADER's human-rated movie-review snippets.

Each snippet has the mean of several people's ratings from -4 to +4. A snippet is
positive when the mean is above 0 and negative when below; the few rated exactly
0 are neither, so they are left out and counted.
"""

import csv
import io
import json
import os
import random

from data.data_error import DataError

SPLIT_SEED = 13


def read_ratings(path):
  """[(id, rating, text)] from the tab-separated ground-truth file."""
  rows = []
  with io.open(path, encoding="utf-8", newline="") as f:
    for line_number, line in enumerate(f, 1):
      line = line.rstrip("\r\n")
      if not line.strip():
        continue
      parts = line.split("\t")
      if len(parts) < 3:
        raise DataError(path, "expected id<TAB>rating<TAB>text", "use VADER's GroundTruth file",
                        line=line_number)
      try:
        rating = float(parts[1])
      except ValueError:
        raise DataError(path, "rating %r is not a number" % parts[1],
                        "use VADER's GroundTruth file", line=line_number, column=2)
      rows.append((parts[0], rating, "\t".join(parts[2:])))
  return rows


def build(ground_truth, out_dir, eval_fraction=0.2, predict_rows=12, seed=SPLIT_SEED):
  """Writes train.csv, dev.csv (id,sentence,label) and test.csv (id,sentence) into out_dir.

  A seeded shuffle holds out predict_rows sentences for test.csv, then
  eval_fraction of the rest for dev.csv. Returns a summary dict (also saved as
  summary.json), with the dev split's majority-class baseline.
  """
  rows = read_ratings(ground_truth)
  labelled = [(i, text, "positive" if r > 0 else "negative") for i, r, text in rows if r != 0]
  random.Random(seed).shuffle(labelled)
  predict, rest = labelled[:predict_rows], labelled[predict_rows:]
  num_eval = int(round(len(rest) * eval_fraction))
  dev, train = rest[:num_eval], rest[num_eval:]

  os.makedirs(out_dir, exist_ok=True)
  _write(os.path.join(out_dir, "train.csv"), ["id", "sentence", "label"], train)
  _write(os.path.join(out_dir, "dev.csv"), ["id", "sentence", "label"], dev)
  _write(os.path.join(out_dir, "test.csv"), ["id", "sentence"], [r[:2] for r in predict])
  dev_positive = sum(1 for r in dev if r[2] == "positive")
  summary = {
      "source": os.path.basename(ground_truth), "rated_sentences": len(rows),
      "left_out_neutral": len(rows) - len(labelled), "train": len(train), "dev": len(dev),
      "test": len(predict), "seed": seed,
      "dev_majority_label": "positive" if dev_positive * 2 >= len(dev) else "negative",
      "dev_majority_baseline": max(dev_positive, len(dev) - dev_positive) / float(len(dev)),
  }
  with open(os.path.join(out_dir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2, sort_keys=True)
  return summary


def _write(path, header, rows):
  with io.open(path, "w", encoding="utf-8", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(header)
    writer.writerows(rows)
