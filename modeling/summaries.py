"""TensorBoard scalars of training (learning rate, loss scale, ...) on every device.

On CPU/GPU a tf.summary.scalar in the model_fn is written by the Estimator's summary
hook every save_summary_steps. A TPU runs the model_fn on the device, where summaries
cannot be written, so there the scalars leave through a host_call: TPUEstimator hands
them to a function that runs on the host and writes them with the TF2 summary API.
(The Estimator itself writes loss, global_step/sec and examples/sec; eval metrics go
to <output_dir>/eval.)
"""

import logging

import tensorflow.compat.v1 as tf
import tensorflow.compat.v2 as tf2


def training_scalars(scalars, use_tpu, summary_dir, every_steps):
  """Records scalars ({tag: scalar tensor}) for TensorBoard. Returns the host_call for
  TPUEstimatorSpec on TPU, None elsewhere."""
  if not use_tpu:
    for tag, value in sorted(scalars.items()):
      tf.summary.scalar(tag, value)
    return None
  tags = sorted(scalars)
  # host_call tensors need a leading (batch) dimension, which TPUEstimator concatenates.
  step = tf.reshape(tf.train.get_or_create_global_step(), [1])
  values = [tf.reshape(tf.cast(scalars[tag], tf.float32), [1]) for tag in tags]
  return (host_call_fn(tags, summary_dir, every_steps), [step] + values)


def host_call_fn(tags, summary_dir, every_steps):
  """The host side of training_scalars: writes each tag's first value at the step, every
  every_steps steps, into summary_dir."""

  def host_call(step, *values):
    step = step[0]
    writer = tf2.summary.create_file_writer(summary_dir)
    with writer.as_default(), tf2.summary.record_if(
        tf.equal(step % every_steps, 0)):
      for tag, value in zip(tags, values):
        tf2.summary.scalar(tag, value[0], step=step)
      return tf.summary.all_v2_summary_ops()

  return host_call


def scalar_events(folder, tag):
  """[(step, value)] of a scalar tag in the event files directly in folder (a bucket
  too), in step order; written by the v1 summary API (simple values) or the v2 one
  (tensors, as the TPU host call writes)."""
  points = {}
  for path in sorted(tf.io.gfile.glob(folder.rstrip("/") + "/events.out.tfevents*")):
    for event in _events_of(path):
      for value in event.summary.value:
        if value.tag != tag:
          continue
        if value.HasField("simple_value"):
          points[event.step] = value.simple_value
        elif value.tensor.dtype != tf.string.as_datatype_enum:
          points[event.step] = float(tf.make_ndarray(value.tensor))
  return sorted(points.items())


def _events_of(path):
  """The events of an event file up to its first record that cannot be read: a run killed
  while writing one leaves a cut-short last record, and the steps before it stand."""
  events = tf.train.summary_iterator(path)
  while True:
    try:
      yield next(events)
    except StopIteration:
      return
    except tf.errors.DataLossError:
      logging.getLogger(__name__).warning(
          "%s ends in a record cut short (a run stopped while writing it): its events up to "
          "there are read", path)
      return
