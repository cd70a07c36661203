"""The GLUE tasks: SST-2, CoLA, MRPC, RTE, MNLI (matched and mismatched), QQP, STS-B."""

from data.errors import DataError
from data.examples import Columns, DataProcessor, HeaderProcessor
from spec.labels import LabelError

GLUE_FILES = {"train": ("train.tsv",), "dev": ("dev.tsv",), "test": ("test.tsv",)}


class Sst2Processor(HeaderProcessor):
  name = "sst-2"
  labels = ["0", "1"]
  split_files = GLUE_FILES
  text_a_column, label_column = "sentence", "label"


class ColaProcessor(DataProcessor):
  """CoLA: GLUE's 4-column headerless train/dev, a 2-column `sentence<TAB>label`
  copy, or the test file with an `index<TAB>sentence` header."""
  name = "cola"
  labels = ["0", "1"]
  label_column = "label"
  has_header = False
  split_files = GLUE_FILES

  def columns(self, table, split):
    first = table.first_fields()
    labels = (1,) if split != "test" else None  # predict files' labels are not read
    names = [f.strip().lstrip(u"\ufeff").lower() for f in first]
    if _is_cola_header(names):  # (GLUE's test file, or another export's header)
      if "label" not in names and split != "test":
        raise DataError(table.path, "this is CoLA's unlabelled test layout (%s)"
                        % ", ".join(names), "use it as the predict file, and give a "
                        "labelled file for %s" % {"train": "training",
                                                  "dev": "evaluation"}[split], line=1)
      table.take_header()
      ids = [i for i, name in enumerate(names) if name in COLA_ID_NAMES]
      return Columns(text_a=names.index("sentence"), guid=ids[0] if ids else None,
                     labels=(names.index("label"),) if labels and "label" in names else None)
    if len(first) >= 4:
      return Columns(text_a=3, labels=labels)
    if len(first) == 2:
      return Columns(text_a=0, labels=labels)
    raise DataError(table.path, "CoLA rows have 2 or 4 columns but this one has %d" % len(first),
                    "give GLUE's CoLA files", line=table.first_records(1)[0][0])


# The names a CoLA file's header may give its columns (GLUE's test file: index, sentence;
# other exports: idx, or a label).
COLA_ID_NAMES = ("index", "idx", "id")


def _is_cola_header(names):
  """Whether a CoLA file's first row names its columns: a sentence column and only known
  names, each once. (A data row's sentence is never the word 'sentence' alone beside
  them.)"""
  return ("sentence" in names and len(set(names)) == len(names) and
          set(names) <= set(COLA_ID_NAMES + ("sentence", "label")))


class MrpcProcessor(HeaderProcessor):
  """MRPC: GLUE's train/dev/test.tsv or Microsoft's original msr_paraphrase_*.txt."""
  name = "mrpc"
  labels = ["0", "1"]
  split_files = {"train": ("train.tsv", "msr_paraphrase_train.txt"),
                 "dev": ("dev.tsv", "msr_paraphrase_test.txt"),
                 "test": ("test.tsv", "msr_paraphrase_test.txt")}
  text_a_column, text_b_column, label_column = "#1 String", "#2 String", "Quality"


class RteProcessor(HeaderProcessor):
  """RTE with text labels, or 0/1 labels (0 = entailment); -1 marks an unlabelled row."""
  name = "rte"
  labels = ["entailment", "not_entailment"]
  split_files = GLUE_FILES
  text_a_column, text_b_column, label_column = "sentence1", "sentence2", "label"
  id_columns = ("index", "idx")

  def label_cell(self, cell, index):
    value = cell.strip()
    if value == "-1":  # GLUE's mark for an unlabelled row: no class to train or score on
      raise LabelError("the label is -1 (GLUE's mark for an unlabelled row)",
                       "use this file for predicting", index=index, missing=True)
    if value in ("0", "1"):
      return self.labels[int(value)]
    return cell


class MnliProcessor(HeaderProcessor):
  name = "mnli"
  labels = ["contradiction", "entailment", "neutral"]
  split_files = {"train": ("train.tsv",), "dev": ("dev_matched.tsv",),
                 "test": ("test_matched.tsv",)}
  text_a_column, text_b_column, label_column = "sentence1", "sentence2", "gold_label"


class MnliMismatchedProcessor(MnliProcessor):
  name = "mnli-mm"
  split_files = {"train": ("train.tsv",), "dev": ("dev_mismatched.tsv",),
                 "test": ("test_mismatched.tsv",)}


class QqpProcessor(HeaderProcessor):
  name = "qqp"
  labels = ["0", "1"]
  split_files = GLUE_FILES
  text_a_column, text_b_column, label_column = "question1", "question2", "is_duplicate"
  id_columns = ("id",)


class StsbProcessor(HeaderProcessor):
  """STS-B: a similarity score in [0, 5], learnt by regression."""
  name = "sts-b"
  labels = None
  heads = ("regression",)
  split_files = GLUE_FILES
  text_a_column, text_b_column, label_column = "sentence1", "sentence2", "score"


GLUE_PROCESSORS = {
    "sst-2": Sst2Processor, "cola": ColaProcessor, "mrpc": MrpcProcessor,
    "rte": RteProcessor, "mnli": MnliProcessor, "mnli-mm": MnliMismatchedProcessor,
    "qqp": QqpProcessor, "sts-b": StsbProcessor,
}
