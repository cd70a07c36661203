"""Processors: turn the files of one task into InputExamples.

Every processor reads by column name where the file has a header, so the GLUE
layouts, the original MRPC files and Kaggle's Jigsaw CSVs are all read by what
their columns are called rather than where they happen to sit.
"""

import collections
import csv
import logging
import os
import re

from data.errors import DataError
from data.table import delimiter_for, quoting_for, read_table
from spec.labels import MISSING_VALUES, LabelError, SoftTarget, build_spec

log = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")


class InputExample(object):
  """One row of input.

  guid: the id written next to its prediction (the file's id column, else the row number).
  label: the value its label spec parsed from the label cells (a class name, or a tuple
    of floats), or None for a row whose labels are not read (a predict file).
  extras: other columns carried through to the outputs (e.g. Jigsaw identity columns).
  """

  def __init__(self, guid, text_a, text_b=None, label=None, extras=None):
    self.guid = guid
    self.text_a = text_a
    self.text_b = text_b
    self.label = label
    self.extras = extras or {}

  def __repr__(self):
    return "InputExample(guid=%r, text_a=%r, text_b=%r, label=%r)" % (
        self.guid, self.text_a[:40], (self.text_b or "")[:40] or None, self.label)


class Columns(object):
  """Which columns of a table make up an example. Each is an index or None."""

  def __init__(self, text_a, text_b=None, labels=None, guid=None, extras=()):
    self.text_a = text_a
    self.text_b = text_b
    self.labels = labels  # the label columns' indices, or None: labels not read
    self.guid = guid
    self.extras = extras  # (name, index) pairs


class DataProcessor(object):
  """Base class. Subclasses set `name`, `labels`, `split_files` and implement `columns`.

  The label spec (spec/labels.py) says what a row's label cells mean; the head kind
  picks it: the task's default_head unless the user chose one of its heads.
  """

  name = None
  labels = None  # the class names, for a classification head
  weight_column = None  # a train column of per-row weights, read into extras
  heads = ("classification",)  # the head kinds this task's labels can train; first = default
  delimiter = "\t"
  quoting = csv.QUOTE_NONE  # GLUE files are unquoted TSV: a quote is just a character.
  has_header = True
  split_files = {}

  def __init__(self, data_dir=None, files=None, skip_malformed_rows=False, quoting="auto",
               head=None):
    if head is not None and head not in self.heads:
      raise ValueError("--head=%s cannot be used with task %s; its labels train: %s"
                       % (head, self.name, ", ".join(self.heads)))
    self.head = head
    self._label_spec = None
    self.data_dir = data_dir
    self.files = dict(files or {})
    self.skip_malformed_rows = skip_malformed_rows
    self.quoting_choice = quoting
    self.skipped = {}  # split -> {cause: rows skipped at the user's request}
    self.accounts = {}  # split -> what reading the file found (lines, records, skips)

  # -- files ---------------------------------------------------------------
  def file_for(self, split):
    """The path of a split's file: an explicit one, else the first known name in data_dir."""
    if self.files.get(split):
      return self.files[split]
    candidates = self.split_files.get(split, ())
    if not self.data_dir:
      raise DataError("<%s %s file>" % (self.name, split), "no file was given for the %s split" % split,
                      "pass --data_dir, or --%s_file" % _flag_for_split(split))
    for name in candidates:
      path = os.path.join(self.data_dir, name)
      if os.path.exists(path) or "://" in path:
        return path
    raise DataError(self.data_dir, "no %s file for task %s (looked for %s)"
                    % (split, self.name, ", ".join(candidates) or "nothing"),
                    "put one of those files in --data_dir, or pass --%s_file" % _flag_for_split(split))

  # -- examples ------------------------------------------------------------
  def get_examples(self, split):
    path = self.file_for(split)
    table = read_table(path, self.delimiter_of(path), self.has_header_for(split),
                       self.quoting_of(path))
    columns = self.columns(table, split)
    if self.weight_column is not None and split == "train":
      columns.extras = tuple(columns.extras) + (
          (str(self.weight_column),
           table.column_index(self.weight_column, "--sample_weight_column")),)
    examples = self._rows_to_examples(table, columns, split)
    if table.blank_lines:
      log.warning("%s: %d empty lines held no record and were passed over", path, table.blank_lines)
    if table.multi_line:
      log.warning("%s: %d records span several lines (quoted newlines), starting at lines %s%s",
                  path, len(table.multi_line),
                  ", ".join(str(line) for line, _ in table.multi_line[:5]),
                  ", ..." if len(table.multi_line) > 5 else "")
    skipped = self.skipped.get(split, {})
    log.info("%s: %s -> %d %s examples%s", path, table.accounting(), len(examples), split,
             "".join(", %d skipped (%s)" % (n, cause) for cause, n in sorted(skipped.items())))
    self.accounts[split] = {
        "lines": table.num_lines, "header": table.header is not None,
        "records": len(table.rows), "blank_lines": table.blank_lines,
        "multi_line_records": len(table.multi_line), "examples": len(examples),
        "skipped": dict(skipped)}
    return examples

  def delimiter_of(self, path):
    return self.delimiter

  def quoting_of(self, path):
    return self.quoting if self.quoting_choice == "auto" else quoting_for(path,
                                                                         self.quoting_choice)

  def has_header_for(self, split):
    return self.has_header

  def columns(self, table, split):
    raise NotImplementedError

  # -- labels --------------------------------------------------------------
  @property
  def head_kind(self):
    return self.head or self.default_head()

  def default_head(self):
    return self.heads[0]

  @property
  def label_columns(self):
    """The label columns, as the spec and the model card name them."""
    return (self.label_column,)

  @property
  def label_spec(self):
    """The spec of this task's labels with the chosen head (spec/labels.py)."""
    if self._label_spec is None:
      kind = self.head_kind
      self._label_spec = build_spec(kind, self.label_columns,
                                    self.labels if kind == "classification" else None)
    return self._label_spec

  def check_row(self, path, line, fields, columns):
    """A task's own checks of a row's other cells (DataError); none by default."""

  def label_cell(self, cell, index):
    """A task's own reading of one raw label cell (the index-th label column) before the
    spec parses it, e.g. RTE's 0/1 for its class names. Raises LabelError; the default
    passes the cell on."""
    return cell

  def parse_labels(self, cells, path, line, column_names):
    """The spec's value of a row's label cells. A missing value is a MissingLabel (which
    --skip_malformed_rows may skip); any other bad value is a DataError naming the column."""
    try:
      return self.label_spec.parse([self.label_cell(c, i) for i, c in enumerate(cells)])
    except LabelError as e:
      column = column_names[e.index]
      if e.missing:
        raise MissingLabel(path, e.problem, "%s, or pass --skip_malformed_rows to skip and "
                           "count such rows%s" % (e.fix, e.hint), line=line, column=column)
      raise DataError(path, "task %s: %s" % (self.name, e.problem), e.fix + e.hint,
                      line=line, column=column)

  def _rows_to_examples(self, table, columns, split):
    """The examples of a table's rows. A row that cannot make an example is an error naming
    its line, or, with skip_malformed_rows, a skip counted by cause. A predict file's labels
    are not read (columns gives them no label column): predicting needs none."""
    label_columns = columns.labels
    label_names = [_column_name(table, i) for i in label_columns or ()]
    needed = max(i for i in (columns.text_a, columns.text_b, columns.guid) +
                 tuple(label_columns or ()) if i is not None)
    width = len(table.header) if table.header else _usual_width(table)
    examples = []
    skipped = {}
    for row_number, (line, fields) in enumerate(table.rows):
      try:
        _check_row_width(table, line, fields, needed, width)
        label = None
        if label_columns is not None:
          label = self.parse_labels([fields[i] for i in label_columns], table.path, line,
                                    label_names)
      except MalformedRow as e:
        if not self.skip_malformed_rows:
          raise
        skipped[e.cause] = skipped.get(e.cause, 0) + 1
        continue
      self.check_row(table.path, line, fields, columns)
      guid = fields[columns.guid] if columns.guid is not None else str(row_number)
      extras = {name: fields[i] for name, i in columns.extras if i < len(fields)}
      text_b = fields[columns.text_b] if columns.text_b is not None else None
      examples.append(InputExample(guid, fields[columns.text_a], text_b, label, extras))
    if skipped:
      log.warning("%s: skipped %s (--skip_malformed_rows)", table.path, ", ".join(
          "%d rows with %s" % (n, cause) for cause, n in sorted(skipped.items())))
    self.skipped[split] = skipped
    return examples


class MalformedRow(DataError):
  """A row that cannot make an example; --skip_malformed_rows skips and counts it by cause."""
  cause = "malformed rows"


class MissingLabel(MalformedRow):
  cause = "a missing label"


class ShortRow(MalformedRow):
  cause = "too few fields"


class LongRow(MalformedRow):
  cause = "too many fields"


def _check_row_width(table, line, fields, needed, width):
  if len(fields) <= needed:
    raise ShortRow(table.path, "the row has %d fields but column %d is needed"
                   % (len(fields), needed),
                   "fix the row (a stray delimiter or quote?), or pass "
                   "--skip_malformed_rows to skip and count such rows", line=line)
  if len(fields) > width:
    raise LongRow(table.path, "the row has %d fields but %s %d: a delimiter (%r) inside a "
                  "text that is not quoted would cut the text there"
                  % (len(fields), "the header has" if table.header else "most rows have",
                     width, _delimiter_name(table)),
                  "quote the text (\"...\"; a .tsv/.txt file also needs --quoting=csv), remove "
                  "the extra delimiter, or pass "
                  "--skip_malformed_rows to skip and count such rows", line=line)


def _usual_width(table):
  """The number of fields most rows of a headerless table have."""
  counts = collections.Counter(len(fields) for _, fields in table.rows)
  return counts.most_common(1)[0][0]


def _delimiter_name(table):
  return "tab" if table.delimiter == "\t" else table.delimiter


def _flag_for_split(split):
  return {"train": "train", "dev": "eval", "test": "predict"}[split]


def _column_name(table, index):
  return table.header[index] if table.header else index


# --- GLUE ---------------------------------------------------------------------


class HeaderProcessor(DataProcessor):
  """A task whose files name their columns in a header; subclasses only declare them."""
  text_a_column = None
  text_b_column = None
  label_column = None
  id_columns = ("index",)  # the first one present names each row
  label_hint = None  # how the user picks the label column, when they can

  def columns(self, table, split):
    ids = [table.header.index(c) for c in self.id_columns if c in table.header]
    return Columns(
        text_a=table.column_index(self.text_a_column, "the %s column" % self.text_a_column),
        text_b=(table.column_index(self.text_b_column, "the %s column" % self.text_b_column)
                if self.text_b_column else None),
        # A predict file's labels are not read, so it needs no label column.
        labels=(tuple(table.column_index(c, self.label_hint or "the %s column" % c)
                      for c in self.label_columns) if split != "test" else None),
        guid=ids[0] if ids else None)


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
    first = table.rows[0][1]
    labels = (1,) if split != "test" else None  # predict files' labels are not read
    if [f.strip() for f in first[:2]] == ["index", "sentence"]:
      if split != "test":
        raise DataError(table.path, "this is CoLA's unlabelled test layout (index, sentence)",
                        "use it as the predict file, and give a labelled file for %s"
                        % {"train": "training", "dev": "evaluation"}[split], line=1)
      table.header = [f.strip() for f in first]
      table.rows = table.rows[1:]
      return Columns(text_a=1, guid=0)
    if len(first) >= 4:
      return Columns(text_a=3, labels=labels)
    if len(first) == 2:
      return Columns(text_a=0, labels=labels)
    raise DataError(table.path, "CoLA rows have 2 or 4 columns but this one has %d" % len(first),
                    "give GLUE's CoLA files", line=table.rows[0][0])


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


# --- Jigsaw -------------------------------------------------------------------

JIGSAW_TOXIC_LABEL_COLUMNS = ("toxic", "severe_toxic", "obscene", "threat", "insult",
                              "identity_hate")
JIGSAW_IDENTITY_COLUMNS = (
    "male", "female", "transgender", "other_gender", "heterosexual",
    "homosexual_gay_or_lesbian", "bisexual", "other_sexual_orientation", "christian",
    "jewish", "muslim", "hindu", "buddhist", "atheist", "other_religion", "black", "white",
    "asian", "latino", "other_race_or_ethnicity", "physical_disability",
    "intellectual_or_learning_disability", "psychiatric_or_mental_illness",
    "other_disability")


class JigsawProcessor(HeaderProcessor):
  delimiter = ","
  quoting = csv.QUOTE_MINIMAL  # Kaggle CSVs quote comments that hold commas and newlines.
  split_files = {"train": ("train.csv",), "dev": ("valid.csv", "dev.csv"),
                 "test": ("test.csv",)}
  text_a_column = "comment_text"
  id_columns = ("id",)


class JigsawToxicProcessor(JigsawProcessor):
  """Kaggle Toxic Comment Classification: one of the six 0/1 label columns (a
  classification head, 0/1), or several at once (a multi-label head, one output each)."""
  name = "jigsaw_toxic"
  labels = ["0", "1"]
  heads = ("classification", "multi_label", "soft_target")
  label_hint = "--label_column"

  def __init__(self, label_columns=("toxic",), **kwargs):
    super(JigsawToxicProcessor, self).__init__(**kwargs)
    self._label_columns = tuple(label_columns)

  @property
  def label_columns(self):
    return self._label_columns

  def default_head(self):
    return "classification" if len(self._label_columns) == 1 else "multi_label"


JIGSAW_BIAS_AUXILIARY_COLUMNS = ("severe_toxicity", "obscene", "identity_attack", "insult",
                                 "threat", "sexual_explicit")


class JigsawBiasProcessor(JigsawProcessor):
  """Kaggle Unintended Bias: the fraction of raters who found a comment toxic (`target`),
  learnt as a soft target; more soft-target columns (e.g. the auxiliary toxicity
  subtypes) may follow it. The classification head learns target >= 0.5 instead. The
  identity columns are carried through to the outputs and the bias metric."""
  name = "jigsaw_bias"
  labels = ["0", "1"]
  heads = ("soft_target", "classification")
  label_hint = "--label_column"

  def __init__(self, label_columns=("target",), auxiliary_targets=False, **kwargs):
    super(JigsawBiasProcessor, self).__init__(**kwargs)
    self._label_columns = tuple(label_columns)
    self.auxiliary_targets = auxiliary_targets
    if self.head_kind == "classification" and (self._label_columns != ("target",) or
                                               auxiliary_targets):
      raise ValueError("--head=classification on task jigsaw_bias learns target >= 0.5 and "
                       "reads only the target column; drop --label_column and "
                       "--auxiliary_targets")
    if self._label_columns[0] != "target":
      raise ValueError("task jigsaw_bias: the first label column must be target (the bias "
                       "metric scores it), not %s; list other columns after it, e.g. "
                       "--label_column=target,%s" % (self._label_columns[0],
                                                     self._label_columns[0]))

  @property
  def label_columns(self):
    if self.auxiliary_targets and not hasattr(self, "_with_auxiliary"):
      self._with_auxiliary = self._label_columns + self._auxiliary_columns()
    return self._with_auxiliary if self.auxiliary_targets else self._label_columns

  def _auxiliary_columns(self):
    """The auxiliary toxicity columns the train file has, filled on every row; those
    missing or with empty cells are left out, and the log says which."""
    path = self.file_for("train")
    table = read_table(path, self.delimiter, True, self.quoting_of(path))
    found, left_out = [], []
    for name in JIGSAW_BIAS_AUXILIARY_COLUMNS:
      if name in self._label_columns:
        continue
      if name not in table.header:
        left_out.append("%s (no such column)" % name)
        continue
      index = table.header.index(name)
      empty = sum(1 for _, fields in table.rows
                  if len(fields) <= index or fields[index].strip() in MISSING_VALUES)
      if empty:
        left_out.append("%s (%d empty cells)" % (name, empty))
      else:
        found.append(name)
    if not found:
      raise DataError(path, "--auxiliary_targets found no auxiliary column filled on every "
                      "row (%s)" % ", ".join(left_out),
                      "fill one of %s, or drop --auxiliary_targets"
                      % ", ".join(JIGSAW_BIAS_AUXILIARY_COLUMNS))
    log.info("--auxiliary_targets: adding soft-target outputs for %s", ", ".join(found))
    if left_out:
      log.warning("--auxiliary_targets: left out %s", ", ".join(left_out))
    return tuple(found)

  def columns(self, table, split):
    columns = super(JigsawBiasProcessor, self).columns(table, split)
    columns.extras = tuple((name, table.header.index(name)) for name in JIGSAW_IDENTITY_COLUMNS
                           if name in table.header)
    return columns

  def check_row(self, path, line, fields, columns):
    """Identity cells are fractions in [0, 1], or empty where the row was not annotated
    (the bias metric reads them)."""
    for name, index in columns.extras:
      cell = fields[index].strip() if index < len(fields) else ""
      if not cell:
        continue
      try:
        value = float(cell)
      except ValueError:
        value = float("nan")
      if not 0.0 <= value <= 1.0:
        raise DataError(path, "identity value %r is not a fraction in [0, 1]" % cell,
                        "give the fraction of raters who saw the identity mentioned, or "
                        "leave the cell empty", line=line, column=name)

  def label_cell(self, cell, index):
    if self.head_kind != "classification":
      return cell
    (target,) = _TARGET.parse([cell])  # the classification head reads target alone
    return "1" if target >= 0.5 else "0"


_TARGET = SoftTarget(["target"])  # how a Jigsaw target cell is read: a fraction in [0, 1]


# --- Any CSV/TSV --------------------------------------------------------------


class CsvProcessor(DataProcessor):
  """Any CSV or TSV: columns by name (with a header) or by 0-based position. Quotes enclose
  fields in .csv files but are plain characters in .tsv/.txt files unless quoting says
  otherwise."""
  name = "csv"
  heads = ("classification", "multi_label", "soft_target", "regression")
  split_files = {"train": ("train.csv", "train.tsv"),
                 "dev": ("dev.csv", "dev.tsv", "valid.csv", "valid.tsv"),
                 "test": ("test.csv", "test.tsv")}

  def __init__(self, text_column, label_columns, text_b_column=None, id_column=None,
               has_header=True, delimiter=None, labels=None, split_headers=None, **kwargs):
    super(CsvProcessor, self).__init__(**kwargs)
    self.text_column = text_column
    self.text_b_column = text_b_column
    self._label_columns = tuple(label_columns or ())
    self.label_column = self._label_columns[0] if self._label_columns else None
    self.id_column = id_column
    self.has_header = has_header
    # {split: True/False} where one file's layout differs from the others'.
    self.split_headers = {k: v for k, v in (split_headers or {}).items() if v is not None}
    self.explicit_delimiter = delimiter
    self._labels = list(labels) if labels else None
    if self._labels and self.head_kind != "classification":
      raise ValueError("--labels lists the classes of a classification head; a %s head's "
                       "outputs are its label columns (%s): drop --labels"
                       % (self.head_kind, ", ".join(self._label_columns)))

  def delimiter_of(self, path):
    return delimiter_for(path, self.explicit_delimiter)

  def quoting_of(self, path):
    return quoting_for(path, self.quoting_choice)

  def has_header_for(self, split):
    return self.split_headers.get(split, self.has_header)

  @property
  def label_columns(self):
    # A predict-only run reads no label column; its head's outputs still need a name.
    return self._label_columns or ("label",)

  def default_head(self):
    return "classification" if len(self._label_columns) <= 1 else "multi_label"

  @property
  def labels(self):
    """The classes of a classification head: --labels, else found in the train file."""
    if self.head_kind != "classification":
      return None
    if self._labels is None:
      self._labels = self._labels_from_train_file()
    return self._labels

  def _labels_from_train_file(self):
    """The sorted distinct labels of the train file (numerically when they are numbers)."""
    path = self.file_for("train")
    table = read_table(path, self.delimiter_of(path), self.has_header_for("train"),
                       self.quoting_of(path))
    index = table.column_index(self.label_column, "--label_column")
    self._check_no_header_as_data(table, index, "train")
    self._check_header_is_not_data(table, index, "train")
    # Missing values are no class: their rows are errors (or counted skips) when read.
    values = set(fields[index].strip() for _, fields in table.rows if len(fields) > index) - \
        MISSING_VALUES
    try:
      found = sorted(values, key=float)
    except ValueError:
      found = sorted(values)
    if len(found) < 2:
      raise DataError(path, "column %s holds %s, but a classifier needs at least two classes"
                      % (self.label_column, "only the label %r" % found[0] if found else
                         "no label"),
                      "check --label_column, or list every class with --labels (e.g. "
                      "--labels=0,1)", column=self.label_column)
    log.info("labels found in %s: %s (pass --labels to fix the list and its order)",
             path, ", ".join(found))
    return found

  def _check_no_header_as_data(self, table, label_index, split):
    """A header read as data (a headered file with --nohas_header) would make its label
    cell, e.g. 'label', a class. Its signs: the first row's label appears on no other row,
    and both that label and the first row's text look like column names."""
    if table.header is not None or len(table.rows) < 2 or self.split_headers.get(split) is False:
      return  # (a header flag given for this file says there is none: no second guessing)
    first = table.rows[0][1]
    text_index = table.column_index(self.text_column, "--text_column")
    if max(label_index, text_index) >= len(first):
      return
    label, text = first[label_index].strip(), first[text_index].strip()
    others = set(fields[label_index].strip() for _, fields in table.rows[1:]
                 if len(fields) > label_index)
    if label not in others and _COLUMN_NAME.match(label) and _COLUMN_NAME.match(text):
      raise DataError(table.path, "the first line looks like a header read as data: its label %r "
                      "appears on no other line, and its text is %r" % (label, text),
                      "drop --nohas_header or pass --%s (the file has a header; then name "
                      "the columns, e.g. --text_column=%s --label_column=%s), remove the "
                      "line, or pass --no%s to confirm the file has no header"
                      % (_header_flag(split), text, label, _header_flag(split)),
                      line=table.rows[0][0])

  def _check_header_is_not_data(self, table, label_index, split):
    """With columns given by position, a headerless file read with a header (the default)
    would lose its first row. Its sign: the 'header' has a label cell that is a label of the
    other rows, or a number."""
    if table.header is None or not str(self.label_column).isdigit():
      return
    if label_index >= len(table.header):
      return
    cell = table.header[label_index]
    others = set(fields[label_index].strip() for _, fields in table.rows
                 if len(fields) > label_index)
    if cell in others or _is_number(cell):
      raise DataError(table.path, "the first line is read as a header, but it looks like data: "
                      "its label %r is %s" % (cell, "a label of other lines" if cell in others
                                              else "a number"),
                      "pass --nohas_header (no file has a header) or --no%s (this file "
                      "has none), or add a header line" % _header_flag(split), line=1)

  def columns(self, table, split):
    labels = None
    if self._label_columns and split != "test":  # predict files' labels: unread
      labels = tuple(table.column_index(c, "--label_column") for c in self._label_columns)
      self._check_no_header_as_data(table, labels[0], split)
      self._check_header_is_not_data(table, labels[0], split)
    if table.header is not None and str(self.text_column).isdigit():
      # Columns by position and a header: say which line was taken as the header, so a
      # headerless file (e.g. a predict file without labels) cannot lose a row unseen.
      log.info("%s: line 1 read as the header (%s); pass --no%s if it is data", table.path,
               ", ".join(table.header[:4]) + (", ..." if len(table.header) > 4 else ""),
               _header_flag(split))
    return Columns(
        text_a=table.column_index(self.text_column, "--text_column"),
        text_b=(table.column_index(self.text_b_column, "--text_b_column")
                if self.text_b_column is not None else None),
        labels=labels,
        guid=(table.column_index(self.id_column, "--id_column")
              if self.id_column is not None else None))


def _is_number(text):
  try:
    float(text)
    return True
  except ValueError:
    return False


def _header_flag(split):
  """The flag that says whether a split's file has a header."""
  return "%s_has_header" % _flag_for_split(split)


# What a column name looks like: a short identifier ('comment_text', 'label', '#1 ID' aside).
_COLUMN_NAME = re.compile(r"^[A-Za-z_#][A-Za-z0-9_#.-]{0,39}$")

GLUE_PROCESSORS = {
    "sst-2": Sst2Processor, "cola": ColaProcessor, "mrpc": MrpcProcessor,
    "rte": RteProcessor, "mnli": MnliProcessor, "mnli-mm": MnliMismatchedProcessor,
    "qqp": QqpProcessor, "sts-b": StsbProcessor,
}
TASK_NAMES = tuple(sorted(GLUE_PROCESSORS)) + ("jigsaw_toxic", "jigsaw_bias", "csv")
# Other spellings that name the same task.
TASK_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "mnli_mm": "mnli-mm"}


def canonical_task_name(task_name):
  """The task's name in TASK_NAMES (case-insensitive, aliases resolved), or None if unknown."""
  name = task_name.lower()
  name = TASK_ALIASES.get(name, name)
  return name if name in TASK_NAMES else None


def get_processor(task_name, data_dir=None, files=None, skip_malformed_rows=False,
                  text_column=None, text_b_column=None, label_columns=None, id_column=None,
                  has_header=True, delimiter=None, labels=None, quoting="auto",
                  split_headers=None, head=None, auxiliary_targets=False,
                  weight_column=None):
  """Builds the processor for a task name (case-insensitive; TASK_ALIASES also accepted).
  label_columns is a list of column names or positions (a string is one column); head
  is a head kind of spec/labels.py, None for the task's default. auxiliary_targets
  (jigsaw_bias) adds the auxiliary toxicity columns as soft targets. weight_column names
  a train column of per-row weights (read into each example's extras). ValueError for a
  head or label columns the task cannot take."""
  name = canonical_task_name(task_name)
  if isinstance(label_columns, str):
    label_columns = [label_columns]
  if auxiliary_targets and name != "jigsaw_bias":
    raise ValueError("--auxiliary_targets is for task jigsaw_bias; list extra label "
                     "columns with --label_column instead")
  common = dict(data_dir=data_dir, files=files, skip_malformed_rows=skip_malformed_rows,
                quoting=quoting, head=head)
  if name in GLUE_PROCESSORS:
    processor = GLUE_PROCESSORS[name](**common)
  elif name == "jigsaw_toxic":
    processor = JigsawToxicProcessor(label_columns=label_columns or ("toxic",), **common)
  elif name == "jigsaw_bias":
    processor = JigsawBiasProcessor(label_columns=label_columns or ("target",),
                                    auxiliary_targets=auxiliary_targets, **common)
  elif name == "csv":
    processor = CsvProcessor(text_column=text_column, text_b_column=text_b_column,
                             label_columns=label_columns, id_column=id_column,
                             has_header=has_header, split_headers=split_headers,
                             delimiter=delimiter, labels=labels, **common)
  else:
    raise ValueError("unknown task %r; known tasks: %s" % (task_name, ", ".join(TASK_NAMES)))
  processor.weight_column = weight_column
  return processor
