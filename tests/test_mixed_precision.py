"""float16/bfloat16 graphs build and train on CPU, and dynamic loss scaling behaves."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import THREE_CLASSES, model_features, small_config
from modeling.bert import BertModel
from modeling.loss_scale import DynamicLossScale
from modeling.model_fn import ModelSettings, model_fn_builder


def test_loss_scale_halves_on_overflow_and_grows_after_good_steps():
  with tf.Graph().as_default():
    grad = tf.placeholder(tf.float32, [3])
    scale = DynamicLossScale(initial_scale=1024.0, growth_interval=3, minimum_scale=256.0)
    (unscaled,), finite = scale.unscale([grad])
    update = scale.update(finite)
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())

      def step(values):
        out = session.run([unscaled, finite], {grad: values})
        session.run(update, {grad: values})
        return out, session.run([scale.scale, scale.good_steps])

      (values, ok), state = step([1024.0, 2048.0, 0.0])
      assert ok and values.tolist() == [1.0, 2.0, 0.0] and state == [1024.0, 1]
      (_, ok), state = step([np.inf, 1.0, 1.0])
      assert not ok and state == [512.0, 0]
      (_, ok), state = step([np.nan, 1.0, 1.0])
      assert not ok and state == [256.0, 0]
      (_, ok), state = step([np.nan, 1.0, 1.0])
      assert state == [256.0, 0]  # never below the minimum
      for expected_good in (1, 2):
        assert step([1.0, 1.0, 1.0])[1] == [256.0, expected_good]
      assert step([1.0, 1.0, 1.0])[1] == [512.0, 0]  # grew after 3 good steps


def _train_steps(precision, feed_inf=False):
  config = small_config()
  with tf.Graph().as_default():
    features = model_features(config)
    model_fn = model_fn_builder(config, THREE_CLASSES, ModelSettings(
        learning_rate=1e-3, num_train_steps=10, precision=precision))
    spec = model_fn(features, None, tf.estimator.ModeKeys.TRAIN, {})
    names = sorted((v.name, v.dtype.base_dtype.name) for v in tf.trainable_variables())
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      before = session.run(tf.trainable_variables())
      loss, _ = session.run([spec.loss, spec.train_op])
      after = session.run(tf.trainable_variables())
      step = session.run(tf.train.get_global_step())
  return names, loss, before, after, step


_FLOAT32_NAMES = []


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_low_precision_keeps_float32_variables_and_trains(precision):
  if not _FLOAT32_NAMES:  # (the float32 model's variables, built once for both precisions)
    _FLOAT32_NAMES.append(_train_steps("float32")[0])
  names32 = _FLOAT32_NAMES[0]
  names, loss, before, after, step = _train_steps(precision)
  # Same checkpoint variables, all float32 master weights (plus the loss-scale state).
  assert names == names32 and {d for _, d in names} == {"float32"}
  assert np.isfinite(loss) and step == 1
  assert all(not np.array_equal(b, a) for b, a in zip(before, after))


def test_float16_encoder_is_close_to_float32():
  config = small_config()
  rng = np.random.RandomState(0)
  ids = tf.constant(rng.randint(0, config.vocab_size, (2, 9)), tf.int32)
  with tf.Graph().as_default():
    ids = tf.constant(rng.randint(0, config.vocab_size, (2, 9)), tf.int32)
    with tf.variable_scope("m"):
      full = BertModel(config, False, ids)
    with tf.variable_scope("m", reuse=True):
      half = BertModel(config, False, ids, compute_dtype=tf.float16)
    assert half.get_pooled_output().dtype == tf.float32
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      a, b = session.run([full.get_sequence_output(), half.get_sequence_output()])
  np.testing.assert_allclose(b, a, atol=3e-2)
  assert np.abs(a - b).max() > 0  # really computed in half precision
