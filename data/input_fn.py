"""The file-based input_fn that feeds TFRecords to the (TPU)Estimator."""

import tensorflow.compat.v1 as tf

from data.record_format import SEQUENCE_FIELDS, parsing_spec

# Large enough to mix examples from across a typical fine-tuning file.
SHUFFLE_BUFFER = 10000
# Width of a length bucket when training with dynamic padding.
BUCKET_WIDTH = 16


def _decode(record, spec):
  example = tf.io.parse_single_example(record, spec)
  # TPUs support int32 but not int64; casting on every device keeps one graph.
  return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
          for name, t in example.items()}


def _length(example):
  return tf.reduce_sum(example["input_mask"], axis=-1)


def _unpad(example):
  """Cuts an example's sequences to its real length (at least 1)."""
  length = tf.maximum(_length(example), 1)
  return {k: t[:length] if k in SEQUENCE_FIELDS else t for k, t in example.items()}


def _trim_batch(batch):
  """Cuts a batch's sequences to its longest real example, keeping row order."""
  length = tf.maximum(tf.reduce_max(_length(batch)), 1)
  return {k: t[:, :length] if k in SEQUENCE_FIELDS else t for k, t in batch.items()}


def bucket_boundaries(max_seq_length, width=BUCKET_WIDTH):
  return list(range(width + 1, max_seq_length + 1, width))


def files_of_pipeline(files, pipeline_id, num_pipelines):
  """The record files that input pipeline pipeline_id of num_pipelines reads (a worker
  machine, or a TPU host): every num_pipelines-th shard, so that no two read the same
  records and together they read them all."""
  if not 0 <= pipeline_id < num_pipelines:
    raise ValueError("input pipeline %d of %d does not exist" % (pipeline_id, num_pipelines))
  if len(files) < num_pipelines:
    raise ValueError(
        "%d input pipelines (one per worker or TPU host) each need a shard of their own, but "
        "the records are %d file%s (%s): write them with --num_record_shards=%d or more"
        % (num_pipelines, len(files), "" if len(files) == 1 else "s", files[0], num_pipelines))
  return list(files[pipeline_id::num_pipelines])


def pipeline_of(params):
  """(this input pipeline's index, the number of pipelines) of an input_fn call: from
  params['input_pipeline_id'] and params['num_input_pipelines'] (a multi-worker run's
  input context), or on a TPU from TPUEstimator's params['context'] (with per-host input,
  one pipeline per host); (0, 1) otherwise."""
  if "num_input_pipelines" in params:
    return params["input_pipeline_id"], params["num_input_pipelines"]
  context = params.get("context")
  if context is not None:
    deployment = context.current_input_fn_deployment()  # (device, index, count, cores)
    return deployment[1], deployment[2]
  return 0, 1


def input_fn_builder(input_file, max_seq_length, is_training, label_spec, seed=None,
                     dynamic_padding=False, weighted=False, skip_examples=0):
  """Returns input_fn(params) reading batches of params['batch_size'] records.

  label_spec (spec/labels.py) gives the label's dtype and shape; weighted records (of
  training with weights) also hold each row's sample_weight. Training shuffles
  (seeded) and repeats. Every mode drops the remainder so that
  batch shapes are static as a TPU needs; eval and predict files are padded to
  whole batches when they are written, so no real example is dropped.

  dynamic_padding (CPU/GPU only: a TPU needs one static shape) computes each
  batch only as long as its longest example. In training, examples are also
  grouped into buckets of similar length (BUCKET_WIDTH tokens), so a batch
  holds little padding; eval and predict keep the file's order and only trim.

  skip_examples (training, on resume: the examples the checkpoint's steps have
  consumed) continues the seeded stream where it stopped instead of replaying its
  start. The stream is deterministic (seeded shuffle, ordered reads), so skipping
  the batches of skip_examples / params['batch_size'] reaches the exact next batch.
  That is the whole stream on CPU/GPU and on one TPU host (whose cores take
  batch_size each per step).

  Where several input pipelines feed one training step (the workers of a multi-worker
  run, the hosts of a TPU pod), each reads its own shards (files_of_pipeline) and skips
  its share of skip_examples. Which pipeline this is comes from pipeline_of(params).
  """
  if skip_examples and not is_training:
    raise ValueError("skip_examples is for resuming training")
  spec = parsing_spec(max_seq_length, label_spec, weighted)
  files = input_file if isinstance(input_file, (list, tuple)) else [input_file]

  def input_fn(params):
    batch_size = params["batch_size"]
    pipeline_id, num_pipelines = pipeline_of(params) if is_training else (0, 1)
    own_files = files_of_pipeline(files, pipeline_id, num_pipelines)
    skip_batches = skip_examples // (batch_size * num_pipelines)
    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(own_files))
    if is_training and len(own_files) > 1:
      dataset = dataset.interleave(tf.data.TFRecordDataset,
                                   cycle_length=min(len(own_files), 8))
    else:
      dataset = dataset.flat_map(tf.data.TFRecordDataset)  # shards in order
    if is_training:
      dataset = dataset.shuffle(SHUFFLE_BUFFER, seed=seed, reshuffle_each_iteration=True)
      dataset = dataset.repeat()
      if not dynamic_padding:  # fixed batches: skipping records skips whole batches, unparsed
        dataset = dataset.skip(skip_batches * batch_size)
    dataset = dataset.map(lambda r: _decode(r, spec),
                          num_parallel_calls=tf.data.experimental.AUTOTUNE)
    if dynamic_padding and is_training:
      boundaries = bucket_boundaries(max_seq_length)
      dataset = dataset.map(_unpad, num_parallel_calls=tf.data.experimental.AUTOTUNE)
      dataset = dataset.apply(tf.data.experimental.bucket_by_sequence_length(
          _length, boundaries, [batch_size] * (len(boundaries) + 1), drop_remainder=True))
      dataset = dataset.skip(skip_batches)  # a batch's rows depend on the buckets before it
    else:
      dataset = dataset.batch(batch_size, drop_remainder=True)
      if dynamic_padding:
        dataset = dataset.map(_trim_batch)
    return dataset.prefetch(tf.data.experimental.AUTOTUNE)

  return input_fn
