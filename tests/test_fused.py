"""The fused CPU kernels (modeling/fused.py) against TensorFlow's own ops: values and
gradients within float32 rounding, dropout masks from the seed, and the encoder built
with them against the encoder without."""

import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from modeling import bert, fused
from conftest import spread_over_runtimes
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


def small_encoder():
  """(a 2-layer encoder's config, its inputs (ids, mask, types)): 3 rows of 11 tokens, the
  first padded after 6, two segments."""
  config = bert.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=64)
  rng = np.random.RandomState(4)
  ids = rng.randint(1, 99, [3, 11]).astype(np.int32)
  mask = np.ones_like(ids)
  mask[0, 6:] = 0
  types = np.zeros_like(ids)
  types[:, 5:] = 1
  return config, (ids, mask, types)


@pytest.mark.parametrize("pooled_only", [False, True])  # (True: a classifier's, [CLS] last)
def test_the_encoder_with_fused_kernels_is_the_encoder_without(kernels, pooled_only):
  config, inputs = small_encoder()
  with tf.Graph().as_default():
    plain = pooled_and_gradients("plain", None, config, inputs, pooled_only)
    fast = pooled_and_gradients("fused", kernels.FusedKernels(seed_of(0)), config, inputs,
                                pooled_only)
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


# ---- bfloat16 activations: the kernels compute in float32 and round what they write.

BF16_ULP = 2.0 ** -7  # (bfloat16 keeps 8 significant bits: one unit in the last place, relative)


def bf16_against_float(build, activations, parameters, seed=3):
  """[(outputs, gradients) with bfloat16 activations, the same with float32 activations
  holding the same bfloat16 values], all as float32 numpy arrays: build(activations,
  parameters) gives the kernel's outputs; the gradients are of sum(outputs * fixed
  bfloat16 weights), w.r.t. the activations, then the parameters (float32 in both)."""
  results = []
  for dtype in (tf.bfloat16, tf.float32):
    rng = np.random.RandomState(seed)
    inputs = [tf.cast(tf.cast(a, tf.bfloat16), dtype) for a in activations]
    outputs = build(inputs, parameters)
    weights = [tf.cast(tf.cast(rng.randn(*o.shape.as_list()).astype(np.float32), tf.bfloat16),
                       tf.float32) for o in outputs]
    # (Through the cast, the upstream gradient of a bfloat16 output is the same numbers.)
    loss = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float32) * w)
                     for o, w in zip(outputs, weights)])
    grads = tf.gradients(loss, inputs + parameters)
    results.append(([tf.cast(o, tf.float32) for o in outputs],
                    [tf.cast(g, tf.float32) for g in grads]))
  with tf.Session() as session:
    return session.run(results)


def as_bf16_values(values):
  """float32 values rounded to bfloat16 by TensorFlow's Cast, back in float32."""
  with tf.Graph().as_default(), tf.Session() as session:
    return session.run(tf.cast(tf.cast(np.asarray(values, np.float32), tf.bfloat16),
                               tf.float32))


def assert_rounded_from(bf16_values, float_values, name):
  """Each bfloat16 result is its float32 twin rounded to bfloat16: exactly for almost
  every element, and never more than one unit in the last place off (the twin's float32
  sums may round their last bit otherwise)."""
  want = as_bf16_values(float_values)
  got = np.asarray(bf16_values, np.float32)
  assert got.shape == want.shape, name
  exact = float(np.mean(got == want))
  assert exact > 0.97, (name, exact)
  np.testing.assert_allclose(got, want, rtol=1.01 * BF16_ULP, atol=1e-30, err_msg=name)


def assert_bf16_kernel_is_float_kernel_rounded(got, activations):
  (bf16_outputs, bf16_grads), (float_outputs, float_grads) = got
  for k, (a, b) in enumerate(zip(bf16_outputs, float_outputs)):
    assert_rounded_from(a, b, "output %d" % k)
  for k, (a, b) in enumerate(zip(bf16_grads, float_grads)):
    if k < activations:
      assert_rounded_from(a, b, "gradient of activation %d" % k)
    else:  # (a parameter's gradient is float32 in both, summed from unrounded terms)
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg="parameter %d" % k)


def test_bf16_bias_gelu_is_the_float32_kernel_rounded(kernels):
  with tf.Graph().as_default():
    rng = np.random.RandomState(10)
    x, bias = constants(rng, (50, 24), (24,))
    ops = kernels.FusedKernels(seed_of(0))
    got = bf16_against_float(lambda a, p: [ops.bias_gelu(a[0], p[0])], [x * 4.0], [bias])
  assert_bf16_kernel_is_float_kernel_rounded(got, 1)


@pytest.mark.parametrize("rate", [0.0, 0.1])
def test_bf16_dropout_add_norm_is_the_float32_kernel_rounded(kernels, rate):
  rows, width = 40, 32
  with tf.Graph().as_default():
    x, residual, bias, gamma, beta = constants(np.random.RandomState(11), (rows, width),
                                               (rows, width), (width,), (width,), (width,))
    ops = kernels.FusedKernels(seed_of(5))
    got = bf16_against_float(
        lambda a, p: [ops.dropout_add_norm(a[0], p[0], a[1], p[1], p[2], rate, 2)],
        [x, residual], [bias, gamma, beta])
  assert_bf16_kernel_is_float_kernel_rounded(got, 2)


@pytest.mark.parametrize("rate", [0.0, 0.1])
def test_bf16_attention_softmax_is_the_float32_kernel_rounded(kernels, rate):
  batch, heads, queries, keys = 3, 2, 5, 7
  mask = np.ones([batch, keys], np.float32)
  mask[1, 4:] = 0
  with tf.Graph().as_default():
    bias = tf.constant((1.0 - mask) * -10000.0)
    (scores,) = constants(np.random.RandomState(12), (batch, heads, queries, keys))
    ops = kernels.FusedKernels(seed_of(9))
    got = bf16_against_float(lambda a, p: [ops.attention_softmax(a[0], bias, 0.25, rate, 4)],
                             [scores], [])
  assert_bf16_kernel_is_float_kernel_rounded(got, 1)
  assert not got[0][0][0][1, :, :, 4:].any()  # padding gets no attention in bfloat16 either


def test_bf16_heads_split_and_merge_as_in_float32(kernels):
  with tf.Graph().as_default():
    x, bias = constants(np.random.RandomState(13), (2, 5, 12), (12,))
    ops = kernels.FusedKernels(seed_of(0))
    got = bf16_against_float(
        lambda a, p: [ops.split_heads(a[0], p[0], 3), ops.merge_heads(
            tf.reshape(a[1], [2, 3, 5, 4]))], [x, x * 2.0], [bias])
  assert_bf16_kernel_is_float_kernel_rounded(got, 2)


def test_bf16_dropout_is_the_float32_kernel_rounded(kernels):
  with tf.Graph().as_default():
    (x,) = constants(np.random.RandomState(14), (3, 5, 331))
    ops = kernels.FusedKernels(seed_of(2))
    got = bf16_against_float(lambda a, p: [ops.dropout(a[0], 0.1, 7)], [x], [])
  assert_bf16_kernel_is_float_kernel_rounded(got, 1)


def test_bf16_rounding_is_tensorflows_cast(kernels):
  """What a kernel writes in bfloat16 is rounded as TensorFlow's Cast rounds: to nearest,
  ties to even, infinities kept, NaN a NaN. (x + bias with x = 0 writes bias rounded.)
  Subnormal floats are left out: TensorFlow runs its CPU kernels, these included, with
  subnormals flushed to zero."""
  special = [0.0, -0.0, 1.0, 1.00390625, 1.01171875, 1.0078125 + 2 ** -30, -3.0e38, 3.4e38,
             2.0 ** -126, -(2.0 ** -126) * 1.5, np.inf, -np.inf, np.nan, 65504.0, 1.0 / 3.0,
             -1.0 / 3.0]
  rng = np.random.RandomState(15)
  bits = rng.randint(0, 2 ** 32, 4000, dtype=np.uint64).astype(np.uint32)
  drawn = bits.view(np.float32)
  with np.errstate(invalid="ignore"):  # (NaNs among them)
    drawn = drawn[~((drawn != 0) & (np.abs(drawn) < np.float32(2.0 ** -126)))]
  values = np.concatenate([np.array(special, np.float32), drawn])
  values = values[:len(values) // 4 * 4]
  with tf.Graph().as_default():
    ops = kernels.FusedKernels(seed_of(0))
    split = ops.split_heads(tf.zeros([1, 1, len(values)], tf.bfloat16),
                            tf.constant(values), len(values) // 4)
    with tf.Session() as session:
      got = session.run(tf.cast(tf.reshape(split, [-1]), tf.float32))
  want = as_bf16_values(values)
  nan = np.isnan(want)
  assert np.array_equal(np.isnan(got), nan)
  np.testing.assert_array_equal(got[~nan], want[~nan])


def bf16_encoders(kernels, pooled_only):
  """(pooled output and gradients by variable name) of the float32 encoder, the bfloat16
  encoder on TensorFlow's ops, and the bfloat16 encoder on the fused kernels, all with
  one set of weights and without dropout."""
  config, inputs = small_encoder()
  built = []
  for scope, dtype, ops in (("reference", tf.float32, None), ("plain", tf.bfloat16, None),
                            ("fused", tf.bfloat16, kernels.FusedKernels(seed_of(0)))):
    model = bert.BertModel(config, False, *[tf.constant(x) for x in inputs],
                           scope=scope, fused_kernels=ops, pooled_only=pooled_only,
                           compute_dtype=dtype)
    pooled = model.get_pooled_output()
    variables = tf.trainable_variables(scope)
    weights = tf.constant(np.linspace(-1, 1, config.hidden_size), tf.float32)
    grads = tf.gradients(tf.reduce_sum(pooled * weights), variables)
    built.append((pooled, {v.op.name[len(scope) + 1:]: tf.convert_to_tensor(g)
                           for v, g in zip(variables, grads)}, variables))
  reference = {v.op.name[len("reference/"):]: v for v in built[0][2]}
  same_weights = [v.assign(reference[v.op.name.split("/", 1)[1]]) for _, _, vs in built[1:]
                  for v in vs]
  with tf.Session() as session:
    session.run(tf.global_variables_initializer())
    session.run(same_weights)
    return session.run([b[:2] for b in built])


# (The kernels' bfloat16 values and gradients are checked on both runtimes above; the
# encoder's two layouts, one on each.)
@pytest.mark.parametrize("pooled_only", spread_over_runtimes([False, True], on_both=0))
def test_the_bf16_encoder_with_fused_kernels_is_as_close_to_float32_as_tensorflows(
    kernels, pooled_only):
  """In bfloat16 the fused encoder and TensorFlow's own ops both differ from float32; the
  fused one (float32 inside its kernels) differs no more, output and every gradient."""
  with tf.Graph().as_default():
    (reference, reference_grads), (plain, plain_grads), (fast, fast_grads) = bf16_encoders(
        kernels, pooled_only)
  assert sorted(fast_grads) == sorted(reference_grads) == sorted(plain_grads)

  def error(a, b, floor=1e-6):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), floor))

  assert error(fast, reference) <= max(error(plain, reference), 4 * BF16_ULP)
  assert error(fast, reference) < 0.05
  # (A gradient that is zero in exact arithmetic, as the key's bias's, is rounding noise
  # in every precision: errors are relative to at least a thousandth of the largest.)
  floor = 1e-3 * max(float(np.abs(g).max()) for g in reference_grads.values())
  for name, want in reference_grads.items():
    assert error(fast_grads[name], want, floor) <= max(
        1.5 * error(plain_grads[name], want, floor), 8 * BF16_ULP), name
