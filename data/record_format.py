"""The one TFRecord schema: the parsing spec that input_fn reads and the serializer that
writes exactly those features."""

import math
import struct

import tensorflow.compat.v1 as tf

from data.data_error import DataError

# 2: reading and truncation counts in the metadata; 3: label specs; 4: each file's size,
# sha256 and record count, checked before the files are used again.
SCHEMA_VERSION = 4
SEQUENCE_FIELDS = ("input_ids", "input_mask", "segment_ids")
SCALAR_INT_FIELDS = ("is_real_example", "example_id")
LABEL_FIELD = "label_ids"
WEIGHT_FIELD = "sample_weight"  # only in weighted training records


# The largest finite float32: a float read from a file for a float32 record (a regression
# target, a sample weight) must be finite and at most this in magnitude.
FLOAT32_MAX = 3.4028234663852886e38


def float32_problem(value):
  """Why a float cannot be stored in a float32 record, or None: NaN, infinite, or beyond
  float32's range (finite in float64, but struct would refuse to pack it)."""
  if math.isnan(value):
    return "is NaN"
  if math.isinf(value):
    return "is infinite"
  if abs(value) > FLOAT32_MAX:
    return "is beyond the range of a 32-bit float (at most 3.4e38 in magnitude)"
  return None


def check_float32(path, value, cell, fix, line=None, column=None):
  """The value read from a cell, if a float32 record can hold it; else a DataError naming
  the file, line and column. Every float from a file that goes into a record passes here."""
  problem = float32_problem(value)
  if problem is not None:
    raise DataError(path, "the value %r %s" % (cell, problem), fix, line=line, column=column)
  return value


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
    return self.record(features.example_id, self.body(features, weight))

  # Map entries sorted by key: example_id, input_ids, input_mask, is_real_example,
  # label_ids, (sample_weight,) segment_ids. Only the first two change from row to row.
  # A record is made of its body (every entry but example_id) in two steps, so that a
  # body made before the example's place in its split is known gets its id (and weight)
  # when it is written.
  def body(self, features, weight=1.0):
    """The map entries after example_id."""
    return self._input_ids_entry(features) + self._entries_after_input_ids(features, weight)

  def record(self, example_id, body):
    """The serialised Example of a body with its example_id."""
    entries = self._int64_entry("example_id", _varint(example_id)) + body
    return _length_delimited(1, entries)  # Example.features, whose map entries are field 1

  def weigh(self, body, weight, max_seq_length):
    """A weighted body with its weight set: the weight's 4 bytes end where the segment_ids
    entry (of fixed size: max_seq_length packed 0s and 1s) begins."""
    after = self._framings.get(("weight", max_seq_length))
    if after is None:
      after = self._framings[("weight", max_seq_length)] = len(
          _int64_map_entry("segment_ids", [0] * max_seq_length))
    end = len(body) - after
    return body[:end - 4] + struct.pack("<f", weight) + body[end:]

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
