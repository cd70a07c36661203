"""AdamWeightDecay (TensorFlow's ops, and the fused kernel), the learning-rate schedule,
and one full training step."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import THREE_CLASSES, model_features, small_config
from modeling import fused
from modeling.compat import setup_tensorflow
from modeling.model_fn import ModelSettings, model_fn_builder
from modeling.optimization import (AdamWeightDecayOptimizer, CLIP_NORM, NO_DECAY_PATTERNS,
                                   create_train_op, global_norm_scale,
                                   learning_rate_schedule)

# The update's two paths: TensorFlow's ops, and one fused kernel a variable.
PATHS = ["tensorflow_ops", "fused_kernel"]


def kernels_of(path):
  """None, or the fused kernels (whose absence fails: a CPU run uses them by default)."""
  if path == "tensorflow_ops":
    return None
  setup_tensorflow()
  reason = fused.unavailable_reason()
  if reason:
    pytest.fail("the fused kernels do not build here: %s" % reason)
  return fused.FusedKernels(tf.constant([1, 0], tf.int64))


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


@pytest.mark.parametrize("path", PATHS)
def test_adam_weight_decay_matches_numpy_and_skips_layernorm_and_bias(path):
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
                                         exclude_from_weight_decay=NO_DECAY_PATTERNS,
                                         kernels=kernels_of(path))
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


@pytest.mark.parametrize("path", PATHS)
def test_sparse_embedding_gradient_updates_every_row_as_its_dense_sum(path):
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
    optimizer = AdamWeightDecayOptimizer(0.1, weight_decay_rate=0.01, kernels=kernels_of(path))
    train = optimizer.apply_gradients([(grad, variable)])
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      session.run(train)
      session.run(train)
      after = session.run(variable)
  expected = _adam_reference(table, dense, 0.1, 0.01, steps=2)
  np.testing.assert_allclose(after, expected, rtol=1e-5, atol=1e-6)
  assert not np.allclose(after[1], table[1])  # a row no id touched: weight decay still applies


@pytest.mark.parametrize("path", PATHS)
def test_gradients_are_clipped_to_global_norm_one(path):
  with tf.Graph().as_default():
    w = tf.get_variable("w", initializer=np.zeros(4, np.float32))
    loss = tf.reduce_sum(w * tf.constant([300.0, 400.0, 0.0, 0.0]))  # gradient norm 500
    train = create_train_op(loss, 1.0, 10, 0, use_tpu=False, kernels=kernels_of(path))
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


def _trained_with(kernels, steps, norm):
  """Three variables trained through create_train_op on gradients fixed in advance (each
  step its own, of global norm `norm`, so clipping acts above 1 and not below): a table
  (an embedding: a gather's sparse gradient, with repeated ids), a kernel and a bias, of
  sizes that do not divide the fused kernel's blocks, the bias without weight decay.
  Returns every variable and slot by name after `steps` steps."""
  rng = np.random.RandomState(5)
  shapes = {"embeddings/word_embeddings": (50, 7), "layer/kernel": (7, 4099),
            "layer/bias": (4099,)}
  ids = rng.randint(0, 50, size=[24])
  with tf.Graph().as_default():
    variables = {name: tf.get_variable(name, initializer=rng.randn(*shape).astype(np.float32))
                 for name, shape in shapes.items()}
    fed = {"embeddings/word_embeddings": tf.placeholder(tf.float32, [len(ids), 7]),
           "layer/kernel": tf.placeholder(tf.float32, shapes["layer/kernel"]),
           "layer/bias": tf.placeholder(tf.float32, shapes["layer/bias"])}
    rows = tf.gather(variables["embeddings/word_embeddings"], tf.constant(ids, tf.int32))
    loss = tf.reduce_sum(rows * fed["embeddings/word_embeddings"]) + tf.add_n(
        [tf.reduce_sum(variables[n] * fed[n]) for n in ("layer/kernel", "layer/bias")])
    train = create_train_op(loss, 0.05, 100, 0, use_tpu=False, kernels=kernels)
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      for _ in range(steps):
        gradients = {n: rng.randn(*p.shape.as_list()).astype(np.float32) for n, p in fed.items()}
        total = np.sqrt(sum(np.sum(np.square(g)) for g in gradients.values()))
        session.run(train, {fed[n]: g * (norm / total) for n, g in gradients.items()})
      return {v.op.name: session.run(v) for v in tf.global_variables()}


@pytest.mark.parametrize("norm", [30.0, 0.5])
def test_the_fused_update_trains_as_tensorflows_ops(norm):
  """Three steps of the whole update (clipping, weight decay, Adam) through the fused
  kernel and through TensorFlow's ops, on the same gradients: every variable and slot
  the same to float32 rounding, with clipping acting (norm 30) and not (norm 0.5)."""
  fused_values = _trained_with(kernels_of("fused_kernel"), 3, norm)
  reference = _trained_with(None, 3, norm)
  assert sorted(fused_values) == sorted(reference)
  assert len([name for name in reference if name.endswith("adam_v")]) == 3
  for name, value in reference.items():  # (a few roundings of the array's largest values)
    np.testing.assert_allclose(fused_values[name], value, rtol=0,
                               atol=1e-6 * np.abs(value).max(), err_msg=name)
  start = _trained_with(None, 0, norm)
  for name in ("embeddings/word_embeddings", "layer/kernel", "layer/bias"):
    assert (reference[name] != start[name]).all(), name  # (every element, even rows no id took)


def test_global_norm_scale_is_what_clipping_multiplies_by():
  rng = np.random.RandomState(2)
  with tf.Graph().as_default():
    for spread in (0.01, 1.0, 30.0):
      grads = [tf.constant(spread * rng.randn(*shape).astype(np.float32))
               for shape in ((5, 3), (7,))]
      clipped, _ = tf.clip_by_global_norm(grads, clip_norm=CLIP_NORM)
      scaled = [g * global_norm_scale(grads, CLIP_NORM) for g in grads]
      with tf.Session() as session:
        expected, actual = session.run([clipped, scaled])
      for e, a in zip(expected, actual):
        np.testing.assert_array_equal(a, e)
    infinite = global_norm_scale([tf.constant([np.inf, 1.0], tf.float32)], CLIP_NORM)
    with tf.Session() as session:
      assert np.isnan(session.run(infinite))  # (every parameter NaN, as clipping gives)


def test_the_fused_update_leaves_an_earlier_read_of_the_variable_as_it_was():
  """A read of the variable taken before the update and used after it (as the backward
  pass's matrix multiplies use the forward pass's weights) keeps the old values: the
  kernel updates a copy of a buffer that a read still holds."""
  kernels = kernels_of("fused_kernel")
  start = np.arange(6, dtype=np.float32).reshape(2, 3)
  with tf.Graph().as_default():
    w = tf.get_variable("w", initializer=start)
    optimizer = AdamWeightDecayOptimizer(0.1, kernels=kernels)
    optimizer.slots(w)
    before = w.read_value()
    with tf.control_dependencies([before]):
      update = optimizer.apply_gradients([(tf.ones([2, 3]), w)])
    with tf.control_dependencies([update]):
      later_use = before + 0.0
      after = w.read_value()
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      used, updated = session.run([later_use, after])
  np.testing.assert_array_equal(used, start)
  # (step one, no bias correction: m = 0.1 g, v = 0.001 g^2)
  np.testing.assert_allclose(updated, start - 0.1 * 0.1 / (np.sqrt(0.001) + 1e-6),
                             rtol=1e-5)


def test_the_fused_update_refuses_a_gradient_of_another_shape():
  kernels = kernels_of("fused_kernel")
  with tf.Graph().as_default():
    w = tf.get_variable("w", initializer=np.zeros([2, 3], np.float32))
    optimizer = AdamWeightDecayOptimizer(0.1, kernels=kernels)
    m, v = optimizer.slots(w)
    update = kernels.adam_weight_decay(w, m, v, tf.placeholder(tf.float32), 1.0, 0.1, 1.0,
                                       0.9, 0.999, 1e-6)
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      with pytest.raises(tf.errors.InvalidArgumentError,
                         match=r"var must be an initialised float variable of the "
                               r"gradient's shape \[6\], not \[2,3\]"):
        session.run(update, {update.inputs[3]: np.zeros(6, np.float32)})


def test_the_fused_kernels_arguments_are_refused_where_they_do_not_apply():
  with tf.Graph().as_default():
    w = tf.get_variable("w", [2])
    with pytest.raises(ValueError, match="clip the gradients first"):
      AdamWeightDecayOptimizer(0.1).apply_gradients([(tf.ones([2]), w)], grad_scale=0.5)
    with pytest.raises(ValueError, match="runs on a CPU, not on TPU"):
      create_train_op(tf.reduce_sum(w), 0.1, 10, 0, use_tpu=True,
                      kernels=kernels_of("fused_kernel"))


def _ancestors(op):
  """Every op that op depends on, through its inputs and control inputs."""
  seen, stack = set(), [op]
  while stack:
    current = stack.pop()
    for parent in [t.op for t in current.inputs] + list(current.control_inputs):
      if parent not in seen:
        seen.add(parent)
        stack.append(parent)
  return seen


@pytest.mark.parametrize("path", PATHS)
def test_no_update_can_run_before_the_forward_pass_reads_its_variable(path):
  """Every op of the update that writes a variable (the weight decay's assign, Adam's
  kernel, the fused kernel) comes after each read of that variable by the model: else
  the executor may run it first, and the step trains on half-updated weights."""
  config = small_config()
  with tf.Graph().as_default():
    model_fn = model_fn_builder(config, THREE_CLASSES, ModelSettings(
        learning_rate=1e-3, num_train_steps=10, fused_kernels=path == "fused_kernel"))
    model_fn(model_features(config), None, tf.estimator.ModeKeys.TRAIN, {})
    ops = tf.get_default_graph().get_operations()
  writers = [op for op in ops if op.name.startswith("optimizer_update") and op.type in (
      "AssignVariableOp", "ResourceApplyAdam", "BertAdamWeightDecay")]
  assert len(writers) >= 2 + 5 + 2 + config.num_hidden_layers * 16
  for writer in writers:
    handle = writer.inputs[0].op
    # (The model's reads: not the variable's own snapshot, "<name>/Read/ReadVariableOp",
    # which the step does not use, nor the update's and the saver's.)
    reads = [op for op in ops if op.type in ("ReadVariableOp", "ResourceGather")
             and op.inputs[0].op is handle and op.outputs[0].consumers()
             and not op.name.startswith(("optimizer_update", "save"))]
    ancestors = _ancestors(writer)
    assert reads and all(read in ancestors for read in reads), (writer.name, reads)


def _updated(kernels, hyper, grads, scale):
  """A [3, 5] variable after len(grads) apply_gradients of AdamWeightDecayOptimizer(**hyper):
  the fused kernel gets each gradient and `scale`, TensorFlow's ops the gradient times it
  (as clipping gives them)."""
  start = np.linspace(-2.0, 2.0, 15, dtype=np.float32).reshape(3, 5)
  with tf.Graph().as_default():
    w = tf.get_variable("layer/kernel", initializer=start)
    fed = tf.placeholder(tf.float32, [3, 5])
    optimizer = AdamWeightDecayOptimizer(kernels=kernels, **hyper)
    if kernels is None:
      step = optimizer.apply_gradients([(fed * scale, w)])
    else:
      step = optimizer.apply_gradients([(fed, w)], grad_scale=tf.constant(scale))
    m, v = optimizer.slots(w)
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      for grad in grads:
        session.run(step, {fed: grad})
      return session.run([w, m, v])


def test_the_fused_update_takes_its_betas_epsilon_decay_and_scale_as_given():
  """Betas, epsilon, weight decay, learning rate and clipping factor far from BERT's
  (an epsilon comparable to sqrt(v)), so that a kernel that kept any of BERT's values
  fails."""
  hyper = dict(learning_rate=0.3, weight_decay_rate=0.2, beta_1=0.5, beta_2=0.7, epsilon=0.05)
  rng = np.random.RandomState(4)
  grads = [0.1 * rng.randn(3, 5).astype(np.float32) for _ in range(3)]
  fused_values = _updated(kernels_of("fused_kernel"), hyper, grads, 0.25)
  reference = _updated(None, hyper, grads, 0.25)
  for got, expected in zip(fused_values, reference):
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
  bert_defaults = _updated(None, dict(learning_rate=0.3, weight_decay_rate=0.2), grads, 0.25)
  assert np.abs(reference[0] - bert_defaults[0]).min() > 1e-3  # (the values matter here)


@pytest.mark.parametrize("path", PATHS)
def test_a_gradient_with_an_infinity_makes_every_value_nan(path):
  """(As clipping by an infinite norm does: the run's divergence check then stops it.)"""
  with tf.Graph().as_default():
    w = tf.get_variable("layer/kernel", initializer=np.ones([2, 3], np.float32))
    b = tf.get_variable("layer/bias", initializer=np.ones([3], np.float32))
    grad = np.array([[1.0, np.inf, 0.0], [0.5, 0.0, -1.0]], np.float32)
    loss = tf.reduce_sum(w * tf.constant(grad)) + tf.reduce_sum(b)
    train = create_train_op(loss, 0.1, 10, 0, use_tpu=False, kernels=kernels_of(path))
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      session.run(train)
      values = session.run([v for v in tf.global_variables() if v.op.name != "global_step"])
  assert len(values) == 6 and all(np.isnan(value).all() for value in values)
