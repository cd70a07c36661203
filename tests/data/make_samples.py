"""Rebuilds the committed samples in tests/data/ from the full data sets.

  python tests/data/make_samples.py [SHARED_DIR]     (default: ../shared next to the project)

Each sample keeps its source's exact bytes, layout and encoding (header, BOM,
quoting, multi-line records): whole records are copied, every k-th one, so the
labels and lengths spread as in the source. The one exception, jigsaw_bias_davidson/,
is derived: Davidson's tweets rewritten in Kaggle's Jigsaw Unintended Bias layout (see
derive_jigsaw_bias). tests/data/README.md names each file's source and licence. Run it
only to change the samples; the tests read the committed files.
"""

import io
import os
import re
import shutil
import sys

import csv

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SHARED = os.path.join(os.path.dirname(os.path.dirname(HERE)), "..", "shared")

csv.field_size_limit(2**31 - 1)


def raw_records(text, delimiter, quoted):
  """(raw_text, fields) of each record: the exact characters of its line(s)."""
  lines = io.StringIO(text, newline="").readlines()
  if not quoted:
    return [(line, line.rstrip("\r\n").split(delimiter)) for line in lines]
  consumed = []

  def feed():
    for line in lines:
      consumed.append(line)
      yield line

  records = []
  for fields in csv.reader(feed(), delimiter=delimiter):
    records.append(("".join(consumed), fields))
    del consumed[:]
  return records


def every_kth(records, count):
  """count records spread evenly over the file, first and last included when count > 1."""
  if count >= len(records):
    return list(records)
  step = (len(records) - 1) / float(count - 1)
  return [records[int(round(i * step))] for i in range(count)]


def sample_delimited(source, target, count, delimiter, header, quoted):
  with io.open(source, encoding="utf-8", newline="") as f:
    text = f.read()
  records = raw_records(text, delimiter, quoted)
  head, body = (records[:1], records[1:]) if header else ([], records)
  chosen = every_kth(body, count)
  with io.open(target, "w", encoding="utf-8", newline="") as f:
    f.write("".join(raw for raw, _ in head + chosen))
  return len(chosen)


def sample_parallel_lines(text_source, label_source, text_target, label_target, count):
  """TweetEval: one text per line and its label on the same line of another file."""
  with io.open(text_source, encoding="utf-8", newline="") as f:
    texts = f.read().split("\n")
  with io.open(label_source, encoding="utf-8", newline="") as f:
    labels = f.read().split("\n")
  if texts and texts[-1] == "":
    texts, labels = texts[:-1], labels[:len(texts) - 1]
  chosen = every_kth(list(zip(texts, labels)), count)
  for target, column in ((text_target, 0), (label_target, 1)):
    with io.open(target, "w", encoding="utf-8", newline="") as f:
      f.write("".join(pair[column] + "\n" for pair in chosen))
  return len(chosen)


# --- Jigsaw Unintended Bias layout, derived from the Davidson tweets -------------------
#
# Kaggle's Jigsaw Unintended Bias files hold, per comment, the fraction of raters who
# gave each label. Davidson's raters each chose one of hate speech (H), offensive but not
# hate (O) or neither (N), count = H + O + N, so every column below is such a fraction:
#   target          = (H + O) / count   toxic or very toxic (toxic when >= 0.5)
#   severe_toxicity = H / count         hate speech is Davidson's graver category
#   identity_attack = H / count         Davidson's hate speech is, by its definition,
#                                       hatred towards a group for an identity
#   insult          = O / count         offensive but not hate
#   obscene, threat, sexual_explicit    empty (missing): Davidson's raters were not asked
#                                       anything that maps onto them
# The identity columns are 1.0 when the tweet contains a word of the identity's list
# below (case-insensitive, whole words), else 0.0. That is a crude stand-in for Kaggle's
# rater annotations ("black" matches the colour, "he" any man), good for test data only.
JIGSAW_BIAS_HEADER = [
    "id", "comment_text", "target", "severe_toxicity", "obscene", "identity_attack", "insult",
    "threat", "sexual_explicit", "male", "female", "homosexual_gay_or_lesbian", "christian",
    "jewish", "muslim", "black", "white", "psychiatric_or_mental_illness"]
IDENTITY_WORDS = [  # in Kaggle's order of the nine scored identities
    ("male", "man men boy boys he him male guy guys"),
    ("female", "woman women girl girls she her female lady ladies"),
    ("homosexual_gay_or_lesbian", "gay lesbian homosexual fag faggot queer dyke"),
    ("christian", "christian christians jesus church"),
    ("jewish", "jew jews jewish"),
    ("muslim", "muslim muslims islam arab arabs"),
    ("black", "black blacks nigga niggas nigger niggers"),
    ("white", "white whites cracker crackers redneck"),
    ("psychiatric_or_mental_illness", "crazy insane psycho retard retarded mental"),
]
JIGSAW_BIAS_FOLDER = "datasets/jigsaw_bias_davidson"
# Split sizes, and how many rows of each (identity, toxic or not) cell each split takes
# first, before the even spread of the rest fills it up.
JIGSAW_BIAS_SPLITS = [("dev", 400, 10), ("train", 600, 14), ("test", 100, 3)]


def identity_patterns():
  return [(name, re.compile(r"\b(?:%s)\b" % "|".join(words.split()), re.IGNORECASE))
          for name, words in IDENTITY_WORDS]


def jigsaw_bias_row(fields, patterns):
  """A Davidson record (id, count, H, O, N, class, tweet) in the Jigsaw bias layout."""
  row_id, count, hate, offensive, _, _, tweet = fields
  count, hate, offensive = float(count), int(hate), int(offensive)
  values = [row_id, tweet, repr((hate + offensive) / count), repr(hate / count), "",
            repr(hate / count), repr(offensive / count), "", ""]
  return values + ["1.0" if pattern.search(tweet) else "0.0" for _, pattern in patterns]


def derive_jigsaw_bias(source, target_dir):
  """Davidson's tweets as Kaggle Jigsaw Unintended Bias train/dev/test CSVs.

  Davidson is ~83% toxic and most identities are rarely mentioned by a non-toxic tweet,
  so rows are chosen in two deterministic steps. First, for each identity (in order) and
  for its toxic and its non-toxic mentions, up to 27 not yet chosen rows spread evenly
  over the file are dealt round-robin to dev, train, test (10, 14 and 3 at most), dev
  first, so every identity has both classes in dev wherever the source has them. Then
  the remaining rows are dealt to the splits by position (6 of every 11 to train, 4 to
  dev, 1 to test) and each split is filled up with an even spread of its share. Each
  file lists its rows in the source's order.
  """
  with io.open(source, encoding="utf-8", newline="") as f:
    records = list(csv.reader(f))[1:]
  patterns = identity_patterns()
  rows = [jigsaw_bias_row(fields, patterns) for fields in records]
  toxic = [float(row[2]) >= 0.5 for row in rows]
  chosen = {name: [] for name, _, _ in JIGSAW_BIAS_SPLITS}
  taken = set()
  for column, (name, _) in enumerate(IDENTITY_WORDS, start=9):
    for is_toxic in (False, True):
      cell = [i for i, row in enumerate(rows)
              if row[column] == "1.0" and toxic[i] == is_toxic and i not in taken]
      quota = {split: share for split, _, share in JIGSAW_BIAS_SPLITS}
      picked = every_kth(cell, sum(quota.values()))
      turn = 0
      for i in picked:
        while quota[JIGSAW_BIAS_SPLITS[turn % 3][0]] == 0:
          turn += 1
        split = JIGSAW_BIAS_SPLITS[turn % 3][0]
        chosen[split].append(i)
        quota[split] -= 1
        taken.add(i)
        turn += 1
  rest = [i for i in range(len(rows)) if i not in taken]
  share = {"train": range(0, 6), "dev": range(6, 10), "test": range(10, 11)}
  os.makedirs(target_dir, exist_ok=True)
  sizes = []
  for split, size, _ in JIGSAW_BIAS_SPLITS:
    pool = [i for position, i in enumerate(rest) if position % 11 in share[split]]
    indices = sorted(chosen[split] + every_kth(pool, size - len(chosen[split])))
    with io.open(os.path.join(target_dir, split + ".csv"), "w", encoding="utf-8",
                 newline="") as f:
      writer = csv.writer(f, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
      writer.writerow(JIGSAW_BIAS_HEADER)
      writer.writerows(rows[i] for i in indices)
    sizes.append((split, len(indices)))
  return sizes


# target (under tests/data), source (under shared), rows kept, delimiter, header, quoted
DELIMITED = [
    ("datasets/jigsaw_toxic_balanced/comments.csv", 400, ",", False, True),
    ("datasets/davidson_hate_offensive/labeled_data.csv", 300, ",", True, True),
    ("datasets/glue/SST-2/train.tsv", 300, "\t", True, False),
    ("datasets/glue/SST-2/dev.tsv", 100, "\t", True, False),
    ("datasets/glue/SST-2/test.tsv", 100, "\t", True, False),
    ("datasets/glue/CoLA/train.tsv", 300, "\t", False, False),
    ("datasets/glue/CoLA/dev.tsv", 100, "\t", False, False),
    ("datasets/glue/MRPC/msr_paraphrase_train.txt", 120, "\t", True, False),
    ("datasets/glue/MRPC/msr_paraphrase_test.txt", 60, "\t", True, False),
    ("datasets/glue/RTE/train.tsv", 100, "\t", True, False),
    ("datasets/glue/RTE/dev.tsv", 40, "\t", True, False),
    ("datasets/glue/RTE/test.tsv", 40, "\t", True, False),
]
WHOLE = [  # copied byte for byte
    "datasets/jigsaw_toxic_sample/train.csv", "datasets/jigsaw_toxic_sample/valid.csv",
    "datasets/jigsaw_toxic_sample/test.csv", "datasets/tweeteval_offensive/mapping.txt",
    "checkpoint_fixtures/bert_tiny/bert_config.json", "checkpoint_fixtures/bert_tiny/vocab.txt",
    "checkpoint_fixtures/bert_tiny/bert_model.ckpt.index",
    "checkpoint_fixtures/bert_mini/bert_config.json",
    "checkpoint_fixtures/bert_mini/bert_model.ckpt.index",
]
TWEETEVAL = [("train", 200), ("val", 60), ("test", 60)]


def main(shared):
  for relative in WHOLE:
    target = os.path.join(HERE, relative)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copyfile(os.path.join(shared, relative), target)
    print("%-55s copied" % relative)
  for relative, count, delimiter, header, quoted in DELIMITED:
    target = os.path.join(HERE, relative)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    kept = sample_delimited(os.path.join(shared, relative), target, count, delimiter, header,
                            quoted)
    print("%-55s %d rows" % (relative, kept))
  folder = "datasets/tweeteval_offensive"
  for split, count in TWEETEVAL:
    names = ["%s/%s_%s.txt" % (folder, split, kind) for kind in ("text", "labels")]
    kept = sample_parallel_lines(*[os.path.join(shared, n) for n in names] +
                                 [os.path.join(HERE, n) for n in names] + [count])
    print("%-55s %d rows" % (names[0], kept))
  for split, kept in derive_jigsaw_bias(
      os.path.join(shared, "datasets/davidson_hate_offensive/labeled_data.csv"),
      os.path.join(HERE, JIGSAW_BIAS_FOLDER)):
    print("%-55s %d rows" % ("%s/%s.csv" % (JIGSAW_BIAS_FOLDER, split), kept))


if __name__ == "__main__":
  main(os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_SHARED))
