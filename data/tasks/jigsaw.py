"""Kaggle's Jigsaw tasks: Toxic Comment Classification and Unintended Bias."""

import csv
import dataclasses
import logging

from data.data_error import DataError
from data.examples import HeaderProcessor
from data.reread import check_rereadable
from data.table import Table
from spec.run_errors import FlagError
from spec.heads.soft_target import SoftTarget
from spec.labels import MISSING_VALUES
from spec.task_names import (JIGSAW_BIAS_AUXILIARY_COLUMNS, JIGSAW_BIAS_TARGET,
                        JIGSAW_IDENTITY_COLUMNS, JIGSAW_TOXIC_LABEL_COLUMNS)

log = logging.getLogger(__name__)


class JigsawProcessor(HeaderProcessor):
  delimiter = ","
  quoting = csv.QUOTE_MINIMAL  # Kaggle CSVs quote comments that hold commas and newlines.
  split_files = {"train": ("train.csv",), "dev": ("valid.csv", "dev.csv"),
                 "test": ("test.csv",)}
  text_a_column = "comment_text"
  id_columns = ("id",)
  takes_label_column = True


class JigsawToxicProcessor(JigsawProcessor):
  """Kaggle Toxic Comment Classification: one of the six 0/1 label columns (a
  classification head, 0/1), or several at once (a multi-label head, one output each)."""
  name = "jigsaw_toxic"
  labels = ["0", "1"]
  heads = ("classification", "multi_label", "soft_target")
  label_hint = "--label_column"

  def __init__(self, label_columns=JIGSAW_TOXIC_LABEL_COLUMNS[:1], **kwargs):
    super(JigsawToxicProcessor, self).__init__(**kwargs)
    self._label_columns = tuple(label_columns)

  @classmethod
  def settings_of(cls, options):
    return dict(super(JigsawToxicProcessor, cls).settings_of(options),
                label_columns=options.label_columns() or JIGSAW_TOXIC_LABEL_COLUMNS[:1])

  @property
  def label_columns(self):
    return self._label_columns

  def default_head(self):
    return "classification" if len(self._label_columns) == 1 else "multi_label"


class JigsawBiasProcessor(JigsawProcessor):
  """Kaggle Unintended Bias: the fraction of raters who found a comment toxic (`target`),
  learnt as a soft target; more soft-target columns (e.g. the auxiliary toxicity
  subtypes) may follow it. The classification head learns target >= 0.5 instead. The
  identity columns are carried through to the outputs and the bias metric."""
  name = "jigsaw_bias"
  labels = ["0", "1"]
  heads = ("soft_target", "classification")
  label_hint = "--label_column"

  @classmethod
  def settings_of(cls, options):
    settings = super(JigsawBiasProcessor, cls).settings_of(
        dataclasses.replace(options, auxiliary_targets=False))
    return dict(settings, label_columns=options.label_columns() or (JIGSAW_BIAS_TARGET,),
                auxiliary_targets=options.auxiliary_targets)

  def __init__(self, label_columns=(JIGSAW_BIAS_TARGET,), auxiliary_targets=False, **kwargs):
    super(JigsawBiasProcessor, self).__init__(**kwargs)
    self._label_columns = tuple(label_columns)
    self.auxiliary_targets = auxiliary_targets
    if self.head_has_classes and (self._label_columns != (JIGSAW_BIAS_TARGET,) or
                                  auxiliary_targets):
      raise FlagError("--head=classification on task jigsaw_bias learns target >= 0.5 and "
                      "reads only the target column; drop --label_column and "
                      "--auxiliary_targets")
    if self._label_columns[0] != JIGSAW_BIAS_TARGET:
      raise FlagError("task jigsaw_bias: the first label column must be target (the bias "
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
    candidates = [name for name in JIGSAW_BIAS_AUXILIARY_COLUMNS
                  if name not in self._label_columns]
    empties = dict.fromkeys(candidates, 0)
    for each in self.files_of("train"):
      table = Table(each, self.delimiter, True, self.quoting_of(each))
      for name in candidates:
        if name not in table.header:  # (a column missing from any file is left out)
          empties.pop(name, None)
      indices = {name: table.column_index(name, "--auxiliary_targets")
                 for name in candidates if name in empties}
      for _, fields in table:  # (one pass over the rows for every column)
        for name, index in indices.items():
          if len(fields) <= index or fields[index].strip() in MISSING_VALUES:
            empties[name] += 1
    found, left_out = [], []
    for name in candidates:
      empty = empties.get(name)
      if empty is None:
        left_out.append("%s (no such column)" % name)
      elif empty:
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
    columns.extras = tuple((name, table.column_index(name, "the %s column" % name))
                           for name in JIGSAW_IDENTITY_COLUMNS if name in table.header)
    return columns

  def carried_columns(self, split):
    """The identity columns of any of the split's files, in name order, from their
    headers."""
    present = set()
    paths = self.files_of(split)
    check_rereadable(paths, "its header is read for its identity columns before its rows")
    for path in paths:
      header = self.open_table(path, split).header or ()
      present.update(name for name in JIGSAW_IDENTITY_COLUMNS if name in header)
    return sorted(present)

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
    if not self.head_has_classes:
      return cell
    (target,) = _TARGET.parse([cell])  # the classification head reads target alone
    return "1" if target >= 0.5 else "0"


_TARGET = SoftTarget([JIGSAW_BIAS_TARGET])  # how a Jigsaw target cell is read: a fraction in [0, 1]
