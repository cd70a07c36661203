"""Rebuilds the committed samples in tests/data/ from the full data sets.

  python tests/data/make_samples.py [SHARED_DIR]     (default: ../shared next to the project)

Each sample keeps its source's exact bytes, layout and encoding (header, BOM,
quoting, multi-line records): whole records are copied, every k-th one, so the
labels and lengths spread as in the source. tests/data/README.md names each
file's source and licence. Run it only to change the samples; the tests read the
committed files.
"""

import io
import os
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


if __name__ == "__main__":
  main(os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_SHARED))
