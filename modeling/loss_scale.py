"""Dynamic loss scaling for float16 training.

float16 gradients underflow to zero below about 6e-8, so the loss is multiplied
by a large scale before differentiation and the gradients divided by it after.
When any gradient is inf or NaN the step is skipped and the scale halved; after
`growth_interval` finite steps in a row the scale doubles.
"""

import tensorflow.compat.v1 as tf


class DynamicLossScale(object):

  def __init__(self, initial_scale=2.0 ** 15, growth_interval=2000, factor=2.0,
               minimum_scale=1.0):
    self.growth_interval = growth_interval
    self.factor = factor
    self.minimum_scale = minimum_scale
    with tf.variable_scope("loss_scale"):
      self.scale = tf.get_variable("scale", [], tf.float32, tf.constant_initializer(initial_scale),
                                   trainable=False)
      self.good_steps = tf.get_variable("good_steps", [], tf.int64, tf.zeros_initializer(),
                                        trainable=False)

  def scale_loss(self, loss):
    return loss * self.scale

  def unscale(self, grads):
    """Divides the gradients by the scale. Returns (gradients, all_finite)."""
    grads = [tf.convert_to_tensor(g) / self.scale if g is not None else None for g in grads]
    finite = tf.reduce_all([tf.reduce_all(tf.is_finite(g)) for g in grads if g is not None])
    return grads, finite

  def update(self, finite):
    """The op that adjusts the scale after a step whose gradients were `finite` or not."""
    def grow_or_count():
      good = self.good_steps + 1
      grow = good >= self.growth_interval
      return tf.group(
          self.scale.assign(tf.where(grow, self.scale * self.factor, self.scale)),
          self.good_steps.assign(tf.where(grow, tf.zeros_like(good), good)))

    def shrink():
      return tf.group(
          self.scale.assign(tf.maximum(self.scale / self.factor, self.minimum_scale)),
          self.good_steps.assign(tf.zeros_like(self.good_steps)))

    return tf.cond(finite, grow_or_count, shrink)
