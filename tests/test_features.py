"""InputFeatures conversion, the shared TFRecord schema, the cache, and input_fn."""

import collections
import gc
import json
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import BINARY, TINY_VOCAB, google_bert, sample_path
from data import tokenization, vocabulary
from data.features import (InputExample, convert_example, convert_examples, num_padding_rows,
                           truncate_pair)
from data import input_fn
from data.input_fn import input_fn_builder
from data.processors import get_processor
from data.tfrecord import build_records, metadata_path
from spec.heads.classification import SingleLabel
from spec.heads.multi_label import MultiLabel
from spec.heads.regression import Regression



def test_truncate_pair_takes_from_the_longer_side():
  a, b = list("abcdefg"), list("xyz")
  truncate_pair(a, b, 6)
  assert (a, b) == (list("abc"), list("xyz"))
  a, b = list("abcd"), list("wxyz")
  truncate_pair(a, b, 5)
  assert (a, b) == (list("abc"), list("wx"))


def test_pair_features_exact_ids(tiny_vocab):
  tokenizer = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
  example = InputExample("g", "Hello world, hello world!", "Goodbye.", label="1")
  f = convert_example(example, 7, BINARY, 10, tokenizer)
  # 7 slots for 6 + 2 tokens: the longer text a loses its "!".
  # [CLS] hello world , hello world [SEP] goodbye . [SEP]
  assert f.input_ids == [101, 7592, 2088, 1010, 7592, 2088, 102, 9119, 1012, 102]
  assert f.segment_ids == [0] * 7 + [1] * 3
  assert f.input_mask == [1] * 10
  padded = convert_example(InputExample("g", "Hello!", "Bye"), 0, BINARY, 8, tokenizer)
  assert padded.input_ids == [101, 7592, 999, 102, 9061, 102, 0, 0]
  assert padded.segment_ids == [0, 0, 0, 0, 1, 1, 0, 0]
  assert padded.input_mask == [1] * 6 + [0, 0]
  assert (f.label_id, f.is_real_example, f.example_id) == (1, True, 7)


@pytest.mark.tf1_only
def test_features_equal_googles_convert_single_example(tiny_vocab):
  """Same ids, mask, segments and label as bert-tensorflow's run_classifier, on real pairs."""
  run_classifier = google_bert("run_classifier")  # Imports bert.modeling: TF 1.15 only.
  google_tokenizer = google_bert("tokenization").FullTokenizer(tiny_vocab, True)
  tokenizer = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
  processor = get_processor("mrpc", data_dir=sample_path("glue", "MRPC"))
  examples = processor.get_examples("train") + processor.get_examples("dev")
  for max_len in (16, 48):
    for i, example in enumerate(examples):
      ours = convert_example(example, i, BINARY, max_len, tokenizer)
      theirs = run_classifier.convert_single_example(
          i, run_classifier.InputExample(example.guid, example.text_a, example.text_b,
                                         example.label),
          ["0", "1"], max_len, google_tokenizer)
      assert ours.input_ids == theirs.input_ids
      assert ours.input_mask == theirs.input_mask
      assert ours.segment_ids == theirs.segment_ids
      assert ours.label_id == theirs.label_id


def test_features_are_compact_and_checked():
  from data.features import InputFeatures, padding_features
  pair = InputFeatures([101, 7, 8, 102, 9, 102], 4, 8, 1)
  assert pair.input_ids == [101, 7, 8, 102, 9, 102, 0, 0]
  assert pair.input_mask == [1] * 6 + [0, 0]
  assert pair.segment_ids == [0, 0, 0, 0, 1, 1, 0, 0]
  padding = padding_features(4, False)
  assert (padding.input_ids, padding.input_mask, padding.segment_ids) == ([0] * 4,) * 3
  assert not padding.is_real_example and padding.example_id == -1
  with pytest.raises(ValueError, match="7 tokens .* do not fit max_seq_length 6"):
    InputFeatures(list(range(7)), 7, 6, 0)
  with pytest.raises(ValueError, match="3 tokens \\(4 in the first segment\\)"):
    InputFeatures([1, 2, 3], 4, 8, 0)


def test_unlabelled_and_regression_labels(tiny_vocab):
  tokenizer = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
  assert convert_example(InputExample("a", "x"), 0, BINARY, 8, tokenizer).label_id == 0
  assert convert_example(InputExample("a", "x", label="1"), 0, BINARY, 8,
                         tokenizer).label_id == 1  # the class index
  assert convert_example(InputExample("a", "x", label=(2.5,)), 0, Regression(["y"]), 8,
                         tokenizer).label_id == (2.5,)
  assert convert_example(InputExample("a", "x"), 0, MultiLabel(["a", "b"]), 8,
                         tokenizer).label_id == (0.0, 0.0)  # an unlabelled row: the spec's value
  empty = convert_example(InputExample("a", "   "), 0, BINARY, 8, tokenizer)
  assert empty.input_ids == [101, 102, 0, 0, 0, 0, 0, 0]


def test_padding_rows():
  assert [num_padding_rows(n, 8) for n in (0, 1, 8, 25, 33)] == [0, 7, 0, 7, 7]
  assert num_padding_rows(25, 0) == 0


def _settings(tiny_vocab, **overrides):
  settings = {"label_spec": BINARY.to_card(), "max_seq_length": 16,
              "vocab_sha256": vocabulary.vocab_fingerprint(tiny_vocab), "source_sha256": "x"}
  settings.update(overrides)
  return settings


def _examples(n):
  return [InputExample(str(i), "example number %d is here" % i, label=str(i % 2))
          for i in range(n)]


def _read_all(input_fn, batch_size):
  with tf.Graph().as_default():
    batch = tf.data.make_one_shot_iterator(input_fn({"batch_size": batch_size})).get_next()
    rows = []
    with tf.Session() as session:
      while True:
        try:
          rows.append(session.run(batch))
        except tf.errors.OutOfRangeError:
          return batch, rows


def test_records_round_trip_with_padding_and_metadata(tmp_path, tiny_vocab):
  tokenizer = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
  examples = _examples(13)
  path = str(tmp_path / "dev.tf_record")
  meta = build_records(examples, path, _settings(tiny_vocab), tokenizer, pad_to_multiple=4)
  assert (meta["num_examples"], meta["num_padding"], meta["num_records"]) == (13, 3, 16)
  with open(metadata_path(path)) as f:
    on_disk = json.load(f)
  assert on_disk["label_spec"]["classes"] == ["0", "1"] and on_disk["max_seq_length"] == 16
  assert on_disk["vocab_sha256"] == vocabulary.vocab_fingerprint(tiny_vocab)

  batch, rows = _read_all(input_fn_builder(path, 16, False, BINARY), 4)
  assert len(rows) == 4
  assert {k: v.dtype for k, v in batch.items()} == {
      "input_ids": tf.int32, "input_mask": tf.int32, "segment_ids": tf.int32,
      "label_ids": tf.int32, "is_real_example": tf.int32, "example_id": tf.int32}
  ids = np.concatenate([r["example_id"] for r in rows])
  real = np.concatenate([r["is_real_example"] for r in rows])
  assert ids[real == 1].tolist() == list(range(13))  # every real example once, in order
  assert ids[real == 0].tolist() == [-1, -1, -1]
  expected = list(convert_examples(examples, BINARY, 16, tokenizer))
  input_ids = np.concatenate([r["input_ids"] for r in rows])
  for i, features in enumerate(expected):
    assert input_ids[i].tolist() == features.input_ids
  assert np.concatenate([r["label_ids"] for r in rows])[:13].tolist() == [i % 2 for i in range(13)]


def test_regression_records_carry_float_labels(tmp_path, tiny_vocab):
  tokenizer = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
  examples = [InputExample(str(i), "pair", "text", label=(i * 0.5,)) for i in range(3)]
  path = str(tmp_path / "r.tf_record")
  spec = Regression(["score"])
  build_records(examples, path, _settings(tiny_vocab, label_spec=spec.to_card()),
                tokenizer, pad_to_multiple=4)
  batch, rows = _read_all(input_fn_builder(path, 16, False, spec), 4)
  assert batch["label_ids"].dtype == tf.float32
  assert rows[0]["label_ids"].tolist() == [[0.0], [0.5], [1.0], [0.0]]  # the last is padding


def test_multi_label_records_carry_one_float_per_column(tmp_path, tiny_vocab):
  """Real Jigsaw Toxic rows, all six label columns: the records hold each row's six 0/1
  values as read from the file."""
  tokenizer = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
  columns = ["toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate"]
  processor = get_processor("jigsaw_toxic", data_dir=sample_path("jigsaw_toxic_sample"),
                            label_columns=columns)
  examples = processor.get_examples("train")
  path = str(tmp_path / "m.tf_record")
  build_records(examples, path, _settings(tiny_vocab, label_spec=processor.label_spec.to_card()),
                tokenizer, pad_to_multiple=8)
  batch, rows = _read_all(input_fn_builder(path, 16, False, processor.label_spec), 8)
  labels = np.concatenate([r["label_ids"] for r in rows])
  assert batch["label_ids"].shape.as_list() == [8, 6] and labels.shape == (272, 6)
  import csv
  with open(sample_path("jigsaw_toxic_sample", "train.csv"), newline="", encoding="utf-8") as f:
    expected = [[float(row[c]) for c in columns] for row in csv.DictReader(f)]
  assert labels[:267].tolist() == expected
  assert labels[267:].tolist() == [[0.0] * 6] * 5  # padding rows


def test_cache_is_reused_and_stale_cache_rebuilt(tmp_path, tiny_vocab, caplog):
  tokenizer = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
  path = str(tmp_path / "train.tf_record")
  caplog.set_level("INFO")
  first = build_records(_examples(5), path, _settings(tiny_vocab), tokenizer)
  mtime = os.path.getmtime(path)
  again = build_records(_examples(5), path, _settings(tiny_vocab), tokenizer)
  assert again == first and os.path.getmtime(path) == mtime
  assert "reusing cached features" in caplog.text
  # The records are found by their settings alone, which name the source file's bytes
  # (source_sha256): the examples are not read again.
  assert build_records(_unread(), path, _settings(tiny_vocab), tokenizer) == first
  for change in ({"max_seq_length": 24}, {"source_sha256": "changed"},
                 {"label_spec": SingleLabel(["label"], ["1", "0"]).to_card()}):
    rebuilt = build_records(_examples(5), path, _settings(tiny_vocab, **change), tokenizer)
    assert rebuilt["fingerprint"] != first["fingerprint"]
    assert "are stale (inputs changed): rebuilding" in caplog.text


def _unread():
  raise AssertionError("the examples were read")
  yield  # (a generator: the error comes only if it is read)


def _records_in(path):
  return sum(1 for _ in tf.io.tf_record_iterator(path))


@pytest.mark.parametrize("fault", ["cut", "one byte", "missing shard", "no checks"])
def test_cached_records_that_are_not_what_was_written_are_rebuilt(tmp_path, tiny_vocab,
                                                                 caplog, fault):
  """The cache checks what its files hold (each one's size, sha256 and record count in
  the metadata) before reusing them: a file cut short, changed or gone is rebuilt, and the
  log says which and why."""
  tokenizer = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
  path = str(tmp_path / "train.tf_record")
  first = build_records(_examples(40), path, _settings(tiny_vocab), tokenizer, num_shards=2)
  assert [c["records"] for c in first["file_checks"]] == [20, 20]
  shard = first["files"][1]
  with open(shard, "rb") as f:
    data = f.read()
  if fault == "cut":  # 8 of its 20 records are left
    lengths = [len(r) + 16 for r in tf.io.tf_record_iterator(shard)]  # (each record's framing)
    with open(shard, "wb") as f:
      f.write(data[:sum(lengths[:8])])
    assert _records_in(shard) == 8
    why = "%s has %d bytes, %d were written (20 records)" % (shard, sum(lengths[:8]), len(data))
  elif fault == "one byte":
    with open(shard, "wb") as f:
      f.write(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    why = "%s has other bytes than were written (its sha256 differs)" % shard
  elif fault == "missing shard":
    os.remove(shard)
    why = "%s is missing" % shard
  else:  # metadata written before the checks existed (under the same fingerprint)
    meta = json.load(open(metadata_path(path)))
    del meta["file_checks"]
    json.dump(meta, open(metadata_path(path), "w"))
    why = None
  caplog.set_level("INFO")
  rebuilt = build_records(_examples(40), path, _settings(tiny_vocab), tokenizer, num_shards=2)
  if why is None:
    assert ("%s is not the metadata this program writes (its entry file_checks is None): "
            "rebuilding its records" % metadata_path(path)) in caplog.text
  else:
    assert "cached features %s are not what was written (%s): rebuilding" % (path, why) in (
        caplog.text)
  assert [_records_in(f) for f in rebuilt["files"]] == [20, 20]
  assert rebuilt["file_checks"] == first["file_checks"]  # the same records again
  assert sorted(os.listdir(str(tmp_path))) == sorted(  # and no staging file left behind
      [os.path.basename(f) for f in rebuilt["files"]] + ["train.tf_record.meta.json",
                                                          "train.tf_record.lock"])
  # Checked whole, sharded records are reused (they were rebuilt every time before: the
  # metadata was looked for beside a file that only unsharded records have).
  mtimes = [os.path.getmtime(f) for f in rebuilt["files"]]
  caplog.clear()
  assert build_records(_examples(40), path, _settings(tiny_vocab), tokenizer,
                       num_shards=2) == rebuilt
  assert "reusing cached features %s (40 examples + 0 padding)" % path in caplog.text
  assert [os.path.getmtime(f) for f in rebuilt["files"]] == mtimes


def test_training_input_shuffles_with_seed_and_repeats(tmp_path, tiny_vocab):
  tokenizer = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
  path = str(tmp_path / "train.tf_record")
  build_records(_examples(10), path, _settings(tiny_vocab), tokenizer)

  def first_batches(seed, count):
    with tf.Graph().as_default():
      fn = input_fn_builder(path, 16, True, BINARY, seed=seed)
      batch = tf.data.make_one_shot_iterator(fn({"batch_size": 4})).get_next()
      with tf.Session() as session:
        return [session.run(batch["example_id"]).tolist() for _ in range(count)]

  batches = first_batches(1, 5)  # 20 rows from 10 examples: repeats, every batch full
  assert all(len(b) == 4 for b in batches)
  seen = collections.Counter(i for b in batches for i in b)
  assert sorted(seen) == list(range(10)) and set(seen.values()) == {2}
  assert batches[0] != [0, 1, 2, 3]  # shuffled
  assert first_batches(1, 5) == batches  # seeded
  assert first_batches(2, 5) != batches


def test_dynamic_padding_trims_batches_and_loses_nothing(tmp_path, tiny_vocab):
  tokenizer = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
  words = "one two three four five six seven eight nine ten eleven twelve".split()
  examples = [InputExample(str(i), " ".join(words[:1 + (i * 5) % 12]), label=str(i % 2))
              for i in range(21)]
  path = str(tmp_path / "dev.tf_record")
  build_records(examples, path, _settings(tiny_vocab, max_seq_length=32), tokenizer,
                pad_to_multiple=4)
  _, fixed = _read_all(input_fn_builder(path, 32, False, BINARY), 4)
  _, trimmed = _read_all(input_fn_builder(path, 32, False, BINARY, dynamic_padding=True), 4)
  assert len(fixed) == len(trimmed) == 6
  for full, cut in zip(fixed, trimmed):
    length = int(full["input_mask"].sum(1).max())
    assert cut["input_ids"].shape == (4, length)  # as long as the longest real row
    assert (full["input_ids"][:, length:] == 0).all()
    np.testing.assert_array_equal(cut["input_ids"], full["input_ids"][:, :length])
    np.testing.assert_array_equal(cut["example_id"], full["example_id"])


def test_length_sorted_groups_in_training(tmp_path, tiny_vocab):
  """Training with dynamic padding: each group of 50 batches is a stretch of the shuffled
  stream sorted by length and cut into batches, each as long as its longest example, sent
  in a seeded order; no example is lost or added."""
  tokenizer = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
  examples = [InputExample(str(i), " ".join(["word"] * (1 + (i * 7) % 60)), label="0")
              for i in range(40)]
  path = str(tmp_path / "train.tf_record")
  build_records(examples, path, _settings(tiny_vocab, max_seq_length=64), tokenizer)
  assert input_fn.group_batches(4) == 50 and input_fn.group_batches(32) == 50
  assert input_fn.group_batches(256) == 32 and input_fn.group_batches(10 ** 5) == 1

  def batches(seed, count, **params):
    with tf.Graph().as_default():
      fn = input_fn.input_fn_builder(path, 64, True, BINARY, seed=seed, dynamic_padding=True)
      batch = tf.data.make_one_shot_iterator(fn(dict({"batch_size": 4}, **params))).get_next()
      with tf.Session() as session:
        return [session.run(batch) for _ in range(count)]

  read = batches(3, 100)
  for b in read:
    lengths = b["input_mask"].sum(1)
    assert b["input_ids"].shape == (4, lengths.max())  # trimmed to its longest
    np.testing.assert_array_equal(b["input_ids"][:, 0], 101)
  for first in (0, 50):  # two groups of 50 batches, 200 examples: five shuffled epochs
    group = read[first:first + 50]
    seen = collections.Counter(i for b in group for i in b["example_id"])
    assert sorted(seen) == list(range(40)) and set(seen.values()) == {5}
    # Cut from one sorted sequence: ordered by length, no batch's lengths overlap another's.
    spans = sorted((b["input_mask"].sum(1).min(), b["input_mask"].sum(1).max()) for b in group)
    assert all(shorter[1] <= longer[0] for shorter, longer in zip(spans, spans[1:]))
    longest = [b["input_ids"].shape[1] for b in group]
    assert longest != sorted(longest) and longest != sorted(longest, reverse=True)
  again = batches(3, 50)
  assert all(np.array_equal(a["example_id"], b["example_id"]) for a, b in zip(read, again))
  other = batches(4, 50)
  assert any(not np.array_equal(a["example_id"], b["example_id"]) for a, b in zip(read, other))
  # Two replicas' batches of 2 a step: the halves of one device's batches of 4, each half
  # trimmed to its own longest.
  halves = batches(3, 100, batch_size=2, batches_per_step=2)
  for whole, first, second in zip(read, halves[0::2], halves[1::2]):
    np.testing.assert_array_equal(
        np.concatenate([first["example_id"], second["example_id"]]), whole["example_id"])
    for half in (first, second):
      assert half["input_ids"].shape == (2, half["input_mask"].sum(1).max())
  assert any(a["input_ids"].shape != b["input_ids"].shape
             for a, b in zip(halves[0::2], halves[1::2]))


def _example_proto(features, float_labels, weight=None):
  """The tf.train.Example of InputFeatures built field by field with protobuf (the reference)."""
  def ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

  fields = {name: ints(getattr(features, name))
            for name in ("input_ids", "input_mask", "segment_ids")}
  fields["is_real_example"] = ints([int(features.is_real_example)])
  fields["example_id"] = ints([features.example_id])
  fields["label_ids"] = (tf.train.Feature(float_list=tf.train.FloatList(value=features.label_id))
                         if float_labels else ints([features.label_id]))
  if weight is not None:
    fields["sample_weight"] = tf.train.Feature(float_list=tf.train.FloatList(value=[weight]))
  return tf.train.Example(features=tf.train.Features(feature=fields))


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("spec", [BINARY, Regression(["score"]), MultiLabel(list("abcdef"))],
                         ids=lambda spec: spec.kind)
def test_fast_serializer_equals_protobuf_deterministic_bytes(spec, weighted):
  from data.features import InputFeatures
  from data.record_format import ExampleSerializer
  rng = np.random.RandomState(0)
  serialize = ExampleSerializer(spec, weighted)
  float_labels = spec.record_width is not None
  for n in range(200):
    length = rng.randint(0, 65)
    token_ids = list(rng.randint(0, 250000 if n % 5 == 0 else 30522, length))
    if n % 11 == 0 and length:
      token_ids[-1] = -int(rng.randint(1, 5))  # never from a tokenizer, but must not garble
    features = InputFeatures(
        token_ids, length // 2, 64,
        tuple(float(v) for v in rng.rand(spec.record_width) * 10 - 2) if float_labels
        else int(rng.randint(0, 300)), bool(n % 7), int(rng.randint(-1, 10 ** 12)))
    weight = float(rng.rand() * 3) if weighted else None
    expected = _example_proto(features, float_labels, weight).SerializeToString(
        deterministic=True)
    assert (serialize(features, weight) if weighted else serialize(features)) == expected


@pytest.mark.parametrize("max_seq_length", [16, 128])
def test_prefix_encoding_gives_the_features_of_whole_texts(tiny_vocab, max_seq_length):
  """Jigsaw comments (long, with newlines and quotes) and MRPC pairs, featurised from
  prefixes, equal the features built from whole texts one by one."""
  tokenizer = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
  jigsaw = get_processor("csv", files={"train": sample_path(
      "jigsaw_toxic_balanced", "comments.csv")}, text_column="0",
      label_columns=["1"], has_header=False).get_examples("train")
  mrpc = get_processor("mrpc", data_dir=sample_path("glue", "MRPC")).get_examples("dev")
  for examples in (jigsaw, mrpc):
    fast = list(convert_examples(examples, BINARY, max_seq_length, tokenizer))
    for i, example in enumerate(examples):
      slow = convert_example(example, i, BINARY, max_seq_length, tokenizer)
      assert fast[i].as_dict() == slow.as_dict(), example.text_a[:100]
  assert max(len(e.text_a) for e in jigsaw) > 8 * 128  # the prefix path was taken


def test_prefix_falls_back_when_a_prefix_is_short(tiny_vocab):
  from data.features import encode_leading_tokens
  tokenizer = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
  # The 32-character prefix holds one unknown word, a single [UNK]: too few ids, so the
  # whole text is encoded.
  text = u"\u2603" * 25 + u" " + u"\u2603" * 300 + u" then some real words follow here"
  assert tokenizer.encode(text[:25]) == [100]
  assert encode_leading_tokens(tokenizer, [text], 4) == [tokenizer.encode(text)]
  assert len(tokenizer.encode(text)) == 8


def _records(paths):
  out = []
  with tf.Graph().as_default():
    dataset = tf.data.TFRecordDataset(tf.constant(paths))
    element = tf.data.make_one_shot_iterator(dataset).get_next()
    with tf.Session() as session:
      while True:
        try:
          out.append(session.run(element))
        except tf.errors.OutOfRangeError:
          return out


@pytest.mark.parametrize("shards,workers", [(3, 1), (3, 2), (1, 2), (20, 2)])
def test_sharded_records_hold_the_same_records_in_order(tmp_path, tiny_vocab, shards, workers):
  tokenizer = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
  examples = _examples(23)
  single = build_records(examples, str(tmp_path / "one.tf_record"), _settings(tiny_vocab),
                         tokenizer, pad_to_multiple=8)
  sharded = build_records(examples, str(tmp_path / "many.tf_record"), _settings(tiny_vocab),
                          tokenizer, pad_to_multiple=8, num_shards=shards, num_workers=workers)
  expected_names = (["many.tf_record"] if shards == 1 else
                    ["many.tf_record-%05d-of-%05d" % (i, shards) for i in range(shards)])
  assert [os.path.basename(p) for p in sharded["files"]] == expected_names
  assert sorted(os.listdir(str(tmp_path))) == sorted(
      ["one.tf_record", "one.tf_record.meta.json", "many.tf_record.meta.json",
       "one.tf_record.lock", "many.tf_record.lock"] + expected_names)
  assert sharded["num_records"] == 24 and sharded["num_padding"] == 1
  assert _records(sharded["files"]) == _records(single["files"])
  _, rows = _read_all(input_fn_builder(sharded["files"], 16, False, BINARY), 8)
  ids = np.concatenate([r["example_id"] for r in rows])
  assert ids.tolist() == list(range(23)) + [-1]
  again = build_records(examples, str(tmp_path / "many.tf_record"), _settings(tiny_vocab),
                        tokenizer, pad_to_multiple=8, num_shards=shards, num_workers=workers)
  assert again == sharded  # reused from the cache
  assert gc.get_freeze_count() == 0  # objects frozen while featurising are thawed


class _FailingTokenizer(tokenization.FullTokenizer):
  """Fails on one text, as a tokenizer bug or a memory error in a worker would."""

  def encode_batch(self, texts):
    if any("number 17 " in t for t in texts):
      raise MemoryError("tokenizer failed on example 17")
    return super(_FailingTokenizer, self).encode_batch(texts)


def test_a_failing_featurisation_worker_fails_the_build_and_writes_nothing(tmp_path, tiny_vocab,
                                                                          capfd):
  tokenizer = _FailingTokenizer(tiny_vocab, do_lower_case=True)
  from spec.run_errors import ProcessFault
  with pytest.raises(ProcessFault, match="1 of 2 featurisation processes failed; their "
                     "errors are printed above"):
    build_records(_examples(23), str(tmp_path / "r.tf_record"), _settings(tiny_vocab),
                  tokenizer, num_workers=2)
  assert "tokenizer failed on example 17" in capfd.readouterr().err  # the worker's traceback
  assert gc.get_freeze_count() == 0  # the garbage collector sees every object again
  # No records, pieces or metadata left behind (the lock stays: it is empty, and another
  # process may hold it).
  assert os.listdir(str(tmp_path)) == ["r.tf_record.lock"]
  with pytest.raises(MemoryError, match="example 17"):  # in one process: the error itself
    build_records(_examples(23), str(tmp_path / "r.tf_record"), _settings(tiny_vocab),
                  tokenizer)


def _labels_and_ids(record_file):
  rows = []
  for serialized in tf.io.tf_record_iterator(record_file):
    features = tf.train.Example.FromString(serialized).features.feature
    rows.append((features["label_ids"].int64_list.value[0],
                 tuple(features["input_ids"].int64_list.value)))
  return rows


def _train_records(tmp_path, csv_path, name, seed):
  from pipeline.build import make_processor, make_tokenizer
  from pipeline.splits import prepare_splits
  from pipeline.task_extras import task_of
  from run_classifier import parse_flags
  c = parse_flags(["run_classifier.py", "--task_name=csv", "--train_file=%s" % csv_path,
                   "--has_header=false", "--text_column=0", "--label_column=1", "--do_train",
                   "--vocab_file=" + TINY_VOCAB, "--output_dir=%s" % (tmp_path / name),
                   "--max_seq_length=16", "--num_record_shards=2", "--seed=%d" % seed])
  tokenizer, vocab_file = make_tokenizer(c.model)
  train = prepare_splits(c, task_of(make_processor(c.data)), tokenizer, vocab_file).train
  return [_labels_and_ids(path) for path in train.record_files]


def test_a_label_sorted_train_file_is_written_in_a_seeded_mixed_order(tmp_path, tiny_vocab):
  """The input's shuffle buffer mixes only nearby rows, and shards are runs of records:
  the train records are written in a seeded random order, so that neither the stream
  nor a machine's shards hold one label for long."""
  csv_path = tmp_path / "sorted.csv"
  rows = [("comment number %d" % i, "0" if i < 100 else "1") for i in range(200)]
  csv_path.write_text(u"".join("%s,%s\n" % row for row in rows))
  shards = _train_records(tmp_path, csv_path, "a", seed=7)
  assert [len(shard) for shard in shards] == [100, 100]
  for shard in shards:
    labels = [label for label, _ in shard]
    assert 35 <= sum(labels) <= 65, labels  # each machine's part holds both labels
    # and so does every stretch of 20 records of the stream
    assert all(0 < sum(labels[i:i + 20]) < 20 for i in range(len(labels) - 19))
  # Every row once, its label with it.
  tokenizer = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
  expected = sorted((int(label), tuple(
      tokenizer.convert_tokens_to_ids(["[CLS]"] + tokenizer.tokenize(text) + ["[SEP]"])))
      for text, label in rows)
  written = sorted((label, ids[:ids.index(0)] if 0 in ids else ids)
                   for shard in shards for label, ids in shard)
  assert written == expected
  # The same seed writes the same order; another seed another.
  assert _train_records(tmp_path, csv_path, "b", seed=7) == shards
  assert _train_records(tmp_path, csv_path, "c", seed=8) != shards


# Two processes featurising into one cache at once (two runs sharing --cache_dir): each waits
# for "go" so that their writes overlap.
TWO_WRITERS = r"""
import os, sys, time
sys.path[:0] = [sys.argv[1], os.path.join(sys.argv[1], "tests")]
from test_features import _examples, _settings
from conftest import TINY_VOCAB
from data import tokenization, vocabulary
from data.tfrecord import build_records
open(sys.argv[3] + ".ready-%d" % os.getpid(), "w").close()
while not os.path.exists(sys.argv[3]):
  time.sleep(0.01)
tokenizer = tokenization.FullTokenizer(TINY_VOCAB, do_lower_case=True)
result = build_records(_examples(3000), sys.argv[2], _settings(TINY_VOCAB), tokenizer,
                       num_shards=2)
print(result["num_examples"])
"""


@pytest.mark.slow
@pytest.mark.one_runtime("tf2")
def test_two_processes_writing_one_cache_at_once_both_finish_whole(tmp_path):
  """Before, both wrote <split>.tf_record.tmp, and one died with NotFoundError on it."""
  import subprocess
  import sys
  from conftest import ROOT
  cache = tmp_path / "cache"
  cache.mkdir()
  path, go = str(cache / "train.tf_record"), str(tmp_path / "go")
  writers = [subprocess.Popen([sys.executable, "-c", TWO_WRITERS, ROOT, path, go],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True) for _ in range(2)]
  while len([n for n in os.listdir(str(tmp_path)) if n.startswith("go.ready-")]) < 2:
    assert all(w.poll() is None for w in writers), writers[0].communicate()[1][-2000:]
  open(go, "w").close()
  for writer in writers:
    out, err = writer.communicate(timeout=600)
    assert writer.returncode == 0, err[-3000:]
    assert out.split() == ["3000"]
  shards = sorted(n for n in os.listdir(str(cache)) if not n.endswith((".meta.json", ".lock")))
  assert shards == ["train.tf_record-00000-of-00002", "train.tf_record-00001-of-00002"]
  assert sum(_records_in(str(cache / n)) for n in shards) == 3000
  assert sorted(os.listdir(str(cache))) == shards + ["train.tf_record.lock",
                                                     "train.tf_record.meta.json"]


READER = r"""
import os, sys, time
sys.path[:0] = [sys.argv[1], os.path.join(sys.argv[1], "tests")]
from test_features import _examples, _settings
from conftest import TINY_VOCAB
from data import tokenization, vocabulary
from data.tfrecord import build_records
tokenizer = tokenization.FullTokenizer(TINY_VOCAB, do_lower_case=True)
build_records(_examples(40), sys.argv[2], _settings(TINY_VOCAB), tokenizer)
open(sys.argv[3], "w").close()  # built; now reading them, as a training would
while not os.path.exists(sys.argv[3] + ".end"):
  time.sleep(0.05)
"""


@pytest.mark.slow
@pytest.mark.one_runtime("tf2")
def test_records_another_run_reads_are_not_rewritten_under_it(tmp_path, tiny_vocab, caplog):
  """A run that would rewrite a cache's records with other settings while another run reads
  them is refused (it would have changed that run's input); once that run ends, it
  writes them. The same records are reused meanwhile."""
  import subprocess
  import sys
  from conftest import ROOT
  from spec.run_errors import FlagError
  path, built = str(tmp_path / "train.tf_record"), str(tmp_path / "built")
  reader = subprocess.Popen([sys.executable, "-c", READER, ROOT, path, built],
                            stderr=subprocess.PIPE, universal_newlines=True)
  try:
    while not os.path.exists(built):
      assert reader.poll() is None, reader.communicate()[1][-2000:]
    tokenizer = tokenization.FullTokenizer(tiny_vocab, do_lower_case=True)
    caplog.set_level("INFO")
    reused = build_records(_examples(40), path, _settings(tiny_vocab), tokenizer)
    assert "reusing cached features %s" % path in caplog.text
    with pytest.raises(FlagError) as error:
      build_records(_examples(40), path, _settings(tiny_vocab, max_seq_length=12), tokenizer)
    assert str(error.value) == (
        "%s: another run is reading this cache's train.tf_record records, made with other "
        "settings or files, and rewriting them would change its input: wait for it to end, or "
        "pass this run another --cache_dir" % tmp_path)
    from data.tfrecord import files_problem
    assert files_problem(reused) is None  # the reader's records are as they were
  finally:
    open(built + ".end", "w").close()
    reader.wait(timeout=300)
  assert reader.returncode == 0
  rebuilt = build_records(_examples(40), path, _settings(tiny_vocab, max_seq_length=12),
                          tokenizer)
  assert rebuilt["max_seq_length"] == 12
