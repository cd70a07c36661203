"""The file-based input_fn that feeds TFRecords to the (TPU)Estimator."""

import tensorflow.compat.v1 as tf

from data.record_format import SEQUENCE_FIELDS, parsing_spec
from spec.model_card import NO_LENGTH_GROUPING

# Large enough to mix examples from across a typical fine-tuning file.
SHUFFLE_BUFFER = 10000
# Training with dynamic padding sorts each group of this many steps' examples by length (a
# step: one batch, or one per replica; at most GROUP_EXAMPLES examples: a group of large
# steps has fewer of them).
GROUP_BATCHES = 50
GROUP_EXAMPLES = 8192
# How a training run with dynamic padding groups its examples, as its model card records it
# (pipeline/state.py): a resumed run must group them the same way.
LENGTH_GROUPING = "length-sorted groups of %d batches (at most %d examples)" % (
    GROUP_BATCHES, GROUP_EXAMPLES)


def _decode(record, spec):
  example = tf.io.parse_single_example(record, spec)
  # TPUs support int32 but not int64; casting on every device keeps one graph.
  return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
          for name, t in example.items()}


def _length(example):
  return tf.reduce_sum(example["input_mask"], axis=-1)


def _trim_batch(batch):
  """Cuts a batch's sequences to its longest real example, keeping row order."""
  length = tf.maximum(tf.reduce_max(_length(batch)), 1)
  return {k: t[:, :length] if k in SEQUENCE_FIELDS else t for k, t in batch.items()}


def group_batches(step_examples):
  """The steps of one length-sorted group, each of step_examples examples (its batches'
  together): GROUP_BATCHES, fewer for steps so large that the group would hold more than
  GROUP_EXAMPLES examples (one at least)."""
  return max(1, min(GROUP_BATCHES, GROUP_EXAMPLES // step_examples))


def length_grouping(dynamic_padding):
  """How a training run groups its examples by length (LENGTH_GROUPING with dynamic padding,
  else NO_LENGTH_GROUPING), for its model card."""
  return LENGTH_GROUPING if dynamic_padding else NO_LENGTH_GROUPING


def _sorted_batches(index, group, count, per_step, batch_size, seed):
  """A dataset of the batches of one group of count steps' examples (per_step batches of
  batch_size each: one per replica that this pipeline feeds): the group sorted by length
  (ties in stream order) and cut into steps, the steps in an order drawn from (seed,
  index), index the group's place in the stream; each step's examples cut in turn into
  its per_step batches, each trimmed to its longest. A step's batches are those of one
  device taking per_step * batch_size examples, so replicas train on one device's batches."""
  order = tf.argsort(_length(group), stable=True)
  keys = tf.random.stateless_uniform([count], seed=tf.stack([tf.constant(seed, tf.int64),
                                                             index]))
  step_order = tf.argsort(keys, stable=True)

  def batches(t):
    rest = t.shape.as_list()[1:]
    steps = tf.gather(tf.reshape(tf.gather(t, order), [count, per_step * batch_size] + rest),
                      step_order)
    return tf.reshape(steps, [count * per_step, batch_size] + rest)

  return tf.data.Dataset.from_tensor_slices(
      {k: batches(t) for k, t in group.items()}).map(_trim_batch)


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
  """Returns input_fn(params) reading batches of params['batch_size'] records
  (params['batches_per_step']: how many of them one training step takes, one per replica
  this pipeline feeds; 1 when absent).

  label_spec (spec/labels.py) gives the label's dtype and shape; weighted records (of
  training with weights) also hold each row's sample_weight. Training shuffles
  (seeded) and repeats. Every mode drops the remainder so that
  batch shapes are static as a TPU needs; eval and predict files are padded to
  whole batches when they are written, so no real example is dropped.

  dynamic_padding (CPU/GPU only: a TPU needs one static shape) computes each
  batch only as long as its longest example. In training, the shuffled stream is also
  taken group_batches(...) steps at a time: each group's examples are sorted by length and
  cut into steps, which then go out in a seeded order, so a batch holds little padding
  and every example of the stream is trained on in its turn. Eval and predict keep the
  file's order and only trim.

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
      per_step = params.get("batches_per_step", 1)
      count = group_batches(per_step * batch_size)
      groups = dataset.batch(count * per_step * batch_size,
                             drop_remainder=True)  # (the stream repeats: nothing is left)
      dataset = tf.data.Dataset.zip((tf.data.Dataset.range(2 ** 62), groups)).flat_map(
          lambda index, group: _sorted_batches(index, group, count, per_step, batch_size,
                                               0 if seed is None else seed))
      dataset = dataset.skip(skip_batches)  # a batch's rows depend on its group's
    else:
      dataset = dataset.batch(batch_size, drop_remainder=True)
      if dynamic_padding:
        dataset = dataset.map(_trim_batch)
    return dataset.prefetch(tf.data.experimental.AUTOTUNE)

  return input_fn
