"""Each processor reads the real files with the documented row counts and labels."""

import collections
import csv
import io
import os
import re

import pytest

from conftest import CORPORA, FULL_DATASETS, ROOT, SAMPLES, sample_path
from data.processors import get_processor


def label_counts(examples):
  return dict(collections.Counter(e.label for e in examples))


GLUE_CASES = {  # corpus -> (task, folder, split, rows, label counts)
    SAMPLES: [
        ("sst-2", "SST-2", "train", 300, {"1": 180, "0": 120}),
        ("sst-2", "SST-2", "dev", 100, {"1": 59, "0": 41}),
        ("sst-2", "SST-2", "test", 100, {None: 100}),  # predict files' labels are not read
        ("cola", "CoLA", "train", 300, {"1": 212, "0": 88}),
        ("cola", "CoLA", "dev", 100, {"1": 63, "0": 37}),
        ("mrpc", "MRPC", "train", 120, {"1": 73, "0": 47}),
        ("mrpc", "MRPC", "dev", 60, {"1": 37, "0": 23}),
        ("rte", "RTE", "train", 100, {"entailment": 54, "not_entailment": 46}),
        ("rte", "RTE", "dev", 40, {"entailment": 22, "not_entailment": 18}),
        ("rte", "RTE", "test", 40, {None: 40}),
        ("qnli", "QNLI", "train", 5, {"entailment": 2, "not_entailment": 3}),
        ("qnli", "QNLI", "dev", 30, {"entailment": 16, "not_entailment": 14}),
        ("qnli", "QNLI", "test", 30, {None: 30}),
        ("wnli", "WNLI", "train", 60, {"0": 32, "1": 28}),
        ("wnli", "WNLI", "dev", 30, {"0": 18, "1": 12}),
        ("wnli", "WNLI", "test", 30, {None: 30}),
        ("ax", "AX", "test", 3, {None: 3}),  # (GLUE's diagnostic pairs: an MNLI model predicts them)
    ],
    FULL_DATASETS: [
        ("sst-2", "SST-2", "train", 60614, {"1": 33828, "0": 26786}),
        ("sst-2", "SST-2", "dev", 6735, {"1": 3741, "0": 2994}),
        ("sst-2", "SST-2", "test", 872, {None: 872}),
        ("cola", "CoLA", "train", 8551, {"1": 6023, "0": 2528}),
        ("cola", "CoLA", "dev", 516, {"1": 354, "0": 162}),
        ("mrpc", "MRPC", "train", 4076, {"1": 2753, "0": 1323}),
        ("mrpc", "MRPC", "dev", 1725, {"1": 1147, "0": 578}),
        ("rte", "RTE", "train", 2490, {"entailment": 1249, "not_entailment": 1241}),
        ("rte", "RTE", "dev", 277, {"entailment": 146, "not_entailment": 131}),
        ("rte", "RTE", "test", 3000, {None: 3000}),
    ],
}


def _cases(table):
  """pytest params over both corpora: the full sets' cases in the extended tier."""
  return [pytest.param(corpus.values[0], *case, marks=corpus.marks,
                       id="-".join([corpus.id] + [str(v) for v in case if not isinstance(v, dict)]))
          for corpus in CORPORA for case in table[corpus.values[0]]]


@pytest.mark.parametrize("corpus,task,folder,split,rows,labels", _cases(GLUE_CASES))
def test_glue_real_files(corpus, task, folder, split, rows, labels):
  processor = get_processor(task, data_dir=os.path.join(corpus, "glue", folder))
  examples = processor.get_examples(split)
  assert len(examples) == rows
  assert label_counts(examples) == labels


def test_the_newer_glue_tasks_read_their_pairs_by_header_name():
  """QNLI's question and sentence, WNLI's two sentences, AX's pairs with MNLI's classes:
  each row's index is its id."""
  qnli = get_processor("qnli", data_dir=sample_path("glue", "QNLI")).get_examples("dev")[0]
  assert (qnli.guid, qnli.label) == ("0", "entailment")
  assert qnli.text_a == "What came into force after the new constitution was herald?"
  assert qnli.text_b.startswith("As of that day, the new constitution heralding the Second")
  wnli = get_processor("wnli", data_dir=sample_path("glue", "WNLI")).get_examples("train")[0]
  assert (wnli.guid, wnli.label) == ("0", "1")
  assert wnli.text_a.startswith("I stuck a pin through a carrot.")
  assert wnli.text_b == "The carrot had a hole."
  ax = get_processor("ax", data_dir=sample_path("glue", "AX"))
  assert ax.labels == ["contradiction", "entailment", "neutral"] and ax.reads_pairs
  first = ax.get_examples("test")[0]
  assert (first.guid, first.text_a, first.text_b) == (
      "0", "The cat sat on the mat.", "The cat did not sit on the mat.")
  from pipeline.card import same_task_family
  assert same_task_family("ax", "mnli") and same_task_family("mnli-mm", "mnli")
  assert not same_task_family("qnli", "rte") and not same_task_family("wnli", "mnli")


def test_mrpc_reads_bom_file_and_pairs():
  processor = get_processor("mrpc", data_dir=sample_path("glue", "MRPC"))
  first = processor.get_examples("train")[0]
  assert first.label == "1"
  assert first.text_a.startswith("Amrozi accused his brother, whom he called \"the witness\"")
  assert first.text_b.startswith("Referring to him as only \"the witness\", Amrozi")


def test_jigsaw_toxic_sample_all_splits_and_label_columns():
  data_dir = sample_path("jigsaw_toxic_sample")
  processor = get_processor("jigsaw_toxic", data_dir=data_dir)
  train = processor.get_examples("train")
  assert len(train) == 267 and label_counts(train) == {"0": 241, "1": 26}
  assert train[0].guid == "0000997932d777bf"
  assert train[0].text_a.startswith("Explanation\nWhy the edits made")  # newline kept
  assert len(processor.get_examples("dev")) == 25
  test = processor.get_examples("test")
  assert len(test) == 33 and label_counts(test) == {None: 33}
  with io.open(os.path.join(data_dir, "train.csv"), encoding="utf-8", newline="") as f:
    rows = list(csv.DictReader(f))
  for column in ("toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate"):
    examples = get_processor("jigsaw_toxic", data_dir=data_dir,
                             label_columns=[column]).get_examples("train")
    assert [e.label for e in examples] == [r[column] for r in rows]


@pytest.mark.parametrize("corpus,rows", _cases({SAMPLES: [(300,)], FULL_DATASETS: [(24783,)]}))
def test_jigsaw_bias_on_fractional_scores(tmp_path, corpus, rows):
  """The Unintended Bias layout, built from the real Davidson tweets' fractional scores."""
  source = os.path.join(corpus, "davidson_hate_offensive", "labeled_data.csv")
  with io.open(source, encoding="utf-8", newline="") as f:
    table = list(csv.DictReader(f))
  path = tmp_path / "train.csv"
  with io.open(str(path), "w", encoding="utf-8", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["id", "comment_text", "target", "male", "female"])
    for r in table:
      target = (int(r["hate_speech"]) + int(r["offensive_language"])) / float(r["count"])
      writer.writerow([r[""], r["tweet"], repr(target), "0.0", ""])
  examples = get_processor("jigsaw_bias", data_dir=str(tmp_path)).get_examples("train")
  assert len(examples) == rows
  # The default soft-target head keeps each fraction exactly as written.
  assert [e.label for e in examples] == [
      ((int(r["hate_speech"]) + int(r["offensive_language"])) / float(r["count"]),)
      for r in table]
  assert examples[3].extras == {"male": "0.0", "female": ""}
  assert examples[3].text_a == table[3]["tweet"]
  # The classification head learns target >= 0.5 instead.
  binary = get_processor("jigsaw_bias", data_dir=str(tmp_path), head="classification")
  toxic = sum(1 for r in table if (int(r["hate_speech"]) + int(r["offensive_language"])) * 2 >=
              int(r["count"]))
  assert label_counts(binary.get_examples("train")) == {"1": toxic, "0": rows - toxic}
  assert toxic == {300: 252, 24783: 20637}[rows]


@pytest.mark.parametrize("corpus,rows", _cases({SAMPLES: [(400,)], FULL_DATASETS: [(12180,)]}))
def test_generic_csv_without_header_by_position(corpus, rows):
  path = os.path.join(corpus, "jigsaw_toxic_balanced", "comments.csv")
  processor = get_processor("csv", files={"train": path}, text_column="0", label_columns=["1"],
                            has_header=False)
  examples = processor.get_examples("train")
  assert len(examples) == rows
  assert processor.labels == ["0", "1"]
  assert label_counts(examples) == {"0": rows // 2, "1": rows // 2}
  assert examples[0].guid == "0"


def test_generic_tsv_with_header_pairs_and_ids(tmp_path):
  path = tmp_path / "pairs.tsv"
  path.write_text(u"qid\tleft\tright\ty\nA\tone\tuno\tsame\nB\ttwo\tdos\tdiff\n")
  processor = get_processor("csv", files={"train": str(path), "test": str(path)},
                            text_column="left", text_b_column="right", label_columns=["y"],
                            id_column="qid")
  examples = processor.get_examples("train")
  assert [(e.guid, e.text_a, e.text_b, e.label) for e in examples] == [
      ("A", "one", "uno", "same"), ("B", "two", "dos", "diff")]
  assert processor.labels == ["diff", "same"]


def test_generic_test_file_may_lack_labels(tmp_path):
  (tmp_path / "train.csv").write_text(u"text,label\na,x\nb,y\n")
  (tmp_path / "test.csv").write_text(u"text\nc\n\"d, e\"\n")
  processor = get_processor("csv", data_dir=str(tmp_path), text_column="text",
                            label_columns=["label"])
  test = processor.get_examples("test")
  assert [(e.text_a, e.label) for e in test] == [("c", None), ("d, e", None)]


def _write_tsv(path, header, rows):
  with io.open(str(path), "w", encoding="utf-8") as f:
    f.write("\t".join(header) + "\n")
    for row in rows:
      f.write("\t".join(row) + "\n")


MNLI_HEADER = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
               "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
               "sentence2", "label1", "gold_label"]


def test_mnli_matched_and_mismatched_dev(tmp_path):
  def row(i, label):
    return [str(i), "p", "q", "fiction", "(", "(", "(", "(", "premise %d" % i, "hyp %d" % i,
            label, label]
  _write_tsv(tmp_path / "train.tsv", MNLI_HEADER, [row(0, "neutral"), row(1, "entailment")])
  _write_tsv(tmp_path / "dev_matched.tsv", MNLI_HEADER, [row(2, "contradiction")])
  _write_tsv(tmp_path / "dev_mismatched.tsv", MNLI_HEADER,
             [row(3, "entailment"), row(4, "neutral")])
  _write_tsv(tmp_path / "test_matched.tsv", MNLI_HEADER[:10], [row(5, "x")[:10]])
  matched = get_processor("mnli", data_dir=str(tmp_path))
  assert matched.labels == ["contradiction", "entailment", "neutral"]
  assert [(e.guid, e.text_a, e.text_b, e.label) for e in matched.get_examples("dev")] == [
      ("2", "premise 2", "hyp 2", "contradiction")]
  assert [e.label for e in matched.get_examples("test")] == [None]
  mismatched = get_processor("mnli-mm", data_dir=str(tmp_path))
  assert [e.label for e in mismatched.get_examples("dev")] == ["entailment", "neutral"]
  assert len(mismatched.get_examples("train")) == 2


def test_qqp_layout(tmp_path):
  _write_tsv(tmp_path / "train.tsv", ["id", "qid1", "qid2", "question1", "question2",
                                      "is_duplicate"],
             [["7", "1", "2", "How old?", "What age?", "1"], ["8", "3", "4", "Why?", "How?", "0"]])
  examples = get_processor("qqp", data_dir=str(tmp_path)).get_examples("train")
  assert [(e.guid, e.text_a, e.text_b, e.label) for e in examples] == [
      ("7", "How old?", "What age?", "1"), ("8", "Why?", "How?", "0")]


def test_stsb_is_regression(tmp_path):
  header = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
            "sentence1", "sentence2", "score"]
  _write_tsv(tmp_path / "dev.tsv", header,
             [["0", "main", "f", "2012", "1", "s", "s", "A man.", "A person.", "3.800"]])
  processor = get_processor("sts-b", data_dir=str(tmp_path))
  assert processor.label_spec.kind == "regression" and processor.labels is None
  (example,) = processor.get_examples("dev")
  assert (example.text_a, example.text_b, example.label) == ("A man.", "A person.", (3.8,))


def test_cola_glue_four_column_and_test_layouts(tmp_path):
  (tmp_path / "train.tsv").write_text(u"gj04\t1\t\tThe sailors rode the breeze.\n"
                                      u"gj04\t0\t*\tThe breeze rode.\n")
  (tmp_path / "test.tsv").write_text(u"index\tsentence\n0\tBill whistled.\n")
  processor = get_processor("cola", data_dir=str(tmp_path))
  assert [(e.text_a, e.label) for e in processor.get_examples("train")] == [
      ("The sailors rode the breeze.", "1"), ("The breeze rode.", "0")]
  assert [(e.guid, e.text_a, e.label) for e in processor.get_examples("test")] == [
      ("0", "Bill whistled.", None)]


def test_unknown_task_lists_the_known_ones():
  with pytest.raises(ValueError) as error:
    get_processor("sst3")
  assert "sst-2" in str(error.value) and "jigsaw_toxic" in str(error.value)


def test_the_task_registry_is_the_processors_in_data_tasks_each_once():
  """Every processor class of data/tasks/ that carries a name is a task by that name, with
  its aliases; base classes are none; a name or alias twice, or a name not in lower case,
  stops the import with both classes; the guide's table of tasks names every task."""
  from data import processors
  from data.tasks.csv_task import CsvProcessor
  from data.tasks.glue import StsbProcessor
  from data.tasks.jigsaw import JigsawProcessor
  assert processors.TASK_NAMES == tuple(sorted(processors.PROCESSORS))
  assert set(processors.TASK_NAMES) >= {"sst-2", "cola", "mnli-mm", "xnli", "jigsaw_toxic",
                                        "jigsaw_bias", "csv"}
  assert all(cls.name == name for name, cls in processors.PROCESSORS.items())
  assert JigsawProcessor not in processors.PROCESSORS.values()
  assert processors.TASK_ALIASES == {"sst2": "sst-2", "stsb": "sts-b", "mnli_mm": "mnli-mm"}
  classes = list(processors.PROCESSORS.values())
  with pytest.raises(TypeError, match=r"two processors are named 'csv': CsvProcessor and Tsv"):
    processors._registry(classes + [type("TsvProcessor", (CsvProcessor,), {})])
  with pytest.raises(TypeError, match=r"two processors are named 'stsb': StsbProcessor and "
                     r"Other"):
    processors._registry(classes + [type("Other", (CsvProcessor,), {
        "name": "other", "aliases": ("stsb",)})])
  assert processors._registry(classes + [type("TsvProcessor", (CsvProcessor,), {
      "name": "tsv"})])[0]["tsv"].__name__ == "TsvProcessor"
  assert processors._registry([c for c in classes if c is not StsbProcessor])[1] == {
      "sst2": "sst-2", "mnli_mm": "mnli-mm"}
  with pytest.raises(TypeError, match=r"the processor Shouting carries no task name in lower "
                     r"case \(its name is 'CSV2'\)"):
    processors._registry(classes + [type("Shouting", (CsvProcessor,), {"name": "CSV2"})])
  with open(os.path.join(ROOT, "docs", "guide", "data.md")) as f:
    table = f.read().split("\n## Tasks\n")[1].split("\n## ")[0]
  listed = [name for row in table.splitlines()[3:] if row.startswith("| `")
            for name in re.findall(r"`([^`]+)`", row.split(" | ")[0])]
  assert sorted(listed) == list(processors.TASK_NAMES)


def test_xnli_reads_one_language_as_googles_processor_does(tmp_path, caplog):
  """XNLI: the translated training file of --xnli_language (premise, hypo, label), and that
  language's rows of the dev and test files, the others counted and reported; its
  "contradictory" read as XNLI's "contradiction"; the option refused for other tasks."""
  import logging
  import shutil
  from pipeline.build import make_processor
  from run_classifier import parse_flags
  from spec.run_errors import FlagError
  folder = sample_path("xnli")
  zh = get_processor("xnli", data_dir=folder)  # (Google's language)
  train = zh.get_examples("train")
  assert len(train) == 4 and label_counts(train) == {"entailment": 3, "neutral": 1}
  assert train[0].text_a.startswith(u"\u4ece \u6982\u5ff5 \u4e0a \u770b")  # (从 概念 上 看)
  with caplog.at_level(logging.INFO):
    dev = zh.get_examples("dev")
  assert [e.guid for e in dev] == ["1", "2", "3", "39", "49", "50"]  # (pairID)
  assert label_counts(dev) == {"neutral": 2, "contradiction": 2, "entailment": 2}
  aside = "rows of other languages than --xnli_language=zh"
  assert zh.rows_left_aside["dev"] == {aside: 2} and zh.accounts["dev"]["left_aside"] == {aside: 2}
  assert zh.skipped["dev"] == {} and zh.accounts["dev"]["skipped"] == {}
  assert "left aside 2 %s" % aside in caplog.text
  assert label_counts(zh.get_examples("test")) == {None: 6}
  c = parse_flags(["run_classifier.py", "--task_name=xnli", "--data_dir=" + folder,
                   "--xnli_language=de", "--output_dir=/tmp/x", "--do_eval"])
  de = make_processor(c.data)
  assert [e.text_a for e in de.get_examples("dev")] == [
      "und er hat gesagt, Mama ich bin daheim."]
  assert len(de.get_examples("train")) == 4 and de.rows_left_aside["dev"] == {
      "rows of other languages than --xnli_language=de": 7}
  # XNLI-MT spells one class "contradictory" (the sample's rows have none: one is spelt so).
  copy = tmp_path / "xnli"
  shutil.copytree(folder, str(copy))
  train_file = copy / "multinli" / "multinli.train.zh.tsv"
  lines = train_file.read_text(encoding="utf-8").split("\n")
  lines[1] = lines[1].rsplit("\t", 1)[0] + "\tcontradictory"
  train_file.write_text("\n".join(lines), encoding="utf-8")
  assert get_processor("xnli", data_dir=str(copy)).get_examples("train")[0].label == (
      "contradiction")
  with pytest.raises(FlagError) as error:
    make_processor(parse_flags(["run_classifier.py", "--task_name=rte", "--data_dir=" + folder,
                                "--xnli_language=zh", "--output_dir=/tmp/x"]).data)
  assert str(error.value) == "--xnli_language=zh is for task xnli: drop it"
  # Each language's rows are records of their own: the same dev file read for de after zh
  # into one folder is not zh's cached records.
  from data.tokenization import FullTokenizer
  from conftest import TINY_VOCAB
  from pipeline.splits import prepare_splits
  from pipeline.task_extras import task_of
  for language, rows in (("zh", 6), ("de", 1), ("zh", 6)):
    c = parse_flags(["run_classifier.py", "--task_name=xnli", "--data_dir=" + folder,
                     "--xnli_language=" + language, "--output_dir=" + str(tmp_path / "run"),
                     "--vocab_file=" + TINY_VOCAB, "--max_seq_length=16", "--do_eval"])
    dev = prepare_splits(c, task_of(make_processor(c.data)), FullTokenizer(TINY_VOCAB, True),
                         TINY_VOCAB).dev
    assert dev.num_examples == rows, language
