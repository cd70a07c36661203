"""Any CSV or TSV file, its columns named by flags."""

import logging
import re
import unicodedata

from data.data_error import DataError
from data.examples import Columns, DataProcessor, flag_for_split
from data.row_ranges import in_range
from data.table import (USUAL_WIDTH_RECORDS, Table, delimiter_for, is_position, quoting_for,
                        refuse_bom_cell)
from spec.heads import HEAD_KINDS
from spec.run_errors import FlagError
from spec.labels import MISSING_VALUES, canonical_label, class_order

log = logging.getLogger(__name__)

# Above this many classes, a label column where most rows have a value of their own is no
# label column (an id, a text); below it, a small file's labels may all differ.
MANY_CLASSES = 20

class CsvProcessor(DataProcessor):
  """Any CSV or TSV: columns by name (with a header) or by 0-based position. Quotes enclose
  fields in .csv files but are plain characters in .tsv/.txt files unless quoting says
  otherwise."""
  name = "csv"
  heads = HEAD_KINDS  # (every head: a file's columns can hold any head's labels)
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
    if self._labels and not self.head_has_classes:
      raise FlagError("--labels lists the classes of a classification head; a %s head's "
                      "outputs are its label columns (%s): drop --labels"
                      % (self.head_kind, ", ".join(self._label_columns)))

  takes_label_column = True
  takes_class_list = True
  label_columns_name_outputs = False  # a file's label column is where it keeps the labels

  @classmethod
  def required_options(cls, needs_labels):
    # Predicting needs no labels; training and evaluating do.
    return ("text_column",) + (("label_column",) if needs_labels else ())

  @classmethod
  def settings_of(cls, options):
    return dict(super(CsvProcessor, cls).settings_of(options),
                text_column=options.text_column, text_b_column=options.text_b_column,
                label_columns=options.label_columns(), id_column=options.id_column,
                has_header=options.has_header, split_headers=options.split_headers(),
                delimiter=options.delimiter, labels=options.labels)

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
    if not self.head_has_classes:
      return None
    if self._labels is None:
      self._labels = self._labels_from_train_file()
    return self._labels

  def _labels_from_train_file(self):
    """The distinct labels of the train file's rows (those of --train_rows), each in its
    canonical spelling (1.0 is 1, TRUE is true: spec.labels.canonical_label), in
    class_order (numbers by value). A column where most rows have a label of their own is
    refused: it is an id or a text."""
    path = self.file_for("train")
    # Missing values are no class: their rows are errors (or counted skips) when read.
    spellings, cells = set(), 0
    rows, position = self.row_ranges.get("train"), -1
    for each in self.files_of("train"):
      table = self.open_table(each, "train")
      index = table.column_index(self.label_column, "--label_column")
      self._check_no_header_as_data(table, index, "train")
      self._check_header_is_not_data(table, index, "train")
      for line, fields in table:
        position += 1  # (the row's place in the split's files, as --train_rows counts)
        if rows and not in_range(rows, position):
          continue
        if len(fields) > index:
          refuse_bom_cell(each, line, fields[index], self.label_column)  # (a class of its own)
          if fields[index].strip() not in MISSING_VALUES:
            spellings.add(fields[index])
            cells += 1
    found = class_order(set(canonical_label(cell) for cell in spellings))
    _check_one_spelling_per_class(path, found, self.label_column)
    if self.head is None:  # (auto: a column of fractions is no set of classes)
      _refuse_fractions_as_classes(path, found, self.label_column)
    if len(found) > MANY_CLASSES and len(found) * 2 > cells:
      raise DataError(path, "column %s has %d distinct values in %d rows: most rows have a "
                      "label of their own, as an id or a text column does, not a label"
                      % (self.label_column, len(found), cells),
                      "name the label column with --label_column (or list the classes with "
                      "--labels; for numbers to predict, pass --head=regression)",
                      column=self.label_column)
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
    if table.header is not None or self.split_headers.get(split) is False:
      return  # (a header flag given for this file says there is none: no second guessing)
    first_two = table.first_records(2)
    if len(first_two) < 2:
      return
    line, first = first_two[0]
    text_index = table.column_index(self.text_column, "--text_column")
    if max(label_index, text_index) >= len(first):
      return
    label, text = first[label_index].strip(), first[text_index].strip()
    if _COLUMN_NAME.match(label) and _COLUMN_NAME.match(text) and not _label_elsewhere(
        table, label_index, label, after_first=True):
      raise DataError(table.path, "the first line looks like a header read as data: its label %r "
                      "appears on no other line, and its text is %r" % (label, text),
                      "drop --nohas_header or pass --%s (the file has a header; then name "
                      "the columns, e.g. --text_column=%s --label_column=%s), remove the "
                      "line, or pass --no%s to confirm the file has no header"
                      % (_header_flag(split), text, label, _header_flag(split)), line=line)

  def _check_no_header_as_ids(self, table, split):
    """A predict file's header read as data (a headered file with --nohas_header) would
    be predicted as a row. Its sign, where the rows have ids: the first row's id looks
    like a column name while the next rows' ids are numbers."""
    if table.header is not None or self.split_headers.get(split) is False:
      return
    index = table.column_index(self.id_column, "--id_column")
    ahead = table.first_records(USUAL_WIDTH_RECORDS)
    ids = [fields[index].strip() for _, fields in ahead if len(fields) > index]
    if len(ids) > 1 and _COLUMN_NAME.match(ids[0]) and not _is_number(ids[0]) and all(
        _is_number(i) for i in ids[1:]):
      raise DataError(table.path, "the first line looks like a header read as data: its id "
                      "%r is a name, and the other lines' ids are numbers" % ids[0],
                      "drop --nohas_header or pass --%s (the file has a header; then name "
                      "the columns), remove the line, or pass --no%s to confirm the file has "
                      "no header" % (_header_flag(split), _header_flag(split)), line=1)

  def _check_header_is_not_data(self, table, label_index, split):
    """With columns given by position, a headerless file read with a header (the default)
    would lose its first row. Its sign: the 'header' has a label cell that is a label of the
    other rows, or a number."""
    if table.header is None or not is_position(self.label_column):
      return
    if label_index >= len(table.header):
      return
    cell = table.header[label_index]
    elsewhere = _label_elsewhere(table, label_index, cell)
    if elsewhere or _is_number(cell):
      raise DataError(table.path, "the first line is read as a header, but it looks like data: "
                      "its label %r is %s" % (cell, "a label of other lines" if elsewhere
                                              else "a number"),
                      "pass --nohas_header (no file has a header) or --no%s (this file "
                      "has none), or add a header line" % _header_flag(split), line=1)

  def columns(self, table, split):
    labels = None
    if self._label_columns and split != "test":  # predict files' labels: unread
      labels = tuple(table.column_index(c, "--label_column") for c in self._label_columns)
      self._check_no_header_as_data(table, labels[0], split)
      self._check_header_is_not_data(table, labels[0], split)
    elif split == "test" and self.id_column is not None:  # (no labels: the ids tell)
      self._check_no_header_as_ids(table, split)
    if table.header is not None and is_position(self.text_column):
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


def _label_elsewhere(table, index, value, after_first=False):
  """Whether value is the label cell (stripped) of a record of table (after its first,
  with after_first): looked for in the first records, and only when they do not settle it,
  in one more pass over the file (its records are not held)."""
  ahead = table.first_records(USUAL_WIDTH_RECORDS)
  if any(len(f) > index and f[index].strip() == value
         for _, f in ahead[1 if after_first else 0:]):
    return True
  if len(ahead) < USUAL_WIDTH_RECORDS:
    return False  # (they were every record)
  again = Table(table.path, table.delimiter, table.header is not None, table.quoting)
  records = iter(again)
  if after_first:
    next(records, None)
  return any(len(f) > index and f[index].strip() == value for _, f in records)


def _is_number(text):
  try:
    float(text)
    return True
  except ValueError:
    return False


def _header_flag(split):
  """The flag that says whether a split's file has a header."""
  return "%s_has_header" % flag_for_split(split)


def _refuse_fractions_as_classes(path, classes, column):
  """A label column of numbers, some of them fractions (0.1667, the share of raters, say),
  read as classes would make every distinct value a class: refused, naming the heads that
  read numbers. (--head=classification, or --labels, says they are classes after all.)"""
  percents = [c for c in classes if re.match(r"^[0-9.]+ ?%$", c)]
  if percents and len(percents) == len(classes):
    raise DataError(path, "column %s holds percentages such as %s, not class names: each of "
                    "its %d distinct values would be a class of its own (ordered as text)" % (
                        column, ", ".join(percents[:3]), len(classes)),
                    "write them as fractions (0.5 for 50%) and pass --head=soft_target, or "
                    "pass --labels to make each value a class", column=column)
  fractions = [c for c in classes if _is_number(c) and "." in c]
  if fractions and all(_is_number(c) for c in classes):
    raise DataError(path, "column %s holds numbers such as %s, not class names: each of its "
                    "%d distinct values would be a class of its own" % (
                        column, ", ".join(fractions[:3]), len(classes)),
                    "pass --head=soft_target for fractions in [0, 1] (a toxicity score, the "
                    "share of raters who agreed), or --head=regression for other numbers; or "
                    "--head=classification (or --labels) if each value really is a class",
                    column=column)


# What a column name looks like: a short identifier ('comment_text', 'label', '#1 ID' aside).
_COLUMN_NAME = re.compile(r"^[A-Za-z_#][A-Za-z0-9_#.-]{0,39}$")


def _check_one_spelling_per_class(path, classes, column):
  """Classes that differ only in case or in quotes around them ('Pos' and 'pos', '"0"'
  and '0': a quote a reader without quote processing keeps) are one class written two
  ways, and would be two outputs of the head: refused, naming them. --labels that lists
  them keeps them apart (they are then read exactly)."""
  quoted = [name for name in classes if len(name) > 1 and name[0] == name[-1] == '"']
  if quoted:
    raise DataError(path, "the labels %s hold their quotes (the file was read without quote "
                    "processing), so the classes would be named with them" % ", ".join(
                        repr(n) for n in quoted),
                    "pass --quoting=csv to read the quotes as CSV's, or --labels to keep the "
                    "quotes as part of the classes", column=column)
  by_form = {}
  for name in classes:
    by_form.setdefault(label_form(name), []).append(name)
  for spellings in by_form.values():
    if len(spellings) > 1:
      raise DataError(path, "the labels %s differ only in case, quotes, Unicode form (NFC or "
                      "NFD: %s), spacing or invisible characters: one class written in %d ways "
                      "would be %d classes" % (
                          ", ".join(_shown(n) for n in spellings), " / ".join(
                              unicodedata.normalize("NFC", n) == n and "NFC" or "not NFC"
                              for n in spellings), len(spellings), len(spellings)),
                      "write each class one way (for a TSV whose fields are quoted, pass "
                      "--quoting=csv), or pass --labels to keep them apart", column=column)


def label_form(name):
  """What two spellings of one class share: the text without quotes around it, its case,
  its Unicode form (NFKC: composed accents, full-width letters), invisible format
  characters (zero-width spaces and joiners, marks of direction) and runs of spaces
  inside it."""
  text = unicodedata.normalize("NFKC", name.strip("\"'").strip()).casefold()
  return " ".join("".join(c for c in text if unicodedata.category(c) != "Cf").split())


def _shown(name):
  """A label as the error shows it: its characters beyond ASCII as escapes, so spellings
  that look alike on screen are told apart."""
  return "'%s'" % name.encode("ascii", "backslashreplace").decode("ascii")

