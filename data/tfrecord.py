"""The one TFRecord schema (writer and parser share it) and the feature cache.

Each record file has a metadata JSON beside it. A later run whose inputs have the
same fingerprint (source files, vocabulary, lengths, labels, padding) reuses the
records; any change rebuilds them.
"""

import hashlib
import json
import logging

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

  Each Feature is still serialised by protobuf; the mask and segment features,
  which depend only on the text lengths, are cached; and the Example and map-entry
  framing around them is written directly (keys in sorted order, as deterministic
  serialisation orders them).
  """

  def __init__(self, is_regression):
    self.is_regression = is_regression
    self._cache = {}

  def _ints(self, values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values)).SerializeToString()

  def _padded_ints(self, values, mask):
    """Like _ints(values), encoding only the unmasked part with protobuf: each padding 0 of
    a packed int64 list is the single byte 0x00, appended directly."""
    try:
      length = mask.index(0)
    except ValueError:
      return self._ints(values)
    packed = tf.train.Int64List(value=values[:length]).SerializeToString()
    payload = _field_payload(packed) + b"\x00" * (len(values) - length)
    return _length_delimited(3, _length_delimited(1, payload))  # Feature.int64_list.value

  def _cached_ints(self, values):
    key = tuple(values)
    found = self._cache.get(key)
    if found is None:
      found = self._cache[key] = self._ints(values)
    return found

  def __call__(self, features):
    if self.is_regression:
      label = tf.train.Feature(float_list=tf.train.FloatList(
          value=[features.label_id])).SerializeToString()
    else:
      label = self._cached_ints([features.label_id])
    fields = {
        "example_id": self._ints([features.example_id]),
        "input_ids": self._padded_ints(features.input_ids, features.input_mask),
        "input_mask": self._cached_ints(features.input_mask),
        "is_real_example": self._cached_ints([int(features.is_real_example)]),
        LABEL_FIELD: label,
        "segment_ids": self._cached_ints(features.segment_ids),
    }
    entries = b"".join(_length_delimited(1, _length_delimited(1, key.encode("ascii")) +
                                         _length_delimited(2, value))
                       for key, value in sorted(fields.items()))
    return _length_delimited(1, entries)


def _varint(value):
  out = bytearray()
  while value > 0x7F:
    out.append((value & 0x7F) | 0x80)
    value >>= 7
  out.append(value)
  return bytes(out)


def _field_payload(serialized):
  """The payload of a message holding one length-delimited field (tag, length, payload)."""
  if not serialized:
    return b""
  start = 1
  while serialized[start] & 0x80:
    start += 1
  return serialized[start + 1:]


def _length_delimited(field_number, payload):
  return _varint(field_number << 3 | 2) + _varint(len(payload)) + payload


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


def _write_shard(index):
  job = _SHARD_JOB
  start, end = job["ranges"][index]
  path = job["paths"][index]
  serialize = ExampleSerializer(job["is_regression"])
  with tf.io.TFRecordWriter(path + ".tmp") as writer:
    for features in convert_examples(job["examples"][start:end], job["labels"],
                                     job["max_seq_length"], job["tokenizer"],
                                     first_example_id=start):
      writer.write(serialize(features))
    if index == len(job["paths"]) - 1:
      for _ in range(job["num_padding"]):
        writer.write(serialize(padding_features(job["max_seq_length"], job["is_regression"])))
  return path


def build_records(examples, record_path, settings, tokenizer, pad_to_multiple=0, num_shards=1,
                  num_workers=1):
  """Writes (or reuses) the records of one split. Returns the metadata dict.

  settings must hold everything that shapes the features: labels, is_regression,
  max_seq_length, vocab and casing, source file hashes. pad_to_multiple > 0 appends
  padding rows (is_real_example=0) so the files hold whole batches. With
  num_shards > 1 the examples are split into that many contiguous files
  (metadata["files"], in order); num_workers > 1 writes shards in parallel processes.
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
                    is_regression=settings["is_regression"], paths=paths,
                    ranges=_shard_ranges(len(examples), num_shards))
  try:
    workers = min(num_workers, num_shards)
    if workers > 1:
      import multiprocessing
      with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool.map(_write_shard, range(num_shards))
    else:
      for index in range(num_shards):
        _write_shard(index)
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
