"""The file-based input_fn that feeds TFRecords to the (TPU)Estimator."""

import tensorflow.compat.v1 as tf

from data.tfrecord import parsing_spec

# Large enough to mix examples from across a typical fine-tuning file.
SHUFFLE_BUFFER = 10000


def _decode(record, spec):
  example = tf.io.parse_single_example(record, spec)
  # TPUs support int32 but not int64; casting on every device keeps one graph.
  return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
          for name, t in example.items()}


def input_fn_builder(input_file, max_seq_length, is_training, is_regression, seed=None):
  """Returns input_fn(params) reading batches of params['batch_size'] records.

  Training shuffles (seeded) and repeats. Every mode drops the remainder so that
  shapes are static as a TPU needs; eval and predict files are padded to whole
  batches when they are written, so no real example is dropped.
  """
  spec = parsing_spec(max_seq_length, is_regression)

  def input_fn(params):
    batch_size = params["batch_size"]
    dataset = tf.data.TFRecordDataset(input_file)
    if is_training:
      dataset = dataset.shuffle(SHUFFLE_BUFFER, seed=seed, reshuffle_each_iteration=True)
      dataset = dataset.repeat()
    dataset = dataset.map(lambda r: _decode(r, spec),
                          num_parallel_calls=tf.data.experimental.AUTOTUNE)
    dataset = dataset.batch(batch_size, drop_remainder=True)
    return dataset.prefetch(tf.data.experimental.AUTOTUNE)

  return input_fn
