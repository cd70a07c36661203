"""The GLUE tasks: SST-2, CoLA, MRPC, RTE, MNLI (matched and mismatched), QQP, STS-B,
QNLI, WNLI and the diagnostic set AX; and XNLI."""

import dataclasses
import os

from data.data_error import DataError
from data.examples import Columns, DataProcessor, HeaderProcessor
from spec.run_errors import FlagError
from spec.labels import LabelError
from spec.task_names import XNLI_DEFAULT_LANGUAGE

GLUE_FILES = {"train": ("train.tsv",), "dev": ("dev.tsv",), "test": ("test.tsv",)}


class Sst2Processor(HeaderProcessor):
  name = "sst-2"
  aliases = ("sst2",)
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
  aliases = ("mnli_mm",)
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
  aliases = ("stsb",)
  labels = None
  heads = ("regression",)
  split_files = GLUE_FILES
  text_a_column, text_b_column, label_column = "sentence1", "sentence2", "score"


class QnliProcessor(HeaderProcessor):
  """QNLI: does the sentence answer the question (SQuAD's questions and sentences)."""
  name = "qnli"
  labels = ["entailment", "not_entailment"]
  split_files = GLUE_FILES
  text_a_column, text_b_column, label_column = "question", "sentence", "label"


class WnliProcessor(HeaderProcessor):
  """WNLI: the Winograd schemas as sentence pairs (1 = the second follows from the first)."""
  name = "wnli"
  labels = ["0", "1"]
  split_files = GLUE_FILES
  text_a_column, text_b_column, label_column = "sentence1", "sentence2", "label"


class AxProcessor(MnliProcessor):
  """AX, GLUE's diagnostic set: unlabelled pairs (AX.tsv) that a model trained on MNLI
  predicts. Its train and dev files are MNLI's, so --task_name=ax trains and evaluates
  the MNLI model from MNLI's folder holding AX.tsv too, or predicts AX.tsv with a model
  trained on MNLI (--output_dir of that run, --predict_file=AX.tsv)."""
  name = "ax"
  split_files = {"train": ("train.tsv",), "dev": ("dev_matched.tsv",),
                 "test": ("AX.tsv", "diagnostic.tsv")}


class XnliProcessor(HeaderProcessor):
  """XNLI, as Google's run_classifier reads it: MultiNLI's training pairs machine-translated
  into one language (XNLI-MT's multinli/multinli.train.<language>.tsv: premise, hypo,
  label), and that language's rows of XNLI's dev and test files (xnli.dev.tsv,
  xnli.test.tsv: every language in one file, named by its language column; the others'
  rows are counted and left aside). data_dir holds both: XNLI-1.0's files beside
  XNLI-MT-1.0's multinli/ folder."""
  name = "xnli"
  labels = ["contradiction", "entailment", "neutral"]
  id_columns = ("pairID",)
  text_a_column, text_b_column, label_column = "premise", "hypo", "label"

  @classmethod
  def settings_of(cls, options):
    settings = super(XnliProcessor, cls).settings_of(
        dataclasses.replace(options, xnli_language=None))
    return dict(settings, language=options.xnli_language or XNLI_DEFAULT_LANGUAGE)

  def __init__(self, language=XNLI_DEFAULT_LANGUAGE, **kwargs):
    super(XnliProcessor, self).__init__(**kwargs)
    if "dev" in self.row_ranges:
      raise FlagError("--eval_rows cannot choose rows of xnli.dev.tsv, which holds every "
                      "language's rows (--xnli_language=%s chooses those read): drop "
                      "--eval_rows" % language)
    self.language = language
    self.split_files = {
        "train": (os.path.join("multinli", "multinli.train.%s.tsv" % language),),
        "dev": ("xnli.dev.tsv",), "test": ("xnli.test.tsv",)}

  def columns(self, table, split):
    # The translated training file names its columns premise, hypo, label; XNLI's own
    # files sentence1, sentence2, gold_label, with each row's language.
    translated = "premise" in table.header
    text_a, text_b, label = (("premise", "hypo", "label") if translated else
                             ("sentence1", "sentence2", "gold_label"))

    def index(name):
      return table.column_index(name, "the %s column" % name)
    ids = [index(name) for name in self.id_columns if name in table.header]
    columns = Columns(text_a=index(text_a), text_b=index(text_b),
                      labels=(index(label),) if split != "test" else None,
                      guid=ids[0] if ids else None)
    columns.language = None if translated else index("language")
    return columns

  def row_selection(self):
    return {"language": self.language}

  def left_aside(self, fields, columns):
    if columns.language is not None and fields[columns.language] != self.language:
      return "rows of other languages than --xnli_language=%s" % self.language
    return None

  def label_cell(self, cell, index):
    # XNLI-MT's training files spell one class "contradictory", XNLI's "contradiction".
    return "contradiction" if cell.strip() == "contradictory" else cell

