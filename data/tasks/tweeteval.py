"""TweetEval (cardiffnlp/tweeteval): any of its tasks (offensive, hate, irony, sentiment,
emotion, emoji, stance). Each split is a file of tweets, one a line, beside a file of
their labels, one class index a line; mapping.txt names the classes in index order."""

import csv
import io
import os

from data.data_error import DataError
from data.examples import Columns, DataProcessor
from data.table import Table
from data.text_lines import open_binary
from spec.labels import LabelError
from spec.run_errors import FlagError

TEXT_END, LABELS_END = "_text.txt", "_labels.txt"
MAPPING = "mapping.txt"


class TweetEvalProcessor(DataProcessor):
  """TweetEval's layout: <split>_text.txt (train, val, test) and <split>_labels.txt beside
  it, line by line; the classes from mapping.txt beside them, or --labels (the model
  card's, once a model is trained). A predict file needs no labels file."""
  name = "tweeteval"
  split_files = {"train": ("train" + TEXT_END,), "dev": ("val" + TEXT_END,),
                 "test": ("test" + TEXT_END,)}
  has_header = False
  quoting = csv.QUOTE_NONE  # a tweet a line: a quote is a plain character
  label_column = "label"
  takes_class_list = True

  def __init__(self, labels=None, **kwargs):
    super(TweetEvalProcessor, self).__init__(**kwargs)
    self._given_labels = list(labels) if labels else None
    self._classes = None
    self._labels_of = {}  # text file -> its labels file

  @classmethod
  def settings_of(cls, options):
    if options.quoting != "auto":
      raise FlagError("--quoting=%s reads files of quoted columns; TweetEval's files hold a "
                      "tweet a line, read as it is: drop --quoting" % options.quoting)
    return dict(super(TweetEvalProcessor, cls).settings_of(options), labels=options.labels)

  @property
  def labels(self):
    """The class names in index order: mapping.txt's, else --labels (or the card's). Both,
    naming other classes, are refused: the indices would name other classes."""
    if self._classes is None:
      path = self._mapping_path()
      given = self._given_labels
      if path is None and given is None:
        raise DataError(os.path.join(self.data_dir or ".", MAPPING), "no %s names the "
                        "classes of the label files' indices" % MAPPING, "put TweetEval's "
                        "%s beside the files, or pass --labels=<the class names in index "
                        "order>" % MAPPING)
      mapping = read_mapping(path) if path is not None else None
      if mapping is not None and given is not None and mapping != given:
        raise DataError(path, "it names the classes %s, but %s names %s" % (
            ", ".join(mapping), "the model card %s" % self.classes_from if self.classes_from
            else "--labels", ", ".join(given)), "read the files of the task the model learnt"
                        if self.classes_from else "drop --labels, or correct %s" % MAPPING)
      self._classes = mapping or given
    return self._classes

  def _mapping_path(self):
    """mapping.txt in --data_dir, else beside the first split file given; None if none."""
    folders = [self.data_dir] if self.data_dir else []
    folders += [os.path.dirname(self.files_of(split)[0]) for split in ("train", "dev", "test")
                if self.files.get(split)]
    for folder in folders:
      path = os.path.join(folder, MAPPING)
      if os.path.exists(path):
        return path
    return None

  def read_files(self, split):
    """Each text file, then its labels file (none for the predict split)."""
    paths = []
    for path in self.files_of(split):
      paths.append(path)
      if split != "test":
        paths.append(labels_path(path))
    return paths

  def open_table(self, path, split):
    if split == "test":
      return LinedTable(path)
    self._labels_of[path] = labels_path(path)
    return LinedTable(path, self._labels_of[path])

  def parse_labels(self, cells, path, line, column_names):
    # (a label's errors name its own file, and line)
    return super(TweetEvalProcessor, self).parse_labels(
        cells, self._labels_of.get(path, path), line, [None])

  def columns(self, table, split):
    return Columns(text_a=0, labels=(1,) if split != "test" else None)

  def label_cell(self, cell, index):
    value = cell.strip()
    if value.isdigit() and int(value) < len(self.labels):
      return self.labels[int(value)]
    classes = "0 to %d: %s" % (len(self.labels) - 1, ", ".join(self.labels))
    if not value:  # (which --skip_malformed_rows may skip)
      raise LabelError("the label is missing", "give the index of the tweet's class (%s), "
                       "or remove the line from both files" % classes, index=index,
                       missing=True)
    raise LabelError("the label %r is no class index (%s)" % (value, classes),
                     "give the index of the tweet's class", index=index)


def labels_path(text_path):
  """The labels file beside a TweetEval text file: x_text.txt's is x_labels.txt."""
  if not text_path.endswith(TEXT_END):
    raise DataError(text_path, "a TweetEval text file's name ends in %s (its labels file's "
                    "in %s), which tells where its labels are" % (TEXT_END, LABELS_END),
                    "name the file <split>%s, its labels <split>%s" % (TEXT_END, LABELS_END))
  path = text_path[:-len(TEXT_END)] + LABELS_END
  if "://" not in path and not os.path.exists(path):
    raise DataError(path, "the labels file of %s does not exist" % text_path,
                    "put the labels beside the tweets, a class index a line, or use the "
                    "file for predicting")
  return path


def read_mapping(path):
  """The class names of a mapping.txt, in index order: `index<TAB>name` a line, the
  indices 0, 1, ... in order."""
  names = []
  with io.TextIOWrapper(open_binary(path), encoding="utf-8") as f:
    for line, text in enumerate(f, 1):
      if not text.strip():
        continue
      fields = text.rstrip("\r\n").split("\t")
      if len(fields) != 2 or fields[0].strip() != str(len(names)) or not fields[1].strip():
        raise DataError(path, "line %d is %r, not `%d<TAB><class name>`" % (
            line, text.rstrip("\r\n"), len(names)), "give each class's index and name, "
            "in index order from 0", line=line)
      names.append(fields[1].strip())
  if len(names) < 2:
    raise DataError(path, "it names %d class%s; a classifier needs two or more"
                    % (len(names), "" if len(names) == 1 else "es"),
                    "give TweetEval's %s" % MAPPING)
  return names


class LinedTable(Table):
  """A file of texts, one a line (read as they are, tabs and quotes included), each
  paired with the same line of a labels file: records are (line, [text, label]). A label
  for an empty text line, or labels past the texts' end, is an error naming the line; an
  empty label line is a missing label."""

  def __init__(self, path, labels_path=None):
    self._labels = None
    if labels_path is not None:
      self._labels = Table(labels_path, "\t", False, csv.QUOTE_NONE)
      self._label_records = iter(self._labels)
      self._next_label = next(self._label_records, None)
    super(LinedTable, self).__init__(path, "\t", False, csv.QUOTE_NONE)
    self._ahead = type(self._ahead)(self._paired(record) for record in self._ahead)

  def digests(self):
    own = [self.digest.hexdigest()]
    return own if self._labels is None else own + self._labels.digests()

  def _pull(self):
    record = super(LinedTable, self)._pull()
    return None if record is None else self._paired(record)

  def _paired(self, record):
    line, fields = record
    text = "\t".join(fields)  # (unquoted: the tab-split fields join back into the line)
    if self._labels is None:
      return line, [text]
    label = self._next_label
    if label is not None and label[0] < line:
      raise self._unlabelled_line(label)
    if label is None or label[0] > line:
      return line, [text, ""]  # (no label on this line: a missing label)
    self._next_label = next(self._label_records, None)
    return line, [text, "\t".join(label[1])]

  def _stream(self):
    for record in super(LinedTable, self)._stream():
      yield record
    if self._labels is not None:
      label = self._next_label
      if label is not None and label[0] <= self.num_lines:
        raise self._unlabelled_line(label)
      if label is not None:
        raise DataError(self._labels.path, "line %d gives a label, but %s ends at line %d"
                        % (label[0], self.path, self.num_lines),
                        "give both files a line for each tweet", line=label[0])
      for _ in self._label_records:  # (the digest covers the whole labels file)
        pass

  def _unlabelled_line(self, label):
    return DataError(self.path, "line %d is empty, but line %d of %s gives it a label (%s)"
                     % (label[0], label[0], self._labels.path, "\t".join(label[1])),
                     "give the tweet, or remove the line from both files", line=label[0])
