"""Kaggle-shaped Jigsaw Unintended Bias files of any size, from texts the repository ships.

train.csv has Kaggle's 45 columns in Kaggle's order (id, target, comment_text, the six
auxiliary toxicity columns, the 24 identity columns, the article and reaction columns
and the annotator counts); test.csv has id and comment_text. The comments are real texts
from tests/data/datasets (Jigsaw comments, tweets, SST-2 sentences), one to three joined
per row so that lengths spread like Kaggle's (about 300 characters on average); one row
in fifty ends in an emoji, and the identity columns are filled on about a fifth of the
rows, as in Kaggle's file. Everything else is drawn from a seeded random generator: the
same N gives the same bytes.

  python -m tools.scale_data --rows=1804874 --out_dir=.cache/scale/1804874
"""

import argparse
import csv
import io
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from spec.task_names import JIGSAW_IDENTITY_COLUMNS  # noqa: E402

KAGGLE_TRAIN_ROWS = 1804874
KAGGLE_TEST_ROWS = 97320
SAMPLES = os.path.join(ROOT, "tests", "data", "datasets")
# Kaggle's train.csv columns, in its order.
TRAIN_COLUMNS = (
  ("id", "target", "comment_text") +
  tuple(c for c in ("severe_toxicity", "obscene", "identity_attack", "insult", "threat")) +
  tuple(sorted(JIGSAW_IDENTITY_COLUMNS)) +
  ("created_date", "publication_id", "parent_id", "article_id", "rating", "funny", "wow",
     "sad", "likes", "disagree", "sexual_explicit", "identity_annotator_count",
     "toxicity_annotator_count"))
IDENTITY_FILLED = 0.22
EMOJI = (u"\U0001F602", u"\U0001F44D", u"\U0001F621", u"\u2764\ufe0f", u"\U0001F914")


def shipped_texts():
  """Every text of the shipped samples' text columns (CSV by header name, text files by
  line)."""
  texts = []
  for folder, name, column in (
      ("jigsaw_toxic_sample", "train.csv", "comment_text"),
      ("jigsaw_toxic_sample", "valid.csv", "comment_text"),
      ("jigsaw_toxic_sample", "test.csv", "comment_text"),
      ("jigsaw_bias_davidson", "train.csv", "comment_text"),
      ("davidson_hate_offensive", "labeled_data.csv", "tweet")):
    with io.open(os.path.join(SAMPLES, folder, name), encoding="utf-8", newline="") as f:
      texts.extend(row[column] for row in csv.DictReader(f))
  with io.open(os.path.join(SAMPLES, "jigsaw_toxic_balanced", "comments.csv"),
                 encoding="utf-8", newline="") as f:
    texts.extend(row[0] for row in csv.reader(f))
  for name in ("train_text.txt", "val_text.txt", "test_text.txt"):
    with io.open(os.path.join(SAMPLES, "tweeteval_offensive", name), encoding="utf-8") as f:
      texts.extend(line.rstrip("\n") for line in f)
  return [t for t in texts if t.strip()]


def _fraction(rng, annotators):
  return "%r" % (rng.randint(0, annotators) / float(annotators))


def _comment(rng, texts):
  parts = rng.choice((1, 1, 1, 2, 2, 3))
  comment = u" ".join(rng.choice(texts) for _ in range(parts))
  if rng.random() < 0.02:
    comment += u" " + rng.choice(EMOJI)
  return comment


def train_row(rng, row_id, texts):
  annotators = rng.choice((4, 4, 6, 10, 10, 10))
  toxic = rng.random() < 0.08
  values = {"id": str(row_id), "comment_text": _comment(rng, texts),
              "target": _fraction(rng, annotators) if toxic else "0.0"}
  for name in ("severe_toxicity", "obscene", "identity_attack", "insult", "threat",
                 "sexual_explicit"):
    values[name] = _fraction(rng, annotators) if toxic and rng.random() < 0.5 else "0.0"
  identities = rng.random() < IDENTITY_FILLED
  for name in JIGSAW_IDENTITY_COLUMNS:
    values[name] = ((_fraction(rng, 4) if rng.random() < 0.15 else "0.0")
            if identities else "")
  values.update(
    created_date="2017-%02d-%02d %02d:%02d:%02d.%06d+00" % (
      rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23), rng.randint(0, 59),
      rng.randint(0, 59), rng.randint(0, 999999)),
    publication_id=str(rng.choice((6, 13, 21, 54, 55))),
    parent_id="" if rng.random() < 0.4 else "%d.0" % rng.randint(60000, 6300000),
    article_id=str(rng.randint(2000, 400000)),
    rating=rng.choice(("approved", "approved", "approved", "rejected")),
    funny=str(rng.randint(0, 3)), wow="0", sad="0", likes=str(rng.randint(0, 10)),
    disagree=str(rng.randint(0, 2)),
    identity_annotator_count=str(4 if identities else 0),
    toxicity_annotator_count=str(annotators))
  return [values[name] for name in TRAIN_COLUMNS]


def write_files(rows, out_dir, test_rows=KAGGLE_TEST_ROWS, seed=2019):
  """Writes out_dir/train.csv (rows) and out_dir/test.csv (test_rows); returns their
  paths. Files already there whole (a marker written last) are kept."""
  if not os.path.isdir(out_dir):
    os.makedirs(out_dir)
  train, test = os.path.join(out_dir, "train.csv"), os.path.join(out_dir, "test.csv")
  done = os.path.join(out_dir, ".complete")
  marker = "%d %d %d\n" % (rows, test_rows, seed)
  if os.path.exists(done):
    with open(done) as f:
      if f.read() == marker:
        return train, test
  texts = shipped_texts()
  rng = random.Random(seed)
  with io.open(train, "w", encoding="utf-8", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(TRAIN_COLUMNS)
    for i in range(rows):
      writer.writerow(train_row(rng, 239575 + i, texts))
  with io.open(test, "w", encoding="utf-8", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(("id", "comment_text"))
    for i in range(test_rows):
      writer.writerow((str(7000000 + i), _comment(rng, texts)))
  with open(done, "w") as f:
    f.write(marker)
  return train, test


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--rows", type=int, default=KAGGLE_TRAIN_ROWS)
  parser.add_argument("--test_rows", type=int, default=KAGGLE_TEST_ROWS)
  parser.add_argument("--out_dir", required=True)
  args = parser.parse_args(argv)
  for path in write_files(args.rows, args.out_dir, args.test_rows):
    print("%s: %.0f MB" % (path, os.path.getsize(path) / 1e6))


if __name__ == "__main__":
  main()
