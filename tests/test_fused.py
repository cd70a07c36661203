"""The fused CPU kernels (modeling/fused.py) against TensorFlow's own ops: values and
gradients within float32 rounding, dropout masks from the seed, and the encoder built
with them against the encoder without."""

import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from modeling import bert, fused
from modeling.compat import setup_tensorflow

TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def kernels():
  setup_tensorflow()
  reason = fused.unavailable_reason()
  if reason:
    pytest.fail("the fused kernels do not build here: %s" % reason)
  return fused


def run_with_gradients(outputs, inputs, feed=None, seed=3):
  """The outputs and the gradients of sum(outputs * fixed random weights) w.r.t. inputs."""
  rng = np.random.RandomState(seed)
  weights = [tf.constant(rng.randn(*o.shape.as_list()).astype(np.float32)) for o in outputs]
  loss = tf.add_n([tf.reduce_sum(o * w) for o, w in zip(outputs, weights)])
  grads = tf.gradients(loss, inputs)
  with tf.Session() as session:
    return session.run([outputs, grads], feed)


def constants(rng, *shapes):
  return [tf.constant(rng.randn(*shape).astype(np.float32)) for shape in shapes]


def assert_close(actual, expected, tolerance=TOLERANCE):
  for a, e in zip(actual, expected):
    np.testing.assert_allclose(a, e, rtol=tolerance, atol=tolerance)


def seed_of(step):
  return tf.constant([7, step], tf.int64)


def test_bias_gelu_is_google_gelu_of_the_sum(kernels):
  with tf.Graph().as_default():
    x, bias = constants(np.random.RandomState(0), (50, 24), (24,))
    x = x * 4.0  # (both tails: large negative and positive inputs)
    ops = kernels.FusedKernels(seed_of(0))
    got = run_with_gradients([ops.bias_gelu(x, bias)], [x, bias])
    want = run_with_gradients([bert.gelu_tanh(x + bias)], [x, bias])
  assert_close(got[0], want[0])
  assert_close(got[1], want[1])


@pytest.mark.parametrize("rate", [0.0, 0.1])
def test_dropout_add_norm_is_layer_norm_of_the_dropped_sum(kernels, rate):
  rows, width = 40, 32
  with tf.Graph().as_default():
    inputs = constants(np.random.RandomState(1), (rows, width), (width,), (rows, width),
                       (width,), (width,))
    x, bias, residual, gamma, beta = inputs
    ops = kernels.FusedKernels(seed_of(5))
    got = run_with_gradients(
        [ops.dropout_add_norm(x, bias, residual, gamma, beta, rate, 2)], inputs)
    # Google's layer norm (as modeling.bert's), of the sum with the kernel's own mask.
    mask = tf.reshape(ops.dropout_multipliers(rate, 2, rows * width), [rows, width])
    summed = (x + bias) * mask + residual
    mean, variance = tf.nn.moments(summed, [-1], keep_dims=True)
    reference = tf.nn.batch_normalization(summed, mean, variance, beta, gamma, 1e-12)
    want = run_with_gradients([reference], inputs)
  assert_close(got[0], want[0])
  assert_close(got[1], want[1])


@pytest.mark.parametrize("rate", [0.0, 0.1])
def test_attention_softmax_is_the_masked_softmax_then_dropout(kernels, rate):
  batch, heads, queries, keys = 3, 2, 5, 7
  rng = np.random.RandomState(2)
  mask = np.ones([batch, keys], np.float32)
  mask[1, 4:] = 0  # padding in one row of the batch
  with tf.Graph().as_default():
    bias = tf.constant((1.0 - mask) * -10000.0)
    (scores,) = constants(rng, (batch, heads, queries, keys))
    ops = kernels.FusedKernels(seed_of(9))
    got = run_with_gradients([ops.attention_softmax(scores, bias, 0.25, rate, 4)], [scores])
    drop = tf.reshape(ops.dropout_multipliers(rate, 4, batch * heads * queries * keys),
                      scores.shape)
    reference = tf.nn.softmax(scores * 0.25 + bias[:, None, None, :]) * drop
    want = run_with_gradients([reference], [scores])
    padded = got[0][0][1, :, :, 4:]
  assert_close(got[0], want[0])
  assert_close(got[1], want[1])
  assert not padded.any()  # padding gets no attention at all


def test_dropout_of_any_shape_is_the_mask_times_the_input(kernels):
  shape = (3, 5, 331)  # (4965 elements: a whole block of 4096 and part of another)
  with tf.Graph().as_default():
    (x,) = constants(np.random.RandomState(6), shape)
    ops = kernels.FusedKernels(seed_of(2))
    got = run_with_gradients([ops.dropout(x, 0.1, kernels.EMBEDDINGS_SITE)], [x])
    mask = tf.reshape(ops.dropout_multipliers(0.1, kernels.EMBEDDINGS_SITE, 4965), shape)
    want = run_with_gradients([x * mask], [x])
  assert_close(got[0], want[0])
  assert_close(got[1], want[1])
  assert 0 < float(np.mean(got[0][0] == 0)) < 0.2  # (some dropped, most kept)


def test_dropout_masks_keep_the_rate_and_change_with_step_and_site(kernels):
  size = 1 << 20
  with tf.Graph().as_default():
    masks = {(step, site): kernels.FusedKernels(seed_of(step)).dropout_multipliers(0.1, site,
                                                                                   size)
             for step, site in ((0, 0), (0, 1), (1, 0))}
    again = kernels.FusedKernels(seed_of(0)).dropout_multipliers(0.1, 0, size)
    with tf.Session() as session:
      values, repeated = session.run([masks, again])
  first = values[(0, 0)]
  assert set(np.unique(first)) == {0.0, np.float32(1.0 / 0.9)}
  kept = float(np.mean(first > 0))
  assert abs(kept - 0.9) < 0.002, kept  # (binomial sd over 2^20 draws: 0.0003)
  np.testing.assert_array_equal(first, repeated)  # a resumed step draws the same mask
  for other in ((0, 1), (1, 0)):
    agreement = float(np.mean((values[other] > 0) == (first > 0)))
    assert abs(agreement - 0.82) < 0.01, (other, agreement)  # independent: .9^2 + .1^2


def pooled_and_gradients(scope, kernels, config, inputs, pooled_only):
  """The pooled output of BertModel under scope, and the gradients of a fixed linear
  function of it, by variable name below the scope."""
  model = bert.BertModel(config, False, *[tf.constant(x) for x in inputs], scope=scope,
                         fused_kernels=kernels, pooled_only=pooled_only)
  pooled = model.get_pooled_output()
  variables = tf.trainable_variables(scope)
  weights = tf.constant(np.linspace(-1, 1, config.hidden_size), tf.float32)
  grads = tf.gradients(tf.reduce_sum(pooled * weights), variables)
  names = [v.op.name[len(scope) + 1:] for v in variables]
  return pooled, dict(zip(names, [tf.convert_to_tensor(g) for g in grads])), variables


@pytest.mark.parametrize("pooled_only", [False, True])  # (True: a classifier's, [CLS] last)
def test_the_encoder_with_fused_kernels_is_the_encoder_without(kernels, pooled_only):
  config = bert.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=64)
  rng = np.random.RandomState(4)
  ids = rng.randint(1, 99, [3, 11]).astype(np.int32)
  mask = np.ones_like(ids)
  mask[0, 6:] = 0
  types = np.zeros_like(ids)
  types[:, 5:] = 1
  with tf.Graph().as_default():
    plain = pooled_and_gradients("plain", None, config, (ids, mask, types), pooled_only)
    fast = pooled_and_gradients("fused", kernels.FusedKernels(seed_of(0)), config,
                                (ids, mask, types), pooled_only)
    fused_variables = {v.op.name[len("fused/"):]: v for v in fast[2]}
    same_weights = [fused_variables[v.op.name[len("plain/"):]].assign(v) for v in plain[2]]
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      session.run(same_weights)
      (plain_pooled, plain_grads), (fused_pooled, fused_grads) = session.run(
          [plain[:2], fast[:2]])
  assert_close([fused_pooled], [plain_pooled])
  assert sorted(fused_grads) == sorted(plain_grads)
  for name, grad in plain_grads.items():
    scale = max(1.0, float(np.abs(grad).max()))
    np.testing.assert_allclose(fused_grads[name], grad, atol=TOLERANCE * scale, err_msg=name)


def test_without_a_compiler_the_reason_names_it(tmp_path, monkeypatch):
  monkeypatch.setattr(fused, "COMPILER", "no-such-compiler-here")
  with pytest.raises(fused.KernelsUnavailable, match=r"no C\+\+ compiler \(no-such-compiler-here\)"):
    fused.build(str(tmp_path))
  assert os.listdir(str(tmp_path)) == []


def test_a_run_uses_them_only_alone_on_the_cpu_in_float32(kernels):
  from pipeline.build import fused_kernels_for
  from spec.run_errors import FlagError
  from spec.options import DeviceOptions, ModelOptions, TrainingOptions
  model, training, device = ModelOptions(), TrainingOptions(), DeviceOptions()
  assert fused_kernels_for(model, training, device, gpus=[]) == (True, None)
  assert fused_kernels_for(model, training, DeviceOptions(fused_kernels="off"),
                           gpus=[]) == (False, "--fused_kernels=off")
  assert fused_kernels_for(model, TrainingOptions(gradient_accumulation_steps=2),
                           DeviceOptions(use_xla=True), cluster=object(), gpus=["GPU:0"]) == (
      False, "--use_xla; --gradient_accumulation_steps=2; a cluster (TF_CONFIG)")
  assert fused_kernels_for(model, training, device, gpus=["GPU:0"]) == (
      False, "a GPU that TensorFlow sees")
  with pytest.raises(FlagError) as refused:
    fused_kernels_for(model, training, DeviceOptions(fused_kernels="on", use_fp16=True),
                      gpus=[])
  assert str(refused.value) == (
      "--fused_kernels=on cannot be used here: --use_fp16. Pass --fused_kernels=auto (they "
      "run where they can) or off")
  from pipeline.build import check_fused_kernels  # (the same, before any work)
  with pytest.raises(FlagError, match="--fused_kernels=on cannot be used here: --use_fp16"):
    check_fused_kernels(model, training, DeviceOptions(fused_kernels="on", use_fp16=True))
  check_fused_kernels(model, training, DeviceOptions(use_fp16=True))  # (auto: no refusal)
