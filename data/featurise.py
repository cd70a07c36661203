"""Featurising one split into record files as its examples are read, in bounded memory.

The examples come from an iterable (a file being read): they go in chunks to worker
processes (or are featurised in this one), which tokenise and serialise them into
scratch files of record bodies. Once every example has been read, the records are
written into the shards in the split's order (file order, or the training order a
SplitOrder gives), each example's id and weight set as it is written. Nothing held grows
with the split but 17 bytes per example (where its body ends, its length, whether its
text is empty), 9 more when only some examples are featurised (a task of a cluster:
which ones, and each one's place among them), and what the order keeps.
"""

import array
import collections
import contextlib
import gc
import glob
import logging
import os
import shutil
import tempfile
import time

import tensorflow.compat.v1 as tf

from data.files import remove_quietly
from data.forked import ForkedWorkers, received
from data.features import (InputExample, Truncation, TruncationCount, convert_examples,
                           padding_features)
from data.record_format import ExampleSerializer
from spec.heads import from_card

log = logging.getLogger(__name__)

# Examples sent to a worker at a time: small enough that the workers stay evenly busy,
# large enough that sending them costs little.
CHUNK_ROWS = 512
REPORT_SECONDS = 30  # between progress lines
_PLACEHOLDER_WEIGHT = 1.0


class Featurisation(object):
  """How one split's examples become record bodies (settings: the records' settings).
  Pure Python (tokenizer, serialiser), so forked workers run it without TensorFlow."""

  def __init__(self, settings, tokenizer, weighted=False):
    self.label_spec = from_card(settings["label_spec"])
    self.strategy = Truncation.from_dict(settings.get("truncation") or {"mode": "head"})
    self.max_seq_length = settings["max_seq_length"]
    self.tokenizer = tokenizer
    self.serializer = ExampleSerializer(self.label_spec, weighted=weighted)

  def bodies(self, rows):
    """(body, length) of each of rows, (text_a, text_b, label) each: its record body
    (ExampleSerializer.body) and its length in tokens before truncation (LengthOf)."""
    examples = [InputExample(None, a, b, label) for a, b, label in rows]
    lengths = LengthOf()
    for features in convert_examples(examples, self.label_spec, self.max_seq_length,
                                     self.tokenizer, truncation=lengths,
                                     strategy=self.strategy, report_every=float("inf")):
      yield self.serializer.body(features, _PLACEHOLDER_WEIGHT), lengths.take()

  def record(self, example_id, body, weight=None):
    if weight is not None:
      body = self.serializer.weigh(body, weight, self.max_seq_length)
    return self.serializer.record(example_id, body)

  def padding_record(self):
    features = padding_features(self.max_seq_length, self.label_spec.unlabelled_value())
    return self.serializer(features, 0.0)


class LengthOf(TruncationCount):
  """Each example's length in tokens as convert_examples counts it (before it yields the
  example's features), taken in order: length * 2 + 1 when the length is exact, length * 2
  when it is a lower bound (a text encoded from a prefix; see TruncationCount)."""

  def __init__(self):
    super(LengthOf, self).__init__()
    self._lengths = collections.deque()

  def count(self, length, exact, max_seq_length):
    self._lengths.append(length * 2 + bool(exact))

  def take(self):
    return self._lengths.popleft()


def truncation_of(lengths, max_seq_length):
  """The TruncationCount of the examples whose LengthOf values are lengths."""
  count = TruncationCount()
  for value in lengths:
    count.count(value >> 1, bool(value & 1), max_seq_length)
  return count


class Staged(object):
  """The record bodies of a split's examples in scratch files (one per worker), in the
  order read: example i is in chunk i // CHUNK_ROWS, which worker chunk % workers
  featurised, after its earlier chunks."""

  def __init__(self, paths, ends, lengths, empty, featurised=None):
    self.paths, self.ends, self._lengths = paths, ends, lengths
    self.empty = empty  # 1 for each example with an empty or whitespace-only text
    self.num_examples = len(empty)
    # With some examples left out: each example's place among those featurised (or -1).
    self._featurised = featurised
    self._files = [os.open(path, os.O_RDONLY) for path in paths]

  def _where(self, index):
    place = index if self._featurised is None else self._featurised[index]
    if place < 0:
      raise ValueError("example %d was not featurised" % index)
    chunk, within = divmod(place, CHUNK_ROWS)
    worker, round_ = chunk % len(self.paths), chunk // len(self.paths)
    return worker, round_ * CHUNK_ROWS + within

  def body(self, index):
    worker, position = self._where(index)
    ends = self.ends[worker]
    start = ends[position - 1] if position else 0
    return os.pread(self._files[worker], ends[position] - start, start)

  def length(self, index):
    """The example's LengthOf value."""
    worker, position = self._where(index)
    return self._lengths[worker][position]

  def lengths(self, indices):
    return (self.length(i) for i in indices)

  def close(self):
    for fd in self._files:
      os.close(fd)
    self._files = []


def stage(examples, job, scratch, workers, observe=None, keep=None):
  """Featurises examples (an iterable, read once) into scratch files under the folder
  scratch, in workers forked processes (1: this one). observe(example) sees each example
  as it is read. keep (a flag per example, by its place) leaves out the examples not
  flagged: they are counted, not featurised. Returns Staged."""
  workers = max(1, workers)
  paths = [os.path.join(scratch, "bodies-%02d" % w) for w in range(workers)]
  send = _Workers(job, paths) if workers > 1 else _InProcess(job, paths[0])
  empty = array.array("b")
  featurised = array.array("q") if keep is not None else None
  chunk = []
  sent = 0
  started = last_report = time.time()
  try:
    for index, example in enumerate(examples):
      if observe is not None:
        observe(example)
      empty.append(not example.text_a.strip() or (example.text_b is not None and
                                                   not example.text_b.strip()))
      if keep is not None:
        if not (index < len(keep) and keep[index]):  # (a longer file is refused later)
          featurised.append(-1)
          continue
        featurised.append(sent)
      sent += 1
      chunk.append((example.text_a, example.text_b, example.label))
      if len(chunk) == CHUNK_ROWS:
        send(chunk)
        chunk = []
        if time.time() - last_report >= REPORT_SECONDS:
          last_report = time.time()
          log.info("featurised %d examples (%.0f/s)", sent, sent / (last_report - started))
    if chunk:
      send(chunk)
    ends, lengths = send.finish()
  except BaseException:
    send.abandon()
    raise
  return Staged(paths, ends, lengths, empty, featurised)


class _InProcess(object):
  """Featurises chunks in this process into one scratch file."""

  def __init__(self, job, path):
    self.job, self.writer = job, _BodyWriter(path)

  def __call__(self, chunk):
    for body, length in self.job.bodies(chunk):
      self.writer.add(body, length)

  def finish(self):
    self.writer.close()
    return [self.writer.ends], [self.writer.lengths]

  def abandon(self):
    self.writer.close()


class _BodyWriter(object):
  """Appends bodies to a scratch file, keeping where each ends and its example's length
  (16 bytes per body)."""

  def __init__(self, path):
    self.path = path
    self.file = open(path, "wb")
    self.ends, self.lengths = array.array("Q"), array.array("Q")
    self.position = 0

  def add(self, body, length):
    with _named_faults(self.path):
      self.file.write(body)
    self.position += len(body)
    self.ends.append(self.position)
    self.lengths.append(length)

  def close(self):
    if not self.file.closed:
      with _named_faults(self.path):
        self.file.close()


@contextlib.contextmanager
def _named_faults(path):
  """A write's OSError with the path it was writing (a failed write names no file)."""
  try:
    yield
  except OSError as e:
    if e.filename is not None:
      raise
    raise OSError(e.errno, e.strerror, path)


class _Workers(ForkedWorkers):
  """Forked workers, each featurising the chunks sent to it (chunk k to worker
  k % workers) into its scratch file."""

  def __init__(self, job, paths):
    super(_Workers, self).__init__(lambda read_input, path: _featurise_chunks(
        job, read_input, path), paths)

  def finish(self):
    super(_Workers, self).finish()
    ends, lengths = [], []
    for path in self.paths:
      with open(path + ".ends", "rb") as f:
        values = array.array("Q")
        values.frombytes(f.read())
      half = len(values) // 2
      ends.append(values[:half])
      lengths.append(values[half:])
    return ends, lengths


def _featurise_chunks(job, read_input, path):
  """A worker's life: featurise each chunk sent until its input closes, then write where
  each body ends and each example's length (path + '.ends')."""
  writer = _BodyWriter(path)
  try:
    for chunk in received(read_input):
      for body, length in job.bodies(chunk):
        writer.add(body, length)
  finally:
    writer.close()
  with _named_faults(path + ".ends"), open(path + ".ends", "wb") as out:
    out.write(writer.ends.tobytes() + writer.lengths.tobytes())


def write_shards(job, staged, order, weights, temporary, shard_sizes, num_padding,
                 file_ids=False):
  """Writes the staged bodies into the shards' files (temporary, in order; None for a
  shard not written here): position p of the split holds example order[p] (p when order
  is None) with weight weights[p] and example id p (order[p], its place in the file,
  with file_ids); the padding rows follow in the last shard."""
  position = 0
  padding = job.padding_record() if num_padding else None
  try:
    for shard, (path, size) in enumerate(zip(temporary, shard_sizes)):
      if path is None:
        position += size
        continue
      with tf.io.TFRecordWriter(path) as writer:
        for p in range(position, position + size):
          index = order[p] if order is not None else p
          writer.write(job.record(index if file_ids else p, staged.body(index),
                                  weights[p] if weights is not None else None))
        position += size
        if shard == len(temporary) - 1:
          for _ in range(num_padding):
            writer.write(padding)
  except BaseException:
    for path in temporary:  # leave no partial files
      if path is not None and tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)
    raise


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


@contextlib.contextmanager
def scratch_folder(record_path):
  """A scratch folder for a split's staged bodies: beside its records when they are local
  (the same disk, which holds the records anyway), else in the system's temporary folder.
  Its caller holds the split's write lock, so any other scratch folder of the split, and
  any staged record file (<record file>.tmp-*), was left by a writer that was killed: they
  are removed."""
  folder, name = os.path.split(record_path)
  prefix = name + ".featurise-"
  base = None
  if "://" not in record_path:
    base = folder
    escaped = os.path.join(glob.escape(folder), glob.escape(name))
    for stale in glob.glob(escaped + ".featurise-*") + glob.glob(escaped + "*.tmp-*"):
      log.info("removing %s, left by a featurisation that did not end", stale)
      if os.path.isdir(stale):
        shutil.rmtree(stale, ignore_errors=True)
      else:
        remove_quietly(stale)
  scratch = tempfile.mkdtemp(prefix=prefix, dir=base)
  try:
    yield scratch
  finally:
    shutil.rmtree(scratch, ignore_errors=True)
