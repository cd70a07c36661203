"""Stratified, seeded k-fold assignment of the train rows.

Each row gets a fold in [0, k). Rows are grouped by stratum (a class, or a bin of a
number), each group is shuffled with the seed and dealt to the folds in turn, and the
dealing continues from one group to the next, so every fold gets each stratum's rows in
proportion and the folds' sizes differ by at most one.
"""

import collections
import random

from spec.run_errors import FlagError


def assign_folds(strata, num_folds, seed):
  """fold[i] for each row i, given each row's stratum (any hashable)."""
  if num_folds < 2:
    raise FlagError("--num_folds=%d: k-fold needs at least 2 folds" % num_folds)
  if len(strata) < num_folds:
    raise FlagError("--num_folds=%d is more than the %d train rows" % (num_folds, len(strata)))
  groups = collections.OrderedDict()
  for i, stratum in enumerate(strata):
    groups.setdefault(stratum, []).append(i)
  rng = random.Random(seed)
  folds = [None] * len(strata)
  turn = 0
  for stratum in sorted(groups, key=repr):  # an order that does not depend on the file's
    rows = groups[stratum]
    rng.shuffle(rows)
    for i in rows:
      folds[i] = turn % num_folds
      turn += 1
  return folds


def quantile_bins(values, num_bins=5):
  """The bin (0 .. num_bins-1) of each value by its rank: strata for a numeric target."""
  order = sorted(range(len(values)), key=lambda i: values[i])
  bins = [0] * len(values)
  for rank, i in enumerate(order):
    bins[i] = rank * num_bins // len(values)
  return bins


def mean_and_std(values):
  """(mean, sample standard deviation) of a metric over folds; std is 0 for one fold."""
  n = len(values)
  mean = sum(values) / float(n)
  if n < 2:
    return mean, 0.0
  return mean, (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
