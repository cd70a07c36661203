"""TweetEval (cardiffnlp/tweeteval): any of its tasks (offensive, hate, irony, sentiment,
emotion, emoji, stance). Each split is a file of tweets, one a line, beside a file of
their labels, one class index a line; mapping.txt names the classes in index order."""

import csv
import os
import re

from data.data_error import DataError
from data.examples import Columns, DataProcessor
from data.gfile import gfile
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
      path, mapping = self._mapping()
      given = self._given_labels
      if path is None and given is None:
        raise DataError(os.path.join(self.data_dir or ".", MAPPING), "no %s names the "
                        "classes of the label files' indices" % MAPPING, "put TweetEval's "
                        "%s beside the files, or pass --labels=<the class names in index "
                        "order>" % MAPPING)
      if mapping is not None and given is not None and mapping != given:
        raise DataError(path, "it names the classes %s, but %s names %s" % (
            ", ".join(mapping), "the model card %s" % self.classes_from if self.classes_from
            else "--labels", ", ".join(given)), "read the files of the task the model learnt"
                        if self.classes_from else "drop --labels, or correct %s" % MAPPING)
      self._classes = mapping or given
    return self._classes

  def _mapping(self):
    """(the path, the class names) of the mapping.txt of the split files' folders:
    --data_dir's and each given file's, each folder's own or else its parent's (TweetEval
    keeps stance's above its five targets' folders); (None, None) if there is none. Two
    that name other classes are refused."""
    folders = [self.data_dir] if self.data_dir else []
    folders += [os.path.dirname(self.files_of(split)[0]) for split in ("train", "dev", "test")
                if self.files.get(split)]
    found = []
    for folder in folders:
      for place in (folder, os.path.dirname(folder.rstrip("/"))):
        path = os.path.join(place, MAPPING)
        if place and gfile.exists(path):
          found.append((path, read_mapping(path)))
          break
    for path, names in found[1:]:
      if names != found[0][1]:
        raise DataError(path, "it names the classes %s, and %s names %s" % (
            ", ".join(names), found[0][0], ", ".join(found[0][1])), "read files of one "
                        "task: their label indices name the classes of one mapping")
    return found[0] if found else (None, None)

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
    if re.match(r"^[0-9]+$", value) and int(value) < len(self.labels):
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
  if not gfile.exists(path):
    raise DataError(path, "the labels file of %s does not exist" % text_path,
                    "put the labels beside the tweets, a class index a line, or use the "
                    "file for predicting")
  return path


def read_mapping(path):
  """The class names of a mapping.txt, in index order: `index<TAB>name` a line (more
  tab-separated fields may follow, as in TweetEval's emoji mapping), the indices 0, 1, ...
  in order, each name once."""
  with open_binary(path) as f:
    raw = f.read()
  raw = raw[3:] if raw.startswith(b"\xef\xbb\xbf") else raw  # (UTF-8's byte-order mark)
  try:
    text = raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise DataError(path, "byte 0x%02x is not UTF-8 text" % raw[e.start],
                    "save the file as UTF-8", line=raw[:e.start].count(b"\n") + 1)
  names, lines = [], {}
  for line, row in enumerate(text.splitlines(), 1):
    if not row.strip():
      continue
    fields = row.split("\t")
    if len(fields) < 2 or fields[0].strip() != str(len(names)) or not fields[1].strip():
      raise DataError(path, "line %d is %r, not `%d<TAB><class name>`" % (
          line, row, len(names)), "give each class's index and name, in index order from 0",
                      line=line)
    name = fields[1].strip()
    if name in lines:
      raise DataError(path, "line %d names class %r again (line %d named it)" % (
          line, name, lines[name]), "give each class a name of its own", line=line)
    lines[name] = line
    names.append(name)
  if len(names) < 2:
    raise DataError(path, "it names %d class%s; a classifier needs two or more"
                    % (len(names), "" if len(names) == 1 else "es"),
                    "give TweetEval's %s" % MAPPING)
  return names


class LinedTable(Table):
  """A file of texts, one a line (read as they are, tabs and quotes included), each
  paired with the same line of a labels file: records are (line, [text, label]). An
  empty line before the last text (every later text would lose its place), a label for
  an empty line, or labels past the texts' end, is an error naming the line; an empty
  label line is a missing label."""

  def __init__(self, path, labels_path=None):
    self._labels, self._last_line = None, 0
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
    if line > self._last_line + 1:  # (the csv reader passes over empty lines)
      raise DataError(self.path, "line %d is empty, where a tweet should be: a TweetEval "
                      "file holds a tweet a line, and the lines after it would lose their "
                      "places" % (self._last_line + 1), "give the tweet, or remove the line "
                      "(and the same line of its labels file)", line=self._last_line + 1)
    self._last_line = line
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
