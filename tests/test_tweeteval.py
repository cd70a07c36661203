"""The tweeteval task (data/tasks/tweeteval.py): TweetEval's tweets a line beside their
labels a line, read against a plain reading of the two files; every way the pair can
disagree named in one line; the labels file in what names the cached records; a run
from the command line on the sample."""

import csv
import hashlib
import io
import os
import shutil

import pytest
from hypothesis import given, settings, strategies as st

from conftest import SAMPLES, TINY, TINY_VOCAB, run_flags
from data.data_error import DataError
from data.processors import get_processor
from data.row_checks import MissingLabel
from spec.run_errors import FlagError

OFFENSIVE = os.path.join(SAMPLES, "tweeteval_offensive")
SPLITS = {"train": "train", "dev": "val", "test": "test"}


def _lines(path):
  with io.open(path, encoding="utf-8", newline="") as f:
    return f.read().split("\n")[:-1]  # (each line ends in \n, the last one too)


def _write(folder, split, texts, labels=None, mapping=("not-offensive", "offensive"),
           end="\n", last_end=True):
  folder.mkdir(parents=True, exist_ok=True)
  with io.open(str(folder / ("%s_text.txt" % split)), "w", encoding="utf-8", newline="") as f:
    f.write(end.join(texts) + (end if last_end else ""))
  if labels is not None:
    with io.open(str(folder / ("%s_labels.txt" % split)), "w", encoding="utf-8",
                 newline="") as f:
      f.write(end.join(labels) + (end if last_end else ""))
  if mapping is not None:
    (folder / "mapping.txt").write_text(u"".join(u"%d\t%s\n" % (i, name)
                                                 for i, name in enumerate(mapping)))
  return str(folder)


def test_the_sample_reads_as_its_two_files_line_by_line():
  processor = get_processor("tweeteval", data_dir=OFFENSIVE)
  assert processor.labels == ["not-offensive", "offensive"]
  for split, prefix in SPLITS.items():
    texts = _lines(os.path.join(OFFENSIVE, prefix + "_text.txt"))
    examples = processor.get_examples(split)
    assert [(e.guid, e.text_a) for e in examples] == [(str(i), t) for i, t in enumerate(texts)]
    files = [os.path.join(OFFENSIVE, prefix + "_text.txt")]
    if split == "test":
      assert {e.label for e in examples} == {None}
    else:
      labels = _lines(os.path.join(OFFENSIVE, prefix + "_labels.txt"))
      assert [e.label for e in examples] == [processor.labels[int(v)] for v in labels]
      files.append(os.path.join(OFFENSIVE, prefix + "_labels.txt"))
    assert len(examples) == {"train": 200, "dev": 60, "test": 60}[split]
    assert processor.read_files(split) == files
    with_digests = [hashlib.sha256(open(path, "rb").read()).hexdigest() for path in files]
    assert processor.read_sha256[split] == with_digests


# Any text of one line: tabs, quotes, commas, spaces at either end, non-ASCII. (A byte-order
# mark that opens a file is its encoding's mark, as in every file the reader reads.)
TWEET = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=u"\n\r\x00"
                              u"\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\ufeff"), min_size=1)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(TWEET, st.integers(0, 2)), min_size=1, max_size=12).filter(
    lambda rows: any(not text.isspace() for text, _ in rows)),  # (else the file is empty)
       end=st.sampled_from(["\n", "\r\n"]), last_end=st.booleans())
def test_any_tweets_and_labels_come_back_as_written(tmp_path_factory, rows, end, last_end):
  folder = tmp_path_factory.mktemp("tweets")
  texts = [text for text, _ in rows]
  data_dir = _write(folder, "train", texts, [str(label) for _, label in rows],
                    mapping=("negative", "neutral", "positive"), end=end, last_end=last_end)
  examples = get_processor("tweeteval", data_dir=data_dir).get_examples("train")
  names = ("negative", "neutral", "positive")
  assert [(e.text_a, e.label) for e in examples] == [(t, names[l]) for t, l in rows]


def _refusal(tmp_path, texts, labels, split="train", **settings):
  data_dir = _write(tmp_path / "data", "train", texts, labels)
  with pytest.raises((DataError, FlagError)) as error:
    get_processor("tweeteval", data_dir=data_dir, **settings).get_examples(split)
  return str(error.value).replace(data_dir + os.sep, "")


def test_a_tweets_file_of_whitespace_alone_is_empty(tmp_path):
  """A tweet of whitespace among others comes back as written (above); a file with nothing
  else holds no text, and is refused as empty."""
  assert _refusal(tmp_path, ["\t", " "], ["0", "1"]) == (
      "train_text.txt: the file is empty. Fix: give a file with rows, or point at the right "
      "file")


def test_every_way_the_two_files_can_disagree_is_named_in_one_line(tmp_path):
  three = ["one tweet", "another", "a third"]
  assert _refusal(tmp_path, three, ["0", "1"]) == (
      "train_labels.txt, line 3: the label is missing. Fix: give the index of the tweet's "
      "class (0 to 1: not-offensive, offensive), or remove the line from both files, or pass "
      "--skip_malformed_rows to skip and count such rows")
  assert _refusal(tmp_path, three[:2], ["0", "1", "1"]) == (
      "train_labels.txt, line 3: line 3 gives a label, but train_text.txt ends at line 2. "
      "Fix: give both files a line for each tweet")
  for labels in (["0", "1", "1"], ["0", "", "1"]):  # (with or without its label)
    assert _refusal(tmp_path, ["one tweet", "", "a third"], labels) == (
        "train_text.txt, line 2: line 2 is empty, where a tweet should be: a TweetEval file "
        "holds a tweet a line, and the lines after it would lose their places. Fix: give "
        "the tweet, or remove the line (and the same line of its labels file)")
  assert _refusal(tmp_path, three[:2] + [""], ["0", "1", "1"]) == (
      "train_text.txt, line 3: line 3 is empty, but line 3 of train_labels.txt gives it a "
      "label (1). Fix: give the tweet, or remove the line from both files")
  for label in ("2", "-1", "offensive", "0.0", u"\u00b2"):
    assert _refusal(tmp_path, three, ["0", label, "1"]) == (
        "train_labels.txt, line 2: task tweeteval: the label %r is no class index (0 to 1: "
        "not-offensive, offensive). Fix: give the index of the tweet's class" % label)
  os.remove(str(tmp_path / "data" / "train_labels.txt"))
  with pytest.raises(DataError) as error:
    get_processor("tweeteval", data_dir=str(tmp_path / "data")).get_examples("train")
  assert str(error.value) == (
      "%s: the labels file of %s does not exist. Fix: put the labels beside the tweets, a "
      "class index a line, or use the file for predicting" % (
          tmp_path / "data" / "train_labels.txt", tmp_path / "data" / "train_text.txt"))
  other = tmp_path / "tweets.txt"
  other.write_text(u"a tweet\n")
  with pytest.raises(DataError, match=r"tweets.txt: a TweetEval text file's name ends in "
                     r"_text.txt \(its labels file's in _labels.txt\)"):
    get_processor("tweeteval", files={"train": str(other)},
                  labels=["a", "b"]).get_examples("train")


def test_a_missing_label_is_skipped_and_counted_when_asked(tmp_path):
  data_dir = _write(tmp_path / "data", "train", ["one", "two", "three", "four"],
                    ["0", "", "1"])
  processor = get_processor("tweeteval", data_dir=data_dir, skip_malformed_rows=True)
  assert [(e.guid, e.label) for e in processor.get_examples("train")] == [
      ("0", "not-offensive"), ("2", "offensive")]
  assert processor.skipped["train"] == {MissingLabel.cause: 2}


def test_the_classes_come_from_mapping_or_labels_and_never_two_disagreeing(tmp_path):
  data_dir = _write(tmp_path / "data", "train", ["one", "two"], ["0", "1"], mapping=None)
  mapping = os.path.join(data_dir, "mapping.txt")
  with pytest.raises(DataError) as error:
    get_processor("tweeteval", data_dir=data_dir).labels
  assert str(error.value) == (
      "%s: no mapping.txt names the classes of the label files' indices. Fix: put "
      "TweetEval's mapping.txt beside the files, or pass --labels=<the class names in index "
      "order>" % mapping)
  assert get_processor("tweeteval", data_dir=data_dir, labels=["no", "yes"]).labels == [
      "no", "yes"]
  for text, problem in [(u"0\tno\n2\tyes\n", "line 2 is '2\\tyes', not `1<TAB><class name>`"),
                        (u"0 no\n", "line 1 is '0 no', not `0<TAB><class name>`"),
                        (u"0\tonly\n", "it names 1 class; a classifier needs two or more"),
                        (u"0\tno\n1\tno\n", "line 2 names class 'no' again (line 1 named it)"),
                        (b"0\tn\xe9\n1\tyes\n", "line 1: byte 0xe9 is not UTF-8 text")]:
    with open(mapping, "wb") as f:
      f.write(text if isinstance(text, bytes) else text.encode("utf-8"))
    with pytest.raises(DataError) as error:
      get_processor("tweeteval", data_dir=data_dir).labels
    assert problem in str(error.value) and str(error.value).startswith(mapping)
  # Blank lines, a byte-order mark, CRLF and the emoji mapping's further fields.
  with open(mapping, "wb") as f:
    f.write(u"\ufeff0\tno\t_no_\t\r\n\r\n1\tyes\t_yes_\t\r\n".encode("utf-8"))
  assert get_processor("tweeteval", data_dir=data_dir).labels == ["no", "yes"]
  # TweetEval's stance keeps mapping.txt above its targets' folders; two that disagree
  # are refused.
  target = tmp_path / "stance" / "abortion"
  _write(target, "train", ["one", "two"], ["0", "1"], mapping=None)
  (tmp_path / "stance" / "mapping.txt").write_text(u"0\tnone\n1\tagainst\n2\tfavor\n")
  assert get_processor("tweeteval", data_dir=str(target)).labels == [
      "none", "against", "favor"]
  with pytest.raises(DataError) as error:
    get_processor("tweeteval", data_dir=str(target), files={
        "dev": os.path.join(data_dir, "train_text.txt")}).labels
  assert str(error.value) == (
      "%s: it names the classes no, yes, and %s names none, against, favor. Fix: read files "
      "of one task: their label indices name the classes of one mapping" % (
          mapping, tmp_path / "stance" / "mapping.txt"))
  assert get_processor("tweeteval", data_dir=data_dir, labels=["no", "yes"]).labels == [
      "no", "yes"]
  with pytest.raises(DataError) as error:
    get_processor("tweeteval", data_dir=data_dir, labels=["yes", "no"]).labels
  assert str(error.value) == (
      "%s: it names the classes no, yes, but --labels names yes, no. Fix: drop --labels, or "
      "correct mapping.txt" % mapping)


def test_quoting_is_refused_for_files_of_a_tweet_a_line():
  from run_classifier import parse_flags
  from data.processors import processor_for
  c = parse_flags(["run_classifier.py", "--task_name=tweeteval", "--data_dir=" + OFFENSIVE,
                   "--quoting=csv", "--output_dir=/tmp/x"])
  with pytest.raises(FlagError, match=r"^--quoting=csv reads files of quoted columns; "
                     r"TweetEval's files hold a tweet a line, read as it is: drop --quoting$"):
    processor_for(c.data)


def test_the_labels_file_is_part_of_what_names_the_cached_records(tmp_path):
  from data.files import files_sha256
  from data.reread import read_checked
  data_dir = tmp_path / "data"
  shutil.copytree(OFFENSIVE, str(data_dir))
  processor = get_processor("tweeteval", data_dir=str(data_dir))
  before = files_sha256(processor.read_files("train"))
  assert len(list(read_checked(processor, "train"))) == 200
  labels = data_dir / "train_labels.txt"
  labels.write_text(labels.read_text().replace(u"0\n", u"1\n", 1))
  assert files_sha256(processor.read_files("train")) != before


@pytest.mark.one_runtime("tf1")  # (the suites' balance: the task reads no TensorFlow)
def test_a_run_trains_evaluates_and_predicts_tweets_and_its_card_names_the_classes(
    tmp_path, tiny_checkpoint):
  """From the command line: train, eval and predict on the sample; then predict with the
  card alone from a folder of tweets with neither labels nor mapping.txt."""
  import json
  output_dir = str(tmp_path / "out")
  common = ["--bert_config_file=" + os.path.join(TINY, "bert_config.json"),
            "--vocab_file=" + TINY_VOCAB, "--output_dir=" + output_dir,
            "--max_seq_length=32", "--predict_batch_size=8"]
  run_flags("--task_name=tweeteval", "--data_dir=" + OFFENSIVE, "--do_train", "--do_eval",
            "--do_predict", "--init_checkpoint=" + tiny_checkpoint, "--train_batch_size=8",
            "--eval_batch_size=8", "--num_train_steps=4", "--learning_rate=1e-3", *common)
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    assert json.load(f)["num_examples"] == 60
  with open(os.path.join(output_dir, "model_card.json")) as f:
    card = json.load(f)
  assert (card["task"], card["labels"]) == ("tweeteval", ["not-offensive", "offensive"])
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    first = list(csv.reader(f, delimiter="\t"))
  assert len(first) == 61 and [row[0] for row in first[1:]] == [str(i) for i in range(60)]
  tweets = tmp_path / "new"
  tweets.mkdir()
  shutil.copy(os.path.join(OFFENSIVE, "test_text.txt"), str(tweets / "new_text.txt"))
  os.remove(os.path.join(output_dir, "test_results.tsv"))
  run_flags("--do_predict", "--predict_file=" + str(tweets / "new_text.txt"), *common)
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    again = list(csv.reader(f, delimiter="\t"))
  assert again == first
