"""AdamWeightDecay, the learning-rate schedule, and one full training step."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import THREE_CLASSES, model_features, small_config
from modeling.model_fn import ModelSettings, model_fn_builder
from modeling.optimization import (AdamWeightDecayOptimizer, NO_DECAY_PATTERNS,
                                   create_train_op, learning_rate_schedule)


def test_learning_rate_warms_up_then_decays_linearly():
  with tf.Graph().as_default():
    step = tf.placeholder(tf.int64, [])
    lr = learning_rate_schedule(1.0, 100, 10, step)
    with tf.Session() as session:
      values = [session.run(lr, {step: s}) for s in (0, 4, 9, 10, 55, 100, 150)]
  np.testing.assert_allclose(values, [0.1, 0.5, 1.0, 0.9, 0.45, 0.0, 0.0], atol=1e-6)


def _adam_reference(param, grad, lr, decay, steps=1, b1=0.9, b2=0.999, eps=1e-6):
  """BERT's update in float64, with the betas as the float32 values a graph holds.

  (1 - beta) is then exact in float32 too; Google's graph instead rounds 1 - 0.999
  to float32 on its own, which differs from 1 - float32(0.999) by 1.3e-5 relative.
  """
  b1, b2 = float(np.float32(b1)), float(np.float32(b2))
  param, grad = param.astype(np.float64), grad.astype(np.float64)
  m = np.zeros_like(param)
  v = np.zeros_like(param)
  for _ in range(steps):
    m = b1 * m + (1 - b1) * grad
    v = b2 * v + (1 - b2) * grad * grad
    param = param - lr * (m / (np.sqrt(v) + eps) + decay * param)
  return param


def test_adam_weight_decay_matches_numpy_and_skips_layernorm_and_bias():
  rng = np.random.RandomState(0)
  values = {name: rng.randn(3, 2).astype(np.float32)
            for name in ("layer/kernel", "layer/bias", "layer/LayerNorm/gamma")}
  grads = {name: rng.randn(3, 2).astype(np.float32) for name in values}
  with tf.Graph().as_default():
    variables = {}
    for name, value in values.items():
      with tf.variable_scope(name.rsplit("/", 1)[0]):
        variables[name] = tf.get_variable(name.rsplit("/", 1)[1], initializer=value)
    optimizer = AdamWeightDecayOptimizer(0.1, weight_decay_rate=0.01,
                                         exclude_from_weight_decay=NO_DECAY_PATTERNS)
    train = optimizer.apply_gradients([(tf.constant(grads[n]), variables[n]) for n in values])
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      session.run(train)
      session.run(train)
      after = session.run(variables)
      slots = sorted(v.name for v in tf.global_variables() if "adam" in v.name)
  assert slots == sorted("%s/adam_%s:0" % (n, s) for n in values for s in "mv")
  for name in values:
    decay = 0.0 if ("bias" in name or "LayerNorm" in name) else 0.01
    expected = _adam_reference(values[name], grads[name], 0.1, decay, steps=2)
    np.testing.assert_allclose(after[name], expected, rtol=1e-5, atol=1e-6)


def test_sparse_embedding_gradient_updates_every_row_as_its_dense_sum():
  """An IndexedSlices gradient (a gather's) with repeated ids: untouched rows still decay."""
  rng = np.random.RandomState(1)
  table = rng.randn(5, 3).astype(np.float32)
  ids = np.array([3, 0, 3], np.int32)
  rows = rng.randn(3, 3).astype(np.float32)
  dense = np.zeros_like(table)
  np.add.at(dense, ids, rows)
  with tf.Graph().as_default():
    with tf.variable_scope("embeddings"):
      variable = tf.get_variable("word_embeddings", initializer=table)
    grad = tf.IndexedSlices(tf.constant(rows), tf.constant(ids), tf.constant([5, 3]))
    optimizer = AdamWeightDecayOptimizer(0.1, weight_decay_rate=0.01)
    train = optimizer.apply_gradients([(grad, variable)])
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      session.run(train)
      session.run(train)
      after = session.run(variable)
  expected = _adam_reference(table, dense, 0.1, 0.01, steps=2)
  np.testing.assert_allclose(after, expected, rtol=1e-5, atol=1e-6)
  assert not np.allclose(after[1], table[1])  # a row no id touched: weight decay still applies


def test_gradients_are_clipped_to_global_norm_one():
  with tf.Graph().as_default():
    w = tf.get_variable("w", initializer=np.zeros(4, np.float32))
    loss = tf.reduce_sum(w * tf.constant([300.0, 400.0, 0.0, 0.0]))  # gradient norm 500
    train = create_train_op(loss, 1.0, 10, 0, use_tpu=False)
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      session.run(train)
      (adam_m,) = [v for v in tf.global_variables() if v.name == "w/adam_m:0"]
      step, m = session.run([tf.train.get_global_step(), adam_m])
  assert step == 1
  np.testing.assert_allclose(m, [0.1 * 0.6, 0.1 * 0.8, 0, 0], atol=1e-6)  # (1-b1) * clipped


def _one_training_step(config, **options):
  """The trainable variables' names, and their values before and after one step."""
  with tf.Graph().as_default():
    features = model_features(config)
    model_fn = model_fn_builder(config, THREE_CLASSES, ModelSettings(
        learning_rate=1e-3, num_train_steps=10, num_warmup_steps=5, **options))
    spec = model_fn(features, None, tf.estimator.ModeKeys.TRAIN, {})
    trainable = tf.trainable_variables()
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      before = session.run(trainable)
      session.run(spec.train_op)
      after = session.run(trainable)
  return [v.name for v in trainable], before, after


@pytest.mark.parametrize("accumulation_steps", [1, 2])
def test_mean_pooling_trains_everything_but_the_unused_pooler(accumulation_steps):
  config = small_config()
  names, before, after = _one_training_step(
      config, pooling="mean", gradient_accumulation_steps=accumulation_steps)
  changed = [n for n, b, a in zip(names, before, after) if not np.array_equal(b, a)]
  unchanged = [n for n in names if n not in changed]
  if accumulation_steps == 1:
    assert unchanged == ["bert/pooler/dense/kernel:0", "bert/pooler/dense/bias:0"]
  else:  # the first of two accumulated batches applies nothing yet
    assert changed == []


def test_one_training_step_changes_every_trainable_variable():
  config = small_config()
  names, before, after = _one_training_step(config)
  assert "output_weights:0" in names and "bert/pooler/dense/kernel:0" in names
  assert len(names) == 2 + 5 + 2 + config.num_hidden_layers * 16
  unchanged = [n for n, b, a in zip(names, before, after) if np.array_equal(b, a)]
  assert unchanged == []


def _quadratic_training(batches, accumulation_steps, runs):
  """Trains w on mean((x . w - y)^2) and returns w after `runs` runs of the train op."""
  with tf.Graph().as_default():
    x = tf.placeholder(tf.float32, [None, 3])
    y = tf.placeholder(tf.float32, [None])
    w = tf.get_variable("w", initializer=np.array([0.5, -0.2, 0.1], np.float32))
    loss = tf.reduce_mean(tf.square(tf.reduce_sum(x * w, axis=1) - y))
    train = create_train_op(loss, 0.05, 100, 0, use_tpu=False,
                            accumulation_steps=accumulation_steps)
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      for i in range(runs):
        bx, by = batches[i % len(batches)]
        session.run(train, {x: bx, y: by})
      return session.run([w, tf.train.get_global_step()])


def test_gradient_accumulation_equals_one_larger_batch():
  rng = np.random.RandomState(0)
  small = [(rng.randn(4, 3).astype(np.float32), rng.randn(4).astype(np.float32))
           for _ in range(3)]
  large = [(np.concatenate([b[0] for b in small]), np.concatenate([b[1] for b in small]))]
  w_accumulated, steps_accumulated = _quadratic_training(small, 3, runs=6)
  w_large, steps_large = _quadratic_training(large, 1, runs=2)
  assert steps_accumulated == steps_large == 2
  np.testing.assert_allclose(w_accumulated, w_large, rtol=1e-5, atol=1e-6)
  w_partial, steps_partial = _quadratic_training(small, 3, runs=4)  # one update + one pending
  assert steps_partial == 1
  w_one, _ = _quadratic_training(large, 1, runs=1)
  np.testing.assert_allclose(w_partial, w_one, rtol=1e-5, atol=1e-6)


def test_gradient_accumulation_is_refused_on_tpu():
  with tf.Graph().as_default():
    w = tf.get_variable("w", [2])
    with pytest.raises(ValueError, match="not supported on TPU"):
      create_train_op(tf.reduce_sum(w), 0.1, 10, 0, use_tpu=True, accumulation_steps=2)
