"""The fused kernels' bfloat16 matrix multiply (modeling/kernels/bf16_matmul.cc) against
numpy's product of the same operands rounded to bfloat16: every shape kind (edges of the
AMX tiles and strips, odd depths, empty products), both transposes, float32 and bfloat16
operands, one matrix or a batch of them; its gradient; its refusals; which units it runs
on; and the encoder that uses it (modeling.bert with FusedKernels(own_bf16_matmul=True))
against the encoder in float32."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from hypothesis import given, settings, strategies as st

from modeling import bert, fused
from modeling.compat import setup_tensorflow


@pytest.fixture(scope="module")
def ops():
  setup_tensorflow()
  reason = fused.unavailable_reason()
  if reason:
    pytest.fail("the fused kernels do not build here: %s" % reason)
  return fused.library()


def to_bf16(x):
  """x rounded to bfloat16 (to nearest, ties to even), as float32."""
  bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
  bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
  return bits.astype(np.uint32).view(np.float32)


def reference(a, b, transpose_a, transpose_b):
  """op(a) op(b) of the rounded operands: matrices, or batches of them (the last two axes)."""
  a, b = to_bf16(a).astype(np.float64), to_bf16(b).astype(np.float64)
  return np.matmul(np.swapaxes(a, -1, -2) if transpose_a else a,
                   np.swapaxes(b, -1, -2) if transpose_b else b)


class Products(object):
  """One graph per (transposes, dtype) with placeholders of any shape, run for each case."""

  def __init__(self, ops):
    self.graph, self.session, self.ends = tf.Graph(), None, {}
    with self.graph.as_default():
      for ta in (False, True):
        for tb in (False, True):
          for dtype in (tf.float32, tf.bfloat16):
            for rank in (2, 3, 4):
              a = tf.placeholder(tf.float32, [None] * rank)
              b = tf.placeholder(tf.float32, [None] * rank)
              product = ops.bert_bf16_mat_mul(tf.cast(a, dtype), tf.cast(b, dtype),
                                              transpose_a=ta, transpose_b=tb)
              self.ends[ta, tb, dtype, rank] = a, b, tf.cast(product, tf.float32)
    self.session = tf.Session(graph=self.graph)

  def __call__(self, a, b, ta=False, tb=False, dtype=tf.float32):
    x, y, product = self.ends[ta, tb, dtype, np.ndim(a)]
    return self.session.run(product, {x: a, y: b})


@pytest.fixture(scope="module")
def products(ops):
  runner = Products(ops)
  yield runner
  runner.session.close()


def operands(rng, m, k, n, ta, tb, scale=1.0, batch=()):
  a = rng.randn(*(tuple(batch) + ((k, m) if ta else (m, k)))).astype(np.float32) * scale
  b = rng.randn(*(tuple(batch) + ((n, k) if tb else (k, n)))).astype(np.float32) * scale
  return a, b


def assert_product(got, want, dtype):
  """float32 out: the rounded operands' product to float32 summation error; bfloat16 out:
  that product rounded once more (half a unit in bfloat16's last place, 2^-9)."""
  assert got.shape == want.shape
  scale = np.abs(want).max() if want.size else 0.0
  if dtype == tf.float32:
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * (1 + scale))
  else:
    np.testing.assert_allclose(got, want, rtol=2 ** -8, atol=1e-5 * (1 + scale))


# Shapes at and around the kernel's blocks: tiles of 16, strips of 32 rows and columns,
# steps of 32 along K, odd K (the last pair half empty), and the dense layers' own.
EDGE_SHAPES = [(1, 1, 1), (1, 2, 1), (15, 31, 17), (16, 32, 16), (17, 33, 15), (31, 1, 33),
               (32, 64, 32), (33, 65, 47), (64, 384, 384), (70, 383, 100), (96, 1536, 40),
               (200, 40, 1536)]


@pytest.mark.parametrize("m,k,n", EDGE_SHAPES)
def test_the_product_is_that_of_the_operands_rounded_to_bfloat16(products, m, k, n):
  rng = np.random.RandomState(m * 1000 + k + n)
  for ta in (False, True):
    for tb in (False, True):
      a, b = operands(rng, m, k, n, ta, tb)
      want = reference(a, b, ta, tb)
      for dtype in (tf.float32, tf.bfloat16):
        assert_product(products(a, b, ta, tb, dtype), want, dtype)


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 80), k=st.integers(1, 80), n=st.integers(1, 80), ta=st.booleans(),
       tb=st.booleans(), bf16=st.booleans(), seed=st.integers(0, 2 ** 16),
       scale=st.sampled_from([1e-3, 1.0, 1e3]))
def test_any_shape_and_transpose_gives_the_rounded_operands_product(products, m, k, n, ta, tb,
                                                                   bf16, seed, scale):
  a, b = operands(np.random.RandomState(seed), m, k, n, ta, tb, scale)
  dtype = tf.bfloat16 if bf16 else tf.float32
  assert_product(products(a, b, ta, tb, dtype), reference(a, b, ta, tb), dtype)


# The attention's products, one per (example, head): scores [S, d] x [S, d]^T, the context
# [S, S] x [S, d] and the gradients' transposes, at lengths around the strips and tiles.
@pytest.mark.parametrize("batch", [(1,), (3,), (2, 3)])
@pytest.mark.parametrize("m,k,n", [(1, 32, 1), (31, 32, 31), (33, 32, 33), (64, 64, 32),
                                   (70, 32, 70), (5, 70, 32), (17, 3, 40)])
def test_a_batch_of_products_is_each_ones_rounded_product(products, batch, m, k, n):
  rng = np.random.RandomState(m * 100 + k + n + len(batch))
  for ta in (False, True):
    for tb in (False, True):
      a, b = operands(rng, m, k, n, ta, tb, batch=batch)
      want = reference(a, b, ta, tb)
      for dtype in (tf.float32, tf.bfloat16):
        got = products(a, b, ta, tb, dtype)
        assert got.shape == tuple(batch) + (m, n)
        assert_product(got, want, dtype)
        # (each product of the batch is the one the op gives that matrix alone)
        for i in np.ndindex(*batch):
          np.testing.assert_array_equal(got[i], products(a[i], b[i], ta, tb, dtype))


@settings(max_examples=40, deadline=None)
@given(batch=st.lists(st.integers(1, 4), min_size=1, max_size=2), m=st.integers(1, 40),
       k=st.integers(1, 40), n=st.integers(1, 40), ta=st.booleans(), tb=st.booleans(),
       bf16=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_any_batch_gives_each_products_rounded_operands_product(products, batch, m, k, n, ta,
                                                               tb, bf16, seed):
  a, b = operands(np.random.RandomState(seed), m, k, n, ta, tb, batch=batch)
  dtype = tf.bfloat16 if bf16 else tf.float32
  assert_product(products(a, b, ta, tb, dtype), reference(a, b, ta, tb), dtype)


def test_empty_batches(products):
  for batch in ((0,), (2, 0), (0, 3)):
    a, b = operands(np.random.RandomState(0), 4, 5, 3, False, False, batch=batch)
    assert products(a, b).shape == batch + (4, 3)
  a, b = operands(np.random.RandomState(0), 4, 0, 3, False, True, batch=(2,))
  np.testing.assert_array_equal(products(a, b, False, True), np.zeros((2, 4, 3), np.float32))


def test_operands_are_rounded_to_bfloat16_not_truncated(products):
  """1 + 2^-8 + 2^-9 is three quarters of bfloat16's step above 1 (2^-7): it rounds up to
  1 + 2^-7, where truncation would give 1; a float32 product of exact operands is exact."""
  a = np.array([[1 + 2 ** -8 + 2 ** -9]], np.float32)
  b = np.array([[1.0]], np.float32)
  assert products(a, b)[0, 0] == np.float32(1 + 2 ** -7)
  assert products(np.array([[3.0]], np.float32), np.array([[5.0]], np.float32))[0, 0] == 15.0


def test_empty_products_and_zero_depth(products):
  assert products(np.zeros((0, 5), np.float32), np.zeros((5, 3), np.float32)).shape == (0, 3)
  assert products(np.zeros((4, 5), np.float32), np.zeros((5, 0), np.float32)).shape == (4, 0)
  # (zero depth in both operand types and every transpose, with rows enough for whole
  # strips: a bfloat16 a of whole steps of K is read in place, and no step of 0 has a row)
  for ta in (False, True):
    for tb in (False, True):
      for dtype in (tf.float32, tf.bfloat16):
        for m in (4, 64):
          a, b = operands(np.random.RandomState(m), m, 0, 3, ta, tb)
          np.testing.assert_array_equal(products(a, b, ta, tb, dtype),
                                        np.zeros((m, 3), np.float32))


def test_non_finite_operands_give_non_finite_products_where_they_reach(products):
  a = np.ones((33, 40), np.float32)
  b = np.ones((40, 20), np.float32)
  a[3, 7] = np.nan
  b[5, 11] = np.inf
  got = products(a, b)
  assert np.isnan(got[3]).all()  # (the NaN reaches row 3; inf * 1 reaches column 11)
  assert np.isinf(np.delete(got, 3, axis=0)[:, 11]).all()
  finite = np.delete(np.delete(got, 3, axis=0), 11, axis=1)
  np.testing.assert_array_equal(finite, np.full(finite.shape, 40.0, np.float32))


@pytest.mark.parametrize("batch", [(), (2,)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_a_nan_whose_bits_are_all_below_bfloat16s_stays_a_nan_and_large_values_round_to_inf(
    products, ta, tb, batch):
  # Float32 operands are rounded by the kernel itself: a NaN with only its low 16 bits set
  # (0x7F800001, 0x7F80FFFF) would become inf if rounded as a number; 3.4e38 rounds up to
  # bfloat16's inf. K = 33: the NaN sits in the last, half-empty pair of a row.
  m, k, n = 5, 33, 18
  a = np.ones(batch + ((k, m) if ta else (m, k)), np.float32)
  b = np.ones(batch + ((n, k) if tb else (k, n)), np.float32)
  for bits, row in ((0x7F800001, 1), (0x7F80FFFF, 3)):
    index = (Ellipsis, k - 1, row) if ta else (Ellipsis, row, k - 1)
    a[index] = np.array(bits, np.uint32).view(np.float32)
  b[(Ellipsis, 16, 0) if tb else (Ellipsis, 0, 16)] = np.float32(3.4e38)
  got = products(a, b, ta, tb)
  assert got.shape == batch + (m, n)
  assert np.isnan(got[..., [1, 3], :]).all()
  others = got[..., [0, 2, 4], :]
  assert np.isposinf(others[..., 16]).all()
  np.testing.assert_array_equal(np.delete(others, 16, axis=-1),
                                np.full(batch + (3, n - 1), float(k), np.float32))


@pytest.mark.parametrize("batch", [(), (3,), (2, 2)])
def test_the_gradient_is_the_rounded_operands_gradient_for_every_transpose(ops, batch):
  rng = np.random.RandomState(5)
  m, k, n = 37, 50, 21
  t = lambda x: np.swapaxes(x, -1, -2)
  for ta in (False, True):
    for tb in (False, True):
      a, b = operands(rng, m, k, n, ta, tb, batch=batch)
      weights = rng.randn(*(batch + (m, n))).astype(np.float32)
      with tf.Graph().as_default():
        x, y = tf.constant(a), tf.constant(b)
        loss = tf.reduce_sum(ops.bert_bf16_mat_mul(x, y, transpose_a=ta, transpose_b=tb) *
                             weights)
        da, db = tf.Session().run(tf.gradients(loss, [x, y]))
      # d loss / d op(a) = w op(b)^T and d loss / d op(b) = op(a)^T w, of rounded factors
      op_a = to_bf16(t(a) if ta else a).astype(np.float64)
      op_b = to_bf16(t(b) if tb else b).astype(np.float64)
      w = to_bf16(weights).astype(np.float64)
      want_a, want_b = np.matmul(w, t(op_b)), np.matmul(t(op_a), w)
      np.testing.assert_allclose(da, t(want_a) if ta else want_a, rtol=1e-4, atol=1e-4)
      np.testing.assert_allclose(db, t(want_b) if tb else want_b, rtol=1e-4, atol=1e-4)


def test_operands_that_do_not_multiply_are_refused_with_their_shapes(ops):
  with tf.Graph().as_default():
    with pytest.raises(ValueError, match="must be equal|Dimensions must be"):
      ops.bert_bf16_mat_mul(tf.zeros([3, 4]), tf.zeros([5, 2]))
    with pytest.raises(ValueError, match="operands of one rank, not 3 and 2"):
      ops.bert_bf16_mat_mul(tf.zeros([2, 3, 4]), tf.zeros([4, 2]))
    with pytest.raises(ValueError, match="at least rank 2|must be at least rank 2"):
      ops.bert_bf16_mat_mul(tf.zeros([4]), tf.zeros([4]))
    with pytest.raises(ValueError, match="must be equal|Dimensions must be"):
      ops.bert_bf16_mat_mul(tf.zeros([2, 3, 4]), tf.zeros([3, 4, 2]))
    a, b = tf.placeholder(tf.float32, [None, None]), tf.placeholder(tf.float32, [None, None])
    product = ops.bert_bf16_mat_mul(a, b)
    x, y = tf.placeholder(tf.float32), tf.placeholder(tf.float32)  # (rank unknown)
    unknown = ops.bert_bf16_mat_mul(x, y)
    with tf.Session() as session:
      with pytest.raises(tf.errors.InvalidArgumentError,
                         match="op\\(a\\) is 3 x 4 but op\\(b\\) has 5 rows"):
        session.run(product, {a: np.zeros((3, 4)), b: np.zeros((5, 2))})
      for a_shape, b_shape in (((2, 3, 4), (3, 4, 2)), ((2, 3, 4), (4, 2)), ((4,), (4,))):
        with pytest.raises(tf.errors.InvalidArgumentError, match=(
            "takes two matrices, or two batches of them of one shape, not \\[%s\\] and "
            "\\[%s\\]" % (",".join(map(str, a_shape)), ",".join(map(str, b_shape))))):
          session.run(unknown, {x: np.zeros(a_shape), y: np.zeros(b_shape)})


def cpu_flags():
  with open("/proc/cpuinfo") as f:
    return next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])


def test_the_product_runs_on_the_cpus_bfloat16_units(ops):
  """On a CPU with AMX (and a kernel that grants the tile state: Linux 5.16+) the product
  is AMX's; else on one with AVX512_BF16, its dot products'; elsewhere the units say why
  it computes in float32 instead."""
  import platform
  units = fused.bf16_matmul_units()
  release = tuple(int(p) for p in platform.release().split(".")[:2] if p.isdigit())
  if {"amx_bf16", "amx_tile"} <= set(cpu_flags()) and release >= (5, 16):
    assert units == "AMX_BF16"
  elif "avx512_bf16" in cpu_flags():
    assert units == "AVX512_BF16"
  else:
    assert units == ("the fused kernels were built without AMX or AVX512_BF16 (this CPU or "
                     "compiler has neither)"), units


def test_the_encoder_on_its_own_bf16_matmul_trains_as_the_float32_encoder(ops):
  """BertModel with FusedKernels(own_bf16_matmul=True): its matrix multiplies are the
  kernel's (every dense layer's and both of each attention's), its activations float32,
  and its outputs and gradients those of the float32 encoder within bfloat16's rounding."""
  config = bert.BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=48,
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  ids = np.random.RandomState(0).randint(1, 60, size=(3, 9)).astype(np.int32)
  results = {}
  for own in (False, True):
    with tf.Graph().as_default():
      tf.set_random_seed(1)
      kernels = fused.FusedKernels(tf.constant([1, 0], tf.int64), own_bf16_matmul=own)
      model = bert.BertModel(config, True, tf.constant(ids), fused_kernels=kernels)
      pooled = model.get_pooled_output()
      loss = tf.reduce_sum(pooled * np.linspace(-1, 1, 32).astype(np.float32))
      variables = tf.trainable_variables()
      names = [v.name for v in variables]
      grads = tf.gradients(loss, variables)
      graph_ops = tf.get_default_graph().get_operations()
      matmuls = [op.name.startswith("gradients/") for op in graph_ops
                 if op.type == "BertBf16MatMul"]
      if own:
        assert not [op for op in graph_ops if op.type.startswith("BatchMatMul")]
      with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        results[own] = (session.run([pooled, grads]),
                        (matmuls.count(False), matmuls.count(True)), pooled.dtype)
  (plain, plain_grads), plain_count, _ = results[False]
  (own, own_grads), own_count, own_dtype = results[True]
  assert plain_count == (0, 0)
  # Per layer Q, K, V, the output projection, the feed-forward pair and the attention's
  # scores and context (forward), and each one's two gradients; no BatchMatMul left.
  layers = config.num_hidden_layers
  assert own_count == (8 * layers, 16 * layers) and own_dtype == tf.float32
  assert np.abs(own - plain).max() > 0  # (really computed from rounded operands)
  np.testing.assert_allclose(own, plain, atol=3e-2)
  largest = max(np.abs(np.asarray(getattr(g, "values", g))).max() for g in plain_grads)
  for name, g_own, g_plain in zip(names, own_grads, plain_grads):
    g_own, g_plain = (np.asarray(getattr(g, "values", g)) for g in (g_own, g_plain))
    assert np.isfinite(g_own).all()
    if name.endswith("key/bias:0"):
      # (zero in exact arithmetic: a row's softmax ignores what is added to all its
      # scores; from rounded products, noise below bfloat16's step of the largest gradient)
      assert np.abs(g_plain).max() < 1e-9 * largest
      assert np.abs(g_own).max() <= 2 ** -8 * largest
      continue
    scale = np.abs(g_plain).max() + 1e-6
    assert np.abs(g_own - g_plain).max() <= 5e-2 * scale, name


BUILD_CHECK = r"""
import sys
import numpy as np
import tensorflow.compat.v1 as tf
sys.path.insert(0, sys.argv[2])
from test_bf16_matmul import operands, reference
tf.disable_eager_execution()
ops = tf.load_op_library(sys.argv[1])
rng = np.random.RandomState(0)
worst = 0.0
with tf.Session() as session:
  print(session.run(ops.bert_bf16_mat_mul_units()).decode())
  for m, k, n, batch in [(1, 1, 1, ()), (17, 33, 15, ()), (64, 64, 64, ()),
                         (70, 383, 100, ()), (33, 32, 33, (2, 3))]:
    for ta in (False, True):
      for tb in (False, True):
        for dtype in (tf.float32, tf.bfloat16):
          a, b = operands(rng, m, k, n, ta, tb, batch=batch)
          got = session.run(tf.cast(ops.bert_bf16_mat_mul(
              tf.cast(a, dtype), tf.cast(b, dtype), transpose_a=ta, transpose_b=tb),
              tf.float32))
          want = reference(a, b, ta, tb)
          # (a bfloat16 product is rounded once more: half a unit in its last place)
          bound = 1e-5 if dtype == tf.float32 else 2 ** -8
          worst = max(worst, float(np.abs(got - want).max() / (bound * (1 + np.abs(want).max()))))
print(worst)
"""


# (the sources' paths, the same for both: built against TF 1.15's headers, twice as fast)
@pytest.mark.one_runtime("tf1")
@pytest.mark.parametrize("without", ["amx", "amx and avx512_bf16"])
def test_a_build_without_some_units_computes_the_same_product_on_the_others(
    ops, tmp_path, without):
  """The matmul's source built without AMX (as on a CPU that has AVX512_BF16 alone: on an
  AMX host this is the path such a CPU takes), or without either (as on a CPU that has
  neither): the units say which path it takes, and the product of every transpose is still
  that of the rounded operands. (The other source, fused_ops.cc, has no code that depends
  on these units, as checked here, and is left out of this build: it would take twice as
  long.)"""
  import os
  import subprocess
  import sys
  (fused_ops,) = [s for s in fused.SOURCES if s.endswith("fused_ops.cc")]
  with open(fused_ops) as f:
    source = f.read()
  # (no AMX or AVX512_BF16 macro, no tile or bfloat16 intrinsic)
  assert not any(s in source for s in ("__AMX", "_tile_", "__AVX512BF16__", "bf16", "pbh"))
  library = str(tmp_path / "without.so")
  flags = ["-mno-amx-tile", "-mno-amx-bf16", "-mno-amx-int8"]
  if without != "amx":
    flags.append("-mno-avx512bf16")
  command = [a for a in fused.compile_command(library) if a != fused_ops] + flags
  built = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True)
  assert built.returncode == 0, fused.first_error(built.stdout)
  done = subprocess.run([sys.executable, "-c", BUILD_CHECK, library,
                         os.path.dirname(os.path.abspath(__file__))],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        universal_newlines=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert done.returncode == 0, done.stderr[-2000:]
  units, worst = done.stdout.strip().splitlines()[-2:]
  if without == "amx" and "avx512_bf16" in cpu_flags():
    assert units == "AVX512_BF16"
  else:
    assert units == ("the fused kernels were built without AMX or AVX512_BF16 (this CPU or "
                     "compiler has neither)")
  assert float(worst) < 1  # (within the bound of each operand type)


def test_model_fn_multiplies_on_its_own_bf16_matmul_in_training_only(ops):
  """With own_bf16_matmul (and train_only_precision, as a CPU run), training's dense layers
  are the kernel's between float32 activations, and eval and predict compute in float32
  as the exports do: no bfloat16 anywhere in their graphs."""
  from conftest import THREE_CLASSES, model_features, small_config
  from modeling.model_fn import ModelSettings, model_fn_builder
  config = small_config()
  settings = ModelSettings(learning_rate=1e-3, num_train_steps=10, precision="bfloat16",
                           train_only_precision=True, fused_kernels=True,
                           own_bf16_matmul=True)
  found = {}
  for mode in (tf.estimator.ModeKeys.TRAIN, tf.estimator.ModeKeys.EVAL,
               tf.estimator.ModeKeys.PREDICT):
    with tf.Graph().as_default():
      spec = model_fn_builder(config, THREE_CLASSES, settings)(
          model_features(config), None, mode, {})
      graph_ops = tf.get_default_graph().get_operations()
      found[mode] = (sum(op.type == "BertBf16MatMul" for op in graph_ops),
                     any(t.dtype == tf.bfloat16 for op in graph_ops for t in op.outputs))
      if mode == tf.estimator.ModeKeys.TRAIN:
        with tf.Session() as session:
          session.run(tf.global_variables_initializer())
          loss, _ = session.run([spec.loss, spec.train_op])
        assert np.isfinite(loss)
  assert found[tf.estimator.ModeKeys.TRAIN][0] > 0
  assert not found[tf.estimator.ModeKeys.TRAIN][1]  # (float32 activations around it)
  assert found[tf.estimator.ModeKeys.EVAL] == (0, False)
  assert found[tf.estimator.ModeKeys.PREDICT] == (0, False)
  with pytest.raises(ValueError, match="own_bf16_matmul needs fused_kernels"):
    ModelSettings(precision="float32", fused_kernels=True, own_bf16_matmul=True)
