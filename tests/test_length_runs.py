"""serving/predicting.length_runs: how a predictor cuts texts into runs of its model, and
that the results come back in the inputs' order whatever the cut."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import BINARY, TINY_VOCAB
from serving.predicting import ExportPredictor, length_runs

pytestmark = pytest.mark.one_runtime("tf1")  # (Python alone: the same on both runtimes)


def cost(lengths, runs, overhead):
  return sum(overhead + len(run) * max(lengths[i] for i in run) for run in runs)


def cheapest(lengths, batch_size, overhead):
  """The least cost of any cut of the texts, sorted by length, into stretches of at most
  batch_size (every subset of the n - 1 places to cut)."""
  order = sorted(range(len(lengths)), key=lengths.__getitem__)
  best = None
  for cuts in itertools.product((False, True), repeat=len(order) - 1):
    runs, run = [], [order[0]]
    for i, cut in zip(order[1:], cuts):
      if cut:
        runs.append(run)
        run = []
      run.append(i)
    runs.append(run)
    if max(len(r) for r in runs) <= batch_size:
      figure = cost(lengths, runs, overhead)
      best = figure if best is None else min(best, figure)
  return best


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 130), min_size=1, max_size=10), st.integers(1, 12),
       st.integers(0, 80))
def test_the_runs_are_the_cheapest_cut_of_the_texts_in_order_of_length(
    lengths, batch_size, overhead):
  runs = length_runs(lengths, batch_size, overhead)
  assert sorted(i for run in runs for i in run) == list(range(len(lengths)))
  assert all(1 <= len(run) <= batch_size for run in runs)
  flat = [lengths[i] for run in runs for i in run]
  assert flat == sorted(lengths)
  assert cost(lengths, runs, overhead) == cheapest(lengths, batch_size, overhead)


def test_requests_of_far_apart_lengths_run_apart():
  """Eight one-text requests as a server gathers them: the short texts share a run, the two
  long ones another, and the middle one runs alone (padding it to 120 would cost 60 tokens
  of time; its own run costs 25)."""
  lengths = [10, 12, 11, 120, 118, 60, 14, 13]
  assert length_runs(lengths, 32, 25) == [[0, 2, 1, 7, 6], [5], [4, 3]]
  assert length_runs(lengths, 32, 10 ** 6) == [[0, 2, 1, 7, 6, 5, 4, 3]]  # (as one run)
  assert length_runs(lengths, 2, 10 ** 6) == [[0, 2], [1, 7], [6, 5], [4, 3]]
  assert length_runs(lengths, 32, 0) == [[0], [2], [1], [7], [6], [5], [4], [3]]
  assert length_runs([], 32, 25) == []


def test_a_run_is_never_longer_than_the_batch_and_its_cost_is_a_number():
  lengths = [5] * 9
  assert length_runs(lengths, 4, 10 ** 9) == [[0], [1, 2, 3, 4], [5, 6, 7, 8]]
  for overhead in (float("inf"), float("nan"), -1, "25", None):
    with pytest.raises(ValueError) as refused:
      length_runs(lengths, 4, overhead)
    assert str(refused.value) == ("overhead=%r: give a run's cost in tokens, a number >= 0"
                                  % (overhead,))
  for batch_size in (0, -3, 2.5):
    with pytest.raises(ValueError) as refused:
      length_runs(lengths, batch_size, 25)
    assert str(refused.value) == ("batch_size=%r: give a whole number of texts, at least 1"
                                  % (batch_size,))


class Recorder(ExportPredictor):
  """An export's predictor whose model gives, for each row, its count of real tokens and
  the sum of their ids (so a row's outputs do not depend on its run's padding), and keeps
  each run's shape."""

  export_dir = "/exports/recorder/1"

  def __init__(self):
    card = {"label_spec": BINARY.to_card(), "max_seq_length": 128,
            "truncation": {"mode": "head"}, "vocab_file": TINY_VOCAB, "do_lower_case": True,
            "text_pair": False, "task": "csv"}
    super(Recorder, self).__init__(card, tokenizer="python", batch_size=32)
    self.shapes = []

  def run_batch(self, batch):
    self.shapes.append(batch["input_ids"].shape)
    mask = batch["input_mask"]
    return np.stack([mask.sum(1), (batch["input_ids"] * mask).sum(1)], 1).astype(np.float32)


def test_predict_outputs_runs_texts_by_length_and_answers_in_input_order():
  predictor = Recorder()
  texts = ["a " * 100, "b", "c " * 40, "d d", "e " * 101, "f"]
  examples = [predictor.example(i, text) for i, text in enumerate(texts)]
  outputs = predictor.predict_outputs(examples)
  alone = []
  for example in examples:
    alone.extend(predictor.predict_outputs([example]))
  assert outputs == alone
  tokens = [int(values[0]) for values in outputs]
  assert tokens == [102, 3, 42, 4, 103, 3]  # ([CLS] and [SEP] around each text)
  del predictor.shapes[:]
  predictor.predict_outputs(examples)
  assert predictor.shapes == [(3, 4), (1, 42), (2, 103)]  # (the runs length_runs gives)
  assert length_runs(tokens, 32, Recorder.run_overhead_tokens) == [[1, 5, 3], [2], [0, 4]]
