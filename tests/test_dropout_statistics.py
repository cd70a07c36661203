"""Whether the fused kernels' dropout (modeling/kernels/fused_ops.cc, class Dropout) is
distributed like TensorFlow's tf.nn.dropout, which the encoder without the kernels uses,
and whether training gradients with the kernels are distributed like those without.

The kernels keep element i when the top 24 bits of splitmix64(key + i) reach
round(rate * 2^24), with key = Mix(Mix(Mix(seed) ^ step) ^ site). TensorFlow's dropout is
an i.i.d. Bernoulli(1 - rate) mask, fresh at every run. So each test here asks one
question of the form "is this what i.i.d. Bernoulli masks would give?" with a bound that
such masks break with probability at most ALPHA (1e-6: exact binomial tails, chi-square
tails, or normal tails where a sum of many independent terms is tested; Bonferroni over
the comparisons that one check makes). Every draw is seeded, so each test is
deterministic: it passes or fails the same way on every run, and its bounds are what
makes a pass meaningful. A test that makes k checks may alarm falsely with probability
at most k * ALPHA.

0. the masks are exactly the documented hash (a numpy splitmix64 reference), whatever the
   threads; a graph without a seed draws its own run seed;
1. keep rates: per site, step, row, column (and head, query, key of the attention
   layout), for rates 0.1 and 0.4; the distribution of kept counts per row against the
   binomial and against tf.nn.dropout's;
2. independence: between every pair of (seed, step, site) masks, between consecutive
   steps, seeds and sites with long masks, between neighbouring elements (lag 1, the
   width, seq * width, the attention's key, query and head strides, the dropout op's
   block of 4096), between rows;
3. the backward pass applies the forward mask: BertDropout, BertDropoutAddNorm and
   BertAttentionSoftmax with dropout on; the whole encoder is exactly the encoder on
   TensorFlow's ops with the kernels' masks put in place of tf.nn.dropout's (so every
   site, layout and backward mask is where the docstrings say); inside an Estimator the
   step (so the masks) advances every step and the backward pass sees the step's seed;
4. the model, in distribution: a 2-layer BERT (hidden 32, 2 heads, seq 16, batch 8)
   with a dropped-out head, built with and without the kernels on the same weights;
   over 300 draws each, the means and variances of the pooled output, the loss and the
   gradients of four variables agree (Welch z per element and on 8 random projections,
   a variance ratio per element with its kurtosis-adjusted standard error, the mean
   squared distance to the mean); and the same statistics reject a kernel dropout whose
   rate is 20% too high (their power). These bounds are large-sample (normal and
   chi-square) approximations, so ALPHA is nominal there. 300 draws do not see every
   defect: sites sharing one mask, or a backward pass applying another site's mask,
   pass them (measured by mutating fused_ops.cc); sections 2 and 3 catch those.
"""

import functools
import math

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from modeling import bert, fused
from modeling.compat import setup_tensorflow

ALPHA = 1e-6  # the false-alarm rate of each check (Bonferroni within it)
SEED = 20240611  # the run's seed: the first of the kernels' pair, or TensorFlow's graph seed
RATES = (0.1, 0.4)
STEPS = 64  # masks per site for the keep-rate and neighbour checks

BATCH, SEQ, HIDDEN, HEADS = 8, 16, 32, 2
TOKENS = [BATCH * SEQ, HIDDEN]  # [rows, width] of the hidden dropouts
ATTENTION = [BATCH, HEADS, SEQ, SEQ]  # [B, heads, Q, S] of the attention-probability dropout
HEAD = [BATCH, HIDDEN]  # the classifier head's dropout of the pooled output
EMB, HEAD_SITE = fused.EMBEDDINGS_SITE, fused.HEAD_SITE

# Each layout's masks: (op, site) of a 2-layer encoder (layer i: 3i attention
# probabilities, 3i + 1 attention output, 3i + 2 FFN output).
LAYOUTS = {
    "tokens": (TOKENS, [("add_norm", 1), ("add_norm", 2), ("add_norm", 4), ("add_norm", 5),
                        ("dropout", EMB)]),
    "attention": (ATTENTION, [("attention", 0), ("attention", 3)]),
    "head": (HEAD, [("dropout", HEAD_SITE)]),
}


@pytest.fixture(scope="module")
def kernels():
  setup_tensorflow()
  reason = fused.unavailable_reason()
  if reason:
    pytest.skip("the fused kernels do not build here: %s" % reason)
  return fused.library()


def report(name, **values):
  """One line of the statistics behind a check (shown with pytest -s or -rP)."""
  print("%s: %s" % (name, ", ".join("%s=%s" % (k, ("%.4g" % v) if isinstance(v, float)
                                                  else v) for k, v in values.items())))


# ---- Distributions (no scipy on the TF 1.15 runtime).

def normal_sf(z):
  return 0.5 * math.erfc(z / math.sqrt(2.0))


@functools.lru_cache(maxsize=None)
def z_bound(alpha):
  """The |z| that a standard normal exceeds with probability alpha (both tails)."""
  low, high = 0.0, 40.0
  for _ in range(200):
    middle = (low + high) / 2
    low, high = (middle, high) if 2 * normal_sf(middle) > alpha else (low, middle)
  return high


_LGAMMA = np.vectorize(math.lgamma)


def binomial_pmf(n, q, ks):
  ks = np.asarray(ks, np.float64)
  return np.exp(_LGAMMA(n + 1.0) - _LGAMMA(ks + 1.0) - _LGAMMA(n - ks + 1.0) +
                ks * math.log(q) + (n - ks) * math.log1p(-q))


@functools.lru_cache(maxsize=None)
def binomial_interval(n, q, alpha):
  """[low, high]: Binomial(n, q) falls below low or above high with probability at most
  alpha / 2 each (exact tails)."""
  sd = math.sqrt(n * q * (1 - q))
  ks = np.arange(max(0, int(n * q - 20 * sd - 20)), min(n, int(n * q + 20 * sd + 20)) + 1)
  pmf = binomial_pmf(n, q, ks)
  below, above = np.cumsum(pmf), np.cumsum(pmf[::-1])[::-1]  # P(X <= k), P(X >= k)
  inside = ks[(below > alpha / 2) & (above > alpha / 2)]
  return int(inside[0]), int(inside[-1])


def _upper_gamma(a, x):
  """The regularised upper incomplete gamma function Q(a, x) (Numerical Recipes)."""
  if x <= 0:
    return 1.0
  log_front = -x + a * math.log(x) - math.lgamma(a)
  if x < a + 1:  # series
    term = total = 1.0 / a
    for i in range(1, 100000):
      term *= x / (a + i)
      total += term
      if abs(term) < abs(total) * 1e-16:
        break
    return max(0.0, 1.0 - total * math.exp(log_front))
  b, c, d = x + 1 - a, 1e300, 1.0 / (x + 1 - a)  # continued fraction
  h = d
  for i in range(1, 100000):
    an = -i * (i - a)
    b += 2
    d = an * d + b
    d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
    c = b + an / c
    c = c if abs(c) > 1e-300 else 1e-300
    h *= d * c
    if abs(d * c - 1) < 1e-16:
      break
  return math.exp(log_front) * h


def chi2_sf(x, dof):
  return _upper_gamma(dof / 2.0, x / 2.0)


def merged_bins(expected, minimum=5.0):
  """Groups of neighbouring bins (lists of indices) whose expected counts reach minimum,
  growing from both ends towards the largest bin (the tails get merged)."""
  expected = list(expected)
  middle = int(np.argmax(expected))
  groups, current, total = [], [], 0.0
  for i in range(0, middle):
    current.append(i)
    total += expected[i]
    if total >= minimum:
      groups.append(current)
      current, total = [], 0.0
  low_rest = current
  tail, current, total = [], [], 0.0
  for i in range(len(expected) - 1, middle, -1):
    current.append(i)
    total += expected[i]
    if total >= minimum:
      tail.append(current)
      current, total = [], 0.0
  groups.append(low_rest + [middle] + current)
  return groups + tail[::-1]


def chi_square_goodness_of_fit(counts, probabilities):
  """(statistic, degrees of freedom, p) of observed counts per value against
  probabilities per value, with bins merged to expected counts of at least 5."""
  counts = np.asarray(counts, np.float64)
  expected = counts.sum() * np.asarray(probabilities, np.float64)
  groups = merged_bins(expected)
  observed = np.array([counts[g].sum() for g in groups])
  wanted = np.array([expected[g].sum() for g in groups])
  statistic = float(((observed - wanted) ** 2 / wanted).sum())
  dof = len(groups) - 1
  return statistic, dof, chi2_sf(statistic, dof)


def chi_square_two_samples(counts_a, counts_b):
  """(statistic, degrees of freedom, p) of the test that two histograms over the same
  values come from one distribution (a 2 x bins contingency table, bins merged to
  expected counts of at least 5 in each row)."""
  a, b = np.asarray(counts_a, np.float64), np.asarray(counts_b, np.float64)
  share = a.sum() / (a.sum() + b.sum())
  groups = merged_bins(np.minimum(share, 1 - share) * (a + b))
  a = np.array([a[g].sum() for g in groups])
  b = np.array([b[g].sum() for g in groups])
  both = a + b
  statistic = float(((a - share * both) ** 2 / (share * both) +
                     (b - (1 - share) * both) ** 2 / ((1 - share) * both)).sum())
  dof = len(groups) - 1
  return statistic, dof, chi2_sf(statistic, dof)


def assert_binomial(count, n, q, alpha, what):
  low, high = binomial_interval(int(n), q, alpha)
  assert low <= count <= high, "%s: %d of %d, outside [%d, %d] (Binomial(n, %.4g) at %.2g)" % (
      what, count, n, low, high, q, alpha)


def assert_binomial_each(counts, n, q, alpha, what):
  """Every count of an array ~ Binomial(n, q), Bonferroni over the array."""
  counts = np.asarray(counts).reshape(-1)
  low, high = binomial_interval(int(n), q, alpha / counts.size)
  bad = np.flatnonzero((counts < low) | (counts > high))
  assert not bad.size, "%s: %d of %d counts outside [%d, %d] of Binomial(%d, %.4g); first %s" % (
      what, bad.size, counts.size, low, high, n, q, [int(counts[i]) for i in bad[:5]])
  return float(counts.min()) / n, float(counts.max()) / n


# ---- Masks as the ops apply them.

def applied_multipliers(ops, kind, shape, rate, site, seed):
  """What the op `kind` multiplies each element of a tensor of `shape` by (0 or
  1 / (1 - rate)), read off its output for an input of ones."""
  if kind == "dropout":  # BertDropout (the embeddings and the head)
    return ops.bert_dropout(tf.ones(shape), seed, rate=rate, site=site)
  if kind == "add_norm":  # BertDropoutAddNorm: its `sum` is dropout(x + bias) + residual
    rows, width = shape
    _, summed, _, _ = ops.bert_dropout_add_norm(
        tf.ones(shape), tf.zeros([width]), tf.zeros(shape), tf.ones([width]),
        tf.zeros([width]), seed, rate=rate, site=site, epsilon=1e-12)
    return summed
  if kind == "attention":  # BertAttentionSoftmax of equal scores: probs are 1 / S
    dropped, probs = ops.bert_attention_softmax(tf.zeros(shape), tf.zeros([shape[0], shape[3]]),
                                                seed, scale=1.0, rate=rate, site=site)
    return dropped / probs
  raise ValueError(kind)


def as_kept(multipliers, rate):
  """The kept elements (bool) of multipliers that must each be 0 or 1 / (1 - rate)."""
  scale = 1.0 / (1.0 - rate)
  kept = np.abs(multipliers - scale) <= 1e-5 * scale
  assert np.all(kept | (multipliers == 0)), "multipliers other than 0 and 1 / (1 - rate): %s" % (
      np.unique(multipliers[~kept & (multipliers != 0)])[:5],)
  return kept


def kernel_masks(ops, rate, masks, seeds_and_steps):
  """kept[mask, draw, ...] for masks [(kind, shape, site)] at each (seed, step)."""
  with tf.Graph().as_default():
    seed = tf.placeholder(tf.int64, [2])
    outputs = [applied_multipliers(ops, kind, shape, rate, site, seed)
               for kind, shape, site in masks]
    with tf.Session() as session:
      values = [session.run(outputs, {seed: pair}) for pair in seeds_and_steps]
  return [as_kept(np.stack([v[m] for v in values]), rate) for m in range(len(masks))]


@functools.lru_cache(maxsize=None)
def layout_masks(rate):
  """{layout: kept [sites, STEPS, *shape]} of the kernels at seed SEED, steps 0..STEPS-1."""
  ops = fused.library()
  masks = [(kind, shape, site) for name, (shape, sites) in sorted(LAYOUTS.items())
           for kind, site in sites]
  kept = kernel_masks(ops, rate, masks, [(SEED, step) for step in range(STEPS)])
  result, first = {}, 0
  for name, (shape, sites) in sorted(LAYOUTS.items()):
    result[name] = np.stack(kept[first:first + len(sites)])
    first += len(sites)
  return result


@functools.lru_cache(maxsize=None)
def tensorflow_masks(rate, shape, draws):
  """kept [draws, *shape] of tf.nn.dropout under graph seed SEED."""
  with tf.Graph().as_default():
    tf.set_random_seed(SEED)
    dropped = tf.nn.dropout(tf.ones([draws] + list(shape)), rate=rate)
    with tf.Session() as session:
      return as_kept(session.run(dropped), rate)


# ---- 0. The masks are the documented hash, whatever the threads and the runtime.

def splitmix64_finaliser(z):
  """Mix of fused_ops.cc on numpy uint64 arrays (arithmetic modulo 2^64)."""
  z = z + np.uint64(0x9E3779B97F4A7C15)
  z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
  z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
  return z ^ (z >> np.uint64(31))


def reference_kept(seed, step, site, rate, size):
  """Element i is kept when the top 24 bits of Mix(key + i) reach round(rate * 2^24),
  key = Mix(Mix(Mix(seed) ^ step) ^ site), rate as the float32 attribute holds it."""
  with np.errstate(over="ignore"):
    word = lambda value: np.array([value], np.int64).view(np.uint64)
    key = splitmix64_finaliser(
        splitmix64_finaliser(splitmix64_finaliser(word(seed)) ^ word(step)) ^ word(site))
    draws = splitmix64_finaliser(key + np.arange(size, dtype=np.uint64)) >> np.uint64(40)
  threshold = math.floor(float(np.float32(rate)) * (1 << 24) + 0.5)
  return draws >= threshold


@pytest.mark.parametrize("rate", RATES)
def test_the_masks_are_the_documented_hash_of_seed_step_site_and_element(kernels, rate):
  """So their statistics are those of splitmix64 (which passes BigCrush as a generator of
  Mix(key + i)), and a checkpoint resumed on the other runtime draws the same masks."""
  size = 5000  # (more than one of BertDropout's blocks of 4096)
  sites = [0, 5, EMB, HEAD_SITE]
  draws = [(SEED, 0), (SEED, 1), (SEED, 123456), (SEED + 1, 0), (-3, 7), (2 ** 62 + 5, 2 ** 40)]
  kept = kernel_masks(kernels, rate, [("dropout", [size], site) for site in sites], draws)
  for s, site in enumerate(sites):
    for d, (seed, step) in enumerate(draws):
      np.testing.assert_array_equal(kept[s][d], reference_kept(seed, step, site, rate, size),
                                    err_msg="seed %d, step %d, site %d" % (seed, step, site))


def test_the_masks_do_not_depend_on_the_threads(kernels):
  with tf.Graph().as_default():
    seed = tf.constant([SEED, 3], tf.int64)
    outputs = [applied_multipliers(kernels, kind, shape, 0.4, site, seed) for kind, shape, site in
               (("dropout", [5, 4096], EMB), ("add_norm", TOKENS, 1),
                ("attention", ATTENTION, 0))]
    values = []
    for threads in (1, 2, 4):
      config = tf.ConfigProto(intra_op_parallelism_threads=threads,
                              inter_op_parallelism_threads=threads)
      with tf.Session(config=config) as session:
        values.append(session.run(outputs))
  for other in values[1:]:
    for a, b in zip(values[0], other):
      np.testing.assert_array_equal(a, b)


def test_a_graph_without_a_seed_draws_its_own_run_seed(kernels):
  """step_seed: [the graph's seed, the global step]. A graph without a seed gets a random
  one, so an unseeded run that is resumed (a new graph) draws other masks than an
  uninterrupted run would; with a seed (RunConfig(tf_random_seed), which --seed always
  sets) it draws the same."""
  seeds = []
  for graph_seed in (None, None, SEED, SEED):
    with tf.Graph().as_default():
      if graph_seed is not None:
        tf.set_random_seed(graph_seed)
      seed = fused.step_seed()
      with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        seeds.append(list(session.run(seed)))
  assert seeds[0][1] == seeds[1][1] == 0
  assert seeds[0][0] != seeds[1][0]
  assert seeds[2] == seeds[3] == [SEED, 0]


# ---- 1. Keep rates.

@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("rate", RATES)
def test_keep_rate_per_site_step_row_and_column(kernels, rate, layout):
  shape, sites = LAYOUTS[layout]
  kept = layout_masks(rate)[layout]  # [sites, steps, *shape]
  q = 1.0 - rate
  size = int(np.prod(shape))
  per_mask = kept.reshape(len(sites), STEPS, size).sum(-1)
  spread = assert_binomial_each(per_mask, size, q, ALPHA, "kept per (site, step)")
  for i, (_, site) in enumerate(sites):
    assert_binomial(int(per_mask[i].sum()), size * STEPS, q, ALPHA / len(sites),
                    "kept at site %d" % site)
  assert_binomial_each(per_mask.sum(0), size * len(sites), q, ALPHA, "kept per step")
  # Per index of each axis (row, column; batch, head, query, key), over all else.
  axes = list(range(2, kept.ndim))
  for axis in axes:
    counts = kept.sum(axis=tuple(a for a in range(kept.ndim) if a != axis))
    assert_binomial_each(counts, kept.size // kept.shape[axis], q, ALPHA / len(axes),
                         "kept per index of axis %d of %s" % (axis - 2, shape))
  width = shape[-1]
  rows = kept.reshape(-1, width)  # the kernels' rows: all axes but the last
  per_row_everywhere = rows.reshape(len(sites) * STEPS, -1, width).sum(axis=(0, 2))
  assert_binomial_each(per_row_everywhere, len(sites) * STEPS * width, q, ALPHA,
                       "kept per row over sites and steps")
  report("keep rate %s %.1f" % (layout, rate), masks=per_mask.size,
         mask_fraction_min=spread[0], mask_fraction_max=spread[1],
         overall=float(kept.mean()), expected=q)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("rate", RATES)
def test_kept_counts_per_row_are_binomial_as_with_tensorflow_dropout(kernels, rate, layout):
  shape, sites = LAYOUTS[layout]
  width = shape[-1]
  kept = layout_masks(rate)[layout]
  theirs = tensorflow_masks(rate, tuple(shape), len(sites) * STEPS)
  ours_rows, their_rows = kept.reshape(-1, width).sum(-1), theirs.reshape(-1, width).sum(-1)
  assert ours_rows.size == their_rows.size
  ours_hist = np.bincount(ours_rows, minlength=width + 1)
  their_hist = np.bincount(their_rows, minlength=width + 1)
  pmf = binomial_pmf(width, 1.0 - rate, np.arange(width + 1))
  ours = chi_square_goodness_of_fit(ours_hist, pmf)
  tensorflow = chi_square_goodness_of_fit(their_hist, pmf)  # (the procedure, calibrated)
  both = chi_square_two_samples(ours_hist, their_hist)
  report("row counts %s %.1f" % (layout, rate), rows=int(ours_rows.size),
         kernels_chi2=ours[0], dof=ours[1], p=ours[2], tf_chi2=tensorflow[0],
         tf_p=tensorflow[2], two_sample_chi2=both[0], two_sample_dof=both[1],
         two_sample_p=both[2])
  assert ours[2] > ALPHA, "the kernels' kept counts per row are not Binomial(%d, %.1f): %s" % (
      width, 1 - rate, ours)
  assert tensorflow[2] > ALPHA, ("tf.nn.dropout's kept counts per row are not binomial: %s"
                                 % (tensorflow,))
  assert both[2] > ALPHA, "the kernels' and tf.nn.dropout's row counts differ: %s" % (both,)
  # Their variance, by a z test (var of a sample variance ~ (mu4 - s^4) / n).
  for name, counts in (("kernels", ours_rows), ("tf.nn.dropout", their_rows)):
    n, mean, var = counts.size, width * (1 - rate), width * rate * (1 - rate)
    mu4 = var * (1 + 3 * (width - 2) * rate * (1 - rate))  # the binomial's 4th central moment
    z = (np.mean((counts - mean) ** 2) - var) / math.sqrt((mu4 - var ** 2) / n)
    assert abs(z) < z_bound(ALPHA), "%s: row counts' variance off by z = %.2f" % (name, z)


# ---- 2. Independence.

def agreement_rate(rate):
  return (1 - rate) ** 2 + rate ** 2


@functools.lru_cache(maxsize=None)
def pair_masks(rate):
  """kept [masks, 4096] of BertDropout for every (seed, step, site) in a grid, and the
  grid's (seed, step, site)."""
  sites = [0, 1, 2, 3, 4, 5, EMB, HEAD_SITE]
  grid = [(seed, step) for seed in (SEED, SEED + 1) for step in range(40)]
  kept = kernel_masks(fused.library(), rate, [("dropout", [4096], site) for site in sites],
                      grid)  # [sites] of [grid, 4096]
  keys = [(seed, step, site) for site in sites for seed, step in grid]
  return np.concatenate(kept), keys


@pytest.mark.parametrize("rate", RATES)
def test_every_pair_of_seed_step_and_site_draws_independent_masks(kernels, rate):
  kept, keys = pair_masks(rate)
  masks, n = kept.shape
  q, p = 1.0 - rate, rate
  k = kept.astype(np.float64)
  agree = k @ k.T + (1 - k) @ (1 - k).T  # elements on which two masks agree
  upper = np.triu_indices(masks, 1)
  agree = agree[upper]
  pairs = agree.size
  assert agree.max() < n and agree.min() > 0, "identical or complementary masks"
  low, high = binomial_interval(n, agreement_rate(rate), ALPHA / pairs)
  bad = np.flatnonzero((agree < low) | (agree > high))
  assert not bad.size, "pairs agreeing too much or too little: %s" % [
      (keys[upper[0][i]], keys[upper[1][i]], int(agree[i])) for i in bad[:5]]
  # All pairs at once: z_ij = sum_e (k_ie - q)(k_je - q) / (sqrt(n) p q) has mean 0 and
  # variance 1 when masks are independent, so mean(z^2) is 1; its variance counts the
  # pairs that share a mask (cov (kappa - 1) / n, kappa = E[standardised k^4]).
  centred = (k - q) / math.sqrt(p * q)
  z = (centred @ centred.T)[upper] / math.sqrt(n)
  kappa = (q ** 3 + p ** 3) / (p * q)
  var = (pairs * (2 + (kappa ** 2 - 3) / n) +
         masks * (masks - 1) * (masks - 2) * (kappa - 1) / n) / pairs ** 2
  mean_square = float(np.mean(z ** 2))
  report("pairs %.1f" % rate, masks=masks, pairs=pairs, agreement_min=float(agree.min()) / n,
         agreement_max=float(agree.max()) / n, expected=agreement_rate(rate),
         bound=(low / n, high / n), mean_z2=mean_square, sd=math.sqrt(var))
  assert abs(mean_square - 1) < z_bound(ALPHA) * math.sqrt(var), (
      "the masks' pairwise correlations are too large: mean z^2 %.4f, sd %.4f"
      % (mean_square, math.sqrt(var)))


@pytest.mark.parametrize("rate", RATES)
def test_consecutive_steps_seeds_and_sites_draw_independent_masks(kernels, rate):
  """Long masks (2^16) of the neighbours most likely to be related: step s and s + 1,
  seed s and s + 1, a seed and a step swapped, site i and i + 1, the embeddings and the
  head, over 24 of each."""
  size, count = 1 << 16, 24
  sites = [0, 1, 2, EMB, HEAD_SITE]
  with tf.Graph().as_default():
    seed = tf.placeholder(tf.int64, [2])
    outputs = {site: applied_multipliers(kernels, "dropout", [size], rate, site, seed)
               for site in sites}
    with tf.Session() as session:
      @functools.lru_cache(maxsize=None)
      def mask(seed_value, step, site):
        return as_kept(session.run(outputs[site], {seed: [seed_value, step]}), rate)
      run_relations(mask, size, count, rate)


def run_relations(mask, size, count, rate):
  relations = {
      "step s, s + 1": [((SEED, s, 0), (SEED, s + 1, 0)) for s in range(count)],
      "step s, s + 1 (head)": [((SEED, s, HEAD_SITE), (SEED, s + 1, HEAD_SITE))
                               for s in range(count)],
      "seed d, d + 1": [((SEED + d, 0, 0), (SEED + d + 1, 0, 0)) for d in range(count)],
      "seed and step swapped": [((SEED + d, s, 1), (s, SEED + d, 1))
                                for d in range(4) for s in range(6)],
      "site i, i + 1": [((SEED, s, i), (SEED, s, i + 1)) for s in range(12) for i in (0, 1)],
      "embeddings, head": [((SEED, s, EMB), (SEED, s, HEAD_SITE)) for s in range(count)],
      "layer site, embeddings": [((SEED, s, 2), (SEED, s, EMB)) for s in range(count)],
  }
  checks = sum(len(pairs) + 1 for pairs in relations.values())
  for name, pairs in relations.items():
    agreements = [int(np.sum(mask(*a) == mask(*b))) for a, b in pairs]
    for (a, b), agreed in zip(pairs, agreements):
      assert 0 < agreed < size, "%s: %s and %s identical or complementary" % (name, a, b)
      assert_binomial(agreed, size, agreement_rate(rate), ALPHA / checks,
                      "%s: %s against %s" % (name, a, b))
    assert_binomial(sum(agreements), size * len(pairs), agreement_rate(rate), ALPHA / checks,
                    "%s, all %d pairs" % (name, len(pairs)))
    report("%s %.1f" % (name, rate), agreement=sum(agreements) / float(size * len(pairs)),
           expected=agreement_rate(rate))


def lagged_agreement(kept, lag):
  """(agreements, pairs) of elements e and e + lag of the last axis, over disjoint pairs
  (e with (e // lag) even), so that pairs share no element and are independent."""
  n = kept.shape[-1]
  first = np.arange(n)
  first = first[((first // lag) % 2 == 0) & (first + lag < n)]
  agreed = kept[..., first] == kept[..., first + lag]
  return int(agreed.sum()), agreed.size


@pytest.mark.parametrize("rate", RATES)
def test_neighbouring_elements_are_independent(kernels, rate):
  masks = layout_masks(rate)
  tokens = masks["tokens"].reshape(-1, STEPS, int(np.prod(TOKENS)))
  attention = masks["attention"].reshape(-1, STEPS, int(np.prod(ATTENTION)))
  blocks = kernel_masks(kernels, rate, [("dropout", [3 * 4096], 7)],
                        [(SEED, step) for step in range(STEPS)])[0]
  width, seq = HIDDEN, SEQ
  cases = [("tokens", tokens, lag) for lag in (1, 2, width - 1, width, seq * width)] + [
      ("attention", attention, lag) for lag in (1, seq, seq * seq, HEADS * seq * seq)] + [
      ("dropout blocks", blocks, lag) for lag in (1, 4096)]
  for name, kept, lag in cases:
    agreed, pairs = lagged_agreement(kept, lag)
    assert_binomial(agreed, pairs, agreement_rate(rate), ALPHA / len(cases),
                    "%s, lag %d" % (name, lag))
    report("lag %s %d %.1f" % (name, lag, rate), agreement=agreed / float(pairs),
           expected=agreement_rate(rate), pairs=pairs)
  # Across the dropout op's block boundary (elements 4095 | 4096, 8191 | 8192) over steps.
  for edge in (4096, 8192):
    assert_binomial(int(np.sum(blocks[:, edge - 1] == blocks[:, edge])), STEPS,
                    agreement_rate(rate), ALPHA, "the block edge at %d" % edge)


@pytest.mark.parametrize("rate", RATES)
def test_rows_are_independent(kernels, rate):
  """Kept counts of rows (the kernels' unit of work): of neighbouring rows, of one row at
  consecutive steps and of one row at two sites of one step. Their products, centred on
  the binomial's mean and scaled by its variance, have mean 0 and variance 1."""
  masks = layout_masks(rate)
  q = 1.0 - rate
  cases = []
  for layout in ("tokens", "attention"):
    shape = LAYOUTS[layout][0]
    width = shape[-1]
    counts = masks[layout].reshape(masks[layout].shape[0], STEPS, -1, width).sum(-1)
    standard = (counts - width * q) / math.sqrt(width * q * (1 - q))  # [sites, steps, rows]
    cases += [("%s: rows 2r, 2r + 1" % layout, standard[:, :, 0::2] * standard[:, :, 1::2]),
              ("%s: row r at steps 2s, 2s + 1" % layout,
               standard[:, 0::2, :] * standard[:, 1::2, :]),
              ("%s: row r at sites 0, 1" % layout, standard[0] * standard[1])]
  for name, products in cases:
    z = float(products.sum()) / math.sqrt(products.size)
    report("rows %s %.1f" % (name, rate), z=z, pairs=products.size)
    assert abs(z) < z_bound(ALPHA / len(cases)), "%s: correlated, z = %.2f" % (name, z)


# ---- 3. The backward pass applies the forward mask.

def seeded(step):
  return [SEED, step]


@pytest.mark.parametrize("rate", RATES)
def test_dropout_backward_applies_the_forward_mask(kernels, rate):
  rng = np.random.RandomState(1)
  with tf.Graph().as_default():
    seed = tf.placeholder(tf.int64, [2])
    cases = []
    for shape, site in (([BATCH, SEQ, HIDDEN], EMB), ([BATCH, HIDDEN], HEAD_SITE),
                        ([3, 5, 331], 4)):  # (4965 elements: more than one block of 4096)
      x = tf.constant((rng.uniform(0.5, 2.0, shape) *
                       rng.choice([-1, 1], shape)).astype(np.float32))
      y = kernels.bert_dropout(x, seed, rate=rate, site=site)
      dy = tf.constant(rng.randn(*shape).astype(np.float32))
      ones_grad, = tf.gradients(y, x, grad_ys=tf.ones(shape))
      random_grad, = tf.gradients(y, x, grad_ys=dy)
      cases.append((x, y, dy, ones_grad, random_grad))
    with tf.Session() as session:
      for step in range(6):
        for x, y, dy, ones_grad, random_grad in session.run(cases, {seed: seeded(step)}):
          forward = as_kept(y / x, rate)
          backward = as_kept(ones_grad, rate)
          np.testing.assert_array_equal(backward, forward)
          np.testing.assert_allclose(random_grad, dy * ones_grad, rtol=1e-6, atol=0)


@pytest.mark.parametrize("rate", RATES)
def test_dropout_add_norm_backward_applies_the_forward_mask(kernels, rate):
  """dx of dropout(x + bias) + residual, normalised, is d(residual) times the mask; the
  forward mask is `sum` / (x + bias) with residual 0."""
  rows, width = TOKENS
  rng = np.random.RandomState(2)
  with tf.Graph().as_default():
    seed = tf.placeholder(tf.int64, [2])
    x = tf.constant(rng.randn(rows, width).astype(np.float32))
    bias = tf.constant(rng.randn(width).astype(np.float32))
    residual = tf.zeros([rows, width])
    gamma = tf.constant(rng.uniform(0.5, 1.5, width).astype(np.float32))
    beta = tf.constant(rng.randn(width).astype(np.float32))
    dy = tf.constant(rng.randn(rows, width).astype(np.float32))
    checks = []
    for site in (1, 2, 5):
      y, summed, _, _ = kernels.bert_dropout_add_norm(x, bias, residual, gamma, beta, seed,
                                                      rate=rate, site=site, epsilon=1e-12)
      dx, dbias, dresidual = tf.gradients(y, [x, bias, residual], grad_ys=dy)
      checks.append((summed / (x + bias), dx, dbias, dresidual))
    with tf.Session() as session:
      for step in range(6):
        for forward, dx, dbias, dresidual in session.run(checks, {seed: seeded(step)}):
          forward = as_kept(forward, rate)
          assert np.all(dresidual != 0)
          np.testing.assert_array_equal(dx != 0, forward)
          np.testing.assert_allclose(dx, dresidual * forward / (1 - rate), rtol=1e-5,
                                     atol=1e-7)
          np.testing.assert_allclose(dbias, dx.sum(0), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("rate", RATES)
def test_attention_softmax_backward_applies_the_forward_mask(kernels, rate):
  """With the incoming gradient one-hot at key k in every row, d scores at k is
  scale p_k m_k (1 - p_k): the backward mask m_k, element by element."""
  rng = np.random.RandomState(3)
  shape = [4, HEADS, SEQ, SEQ]
  scale = 0.25
  mask = np.ones([shape[0], SEQ], np.float32)
  mask[1, 12:] = 0  # padding in one row of the batch
  with tf.Graph().as_default():
    seed = tf.placeholder(tf.int64, [2])
    scores = tf.constant(rng.randn(*shape).astype(np.float32))
    bias = tf.constant((1.0 - mask) * -10000.0)
    checks = []
    for site in (0, 3):
      dropped, probs = kernels.bert_attention_softmax(scores, bias, seed, scale=scale,
                                                      rate=rate, site=site)
      grads = [tf.gradients(dropped, scores, grad_ys=tf.one_hot(
          tf.fill(shape[:3], k), SEQ))[0][..., k] for k in range(SEQ)]
      checks.append((dropped, probs, tf.stack(grads, -1)))
    with tf.Session() as session:
      for step in range(4):
        for dropped, probs, dscores in session.run(checks, {seed: seeded(step)}):
          real = probs > 1e-3  # (padded keys: no probability, no gradient to read)
          forward = as_kept(np.where(real, dropped / np.where(real, probs, 1), 0), rate)
          backward = dscores / (scale * probs * (1 - probs) + (~real))
          assert np.all(np.abs(backward[real] - np.where(forward, 1 / (1 - rate), 0)[real])
                        <= 1e-3), "the backward mask is not the forward mask"
          assert 0 < forward[real].mean() < 1


def dropout_in_call_order(kernels_object, monkeypatch):
  """Replaces modeling.bert's tf.nn.dropout with multiplication by the kernels' masks of
  the sites in the order BertModel calls dropout: the embeddings, then per layer i the
  attention probabilities (3i), the attention output (3i + 1), the FFN output (3i + 2)."""
  sites = iter([EMB, 0, 1, 2, 3, 4, 5])

  def dropout(x, rate):
    if not rate:
      return x
    size = x.shape.num_elements()
    multipliers = kernels_object.dropout_multipliers(rate, next(sites), size)
    return x * tf.reshape(multipliers, tf.shape(x))

  monkeypatch.setattr(bert, "dropout", dropout)


@pytest.mark.parametrize("rate, pooled_only", [(0.1, True), (0.4, False)])
def test_the_fused_encoder_is_tensorflow_s_with_the_kernels_masks(kernels, rate, pooled_only,
                                                                  monkeypatch):
  """Dropout on: the fused encoder's pooled output and every gradient equal those of the
  encoder on TensorFlow's ops with the kernels' masks (site by site, in its layouts) put
  where tf.nn.dropout was. So each site's mask lands where the docstrings say, and the
  backward pass applies each forward mask."""
  config = bert.BertConfig(vocab_size=50, hidden_size=HIDDEN, num_hidden_layers=2,
                           num_attention_heads=HEADS, intermediate_size=64,
                           hidden_dropout_prob=rate, attention_probs_dropout_prob=rate,
                           max_position_embeddings=SEQ)
  rng = np.random.RandomState(4)
  ids = rng.randint(1, 50, [BATCH, SEQ]).astype(np.int32)
  input_mask = np.ones_like(ids)
  input_mask[2, 9:] = 0
  with tf.Graph().as_default():
    seed = tf.placeholder(tf.int64, [2])
    ops = fused.FusedKernels(seed)
    weights = tf.constant(np.linspace(-1, 1, HIDDEN), tf.float32)
    results = {}
    for scope in ("fused", "plain"):
      if scope == "plain":
        dropout_in_call_order(ops, monkeypatch)
      model = bert.BertModel(config, True, tf.constant(ids), tf.constant(input_mask),
                             scope=scope, fused_kernels=ops if scope == "fused" else None,
                             pooled_only=pooled_only)
      pooled = model.get_pooled_output()
      head = (ops.dropout(pooled, rate, HEAD_SITE) if scope == "fused" else
              pooled * tf.reshape(ops.dropout_multipliers(rate, HEAD_SITE, BATCH * HIDDEN),
                                  [BATCH, HIDDEN]))
      variables = tf.trainable_variables(scope)
      grads = tf.gradients(tf.reduce_sum(tf.tanh(head) * weights), variables)
      results[scope] = (pooled, {v.op.name[len(scope) + 1:]: tf.convert_to_tensor(g)
                                 for v, g in zip(variables, grads)}, variables)
    fused_variables = {v.op.name[len("fused/"):]: v for v in results["fused"][2]}
    same = [fused_variables[v.op.name[len("plain/"):]].assign(v) for v in results["plain"][2]]
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      session.run(same)
      for step in (0, 1, 17):
        (fast, fast_grads), (plain, plain_grads) = session.run(
            [results["fused"][:2], results["plain"][:2]], {seed: seeded(step)})
        np.testing.assert_allclose(fast, plain, rtol=1e-5, atol=1e-5)
        assert sorted(fast_grads) == sorted(plain_grads)
        for name, grad in plain_grads.items():
          size = max(1.0, float(np.abs(grad).max()))
          np.testing.assert_allclose(fast_grads[name], grad, atol=1e-5 * size, rtol=0,
                                     err_msg="%s at step %d" % (name, step))


def test_in_an_estimator_each_step_draws_new_masks_and_backward_uses_them(kernels, tmp_path):
  """model_fn's seed (modeling.model_fn.fused_kernels_of_step, step_seed): [the run's
  seed, the global step]. Every training step reads the step it trains (0, 1, 2, ...),
  its backward pass applies its forward mask, and a resumed run goes on with the masks of
  the steps it trains, which an uninterrupted run would have drawn."""
  from modeling.model_fn import fused_kernels_of_step
  rate, width = 0.4, 256
  seen = []

  class Recorder(tf.train.SessionRunHook):
    def before_run(self, run_context):
      graph = tf.get_default_graph()
      return tf.train.SessionRunArgs([graph.get_tensor_by_name(name + ":0")
                                      for name in ("seed", "forward", "backward")])

    def after_run(self, run_context, run_values):
      seen.append(run_values.results)

  def model_fn(features, labels, mode, params):
    ops = fused_kernels_of_step()
    tf.identity(ops.seed, name="seed")
    w = tf.get_variable("w", [width], initializer=tf.ones_initializer())
    y = ops.dropout(w * features["x"], rate, ops.HEAD_SITE)
    tf.identity(y, name="forward")
    loss = tf.reduce_sum(y)
    grad, = tf.gradients(loss, [w])
    tf.identity(grad, name="backward")
    train = tf.train.GradientDescentOptimizer(0.0).apply_gradients(
        [(grad, w)], global_step=tf.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train)

  def input_fn():
    return tf.data.Dataset.from_tensors({"x": tf.ones([width])}).repeat()

  estimator = tf.estimator.Estimator(model_fn, str(tmp_path), config=tf.estimator.RunConfig(
      tf_random_seed=SEED, save_checkpoints_steps=2, save_summary_steps=None,
      log_step_count_steps=None))
  estimator.train(input_fn, steps=4, hooks=[Recorder()])
  estimator.train(input_fn, steps=3, hooks=[Recorder()])  # resumed from step 4
  assert [list(seed) for seed, _, _ in seen] == [[SEED, step] for step in range(7)]
  expected = kernel_masks(kernels, rate, [("dropout", [width], HEAD_SITE)],
                          [(SEED, step) for step in range(7)])[0]
  for step, (_, forward, backward) in enumerate(seen):
    np.testing.assert_array_equal(as_kept(forward, rate), expected[step])
    np.testing.assert_array_equal(as_kept(backward, rate), expected[step])
  assert len({m.tobytes() for m in expected}) == 7


# ---- 4. The model, in distribution.

DRAWS = 300
GRADIENT_VARIABLES = ("embeddings/LayerNorm/gamma", "encoder/layer_0/attention/self/query/kernel",
                      "encoder/layer_0/output/dense/kernel",
                      "encoder/layer_1/attention/output/dense/kernel")


class SkewedKernels(fused.FusedKernels):
  """The kernels with every dropout rate 20% too high (for the tests' power)."""

  def dropout_add_norm(self, x, bias, residual, gamma, beta, rate, site):
    return super(SkewedKernels, self).dropout_add_norm(x, bias, residual, gamma, beta,
                                                       1.2 * rate, site)

  def attention_softmax(self, scores, bias, scale, rate, site):
    return super(SkewedKernels, self).attention_softmax(scores, bias, scale, 1.2 * rate, site)

  def dropout(self, x, rate, site):
    return super(SkewedKernels, self).dropout(x, 1.2 * rate, site)


@functools.lru_cache(maxsize=None)
def model_draws(rate, skewed=False):
  """{path: {quantity: [DRAWS, elements]}} for path plain (tf.nn.dropout, fresh masks
  each run under graph seed SEED), fused (the kernels at seed SEED, steps 0..DRAWS-1)
  and, if asked, skewed (SkewedKernels): the pooled output, the loss and the gradients of
  GRADIENT_VARIABLES of a 2-layer encoder with a dropped-out head (pooled_only, as a
  classifier trains it), on the same weights and batch."""
  config = bert.BertConfig(vocab_size=50, hidden_size=HIDDEN, num_hidden_layers=2,
                           num_attention_heads=HEADS, intermediate_size=64,
                           hidden_dropout_prob=rate, attention_probs_dropout_prob=rate,
                           max_position_embeddings=SEQ)
  rng = np.random.RandomState(5)
  ids = rng.randint(1, 50, [BATCH, SEQ]).astype(np.int32)
  input_mask = np.ones_like(ids)
  input_mask[1, 10:] = 0
  input_mask[5, 12:] = 0
  labels = rng.randint(0, 2, [BATCH]).astype(np.int32)
  head_weights = rng.randn(HIDDEN, 2).astype(np.float32)
  paths = ("plain", "fused", "skewed") if skewed else ("plain", "fused")
  with tf.Graph().as_default():
    tf.set_random_seed(SEED)
    step = tf.placeholder(tf.int64, [])
    seed = tf.stack([tf.constant(SEED, tf.int64), step])
    fetches, variables = {}, {}
    for path in paths:
      ops = {"plain": None, "fused": fused.FusedKernels(seed),
             "skewed": SkewedKernels(seed)}[path]
      model = bert.BertModel(config, True, tf.constant(ids), tf.constant(input_mask),
                             scope=path, fused_kernels=ops, pooled_only=True)
      pooled = model.get_pooled_output()
      dropped = (tf.nn.dropout(pooled, rate=rate) if ops is None else
                 ops.dropout(pooled, rate, ops.HEAD_SITE))
      logits = tf.matmul(dropped, tf.constant(head_weights))
      loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels=tf.constant(labels), logits=logits))
      variables[path] = {v.op.name[len(path) + 1:]: v for v in tf.trainable_variables(path)}
      grads = tf.gradients(loss, [variables[path][name] for name in GRADIENT_VARIABLES])
      fetches[path] = dict([("pooled", pooled), ("loss", loss)] +
                           list(zip(GRADIENT_VARIABLES, grads)))
    same = [variables[path][name].assign(v) for path in paths[1:]
            for name, v in variables["plain"].items()]
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      session.run(same)
      draws = [session.run(fetches, {step: i}) for i in range(DRAWS)]
  return {path: {name: np.stack([d[path][name].reshape(-1) for d in draws]).astype(np.float64)
                 for name in fetches[path]} for path in paths}


PROJECTIONS = 8


def distribution_statistics(ours, theirs):
  """The z statistics of ours against theirs ([draws, elements] each) and the number of
  comparisons of each kind:
  - means per element: Welch z;
  - variances per element: log(var ratio) / its standard error sqrt((kurtosis - 1) (1/n +
    1/m)), with the kurtosis of both samples pooled (no normality assumed);
  - means of 8 random projections at once: Hotelling's T^2 ~ chi-square(8), as a z;
  - the spread: Welch z of the squared distance of each draw to its sample's mean;
  - the squared norm: Welch z of |x|^2 (the mean square of a gradient, what Adam's
    second moment tracks)."""
  n, m = ours.shape[0], theirs.shape[0]
  mean_a, mean_b = ours.mean(0), theirs.mean(0)
  var_a, var_b = ours.var(0, ddof=1), theirs.var(0, ddof=1)
  varies = (var_a > 0) | (var_b > 0)
  assert np.all(varies), "elements that no draw changes: %d" % np.sum(~varies)
  mean_z = (mean_a - mean_b) / np.sqrt(var_a / n + var_b / m)
  centred = np.concatenate([ours - mean_a, theirs - mean_b])
  kurtosis = (centred ** 4).mean(0) / (centred ** 2).mean(0) ** 2
  var_z = np.log(var_a / var_b) / np.sqrt((kurtosis - 1) * (1.0 / n + 1.0 / m))

  def welch(a, b):
    return float((a.mean() - b.mean()) / math.sqrt(a.var(ddof=1) / n + b.var(ddof=1) / m))

  directions = np.random.RandomState(6).randn(ours.shape[1], min(PROJECTIONS, ours.shape[1]))
  pa, pb = ours @ directions, theirs @ directions
  difference = pa.mean(0) - pb.mean(0)
  covariance = np.atleast_2d(np.cov(pa.T) / n + np.cov(pb.T) / m)
  t2 = float(difference @ np.linalg.solve(covariance, difference))
  projected_p = chi2_sf(t2, directions.shape[1])
  return {
      "mean": mean_z, "variance": var_z,
      "projected mean": np.array([z_of_p(projected_p)]),
      "spread": np.array([welch(((ours - mean_a) ** 2).sum(1), ((theirs - mean_b) ** 2).sum(1))]),
      "mean square": np.array([welch((ours ** 2).sum(1), (theirs ** 2).sum(1))]),
      "variance ratio": float(np.exp(np.mean(np.log(var_a / var_b)))),
  }


def z_of_p(p):
  """The |z| whose two-sided normal tail is p (to compare a chi-square p with z bounds)."""
  return z_bound(max(p, 1e-300))


def compare_paths(draws, ours, theirs):
  """{quantity: statistics} and the largest |z| of each kind over quantities, with the
  Bonferroni bound of each kind (its comparisons over all quantities)."""
  statistics = {name: distribution_statistics(draws[ours][name], draws[theirs][name])
                for name in draws[theirs]}
  kinds = ("mean", "variance", "projected mean", "spread", "mean square")
  worst = {}
  for kind in kinds:
    count = sum(s[kind].size for s in statistics.values())
    largest = max(statistics, key=lambda name: np.abs(statistics[name][kind]).max())
    worst[kind] = (float(np.abs(statistics[largest][kind]).max()), largest,
                   z_bound(ALPHA / (len(kinds) * count)))
  return statistics, worst


@pytest.mark.parametrize("rate", RATES)
def test_the_encoder_s_outputs_and_gradients_are_distributed_as_with_tensorflow_dropout(
    kernels, rate):
  draws = model_draws(rate, skewed=rate == RATES[0])
  statistics, worst = compare_paths(draws, "fused", "plain")
  for kind, (z, where, bound) in sorted(worst.items()):
    report("model %.1f %s" % (rate, kind), max_abs_z=z, at=where, bound=bound)
  for name, s in sorted(statistics.items()):
    report("model %.1f %s" % (rate, name), variance_ratio=s["variance ratio"],
           spread_z=float(s["spread"][0]), mean_square_z=float(s["mean square"][0]),
           projected_z=float(s["projected mean"][0]))
  failed = {kind: (z, where) for kind, (z, where, bound) in worst.items() if z >= bound}
  assert not failed, "the fused encoder differs from TensorFlow's in distribution: %s" % failed


def test_the_model_statistics_detect_a_dropout_rate_20_percent_too_high(kernels):
  """Their power: SkewedKernels (rate 0.12 for 0.1) against TensorFlow's ops, on the
  draws of the test above. The spread of the gradients must give it away."""
  draws = model_draws(RATES[0], skewed=True)
  _, worst = compare_paths(draws, "skewed", "plain")
  for kind, (z, where, bound) in sorted(worst.items()):
    report("skewed %s" % kind, max_abs_z=z, at=where, bound=bound)
  z, where, bound = worst["spread"]
  assert z >= bound, "a 20%% higher rate went unnoticed: spread z %.2f < %.2f" % (z, bound)
