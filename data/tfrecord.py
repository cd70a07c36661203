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
import shutil
import struct
import sys
import tempfile
import traceback

import tensorflow.compat.v1 as tf

from data.features import (Truncation, TruncationCount, convert_examples, num_padding_rows,
                           padding_features)
from spec import labels as label_specs

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3  # 2: reading and truncation counts in the metadata; 3: label specs
SEQUENCE_FIELDS = ("input_ids", "input_mask", "segment_ids")
SCALAR_INT_FIELDS = ("is_real_example", "example_id")
LABEL_FIELD = "label_ids"
WEIGHT_FIELD = "sample_weight"  # only in weighted training records


def parsing_spec(max_seq_length, label_spec, weighted=False):
  """{name: FixedLenFeature} for tf.io.parse_single_example; the writer emits exactly these.
  The label's dtype and shape are the label spec's: a scalar int64 class index (Google's
  layout), or a float32 vector with one value per label column."""
  spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in SEQUENCE_FIELDS}
  for name in SCALAR_INT_FIELDS:
    spec[name] = tf.io.FixedLenFeature([], tf.int64)
  width = label_spec.record_width
  spec[LABEL_FIELD] = tf.io.FixedLenFeature([] if width is None else [width],
                                            tf.as_dtype(label_spec.record_dtype))
  if weighted:
    spec[WEIGHT_FIELD] = tf.io.FixedLenFeature([], tf.float32)
  return spec


class ExampleSerializer(object):
  """Serialises InputFeatures as a tf.train.Example with the fields of parsing_spec: the
  bytes of protobuf's deterministic serialisation of that Example, several times faster.

  The framing is written directly (map entries in sorted key order, as
  deterministic serialisation orders them). input_ids are packed from a table of
  precomputed varints, and each padding 0 is the single byte 0x00; the framing in
  front of them depends only on their packed size, and is cached by it. The map
  entries after input_ids (mask, flag, label, segments) depend only on the segment
  lengths, the flag and a class label, so they are cached as one piece of bytes; a
  float label vector and a weight (weighted=True) are packed between cached pieces.
  """

  def __init__(self, label_spec, weighted=False):
    self.float_labels = label_spec.record_dtype == "float32"
    self.weighted = weighted
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

  def __call__(self, features, weight=1.0):
    # Map entries sorted by key: example_id, input_ids, input_mask, is_real_example,
    # label_ids, (sample_weight,) segment_ids. Only the first two change from row to row.
    entries = (self._int64_entry("example_id", _varint(features.example_id)) +
               self._input_ids_entry(features) + self._entries_after_input_ids(features, weight))
    return _length_delimited(1, entries)  # Example.features, whose map entries are field 1

  def _entries_after_input_ids(self, features, weight):
    """input_mask, is_real_example, label_ids, (sample_weight,) segment_ids: cached, but
    for float labels and weights."""
    shape = (len(features.token_ids), features.num_first_segment, features.max_seq_length,
             features.is_real_example)
    if self.float_labels or self.weighted:
      before_label, after_label = self._cached(shape, lambda: (
          _int64_map_entry("input_mask", features.input_mask) +
          _int64_map_entry("is_real_example", [int(features.is_real_example)]),
          _int64_map_entry("segment_ids", features.segment_ids)))
      if self.float_labels:
        label = _float_map_entry(LABEL_FIELD, features.label_id)
      else:
        label = _int64_map_entry(LABEL_FIELD, [features.label_id])
      if self.weighted:
        label += _float_map_entry(WEIGHT_FIELD, [weight])
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


def _float_map_entry(name, values):
  """A float feature: Feature.float_list.value, packed little-endian float32s."""
  return _map_entry(name, _length_delimited(2, _length_delimited(
      1, struct.pack("<%df" % len(values), *values))))


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


def shard_sizes(num_examples, num_shards):
  """The examples in each of num_shards shards (the last ones may be empty)."""
  return [end - start for start, end in _shard_ranges(num_examples, num_shards)]


def _shard_ranges(num_examples, num_shards):
  """Contiguous [start, end) ranges, so shards read in order give the examples in order."""
  size = -(-num_examples // num_shards) if num_examples else 0
  return [(min(i * size, num_examples), min((i + 1) * size, num_examples))
          for i in range(num_shards)]


# With several workers each shard is written as this many pieces per worker, so
# that a worker that finishes early takes more pieces (rows differ in cost, and
# files are often sorted, e.g. by label).
PIECES_PER_WORKER = 4
_FRAME = struct.Struct("<Q")  # the length before each record in a worker's piece file


class _Featurisation(object):
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
    with open(path, "wb") as out:
      out.write(b"\0" * (3 * _FRAME.size))  # the count goes here once it is known
      for record in self.records(index, truncation):
        out.write(_FRAME.pack(len(record)))
        out.write(record)
      out.seek(0)
      out.write(_FRAME.pack(truncation.truncated) + _FRAME.pack(truncation.longest) +
                _FRAME.pack(truncation.longest_exact))


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


def _write_shards(job, paths, pieces_per_shard, workers):
  """Writes each of paths (shards, in order) as path + '.tmp'; pieces_per_shard pieces of
  the job make one shard. With workers > 1, forked processes featurise the pieces.
  Returns the TruncationCount of all examples."""
  truncation = TruncationCount()
  piece_files = {}
  piece_dir = None
  temporary = [path + ".tmp" for path in paths]
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
  """Runs function(*item) for each item of jobs[w] in forked child process w; waits for all.

  Plain fork and waitpid: a multiprocessing.Pool costs about 0.1 s to shut down,
  which is a sixth of featurising a 12,000-row file, and a spawned process would
  import TensorFlow again (seconds). Forking a process whose TensorFlow has started
  threads is safe only for a child that never calls TensorFlow (its locks may be
  held by threads the child does not have): the children here run plain Python
  (tokenizer, serialiser, file writes) and leave with os._exit.
  """
  children = []
  try:
    for items in jobs:
      pid = os.fork()
      if pid == 0:
        _child(function, items)  # never returns
      children.append(pid)
  finally:
    statuses = [os.waitpid(pid, 0)[1] for pid in children]
  failed = sum(1 for status in statuses if status != 0)
  if failed:
    raise RuntimeError("%d of %d featurisation processes failed; their errors are printed "
                       "above" % (failed, len(children)))


def _child(function, items):
  """A forked child's life: work, then leave without running the parent's clean-up."""
  status = 0
  try:
    for item in items:
      function(*item)
  except BaseException:  # reported here; the parent sees the exit status
    traceback.print_exc()
    status = 1
  finally:
    sys.stderr.flush()
    os._exit(status)


def build_records(examples, record_path, settings, tokenizer, pad_to_multiple=0, num_shards=1,
                  num_workers=1, weights=None):
  """Writes (or reuses) the records of one split. Returns the metadata dict.

  settings must hold everything that shapes the features: label_spec (its card entry),
  truncation (Truncation.as_dict(); head when absent), max_seq_length, vocab and casing,
  source file hashes. pad_to_multiple > 0 appends padding rows (is_real_example=0) so the
  files hold whole batches. With num_shards > 1 the examples are split into that many
  contiguous files (metadata["files"], in order); num_workers > 1 featurises in that
  many parallel processes (any number of shards, even one: workers write pieces of the
  examples, which are joined into the shards in order). weights (one float per
  example, for training) adds the sample_weight field; padding rows weigh 0.
  """
  num_shards = max(1, num_shards)
  settings = dict(settings, pad_to_multiple=pad_to_multiple, num_examples=len(examples),
                  num_shards=num_shards, weighted=weights is not None,
                  weights_sha256=_weights_sha256(weights))
  key = fingerprint(settings)
  existing = read_metadata(record_path)
  if existing is not None and existing.get("fingerprint") == key and all(
      tf.io.gfile.exists(p) for p in existing.get("files", [])):
    log.info("reusing cached features %s (%d examples + %d padding)", record_path,
             existing["num_examples"], existing["num_padding"])
    report_changes(record_path, existing)
    return existing
  if existing is not None:
    log.info("cached features %s are stale (inputs changed): rebuilding", record_path)

  paths = shard_paths(record_path, num_shards)
  num_padding = num_padding_rows(len(examples), pad_to_multiple)
  tf.io.gfile.makedirs(record_path.rsplit("/", 1)[0])
  pieces_per_shard = (1 if num_workers <= 1 else
                      -(-num_workers * PIECES_PER_WORKER // num_shards))
  ranges = [(start + a, start + b)
            for start, end in _shard_ranges(len(examples), num_shards)
            for a, b in _shard_ranges(end - start, pieces_per_shard)]
  job = _Featurisation(examples, settings, tokenizer, num_padding, ranges, weights)
  with _existing_objects_frozen():
    truncation = _write_shards(job, paths, pieces_per_shard, num_workers)
  for path in paths:
    tf.io.gfile.rename(path + ".tmp", path, overwrite=True)

  metadata = dict(settings, fingerprint=key, schema_version=SCHEMA_VERSION, files=paths,
                  num_padding=num_padding, num_records=len(examples) + num_padding,
                  empty_texts=_empty_texts(examples), **truncation.as_dict())
  with tf.io.gfile.GFile(metadata_path(record_path), "w") as f:
    json.dump(metadata, f, indent=2, sort_keys=True)
  log.info("wrote %s: %d examples + %d padding rows in %d file(s)", record_path, len(examples),
           num_padding, len(paths))
  report_changes(record_path, metadata)
  return metadata


def _weights_sha256(weights):
  if weights is None:
    return None
  return hashlib.sha256(struct.pack("<%dd" % len(weights), *weights)).hexdigest()


def _empty_texts(examples):
  """Examples whose text (or either text of a pair) is empty or only whitespace."""
  return sum(1 for e in examples
             if not e.text_a.strip() or (e.text_b is not None and not e.text_b.strip()))


def report_changes(record_path, metadata):
  """Logs what featurisation changed or found: empty texts, truncated texts."""
  if metadata.get("empty_texts"):
    log.warning("%s: %d examples have an empty or whitespace-only text; they are kept and "
                "featurised as [CLS] [SEP]", record_path, metadata["empty_texts"])
  if metadata.get("truncated"):
    max_len = metadata["max_seq_length"]
    log.info("%s: %d examples were longer than max_seq_length=%d and were truncated (the "
             "longest has %s%d tokens)", record_path, metadata["truncated"], max_len,
             "" if metadata.get("longest_tokens_exact") else "at least ",
             metadata["longest_tokens"])
