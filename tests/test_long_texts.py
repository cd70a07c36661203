"""Windows over long texts (--doc_stride, --window_aggregation): the spans against a
brute-force reference, each window's ids against the whole text's, the aggregation
against hand-computed rows, the per-text metrics against scikit-learn, and a run that
trains, evaluates, predicts and exports with windows, checked against the Predictor."""

import csv
import glob
import json
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import metrics as sk

from conftest import (JIGSAW, SAMPLES, TINY_VOCAB, common_flags, run_flags, run_with_log,
                      spread_over_runtimes, TINY_JIGSAW_RUN)
from data.features import InputExample
from data.long_texts import (Windowing, WindowSplitter, aggregate, logits_of, starts_of,
                             word_spans)
from data.tokenization import FullTokenizer
from modeling.metrics import metrics_of
from spec.heads.classification import SingleLabel
from spec.heads.multi_label import MultiLabel
from spec.heads.regression import Regression
from spec.model_card import CardError, from_json
from spec.run_errors import FlagError


def reference_spans(lengths, room, stride):
  """word_spans by its definition, the slow way: each window the longest run of whole
  words from its start that fits room (one word at least); the next start the first word
  at or past start + stride tokens whose window ends after this one's, else this one's
  end."""
  offsets = [sum(lengths[:i]) for i in range(len(lengths))]

  def end_from(start):
    return max([e for e in range(start + 1, len(lengths) + 1)
                if sum(lengths[start:e]) <= room] or [start + 1])
  spans, start = [], 0
  while True:
    end = end_from(start)
    spans.append((start, end))
    if end == len(lengths):
      return spans
    start = min([i for i in range(start + 1, end) if offsets[i] >= offsets[start] + stride
                 and end_from(i) > end] or [end])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=40), st.integers(1, 20),
       st.data())
def test_windows_cover_every_word_in_order_and_start_every_stride(lengths, room, data):
  stride = data.draw(st.integers(1, room))
  spans = word_spans(lengths, room, stride)
  assert spans == reference_spans(lengths, room, stride)
  assert spans[0][0] == 0 and spans[-1][1] == len(lengths)
  for (s0, e0), (s1, e1) in zip(spans, spans[1:]):
    assert s0 < s1 <= e0 < e1  # (each starts later, none leaves a gap)
  for start, end in spans:
    assert sum(lengths[start:end]) <= room or end == start + 1


WORDS = ["the", "cat", "runs", "##s", "unaffable", "don't", "Über", "naïve", "東京",
         "x" * 120, "😀", "hello,world", "a.b", "\u00e9t\u00e9", "ＡＢＣ", "it's", "q", "zz",
         "ΟΔΟΣ", "e\u0301", "\u0301", "\u200b", "a\u00adb", "\x00"]


_TOKENIZERS = {}


def tokenizers(lower):
  """The python and the Rust tokenizer of the tiny vocabulary, made once."""
  if lower not in _TOKENIZERS:
    from data.fast_tokenization import FastTokenizer
    _TOKENIZERS[lower] = (FullTokenizer(TINY_VOCAB, lower), FastTokenizer(TINY_VOCAB, lower))
  return _TOKENIZERS[lower]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=60),
       st.sampled_from([" ", "  ", "\n", "\t"]), st.integers(3, 24), st.data(),
       st.booleans())
def test_each_window_holds_exactly_its_words_ids_in_the_whole_text(words, space, room,
                                                                   data, lower):
  """A window's ids (its words joined by spaces, tokenised again) are the whole text's
  ids from its first word to its last, and the windows start every stride tokens: so a
  model sees the same tokens in a window as in the text."""
  stride = data.draw(st.integers(1, room))
  text = space.join(words)
  for tokenizer in tokenizers(lower):
    splitter = WindowSplitter(Windowing(stride, "mean", room + 2), tokenizer)
    whole = tokenizer.encode(text)
    texts = splitter.texts(text)
    if len(whole) <= room:
      assert texts == [text]
      continue
    lengths = [len(tokenizer.encode(text[a:b])) for a, b in splitter.word_bounds(text)]
    assert sum(lengths) == len(whole)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    spans = word_spans(lengths, room, stride)
    assert len(texts) == len(spans)
    for window, (start, end) in zip(texts, spans):
      assert tokenizer.encode(window) == whole[offsets[start]:offsets[end]]
    if stride == room:
      assert sum((tokenizer.encode(t) for t in texts), []) == whole


def test_a_text_s_windows_carry_its_label_guid_and_a_share_of_its_weight():
  splitter = WindowSplitter(Windowing(2, "mean", 6), FullTokenizer(TINY_VOCAB, True))
  counts = []
  examples = [InputExample("a", "the cat runs the cat runs the cat", label="1",
                           extras={"x": 1}), InputExample("b", "short", label="0")]
  windows = list(splitter.examples(examples, counts))
  assert counts == [3, 1]
  assert [w.text_a for w in windows] == ["the cat runs the", "runs the cat runs",
                                         "cat runs the cat", "short"]
  # A window is its text verbatim from its first word to its last.
  assert splitter.texts("Ab,  cD\u200b\tef!") == ["Ab,  cD", "cD\u200b\tef!"]
  assert [(w.guid, w.label, w.extras, w.window_weight, w.window_start) for w in windows] == [
      ("a", "1", {"x": 1}, 1 / 3, True), ("a", "1", {"x": 1}, 1 / 3, False),
      ("a", "1", {"x": 1}, 1 / 3, False), ("b", "0", {}, 1.0, True)]
  # A pair keeps its shorter text whole in each window and splits the longer.
  pair = InputExample("c", "the cat runs the cat runs the cat", "short", label="1")
  pairs = list(splitter.examples([pair, InputExample("d", "short", "cat", label="0")],
                                 counts))
  assert counts[2:] == [4, 1]  # (the pair's 3 tokens: "short" 1, each window 2)
  assert [(w.text_a, w.text_b, w.window_weight) for w in pairs[:4]] == [
      ("the cat", "short", 1 / 4), ("runs the", "short", 1 / 4),
      ("cat runs", "short", 1 / 4), ("the cat", "short", 1 / 4)]
  assert (pairs[-1].text_a, pairs[-1].text_b, pairs[-1].window_weight) == ("short", "cat", 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=40),
       st.lists(st.sampled_from(WORDS), min_size=1, max_size=40), st.integers(4, 24),
       st.data(), st.booleans())
def test_a_pair_s_windows_keep_the_shorter_text_and_split_the_longer_whole(
    words_a, words_b, room, data, lower):
  """A pair that fits is one window. One that does not: each window's featurised ids are
  [CLS] the shorter text's first tokens (all of them, or at least half the room) [SEP] a
  window's ids, exactly the longer text's from its first word to its last (never cut)
  [SEP], within max_seq_length; the windows are the longer text's windows of the room left,
  which cover its tokens in order; the shorter text keeps its place (text_a or text_b)."""
  from data.features import convert_example
  stride = data.draw(st.integers(1, room))
  a, b = " ".join(words_a), " ".join(words_b)
  for tokenizer in tokenizers(lower):
    splitter = WindowSplitter(Windowing(stride, "mean", room + 2), tokenizer)
    ids_a, ids_b = tokenizer.encode(a), tokenizer.encode(b)
    windows = splitter.windows_of(InputExample("p", a, b))
    if len(ids_a) + len(ids_b) <= room - 1:
      assert windows == [(a, b)]
      continue
    long_is_b = len(ids_b) > len(ids_a)
    short, long_text = (ids_a, b) if long_is_b else (ids_b, a)
    half = (room - 1 + 1) // 2  # (of the pair's room, rounded up)
    kept = short[:half]
    assert [w[1] if long_is_b else w[0] for w in windows] == splitter.texts(
        long_text, room - 1 - len(kept))
    assert all((w[0] if long_is_b else w[1]) == (a if long_is_b else b) for w in windows)
    cls, sep = [tokenizer.vocab["[CLS]"]], [tokenizer.vocab["[SEP]"]]
    for window in windows:
      feature = convert_example(InputExample("p", window[0], window[1]), 0,
                                SingleLabel(["y"], ["0", "1"]), room + 2, tokenizer)
      part = tokenizer.encode(window[1] if long_is_b else window[0])
      ids = list(feature.token_ids)
      assert len(ids) <= room + 2
      if len(part) + len(kept) <= room - 1:  # (else one word longer than the room left)
        # (a last window shorter than the rest leaves the shorter text more of the room)
        kept_here = short[:room - 1 - len(part)]
        assert ids == (cls + kept_here + sep + part + sep if long_is_b else
                       cls + part + sep + kept_here + sep)


@settings(max_examples=50, deadline=None)
@given(counts=st.lists(st.integers(1, 4), min_size=1, max_size=30),
       fraction=st.floats(0.01, 1.0), seed=st.integers(0, 99))
def test_a_train_fraction_of_windows_keeps_whole_texts_those_of_a_run_without(counts,
                                                                             fraction, seed):
  from pipeline.training_order import fraction_indices, windows_of_texts
  first = [k == 0 for count in counts for k in range(count)]
  text_of = [t for t, count in enumerate(counts) for _ in range(count)]
  kept = set(fraction_indices(len(counts), fraction, seed))
  assert windows_of_texts(first, fraction, seed) == (
      [i for i, t in enumerate(text_of) if t in kept], len(counts), len(kept))


def test_windows_outputs_are_aggregated_into_one_row_per_text_as_by_hand():
  outputs = np.array([[0.9, 0.1], [0.3, 0.7], [0.6, 0.4], [0.2, 0.8], [0.2, 0.8],
                      [0.5, 0.5]], np.float32)
  counts = [3, 2, 1]
  assert list(starts_of(counts)) == [0, 3, 5]
  np.testing.assert_allclose(aggregate(outputs, counts, "mean", "softmax_cross_entropy"),
                             [[0.6, 0.4], [0.2, 0.8], [0.5, 0.5]], rtol=1e-6)
  np.testing.assert_array_equal(aggregate(outputs, counts, "first", "softmax_cross_entropy"),
                                outputs[[0, 3, 5]])
  # A two-class softmax head's max: the window most likely of the second class, whole
  # (the first of two equal ones).
  np.testing.assert_array_equal(aggregate(outputs, counts, "max", "softmax_cross_entropy"),
                                outputs[[1, 3, 5]])
  # Sigmoid and regression heads: the max of each column.
  columns = np.array([[0.1, 0.9], [0.7, 0.2], [0.4, 0.4]], np.float32)
  for loss in ("sigmoid_cross_entropy", "squared_error"):
    np.testing.assert_array_equal(aggregate(columns, [2, 1], "max", loss),
                                  columns[[1, 2]] * [[1, 0], [1, 1]] + columns[[0, 2]] * [[0, 1], [0, 0]])
  with pytest.raises(FlagError) as error:
    aggregate(np.ones((2, 3), np.float32) / 3, [2], "max", "softmax_cross_entropy")
  assert "this head has 3 classes: use mean or first" in str(error.value)
  with pytest.raises(ValueError):  # (a window lost)
    aggregate(outputs[:5], counts, "mean", "softmax_cross_entropy")
  assert aggregate(np.zeros((0, 2)), [], "mean", "softmax_cross_entropy").shape == (0, 2)


def test_the_logits_of_aggregated_outputs_give_them_back_and_are_finite():
  p = np.array([[0.25, 0.75], [1.0, 0.0]], np.float32)
  logits = logits_of(p, "softmax_cross_entropy")
  assert np.isfinite(logits).all()
  np.testing.assert_allclose(np.exp(logits) / np.exp(logits).sum(1, keepdims=True), p,
                             atol=1e-6)
  sig = logits_of(p, "sigmoid_cross_entropy")
  assert np.isfinite(sig).all()
  np.testing.assert_allclose(1 / (1 + np.exp(-sig)), p, atol=1e-6)
  np.testing.assert_array_equal(logits_of(p, "squared_error"), p)


def test_per_text_metrics_are_the_evaluation_s_and_agree_with_scikit_learn():
  rng = np.random.RandomState(3)
  p = rng.dirichlet([1, 1], 200).astype(np.float32)
  y = (rng.rand(200) < p[:, 1]).astype(int)
  got = metrics_of(SingleLabel(["y"], ["0", "1"]), logits_of(p, "softmax_cross_entropy"), y)
  assert got["num_examples"] == 200
  assert got["auc"] == pytest.approx(sk.roc_auc_score(y, p[:, 1]), abs=1e-6)
  assert got["accuracy"] == pytest.approx(sk.accuracy_score(y, p.argmax(1)), abs=1e-6)
  assert got["eval_loss"] == pytest.approx(sk.log_loss(y, p[:, 1]), rel=1e-5)
  assert got["f1"] == pytest.approx(sk.f1_score(y, p.argmax(1)), abs=1e-5)
  q = rng.rand(200, 2).astype(np.float32)
  targets = (rng.rand(200, 2) < q).astype(np.float32)
  got = metrics_of(MultiLabel(["a", "b"]), logits_of(q, "sigmoid_cross_entropy"), targets)
  assert got["auc_b"] == pytest.approx(sk.roc_auc_score(targets[:, 1], q[:, 1]), abs=1e-6)
  assert got["eval_loss"] == pytest.approx(np.mean([sk.log_loss(targets[:, i], q[:, i])
                                                    for i in range(2)]), rel=1e-4)
  values = rng.normal(size=(50, 1)).astype(np.float32)
  truth = values + rng.normal(scale=0.5, size=(50, 1)).astype(np.float32)
  got = metrics_of(Regression(["v"]), logits_of(values, "squared_error"), truth)
  assert got["mse"] == pytest.approx(sk.mean_squared_error(truth, values), rel=1e-5)


def _record_weights(record_path):
  """The sample_weight of every record of a split's files (as its metadata lists them)."""
  weights = []
  for path in json.load(open(record_path + ".meta.json"))["files"]:
    for record in tf.python_io.tf_record_iterator(path):
      example = tf.train.Example.FromString(record)
      weights.append(example.features.feature["sample_weight"].float_list.value[0])
  return weights


@pytest.mark.parametrize("aggregation", spread_over_runtimes(["max", "mean"], on_both=0))
def test_a_run_with_windows_trains_evaluates_predicts_and_exports_one_row_per_text(
    tmp_path, tiny_checkpoint, aggregation):
  """The Jigsaw sample at max_seq_length 16 (most comments are longer): the train records
  weigh each text's k windows 1/k of its balanced class weight (counted over texts);
  eval_results and test_results are one row per text,
  equal to the Predictor's windows of the same texts (which the export's card tells it to
  make) and to scikit-learn's metrics of them; the export takes ids only. With mean,
  --train_fraction=0.5 trains on the texts a run without windows would, each whole."""
  import pandas
  from serving.predictor import Predictor
  output_dir = str(tmp_path / "out")
  from spec.config import RunConfig
  result, log = run_with_log(RunConfig(
      init_checkpoint=tiny_checkpoint, output_dir=output_dir, do_train=True, do_eval=True,
      do_predict=True, do_export=True, doc_stride=10, window_aggregation=aggregation,
      calibrate=True, class_weights=("balanced",), train_fraction=0.5 if aggregation == "mean" else 1.0,
      **dict(TINY_JIGSAW_RUN, max_seq_length=16, num_train_steps=4)))
  train = everything = pandas.read_csv(os.path.join(JIGSAW, "train.csv"))
  dev = pandas.read_csv(os.path.join(JIGSAW, "valid.csv"))
  splitter = WindowSplitter(Windowing(10, aggregation, 16), FullTokenizer(TINY_VOCAB, True))
  counts = [len(splitter.texts(t)) for t in train.comment_text]
  assert "train: %d texts in %d windows (--doc_stride=10)" % (len(counts), sum(counts)) in log
  summary = json.load(open(os.path.join(output_dir, "run_summary.json")))
  assert summary["results"]["windows"]["train"] == {"texts": len(train), "windows": sum(counts)}
  assert [summary["results"]["windows"][s]["texts"] for s in ("dev", "test")] == [25, 33]
  assert sum(counts) > 3 * len(counts)  # (most texts are long here)
  if aggregation == "mean":  # (the half of the texts fraction_indices takes, all windows)
    from pipeline.training_order import fraction_indices
    kept = list(fraction_indices(len(train), 0.5, 12345))
    assert "--train_fraction=0.5: training on 134 of 267 rows (%d of %d windows)" % (
        sum(counts[i] for i in kept), sum(counts)) in log
    train, counts = train.iloc[kept], [counts[i] for i in kept]
  # Balanced class weights count texts, not windows; a text's k windows share its weight.
  card = json.load(open(os.path.join(output_dir, "model_card.json")))
  texts_of = train.toxic.value_counts()
  balanced = {str(c): len(train) / (2.0 * texts_of[c]) for c in (0, 1)}
  assert len(train) == (134 if aggregation == "mean" else len(everything))
  assert card["training"]["data"][0]["class_weights"] == pytest.approx(balanced)
  weights = _record_weights(os.path.join(output_dir, "features", "train.tf_record"))
  scale = sum(counts) / float(len(counts))  # (so that the window weights average 1)
  assert sorted(weights) == pytest.approx(sorted(
      balanced[str(label)] * scale / k for k, label in zip(counts, train.toxic)
      for _ in range(k)))
  assert card["truncation"] == {"mode": "head", "windows": {"doc_stride": 10,
                                                             "aggregation": aggregation}}

  with Predictor(output_dir) as predictor:
    assert "serving_default" not in tf.saved_model.load(
        predictor._session, ["serve"], predictor.export_dir).signature_def
    dev_outputs = np.array(predictor.predict_outputs(
        [InputExample(i, t) for i, t in enumerate(dev.comment_text)]))
    # Each dev window as a text of its own: its outputs at the card's temperature T, so
    # T log p are its logits (up to a constant that softmax ignores).
    dev_windows = [splitter.texts(t) for t in dev.comment_text]
    window_outputs = np.array(predictor.predict_outputs(
        [InputExample(i, w) for i, w in enumerate(sum(dev_windows, []))]), np.float64)
    test = pandas.read_csv(os.path.join(JIGSAW, "test.csv"))
    examples = [InputExample(i, t) for i, t in enumerate(test.comment_text)]
    test_outputs = np.array(predictor.predict_outputs(examples))
    # The server refuses a request whose texts make more windows than it takes.
    from serving.server import TooMany, check_windows
    test_windows = summary["results"]["windows"]["test"]["windows"]
    assert predictor.count_windows(examples, 10 ** 6) == test_windows
    check_windows(predictor, examples, test_windows)
    with pytest.raises(TooMany) as error:
      check_windows(predictor, examples, test_windows - 1)
    assert str(error.value) == (
        "the instances' texts make more than the %d windows this server predicts for one "
        "request (the model reads long texts in windows of 14 tokens): send shorter texts "
        "or fewer of them (or start it with a larger --max_windows)" % (test_windows - 1))
  results = json.load(open(os.path.join(output_dir, "eval_results.json")))
  temperature = results["temperature"]
  assert json.load(open(os.path.join(output_dir, "model_card.json")))["label_spec"][
      "temperature"] == temperature
  window_logits = temperature * np.log(window_outputs)
  owner = np.repeat(np.arange(len(dev)), [len(w) for w in dev_windows])

  def by_hand(t):
    """The texts' outputs at temperature t: each window's softmax, then the windows'
    mean, or the window most likely toxic (the first of equal ones)."""
    z = np.exp(window_logits / t - (window_logits / t).max(axis=1, keepdims=True))
    p = z / z.sum(axis=1, keepdims=True)
    return np.array([p[owner == k].mean(axis=0) if aggregation == "mean" else
                     p[owner == k][np.argmax(p[owner == k][:, 1])] for k in range(len(dev))])
  y = dev.toxic.values
  # The evaluation's metrics are of the model before the temperature; its predictions,
  # through the card's graph, at it; the temperature minimises the log-loss of the texts'
  # aggregated outputs (scipy's bounded minimiser about the best point of a fine grid).
  at_one = by_hand(1.0)
  assert results["num_examples"] == len(dev) == 25
  assert results["global_step"] == 4
  assert results["auc"] == pytest.approx(sk.roc_auc_score(y, at_one[:, 1]), abs=1e-5)
  assert results["loss"] == pytest.approx(sk.log_loss(y, at_one[:, 1]), rel=1e-4)
  assert results["nll_uncalibrated"] == pytest.approx(results["loss"], rel=1e-4)
  assert results["accuracy"] == pytest.approx(sk.accuracy_score(y, at_one.argmax(1)))
  np.testing.assert_allclose(dev_outputs, by_hand(temperature), atol=2e-5)
  from scipy.optimize import minimize_scalar
  nll = lambda u: sk.log_loss(y, by_hand(np.exp(u))[:, 1])
  grid = np.linspace(np.log(0.01), np.log(100.0), 801)
  best = grid[int(np.argmin([nll(u) for u in grid]))]
  reference = minimize_scalar(nll, bounds=(best - 0.02, best + 0.02), method="bounded",
                              options={"xatol": 1e-9})
  assert temperature == pytest.approx(np.exp(reference.x), rel=1e-3)
  assert results["nll_calibrated"] == pytest.approx(reference.fun, rel=1e-4)
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    rows = list(csv.reader(f, delimiter="\t"))[1:]
  assert [r[0] for r in rows] == list(test.id)
  np.testing.assert_allclose([[float(v) for v in r[1:3]] for r in rows], test_outputs,
                             atol=1e-5)

  # A card whose windows were edited is refused, naming the entry.
  card["truncation"]["windows"]["doc_stride"] = 15
  with pytest.raises(CardError) as error:
    from_json(json.dumps(card), "model_card.json")
  assert str(error.value) == (
      'model_card.json: truncation.windows is {"aggregation": "%s", "doc_stride": 15}, not '
      'a doc_stride from 1 to 14 and an aggregation of mean, max, first (the file was '
      'edited): restore the card, or train again into a new --output_dir' % aggregation)


@pytest.mark.one_runtime("tf2")
def test_k_fold_with_windows_gives_one_out_of_fold_row_per_text(tmp_path, tiny_checkpoint):
  """Folds of texts (each text's windows in its fold): oof_predictions.tsv has every train
  text once, in file order, each fold's eval counts its texts, and the folds' mean
  predictions are one row per test text. --calibrate fits one temperature on every
  text's out-of-fold windows, which every fold's card and export keep (tuned thresholds
  too). Calibrating the folds again would move their thresholds through a mean of
  windows: refused before any fold runs, whether or not --doc_stride is repeated (the
  cards record it)."""
  import pandas
  output_dir = str(tmp_path / "cv")
  flags = common_flags(tiny_checkpoint, output_dir) + [
      "--num_folds=2", "--do_train", "--num_train_steps=2", "--max_seq_length=16"]
  run_flags(*flags + ["--do_predict", "--do_export", "--doc_stride=10", "--calibrate",
                      "--tune_thresholds=f1"])
  for again in (["--doc_stride=10"], []):
    with pytest.raises(FlagError) as error:
      run_flags(*flags + again + ["--calibrate"])
    assert str(error.value) == (
        "--calibrate would move the model card's tuned thresholds to the new temperature "
        "so that they decide as before, and no threshold does that for windows aggregated "
        "by their mean: add --tune_thresholds to tune them again at the new temperature")
  train = pandas.read_csv(os.path.join(JIGSAW, "train.csv"))
  with open(os.path.join(output_dir, "oof_predictions.tsv")) as f:
    oof = list(csv.DictReader(f, delimiter="\t"))
  assert [r["id"] for r in oof] == list(train.id)
  summary = json.load(open(os.path.join(output_dir, "folds_summary.json")))
  temperature = summary["calibration"]["temperature"]
  assert 0.01 < temperature < 100
  for i in range(2):
    results = json.load(open(os.path.join(output_dir, "fold_%d" % i, "eval_results.json")))
    assert results["num_examples"] == summary["fold_sizes"][i] == sum(
        1 for r in oof if r["fold"] == str(i))
    card = json.load(open(os.path.join(output_dir, "fold_%d" % i, "model_card.json")))
    assert card["label_spec"]["temperature"] == temperature
    assert card["label_spec"]["thresholds"] == {"1": summary["thresholds"]["threshold"]}
    exported = glob.glob(os.path.join(output_dir, "fold_%d" % i, "export", "*",
                                      "assets", "model_card.json"))
    assert [json.load(open(e))["label_spec"] for e in exported] == [card["label_spec"]]
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    assert [r["id"] for r in csv.DictReader(f, delimiter="\t")] == list(
        pandas.read_csv(os.path.join(JIGSAW, "test.csv")).id)


@pytest.mark.one_runtime("tf1")
def test_pairs_with_windows_give_one_row_per_pair_as_the_predictor_and_server_count(
    tmp_path, tiny_checkpoint):
  """MRPC's sample at max_seq_length 20: most pairs do not fit, and each is read in
  windows of its longer sentence beside the shorter. eval_results and test_results are
  one row per pair, in the file's order, equal to the Predictor's windows of the same
  pairs; the server counts the windows the run did."""
  import pandas
  from serving.predictor import Predictor
  output_dir = str(tmp_path / "mrpc")
  mrpc = os.path.join(SAMPLES, "glue", "MRPC")
  from spec.config import RunConfig
  _, log = run_with_log(RunConfig(
      init_checkpoint=tiny_checkpoint, output_dir=output_dir, do_train=True, do_eval=True,
      do_predict=True, do_export=True, doc_stride=6, **dict(
          TINY_JIGSAW_RUN, task_name="mrpc", data_dir=mrpc, max_seq_length=20,
          num_train_steps=2)))
  test = pandas.read_csv(os.path.join(mrpc, "msr_paraphrase_test.txt"), sep="\t",
                         quoting=csv.QUOTE_NONE, encoding="utf-8-sig", dtype=str)
  examples = [InputExample(i, a, b) for i, (a, b) in enumerate(
      zip(test["#1 String"], test["#2 String"]))]
  splitter = WindowSplitter(Windowing(6, "mean", 20), FullTokenizer(TINY_VOCAB, True))
  windows = sum(len(splitter.windows_of(e)) for e in examples)
  assert windows > 2 * len(examples)
  assert "test: %d texts in %d windows (--doc_stride=6)" % (len(examples), windows) in log
  results = json.load(open(os.path.join(output_dir, "eval_results.json")))
  assert results["num_examples"] == len(examples)
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    rows = list(csv.reader(f, delimiter="\t"))[1:]
  assert len(rows) == len(examples)
  with Predictor(output_dir) as predictor:
    assert predictor.count_windows(examples, 10 ** 6) == windows
    outputs = np.array(predictor.predict_outputs(examples))
  np.testing.assert_allclose([[float(v) for v in r[1:3]] for r in rows], outputs, atol=1e-5)


@pytest.mark.one_runtime("tf1")
def test_windows_are_refused_where_they_are_not_built(tmp_path, tiny_checkpoint):
  base = common_flags(tiny_checkpoint, str(tmp_path / "out")) + [
      "--num_train_steps=1", "--doc_stride=8", "--do_train"]
  davidson = ["--task_name=csv", "--train_file=" + os.path.join(
      SAMPLES, "davidson_hate_offensive", "labeled_data.csv"), "--text_column=tweet",
              "--label_column=class"]
  for extra, message in (
      (davidson + ["--window_aggregation=max"],
       "--window_aggregation=max takes a softmax head's window most likely of its second "
       "class, and this head has 3 classes: use mean or first"),
      (["--doc_stride=31"], "--doc_stride=31 must be a whole number from 1 to "
                            "max_seq_length - 2 = 30 (the tokens a window holds besides "
                            "[CLS] and [SEP])")):
    with pytest.raises(FlagError) as error:
      run_flags(*base + extra)
    assert str(error.value) == message, extra


def test_the_transformers_config_records_the_windows_and_its_tokenizer_says_it_truncates(
    caplog):
  from modeling.bert import BertConfig
  from modeling.convert_hf import WINDOWS_KEY, hf_config
  from pipeline.hf_export import tokenizer_truncation
  windows = {"doc_stride": 64, "aggregation": "max"}
  config = hf_config(BertConfig(vocab_size=99), "classification", ["0", "1"],
                     windows=windows)
  assert config[WINDOWS_KEY] == windows
  assert WINDOWS_KEY not in hf_config(BertConfig(vocab_size=99), "classification", ["0", "1"])
  card = {"truncation": {"mode": "head", "windows": windows}, "max_seq_length": 128,
          "text_pair": False}
  with caplog.at_level("WARNING"):
    assert tokenizer_truncation(card, "out/export/1/hf") == "right"
  assert ("the tokenizer.json of out/export/1/hf truncates a long text to its first 126 "
          "tokens; this model reads long texts in windows (every 64 tokens, aggregated by "
          "their max), as its Predictor does: a client of its own windows them alike"
          ) in caplog.text


def test_outputs_that_are_not_numbers_name_the_text_of_the_window_and_count_texts():
  from pipeline.evaluation import check_finite_outputs
  from pipeline.splits import Split
  from spec.run_errors import NumericFault
  split = Split(None, {"num_examples": 6, "files": [], "source_file": "dev.csv",
                       "read": {"windows": [2, 3, 1]}},
                {"label_spec": SingleLabel(["y"], ["0", "1"])}, Windowing(4, "mean", 10))
  assert (split.num_texts, split.texts_of(range(6)).tolist()) == (3, [0, 0, 1, 1, 1, 2])
  rows = np.ones((6, 2), np.float32)
  rows[3:5] = np.nan
  with pytest.raises(NumericFault) as error:
    check_finite_outputs(rows, split, None)
  assert str(error.value).startswith(
      "the outputs of no checkpoint (random head) for 1 of 3 rows are not numbers (NaN or "
      "infinity), the first being row 2 (counted from 1) of dev.csv: nothing was written")
