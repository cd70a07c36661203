"""Featurising one split into record files: the examples cut into pieces, each piece
tokenised and serialised (in forked worker processes when asked), the pieces joined in
order into the shards."""

import contextlib
import gc
import json
import os
import shutil
import struct
import sys
import tempfile
import traceback

import tensorflow.compat.v1 as tf

from data.features import Truncation, TruncationCount, convert_examples, padding_features
from data.record_format import ExampleSerializer
from spec import labels as label_specs
from spec.errors import PLACE_FAULTS

# With several workers each shard is written as this many pieces per worker, so
# that a worker that finishes early takes more pieces (rows differ in cost, and
# files are often sorted, e.g. by label).
PIECES_PER_WORKER = 4
_FRAME = struct.Struct("<Q")  # the length before each record in a worker's piece file


class Featurisation(object):
  """One split's featurisation, cut into contiguous pieces of the examples.

  records(i) is pure Python (tokenizer, serialiser), so forked workers can run it
  without touching TensorFlow; only the parent writes TFRecord files.
  """

  def __init__(self, examples, settings, tokenizer, num_padding, ranges, weights=None):
    self.examples = examples
    self.weights = weights
    self.label_spec = label_specs.from_card(settings["label_spec"])
    self.strategy = Truncation.from_dict(settings.get("truncation") or {"mode": "head"})
    self.max_seq_length = settings["max_seq_length"]
    self.tokenizer = tokenizer
    self.num_padding = num_padding
    self.ranges = ranges

  def records(self, index, truncation):
    """The serialised records of piece index; the padding rows follow the last piece.
    truncation counts the examples longer than max_seq_length."""
    start, end = self.ranges[index]
    serialize = ExampleSerializer(self.label_spec, weighted=self.weights is not None)
    for features in convert_examples(self.examples[start:end], self.label_spec,
                                     self.max_seq_length, self.tokenizer,
                                     first_example_id=start, truncation=truncation,
                                     strategy=self.strategy):
      yield serialize(features, self.weights[features.example_id] if self.weights else 1.0)
    if index == len(self.ranges) - 1 and self.num_padding:
      padding = serialize(padding_features(self.max_seq_length,
                                           self.label_spec.unlabelled_value()), 0.0)
      for _ in range(self.num_padding):
        yield padding

  def write_piece_file(self, index, path):
    """A worker's output: the truncation count of one piece, then its records, each after
    its length (plain Python file writes; the parent turns pieces into TFRecord files)."""
    truncation = TruncationCount()
    try:
      with open(path, "wb") as out:
        out.write(b"\0" * (3 * _FRAME.size))  # the count goes here once it is known
        for record in self.records(index, truncation):
          out.write(_FRAME.pack(len(record)))
          out.write(record)
        out.seek(0)
        out.write(_FRAME.pack(truncation.truncated) + _FRAME.pack(truncation.longest) +
                  _FRAME.pack(truncation.longest_exact))
    except OSError as e:
      if e.filename is not None:
        raise
      raise OSError(e.errno, e.strerror, path)  # (a failed write names no file)


def _read_piece_file(path, truncation):
  with open(path, "rb") as f:
    data = f.read()
  size = _FRAME.size
  truncation.add(TruncationCount(*[_FRAME.unpack_from(data, i * size)[0] for i in range(3)]))
  position = 3 * size
  while position < len(data):
    (length,) = _FRAME.unpack_from(data, position)
    position += size
    yield data[position:position + length]
    position += length


def write_shards(job, paths, staging, pieces_per_shard, workers):
  """Writes each of paths (shards, in order) as its staging name (staging[path]);
  pieces_per_shard pieces of the job make one shard. With workers > 1, forked processes
  featurise the pieces. Returns the TruncationCount of all examples."""
  truncation = TruncationCount()
  piece_files = {}
  piece_dir = None
  temporary = [staging[path] for path in paths]
  try:
    if workers > 1:
      # Workers write plain local files (the records may go to Cloud Storage).
      piece_dir = tempfile.mkdtemp(prefix="featurise-")
      piece_files = {i: os.path.join(piece_dir, "piece-%05d" % i)
                     for i in range(len(job.ranges))}
      # Worker w takes pieces w, w + workers, ...: interleaved, so each gets rows from
      # all over the file even when it is sorted (by label, by length).
      _run_forked([[(i, piece_files[i]) for i in range(w, len(job.ranges), workers)]
                   for w in range(workers)], job.write_piece_file)
    for shard, path in enumerate(temporary):
      with tf.io.TFRecordWriter(path) as writer:
        for index in range(shard * pieces_per_shard, (shard + 1) * pieces_per_shard):
          records = (_read_piece_file(piece_files[index], truncation) if piece_files
                     else job.records(index, truncation))
          for record in records:
            writer.write(record)
  except BaseException:
    for path in temporary:  # leave no partial files
      if tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)
    raise
  finally:
    if piece_dir:
      shutil.rmtree(piece_dir, ignore_errors=True)
  return truncation


@contextlib.contextmanager
def existing_objects_frozen():
  """Keeps the garbage collector off the objects that exist on entry, until exit.

  None of them becomes featurisation's garbage, yet every full collection walked
  them all (with TensorFlow 2 loaded, a third of featurisation time), and in forked
  workers the walk also copied the parent's heap page by page (two workers were
  slower than one). New objects are still collected.
  """
  gc.freeze()
  try:
    yield
  finally:
    gc.unfreeze()


def _run_forked(jobs, function):
  """Runs function(*item) for each item of jobs[w] in forked child process w; waits for all.

  Plain fork and waitpid: a multiprocessing.Pool costs about 0.1 s to shut down,
  which is a sixth of featurising a 12,000-row file, and a spawned process would
  import TensorFlow again (seconds). Forking a process whose TensorFlow has started
  threads is safe only for a child that never calls TensorFlow (its locks may be
  held by threads the child does not have): the children here run plain Python
  (tokenizer, serialiser, file writes) and leave with os._exit.
  """
  children, reports = [], []
  try:
    for items in jobs:
      read_end, write_end = os.pipe()
      pid = os.fork()
      if pid == 0:
        os.close(read_end)
        _child(function, items, write_end)  # never returns
      os.close(write_end)
      children.append(pid)
      reports.append(read_end)
  finally:
    statuses = [os.waitpid(pid, 0)[1] for pid in children]
    faults = [_read_report(read_end) for read_end in reports]
  for fault in faults:
    if fault:  # a full disk, say: the parent raises it as its own, for the report it gets
      raise OSError(fault["errno"], os.strerror(fault["errno"]), fault["filename"])
  failed = sum(1 for status in statuses if status != 0)
  if failed:
    raise RuntimeError("%d of %d featurisation processes failed; their errors are printed "
                       "above" % (failed, len(children)))


def _child(function, items, report):
  """A forked child's life: work, then leave without running the parent's clean-up. The
  fault of a place (a full disk: its number and file) is written to the pipe report for the
  parent to raise as its own; any other error's traceback is printed."""
  status = 0
  try:
    for item in items:
      function(*item)
  except BaseException as e:  # the parent sees the exit status, and a fault's report
    if isinstance(e, OSError) and e.errno in PLACE_FAULTS:
      os.write(report, json.dumps({"errno": e.errno, "filename": e.filename}).encode("utf-8"))
    else:
      traceback.print_exc()
    status = 1
  finally:
    sys.stderr.flush()
    os._exit(status)


def _read_report(read_end):
  """The OSError a child reported ({"errno", "filename"}), or None."""
  with os.fdopen(read_end, "rb") as f:
    text = f.read()
  return json.loads(text.decode("utf-8")) if text else None

