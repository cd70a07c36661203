"""Representative windows of training batches: which few batches of a long stream a speed
benchmark trains on and times, so that their lengths are the stream's.

A run that times its first steps measures whatever batches its sampler or input pipeline
happens to emit first, and those need not be typical: Hugging Face's length-grouped
sampler begins an epoch with its longest batches. So a benchmark draws a pool of whole
epochs' batches, of either sampler or input pipeline alike, and trains and times a window
of them chosen by stratified_window.

Pure Python (no TensorFlow, torch or numpy): tools/bench_hf.py imports it in .venvs/hf,
which has no TensorFlow, and tools/bench_worker.py in the TensorFlow environments.
"""

import random

# The measured steps are drawn from a pool of whole epochs holding at least this many
# batches per step: a few epochs of a small file, one of a large one.
POOL_BATCHES_PER_STEP = 8


class InputError(ValueError):
  """A problem with the command's input, reported as one line rather than a traceback."""


def whole_batches(order, batch):
  """One epoch's batches of row indices, from its order: consecutive runs of batch rows,
  the incomplete last one dropped (as DataLoader's drop_last drops it)."""
  return [list(order[start:start + batch]) for start in range(0, len(order) - batch + 1, batch)]


def padded_widths(batches, lengths):
  """Each batch's padded length: its longest row's, to which DataCollatorWithPadding pads."""
  return [max(lengths[row] for row in rows) for rows in batches]


def mean(values):
  return sum(values) / float(len(values))


def epochs_to_cover(rows, batch, needed):
  """The whole epochs of rows that hold needed batches of batch rows each."""
  per_epoch = rows // batch
  if not per_epoch:
    raise InputError("%d rows make no whole batch of %d" % (rows, batch))
  return -(-needed // per_epoch)  # (rounded up)


def pool_size(rows, batch, warmup, steps):
  """(epochs, batches) of the pool that a window of warmup + steps batches is drawn from:
  whole epochs of rows, at least POOL_BATCHES_PER_STEP batches per measured step."""
  epochs = epochs_to_cover(rows, batch, max(warmup + steps, POOL_BATCHES_PER_STEP * steps))
  return epochs, epochs * (rows // batch)


def stratified_window(widths, warmup, steps, seed):
  """Indices into a pool of batches (widths: each one's padded length): warmup then steps
  of them. A plain random draw would be unbiased but loose: a pool's lengths run from a
  dozen tokens to the maximum, so twenty batches drawn from it can land far from its
  mean either way. So the measured steps take one batch from each of steps equal strata
  of the pool sorted by padded length (at random within each, seeded, then shuffled), and
  their lengths spread as the pool's do; the warm-up steps are drawn at random from the
  rest."""
  if warmup + steps > len(widths):
    raise ValueError("%d batches cannot be drawn from %d" % (warmup + steps, len(widths)))
  rng = random.Random(seed)
  by_width = sorted(range(len(widths)), key=lambda k: (widths[k], k))
  bounds = [len(widths) * stratum // steps for stratum in range(steps + 1)]
  measured = [by_width[rng.randrange(bounds[k], bounds[k + 1])] for k in range(steps)]
  rng.shuffle(measured)  # (not by length: a drift in the machine's speed would fall on one end)
  taken = set(measured)
  warm = rng.sample([k for k in range(len(widths)) if k not in taken], warmup)
  return warm + measured


def representative_window(orders, lengths, batch, warmup, steps, seed):
  """(the pool, the window) of a sampler's epochs (orders of row indices): the pool is
  every whole batch of the epochs' orders; the window, warmup then steps batches of it
  (stratified_window). A window from an epoch's start would be biased: the length-grouped
  sampler begins with its first megabatch's longest batches."""
  pool = [rows for order in orders for rows in whole_batches(order, batch)]
  chosen = stratified_window(padded_widths(pool, lengths), warmup, steps, seed)
  return pool, [pool[k] for k in chosen]


def epoch_figures(orders, lengths, batch):
  """The padded lengths of whole epochs of a sampler (its orders of row indices): the
  mean over every whole batch, with the epochs' and batches' counts."""
  widths = [padded_widths(whole_batches(order, batch), lengths) for order in orders]
  return dict(epoch_mean_seq_length=mean([w for epoch in widths for w in epoch]),
              epochs_sampled=len(orders), epoch_batches=len(widths[0]))
