"""Examples and the processors that read them: a task's files become InputExamples.

Every processor reads by column name where the file has a header, so the GLUE
layouts, the original MRPC files and Kaggle's Jigsaw CSVs are all read by what
their columns are called rather than where they happen to sit. The tasks themselves are
in data/tasks/; data/processors.py finds them by name.
"""

import collections
import csv
import logging
import os

from data.data_error import DataError
from data.features import InputExample
from data.record_format import check_float32
from data.row_checks import MalformedRow, MissingLabel, check_row_width, check_usual_width
from data.row_ranges import check_range_read, in_range, range_option
from data.file_lists import expand_files
from data.table import Table, quoting_for, refuse_bom_cell, total_account
from data.weights import read_weight
from spec.run_errors import FlagError
from spec.heads import SPECS, build_spec
from spec.labels import LabelError
from spec.rows import row_ranges_of


log = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")


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

  name = None  # the task's name (lower case); None for a base class that is no task
  aliases = ()  # other spellings of the name
  labels = None  # the class names, for a classification head
  weight_column = None  # a train column of per-row weights, read into extras
  heads = ("classification",)  # the head kinds this task's labels can train; first = default
  delimiter = "\t"
  quoting = csv.QUOTE_NONE  # GLUE files are unquoted TSV: a quote is just a character.
  has_header = True
  split_files = {}

  def __init__(self, data_dir=None, files=None, skip_malformed_rows=False, quoting="auto",
               head=None, row_ranges=None):
    if head is not None and head not in self.heads:
      raise FlagError("--head=%s cannot be used with task %s; its labels train: %s"
                      % (head, self.name, ", ".join(self.heads)))
    self.head = head
    self._label_spec = None
    self.data_dir = data_dir
    self.files = dict(files or {})
    self.skip_malformed_rows = skip_malformed_rows
    self.row_ranges = dict(row_ranges or {})  # split -> the RowRange of its rows read
    self.quoting_choice = quoting
    self.skipped = {}  # split -> {cause: rows skipped at the user's request}
    self.rows_left_aside = {}  # split -> {what: rows the options leave out (left_aside)}
    self.accounts = {}  # split -> what reading the file found (lines, records, skips)
    self.read_sha256 = {}  # split -> the sha256 of each of its read_files' bytes, as read
    # The model card the classes came from, when they are a trained model's rather than
    # this run's (--labels, the task's, or the train file's): a row with another label
    # then needs another model, not only a corrected row.
    self.classes_from = None

  # Which of the run's label options the task reads: --label_column, and --labels (the
  # classes of its label column).
  takes_label_column = False
  takes_class_list = False
  # Whether the label columns' names say what the outputs mean (a Jigsaw column such as
  # toxic or insult), or only where a file keeps the labels (csv: its layout).
  label_columns_name_outputs = True

  text_b_column = None  # the column of each example's second text, for a task of pairs

  @property
  def reads_pairs(self):
    """Whether the task's examples are pairs of texts."""
    return self.text_b_column is not None

  @classmethod
  def required_options(cls, needs_labels):
    """The options (DataOptions' names) this task cannot run without."""
    return ()

  @classmethod
  def settings_of(cls, options):
    """The constructor's settings from the run's DataOptions (spec/options.py): those every
    task reads. A task that reads more options adds its own; one it does not read is
    left alone, or refused where a user would expect it to do something."""
    if options.auxiliary_targets:
      raise FlagError("--auxiliary_targets is for task jigsaw_bias; list extra label "
                      "columns with --label_column instead")
    if options.xnli_language is not None:
      raise FlagError("--xnli_language=%s is for task xnli: drop it" % options.xnli_language)
    return dict(data_dir=options.data_dir, files=options.files(),
                skip_malformed_rows=options.skip_malformed_rows, quoting=options.quoting,
                head=None if options.head == "auto" else options.head,
                row_ranges=row_ranges_of(options))

  # -- files ---------------------------------------------------------------
  def file_for(self, split):
    """The path of a split's file: an explicit one, else the first known name in data_dir."""
    if self.files.get(split):
      return self.files[split]
    candidates = self.split_files.get(split, ())
    if not self.data_dir:
      raise DataError("<%s %s file>" % (self.name, split), "no file was given for the %s split" % split,
                      "pass --data_dir, or --%s_file" % flag_for_split(split))
    for name in candidates:
      path = os.path.join(self.data_dir, name)
      if os.path.exists(path) or "://" in path:
        return path
    raise DataError(self.data_dir, "no %s file for task %s (looked for %s)"
                    % (split, self.name, ", ".join(candidates) or "nothing"),
                    "put one of those files in --data_dir, or pass --%s_file" % flag_for_split(split))

  # -- examples ------------------------------------------------------------
  def get_examples(self, split):
    """Every example of a split's file, as a list (see iter_examples)."""
    return list(self.iter_examples(split))

  def files_of(self, split):
    """The paths of a split's files: one, or several read as one split (a comma-separated
    list or glob patterns; data/table.expand_files)."""
    return expand_files(self.file_for(split))

  def read_files(self, split):
    """Every file whose bytes a read of the split takes, in the order of the digests
    its tables give (Table.digests): what names its cached records and what a second
    read is checked against. A split's files themselves here; a task whose labels sit in
    a file of their own beside each text file adds it."""
    return self.files_of(split)

  def iter_examples(self, split):
    """The examples of a split's files, made as their rows are read: a file is never held
    whole. The log's account of each file, and self.accounts[split], follow its last
    row; rows are numbered on across files (the ids of files without an id column)."""
    paths = self.files_of(split)
    skipped = self.skipped[split] = {}
    aside = self.rows_left_aside[split] = {}
    digests = self.read_sha256[split] = []
    accounts, first_row = [], 0
    for path in paths:
      table = self.open_table(path, split)
      columns = self.columns(table, split)
      if self.weight_column is not None and split == "train":
        columns.extras = tuple(columns.extras) + (
            (str(self.weight_column),
             table.column_index(self.weight_column, "--sample_weight_column")),)
      file_skips, file_aside = {}, {}
      count = 0
      for example in self._rows_to_examples(table, columns, split, first_row, file_skips,
                                            file_aside):
        count += 1
        yield example
      first_row += table.records
      digests.extend(table.digests())  # (of the bytes read: the whole file)
      for counts, file_counts in ((skipped, file_skips), (aside, file_aside)):
        for cause, n in file_counts.items():
          counts[cause] = counts.get(cause, 0) + n
      accounts.append(table.account(split, count, file_skips, file_aside))
    if split in self.row_ranges:
      check_range_read(self.file_for(split), flag_for_split(split), self.row_ranges[split],
                       first_row)
    total = total_account(accounts)
    if total["records"] and not total["examples"]:  # (a run on no rows would train, score
      causes = ", ".join(["%d skipped (%s)" % (n, cause)  # or predict nothing)
                          for cause, n in sorted(skipped.items())] +
                         ["%d %s left aside" % (n, what) for what, n in sorted(aside.items())])
      if aside:  # (the options chose no row of the file)
        raise DataError(self.file_for(split), "every record was skipped or left aside (%s): "
                        "no rows are left to read" % causes, "correct the rows, or the "
                        "options that read them and choose which to keep (the log names "
                        "each cause)")
      raise DataError(self.file_for(split), "every record was skipped (%s): no rows are "
                      "left to read" % causes, "correct the rows, or the column and label "
                      "options that read them (the log names each cause)")
    if len(accounts) > 1:
      log.info("%s: %d files, %d records -> %d %s examples", self.file_for(split),
               len(accounts), total["records"], total["examples"], split)
      total["files"] = accounts
    self.accounts[split] = total

  def rows_option(self, split):
    """The --*_rows option of a split's range, as given back to the user."""
    return range_option(flag_for_split(split), self.row_ranges[split])

  def open_table(self, path, split):
    """The Table of a split's file, its records read as they are asked for."""
    return Table(path, self.delimiter_of(path), self.has_header_for(split),
                 self.quoting_of(path))

  def delimiter_of(self, path):
    return self.delimiter

  def quoting_of(self, path):
    return self.quoting if self.quoting_choice == "auto" else quoting_for(path,
                                                                         self.quoting_choice)

  def has_header_for(self, split):
    return self.has_header

  def columns(self, table, split):
    raise NotImplementedError

  def carried_columns(self, split):
    """The names of the columns a split's predictions carry through (its examples'
    extras), known before its rows are read: none here."""
    return ()

  def left_aside(self, fields, columns):
    """What makes a row one the run leaves out (a task whose files hold rows of several
    kinds, such as XNLI's languages), as a count's description, or None to read it."""
    return None

  def row_selection(self):
    """The settings left_aside keeps rows by ({} when it keeps all): part of what names a
    split's cached records, since the same file gives other rows under other settings."""
    return {}

  # -- labels --------------------------------------------------------------
  @property
  def head_kind(self):
    return self.head or self.default_head()

  @property
  def head_has_classes(self):
    """Whether the chosen head's outputs are the classes of one label column."""
    return SPECS[self.head_kind].has_classes

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
                                    self.labels if SPECS[kind].has_classes else None)
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
    for cell, column in zip(cells, column_names):
      refuse_bom_cell(path, line, cell, column)
    try:
      label = self.label_spec.parse([self.label_cell(c, i) for i, c in enumerate(cells)])
    except LabelError as e:
      column = column_names[e.index]
      if e.missing:
        raise MissingLabel(path, e.problem, "%s, or pass --skip_malformed_rows to skip and "
                           "count such rows%s" % (e.fix, e.hint), line=line, column=column)
      if e.unknown and self.classes_from:
        raise DataError(path, "task %s: %s, the classes of the model whose card is %s"
                        % (self.name, e.problem, self.classes_from),
                        "a file read with this model may hold only its classes: correct the "
                        "row, or train a model with these labels into another --output_dir",
                        line=line, column=column)
      raise DataError(path, "task %s: %s" % (self.name, e.problem), e.fix + e.hint,
                      line=line, column=column)
    if self.label_spec.record_dtype == "float32":
      # A float32 record holds each value: refused here, naming the cell, if it cannot.
      for value, cell, column in zip(label, cells, column_names):
        check_float32(path, value, cell.strip(), "give a number of at most 3.4e38 in "
                      "magnitude (rescale the column?)", line=line, column=column)
    return label

  def _rows_to_examples(self, table, columns, split, first_row, skipped, left_aside):
    """The examples of a table's rows, as they are read (numbered from first_row). A row
    that cannot make an example is an error naming its line, or, with
    skip_malformed_rows, a skip counted by cause into skipped. A predict file's labels
    are not read (columns gives them no label column): predicting needs none."""
    label_columns = columns.labels
    label_names = [_column_name(table, i) for i in label_columns or ()]
    needed = max(i for i in (columns.text_a, columns.text_b, columns.guid) +
                 tuple(label_columns or ()) if i is not None)
    width = len(table.header) if table.header else table.usual_width()
    widths = collections.Counter()
    rows = self.row_ranges.get(split)
    outside = rows and "rows outside %s" % self.rows_option(split)
    for row_number, (line, fields) in enumerate(table, first_row):
      widths[len(fields)] += 1
      if rows and not in_range(rows, row_number):
        left_aside[outside] = left_aside.get(outside, 0) + 1  # (counted, and reported)
        continue
      try:
        check_row_width(table, line, fields, needed, width)
        aside = self.left_aside(fields, columns)
        if aside:  # (a row the run's options leave out: counted, and reported)
          left_aside[aside] = left_aside.get(aside, 0) + 1
          continue
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
      if self.weight_column is not None and split == "train":
        name = str(self.weight_column)
        read_weight(table.path, dict(columns.extras)[name], fields, name, line)
      guid = fields[columns.guid] if columns.guid is not None else str(row_number)
      extras = {name: fields[i] for name, i in columns.extras if i < len(fields)}
      text_b = fields[columns.text_b] if columns.text_b is not None else None
      yield InputExample(guid, fields[columns.text_a], text_b, label, extras)
    if table.header is None:
      check_usual_width(table, widths, width)
    if skipped:
      log.warning("%s: skipped %s (--skip_malformed_rows)", table.path, ", ".join(
          "%d rows with %s" % (n, cause) for cause, n in sorted(skipped.items())))
    for what, n in sorted(left_aside.items()):
      log.info("%s: left aside %d %s", table.path, n, what)


def flag_for_split(split):
  return {"train": "train", "dev": "eval", "test": "predict"}[split]


def _column_name(table, index):
  return table.header[index] if table.header else index



class HeaderProcessor(DataProcessor):
  """A task whose files name their columns in a header; subclasses only declare them."""
  text_a_column = None
  text_b_column = None
  label_column = None
  id_columns = ("index",)  # the first one present names each row
  label_hint = None  # how the user picks the label column, when they can

  def columns(self, table, split):
    ids = [table.column_index(c, "the %s column" % c) for c in self.id_columns
           if c in table.header]
    return Columns(
        text_a=table.column_index(self.text_a_column, "the %s column" % self.text_a_column),
        text_b=(table.column_index(self.text_b_column, "the %s column" % self.text_b_column)
                if self.text_b_column else None),
        # A predict file's labels are not read, so it needs no label column.
        labels=(tuple(table.column_index(c, self.label_hint or "the %s column" % c)
                      for c in self.label_columns) if split != "test" else None),
        guid=ids[0] if ids else None)
