"""A split's files read again, after the first read has said what they hold: a split
whose examples are not held (the predict file) is read again to write its predictions,
and a task of a cluster reads the train file once for the order and once to featurise
its own rows. A second read is quiet, and is checked to be of the same bytes."""

import logging
import os
import stat

from data.data_error import DataError
from data.files import combined_sha256, files_sha256
from data.text_lines import check_file

_END = object()


def quietly(examples):
  """examples (an iterable that reads files) without this package's log lines below
  errors: a file read again has had them said. Only the reading is quiet, not the
  caller's work between examples, nor anything after an early stop."""
  reading_log = logging.getLogger("data")
  examples = iter(examples)
  while True:
    level = reading_log.level
    reading_log.setLevel(logging.ERROR)
    try:
      example = next(examples, _END)
    finally:
      reading_log.setLevel(level)
    if example is _END:
      return
    yield example


def read_again(processor, split, sha256):
  """The examples of a split's files (processor: data/examples), read once more, quietly.
  DataError, once they are read, if the files' bytes (sha256) are not those the caller
  made its records of."""
  return checked(quietly(processor.iter_examples(split)), processor, split, sha256,
                 "changed after its rows were featurised")


def read_checked(processor, split):
  """The examples of a split's files, read once; DataError once they are read if a file's
  bytes changed while it was read (hashed first, when it is a regular file: a stream,
  read once, is taken as it comes)."""
  paths = processor.read_files(split)
  for path in paths:
    check_file(path)
  if not all(rereadable(path) for path in paths):
    return processor.iter_examples(split)
  return checked(processor.iter_examples(split), processor, split, files_sha256(paths),
                 "changed while it was read")


def checked(examples, processor, split, sha256, change):
  """examples, then DataError if the bytes read are not those of sha256: the rows
  written from them would not be the file's."""
  for example in examples:
    yield example
  refuse_changed(processor, split, sha256, "the file %s (its sha256 then and now differ): "
                 "its predictions would be written beside other rows" % change)


def refuse_changed(processor, split, sha256, problem):
  """DataError(problem) if the bytes the last read of a split's files took
  (processor.read_sha256[split]) are not those of sha256."""
  read = processor.read_sha256.get(split)
  if read and combined_sha256(read) != sha256:
    raise DataError(processor.file_for(split), problem, "run again once nothing writes to it")


def check_rereadable(paths, why):
  """DataError for a path that is missing, a folder, or a stream that can be read only
  once (a pipe, a FIFO), which the caller would read twice: why says what does."""
  for path in paths:
    check_file(path)
    if not rereadable(path):
      raise DataError(path, "this is a pipe or another stream, which can be read only once, "
                      "and %s" % why, "save it to a file first and pass that file")


def rereadable(path):
  """Whether path (which exists) can be read twice: a regular file, or a bucket's object."""
  return "://" in path or stat.S_ISREG(os.stat(path).st_mode)


def read_twice(processor, split):
  """A callable that gives the split's examples afresh: read as usual the first time, and
  quietly the second (each read's bytes are checked by the caller's accounts)."""
  calls = []

  def examples():
    calls.append(split)
    rows = processor.iter_examples(split)
    return rows if len(calls) == 1 else quietly(rows)
  return examples
