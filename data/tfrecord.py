"""The one TFRecord schema (writer and parser share it) and the feature cache.

Each record file has a metadata JSON beside it. A later run whose inputs have the
same fingerprint (source files, vocabulary, lengths, labels, padding) reuses the
records; any change rebuilds them.
"""

import contextlib
import gc
import hashlib
import json
import logging
import os
import struct
import sys
import traceback

import tensorflow.compat.v1 as tf

from data.features import convert_examples, num_padding_rows, padding_features

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
SEQUENCE_FIELDS = ("input_ids", "input_mask", "segment_ids")
SCALAR_INT_FIELDS = ("is_real_example", "example_id")
LABEL_FIELD = "label_ids"


def parsing_spec(max_seq_length, is_regression):
  """{name: FixedLenFeature} for tf.io.parse_single_example; the writer emits exactly these."""
  spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in SEQUENCE_FIELDS}
  for name in SCALAR_INT_FIELDS:
    spec[name] = tf.io.FixedLenFeature([], tf.int64)
  spec[LABEL_FIELD] = tf.io.FixedLenFeature([], tf.float32 if is_regression else tf.int64)
  return spec


class ExampleSerializer(object):
  """Serialises InputFeatures as a tf.train.Example with the fields of parsing_spec: the
  bytes of protobuf's deterministic serialisation of that Example, several times faster.

  The framing is written directly (map entries in sorted key order, as
  deterministic serialisation orders them). input_ids are packed from a table of
  precomputed varints, and each padding 0 is the single byte 0x00; the framing in
  front of them depends only on their packed size, and is cached by it. The map
  entries after input_ids (mask, flag, label, segments) depend only on the segment
  lengths, the flag and a class label, so they are cached as one piece of bytes.
  """

  def __init__(self, is_regression):
    self.is_regression = is_regression
    self._entries = {}
    self._framings = {}

  def _int64_entry(self, name, packed):
    """The map entry of an int64 feature whose packed values are given."""
    framing = self._framings.get((name, len(packed)))
    if framing is None:  # it depends only on the name and the packed size
      whole = _map_entry(name, _int64_feature(packed))
      framing = self._framings[(name, len(packed))] = whole[:len(whole) - len(packed)]
    return framing + packed

  def _input_ids_entry(self, features):
    return self._int64_entry("input_ids",
                             _packed(features.token_ids) + b"\x00" * features.num_padding)

  def __call__(self, features):
    # Map entries sorted by key: example_id, input_ids, input_mask, is_real_example,
    # label_ids, segment_ids. Only the first two change from row to row.
    entries = (self._int64_entry("example_id", _varint(features.example_id)) +
               self._input_ids_entry(features) + self._entries_after_input_ids(features))
    return _length_delimited(1, entries)  # Example.features, whose map entries are field 1

  def _entries_after_input_ids(self, features):
    """input_mask, is_real_example, label_ids and segment_ids: cached, but for a float label."""
    shape = (len(features.token_ids), features.num_first_segment, features.max_seq_length,
             features.is_real_example)
    if self.is_regression:
      before_label, after_label = self._cached(shape, lambda: (
          _int64_map_entry("input_mask", features.input_mask) +
          _int64_map_entry("is_real_example", [int(features.is_real_example)]),
          _int64_map_entry("segment_ids", features.segment_ids)))
      label = _map_entry(LABEL_FIELD, _length_delimited(2, _length_delimited(
          1, struct.pack("<f", features.label_id))))  # Feature.float_list.value, packed
      return before_label + label + after_label
    return self._cached(shape + (features.label_id,), lambda: b"".join((
        _int64_map_entry("input_mask", features.input_mask),
        _int64_map_entry("is_real_example", [int(features.is_real_example)]),
        _int64_map_entry(LABEL_FIELD, [features.label_id]),
        _int64_map_entry("segment_ids", features.segment_ids))))

  def _cached(self, key, build):
    found = self._entries.get(key)
    if found is None:
      found = self._entries[key] = build()
    return found


def _int64_map_entry(name, values):
  return _map_entry(name, _int64_feature(_packed(values)))


def _packed(values):
  """Packed varints of int64 values; token ids (small, never negative) come from the table."""
  if values and min(values) >= 0:  # a negative index would silently read the table's end
    try:
      return b"".join(map(_SMALL_VARINTS.__getitem__, values))
    except IndexError:  # beyond the table
      pass
  return b"".join(_varint(v) for v in values)


def _int64_feature(packed):
  return _length_delimited(3, _length_delimited(1, packed))  # Feature.int64_list.value


def _map_entry(key, feature):
  return _length_delimited(1, _length_delimited(1, key.encode("ascii")) +
                           _length_delimited(2, feature))


def _varint(value):
  """Protobuf's base-128 varint; a negative int64 is its 64-bit two's complement."""
  value = int(value) & 0xFFFFFFFFFFFFFFFF
  out = bytearray()
  while value > 0x7F:
    out.append((value & 0x7F) | 0x80)
    value >>= 7
  out.append(value)
  return bytes(out)


def _length_delimited(field_number, payload):
  size = len(payload)
  return (_TAGS[field_number] + (_SMALL_VARINTS[size] if size < _NUM_SMALL_VARINTS
                                 else _varint(size)) + payload)


# varint bytes of 0..2^15-1: every id of a 30522-word vocabulary, and every length here.
_NUM_SMALL_VARINTS = 1 << 15
_SMALL_VARINTS = [_varint(i) for i in range(_NUM_SMALL_VARINTS)]
_TAGS = {n: _varint(n << 3 | 2) for n in (1, 2, 3)}  # length-delimited fields 1, 2, 3


def file_sha256(path):
  digest = hashlib.sha256()
  with tf.io.gfile.GFile(path, "rb") as f:
    while True:
      block = f.read(1 << 20)
      if not block:
        break
      digest.update(block)
  return digest.hexdigest()


def fingerprint(settings):
  """A short stable hash of everything that determines the records' content."""
  blob = json.dumps(dict(settings, schema_version=SCHEMA_VERSION), sort_keys=True)
  return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def metadata_path(record_path):
  return record_path + ".meta.json"


def read_metadata(record_path):
  path = metadata_path(record_path)
  if not (tf.io.gfile.exists(path) and tf.io.gfile.exists(record_path)):
    return None
  with tf.io.gfile.GFile(path, "r") as f:
    try:
      return json.load(f)
    except ValueError:
      return None


def shard_paths(record_path, num_shards):
  if num_shards <= 1:
    return [record_path]
  return ["%s-%05d-of-%05d" % (record_path, i, num_shards) for i in range(num_shards)]


def _shard_ranges(num_examples, num_shards):
  """Contiguous [start, end) ranges, so shards read in order give the examples in order."""
  size = -(-num_examples // num_shards) if num_examples else 0
  return [(min(i * size, num_examples), min((i + 1) * size, num_examples))
          for i in range(num_shards)]


# What forked featurisation workers inherit (examples and tokenizer are not pickled).
_SHARD_JOB = {}
# With several workers each shard is written as this many pieces per worker, so
# that a worker that finishes early takes more pieces (rows differ in cost, and
# files are often sorted, e.g. by label).
PIECES_PER_WORKER = 4


def _write_piece(index):
  """Writes the records of one contiguous piece of the examples to its own file."""
  job = _SHARD_JOB
  start, end = job["ranges"][index]
  path = job["piece_paths"][index]
  serialize = ExampleSerializer(job["is_regression"])
  with tf.io.TFRecordWriter(path) as writer:
    for features in convert_examples(job["examples"][start:end], job["labels"],
                                     job["max_seq_length"], job["tokenizer"],
                                     first_example_id=start):
      writer.write(serialize(features))
    if index == len(job["ranges"]) - 1:
      for _ in range(job["num_padding"]):
        writer.write(serialize(padding_features(job["max_seq_length"], job["is_regression"])))
  return path


def _concatenate(parts, path):
  """A TFRecord file is a sequence of self-delimiting records, so files concatenate."""
  with tf.io.gfile.GFile(path, "wb") as out:
    for part in parts:
      with tf.io.gfile.GFile(part, "rb") as f:
        out.write(f.read())
      tf.io.gfile.remove(part)


def _write_shards(paths, num_examples, workers):
  """Writes each of paths (shards, in order) as path + '.tmp'."""
  pieces_per_shard = 1 if workers <= 1 else -(-workers * PIECES_PER_WORKER // len(paths))
  ranges = [(start + a, start + b)
            for start, end in _shard_ranges(num_examples, len(paths))
            for a, b in _shard_ranges(end - start, pieces_per_shard)]
  piece_paths = ["%s.tmp-%05d" % (path, i) for path in paths for i in range(pieces_per_shard)]
  if pieces_per_shard == 1:
    piece_paths = [path + ".tmp" for path in paths]
  _SHARD_JOB.update(ranges=ranges, piece_paths=piece_paths)
  try:
    _write_pieces(paths, piece_paths, pieces_per_shard, len(ranges), workers)
  except BaseException:
    for path in set(piece_paths + [p + ".tmp" for p in paths]):  # leave no partial files
      if tf.io.gfile.exists(path):
        tf.io.gfile.remove(path)
    raise


def _write_pieces(paths, piece_paths, pieces_per_shard, num_pieces, workers):
  if workers > 1:
    # Worker w takes pieces w, w + workers, ...: interleaved, so each gets rows from
    # all over the file even when it is sorted (by label, by length).
    _run_forked([list(range(w, num_pieces, workers)) for w in range(workers)], _write_piece)
    if pieces_per_shard > 1:
      for i, path in enumerate(paths):
        _concatenate(piece_paths[i * pieces_per_shard:(i + 1) * pieces_per_shard],
                     path + ".tmp")
  else:
    for index in range(num_pieces):
      _write_piece(index)


@contextlib.contextmanager
def _existing_objects_frozen():
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
  """Runs function(i) for each i of jobs[w] in forked child process w; waits for all.

  Plain fork and waitpid: a multiprocessing.Pool costs about 0.1 s to shut down,
  which is a sixth of featurising a 12,000-row file.
  """
  children = []
  try:
    for indices in jobs:
      pid = os.fork()
      if pid == 0:
        _child(function, indices)  # never returns
      children.append(pid)
  finally:
    statuses = [os.waitpid(pid, 0)[1] for pid in children]
  failed = sum(1 for status in statuses if status != 0)
  if failed:
    raise RuntimeError("%d of %d featurisation processes failed; their errors are printed "
                       "above" % (failed, len(children)))


def _child(function, indices):
  """A forked child's life: work, then leave without running the parent's clean-up."""
  status = 0
  try:
    for i in indices:
      function(i)
  except BaseException:  # reported here; the parent sees the exit status
    traceback.print_exc()
    status = 1
  finally:
    sys.stderr.flush()
    os._exit(status)


def build_records(examples, record_path, settings, tokenizer, pad_to_multiple=0, num_shards=1,
                  num_workers=1):
  """Writes (or reuses) the records of one split. Returns the metadata dict.

  settings must hold everything that shapes the features: labels, is_regression,
  max_seq_length, vocab and casing, source file hashes. pad_to_multiple > 0 appends
  padding rows (is_real_example=0) so the files hold whole batches. With
  num_shards > 1 the examples are split into that many contiguous files
  (metadata["files"], in order); num_workers > 1 featurises in that many parallel
  processes (any number of shards, even one: workers write pieces of the
  examples, which are joined into the shards in order).
  """
  num_shards = max(1, num_shards)
  settings = dict(settings, pad_to_multiple=pad_to_multiple, num_examples=len(examples),
                  num_shards=num_shards)
  key = fingerprint(settings)
  existing = read_metadata(record_path)
  if existing is not None and existing.get("fingerprint") == key and all(
      tf.io.gfile.exists(p) for p in existing.get("files", [])):
    log.info("reusing cached features %s (%d examples + %d padding)", record_path,
             existing["num_examples"], existing["num_padding"])
    return existing
  if existing is not None:
    log.info("cached features %s are stale (inputs changed): rebuilding", record_path)

  paths = shard_paths(record_path, num_shards)
  num_padding = num_padding_rows(len(examples), pad_to_multiple)
  tf.io.gfile.makedirs(record_path.rsplit("/", 1)[0])
  _SHARD_JOB.update(examples=examples, labels=settings["labels"], tokenizer=tokenizer,
                    max_seq_length=settings["max_seq_length"], num_padding=num_padding,
                    is_regression=settings["is_regression"])
  try:
    with _existing_objects_frozen():
      _write_shards(paths, len(examples), num_workers)
  finally:
    _SHARD_JOB.clear()
  for path in paths:
    tf.io.gfile.rename(path + ".tmp", path, overwrite=True)

  metadata = dict(settings, fingerprint=key, schema_version=SCHEMA_VERSION, files=paths,
                  num_padding=num_padding, num_records=len(examples) + num_padding)
  with tf.io.gfile.GFile(metadata_path(record_path), "w") as f:
    json.dump(metadata, f, indent=2, sort_keys=True)
  log.info("wrote %s: %d examples + %d padding rows in %d file(s)", record_path, len(examples),
           num_padding, len(paths))
  return metadata
