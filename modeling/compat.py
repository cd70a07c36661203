"""The one place that adapts TensorFlow 1.15 and 2.15 to the same graph-mode API."""

import tensorflow.compat.v1 as tf

_READY = []


def setup_tensorflow():
  """Call once before building graphs, on either runtime.

  Resource variables everywhere: TF 1.15 defaults to reference variables, which
  XLA cannot compile, and TF 2.15 already uses resource variables.
  """
  if not _READY:
    tf.enable_resource_variables()
    _READY.append(True)


def static_shape(tensor):
  """The static shape as a list of ints/None on both runtimes (TF 1.15 has Dimension objects)."""
  return tensor.shape.as_list()
