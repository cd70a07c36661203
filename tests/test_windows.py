"""The windows of batches that the benchmark's runs train on and time (tools/windows.py):
whole epochs' batches as a pool, and a window drawn from it whose lengths spread as the
pool's do. Pure Python, shared by the Hugging Face path (tools/bench_hf.py, in an
environment without TensorFlow) and this project's (tools/bench_worker.py)."""


import pytest

from conftest import modules_loaded_by
from tools import windows


def test_an_epoch_is_cut_into_whole_batches_each_padded_to_its_longest_row():
  order = [4, 0, 3, 1, 2]  # row indices, in the sampler's order
  batches = windows.whole_batches(order, 2)
  assert batches == [[4, 0], [3, 1]]  # the incomplete [2] is dropped
  lengths = [7, 30, 5, 12, 9]
  assert windows.padded_widths(batches, lengths) == [9, 30]
  assert windows.whole_batches(order, 6) == []


def test_a_pool_holds_as_many_whole_epochs_as_its_steps_need():
  assert windows.epochs_to_cover(400, 32, 23) == 2  # 12 whole batches an epoch
  assert windows.epochs_to_cover(400, 32, 8 * 20) == 14  # (POOL_BATCHES_PER_STEP: 8)
  assert windows.epochs_to_cover(12180, 32, 8 * 20) == 1  # 380
  assert windows.epochs_to_cover(384, 32, 24) == 2 and windows.epochs_to_cover(384, 32, 25) == 3
  with pytest.raises(windows.InputError, match="31 rows make no whole batch of 32"):
    windows.epochs_to_cover(31, 32, 1)


def test_the_window_measures_a_batch_of_each_length_stratum_of_its_epochs():
  orders = [[5, 0, 3, 1, 4, 2, 6], [2, 6, 1, 0, 5, 3, 4]]  # two epochs of 7 rows
  lengths = [10, 60, 30, 20, 50, 40, 70]
  pool, window = windows.representative_window(orders, lengths, 2, warmup=1, steps=3, seed=1)
  assert pool == [[5, 0], [3, 1], [4, 2], [2, 6], [1, 0], [5, 3]]
  assert windows.padded_widths(pool, lengths) == [40, 60, 50, 70, 60, 40]
  # Strata by length: {40, 40}, {50, 60}, {60, 70}. A measured batch from each (40, 50,
  # 70, shuffled), and the warm-up batch from the rest.
  assert window == [[1, 0], [2, 6], [4, 2], [5, 0]]  # seeded: the same in every run
  assert windows.padded_widths(window, lengths) == [60, 70, 50, 40]
  assert windows.representative_window(orders, lengths, 2, 1, 3, seed=1)[1] == window
  with pytest.raises(ValueError, match="7 batches cannot be drawn from 6"):
    windows.representative_window(orders, lengths, 2, 2, 5, seed=1)


def test_the_measured_steps_have_the_epochs_lengths_where_the_first_steps_are_the_longest():
  # As LengthGroupedSampler orders a megabatch: longest first.
  lengths = [64 - row for row in range(64)]
  order = list(range(64))
  assert windows.epoch_figures([order], lengths, 4) == dict(
      epoch_mean_seq_length=34.0, epochs_sampled=1, epoch_batches=16)  # widths 64, 60, .. 4
  first_steps = windows.whole_batches(order, 4)[2:10]  # (after 2 warm-up steps)
  assert windows.mean(windows.padded_widths(first_steps, lengths)) == 42.0
  _, window = windows.representative_window([order], lengths, 4, warmup=2, steps=8, seed=1)
  # One of each pair of widths (64, 60), (56, 52), ... (8, 4) is measured:
  assert windows.padded_widths(window, lengths) == [8, 44, 24, 40, 12, 48, 56, 64, 4, 28]
  means = [windows.mean(windows.padded_widths(
      windows.representative_window([order], lengths, 4, 2, 8, seed)[1][2:], lengths))
      for seed in range(200)]
  # The epoch's 34, never more than 2 off (each pair's shorter one: 32; longer: 36).
  assert (min(means), max(means)) == (32.0, 35.5)
  assert windows.mean(means) == pytest.approx(34.015)


def test_the_epoch_mean_counts_every_whole_batch_of_every_epoch():
  lengths = [10, 20, 30, 40, 50]
  figures = windows.epoch_figures([[0, 4, 1, 2, 3], [3, 2, 1, 0, 4]], lengths, 2)
  # Widths 50, 30 then 40, 20; rows 3 and 4 (the incomplete batches) are left out.
  assert figures == dict(epoch_mean_seq_length=35.0, epochs_sampled=2, epoch_batches=2)


def test_the_window_is_chosen_by_the_batches_widths_alone():
  # The pool of the stratum test above, as its widths: the same window, as indices.
  widths = [40, 60, 50, 70, 60, 40]
  assert windows.stratified_window(widths, warmup=1, steps=3, seed=1) == [4, 3, 2, 0]
  # As many strata as batches: each batch is measured once, in a seeded shuffle.
  assert windows.stratified_window(widths, warmup=0, steps=6, seed=1) == [2, 4, 0, 5, 3, 1]
  with pytest.raises(ValueError, match="7 batches cannot be drawn from 6"):
    windows.stratified_window(widths, 2, 5, seed=1)


def test_a_pool_holds_whole_epochs_and_eight_batches_per_measured_step():
  assert windows.POOL_BATCHES_PER_STEP == 8
  assert windows.pool_size(400, 32, warmup=3, steps=20) == (14, 168)  # 12 batches an epoch
  assert windows.pool_size(12180, 32, warmup=3, steps=20) == (1, 380)  # one epoch: 380
  assert windows.pool_size(400, 8, warmup=1, steps=2) == (1, 50)
  assert windows.pool_size(400, 32, warmup=30, steps=2) == (3, 36)  # (the warm-up's 32)
  with pytest.raises(windows.InputError, match="7 rows make no whole batch of 8"):
    windows.pool_size(7, 8, 1, 2)


def test_importing_it_loads_neither_tensorflow_nor_torch_nor_numpy():
  # Both the TensorFlow environments and .venvs/hf (no TensorFlow) import it.
  assert modules_loaded_by("tools.windows", ("numpy", "tensorflow", "torch")) == "[]"
