"""Decision thresholds tuned on the dev split (--tune_thresholds): the choice against a
brute-force reference, the label classes that decide by them, and a run that tunes,
records them in eval_results.json and the model card, and predicts by them."""

import csv
import io
import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import JIGSAW, common_flags, run_flags
from spec import thresholds
from spec.heads import from_card
from spec.heads.classification import SingleLabel
from spec.heads.multi_label import MultiLabel
from spec.run_errors import FlagError


def test_objectives_are_read_or_refused_with_the_fix():
  assert [thresholds.parse_objective(t) for t in ("f1", " F1 ", "precision@0.9", "recall@1")
          ] == [("f1", None), ("f1", None), ("precision", 0.9), ("recall", 1.0)]
  for text, message in (
      ("accuracy", "--tune_thresholds=accuracy is not one of f1, precision@P, recall@R (e.g. "
                   "precision@0.9)"),
      ("precision@", "--tune_thresholds=precision@: '' is not a precision in (0, 1]; e.g. "
                     "precision@0.9"),
      ("recall@1.5", "--tune_thresholds=recall@1.5: '1.5' is not a recall in (0, 1]; e.g. "
                     "recall@0.9"),
      ("precision@nan", "--tune_thresholds=precision@nan: 'nan' is not a precision in (0, 1]; "
                        "e.g. precision@0.9"),
      ("recall@\uff11", "--tune_thresholds=recall@\uff11: '\uff11' is not a recall in (0, 1]; "
                         "e.g. recall@0.9")):
    with pytest.raises(ValueError) as error:
      thresholds.parse_objective(text)
    assert str(error.value) == message
  assert [thresholds.objective_text(thresholds.parse_objective(t)) for t in (
      " F1", "Precision@.90", "recall@1")] == ["f1", "precision@0.9", "recall@1.0"]


def _reference(scores, positives, objective):
  """Every distinct score tried as the threshold, its figures counted afresh; the best by
  the objective, the higher threshold among equals; given as the midpoint between it and
  the next lower score (the lowest itself)."""
  kind, target = objective
  best = None
  distinct = sorted(set(scores), reverse=True)
  for k, t in enumerate(distinct):
    p, r, f1 = thresholds.figures_at(scores, positives, t)
    if kind == "f1":
      key = f1
    elif kind == "precision":
      key = r if p >= target else None
    else:
      key = p if r >= target else None
    if key is not None and (best is None or key > best[0]):
      best = (key, t if k + 1 == len(distinct) else (t + distinct[k + 1]) / 2.0)
  return None if best is None or not any(positives) else best[1]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95]),
                          st.booleans()), min_size=1, max_size=30),
       st.sampled_from([("f1", None), ("precision", 0.5), ("precision", 0.8),
                        ("recall", 0.5), ("recall", 0.9), ("recall", 1.0)]))
def test_the_chosen_threshold_is_the_brute_force_best(rows, objective):
  scores, positives = [s for s, _ in rows], [p for _, p in rows]
  assert thresholds.tune(scores, positives, objective) == _reference(scores, positives,
                                                                      objective)


def test_figures_at_a_threshold_by_hand():
  scores, positives = [0.9, 0.8, 0.6, 0.4, 0.3], [True, False, True, True, False]
  assert thresholds.figures_at(scores, positives, 0.5) == pytest.approx((2 / 3, 2 / 3, 2 / 3))
  assert thresholds.figures_at(scores, positives, 0.95) == (0.0, 0.0, 0.0)
  # (midway to the next lower score)
  assert thresholds.tune(scores, positives, ("f1", None)) == pytest.approx(0.35)  # (3/4, all)
  assert thresholds.tune(scores, positives, ("precision", 1.0)) == pytest.approx(0.85)
  assert thresholds.tune(scores, positives, ("recall", 1.0)) == pytest.approx(0.35)
  assert thresholds.tune([0.2, 0.7], [True, True], ("f1", None)) == 0.2  # (the lowest itself)
  assert thresholds.tune(scores, [False] * 5, ("f1", None)) is None  # no positive row


def test_the_label_classes_decide_by_their_thresholds_and_say_which():
  binary = SingleLabel(["toxic"], ["0", "1"])
  assert binary.result(["0", "1"], [0.7, 0.3]) == {"probabilities": {"0": 0.7, "1": 0.3},
                                                   "label": "0"}
  binary.set_thresholds({"1": 0.25})
  assert binary.result(["0", "1"], [0.7, 0.3]) == {"probabilities": {"0": 0.7, "1": 0.3},
                                                   "label": "1", "threshold": 0.25}
  assert binary.prediction_cells([0.8, 0.2]) == ["0.8", "0.2", "0"]  # (0.2 < 0.25)
  again = from_card(json.loads(json.dumps(binary.to_card())))
  assert again.thresholds == {"1": 0.25} and again == SingleLabel(["toxic"], ["0", "1"])
  columns = MultiLabel(["toxic", "insult"])
  columns.set_thresholds({"insult": 0.1})
  assert columns.result(["toxic", "insult"], [0.4, 0.2]) == {
      "probabilities": {"toxic": 0.4, "insult": 0.2}, "labels": ["insult"],
      "thresholds": {"toxic": 0.5, "insult": 0.1}}
  for spec, entry, message in (
      (SingleLabel(["l"], ["a", "b", "c"]), {"b": 0.3},
       'a threshold of "b": the labels a,b,c has no decision a threshold sets'),
      (SingleLabel(["l"], ["a", "b"]), {"a": 0.3},
       'a threshold of "a": the labels a,b decides by thresholds of b only'),
      (MultiLabel(["toxic"]), {"toxic": 1.5}, "the threshold of toxic is 1.5, not a number in "
                                              "[0, 1]"),
      (MultiLabel(["toxic"]), {"toxic": "0.3"}, 'the threshold of toxic is "0.3", not a number '
                                                'in [0, 1]'),
      (MultiLabel(["toxic"]), {"toxic": True}, "the threshold of toxic is true, not a number in "
                                               "[0, 1]")):
    with pytest.raises(FlagError) as error:
      spec.set_thresholds(entry)
    assert str(error.value) == message


def _tsv(path):
  with io.open(path, encoding="utf-8", newline="") as f:
    return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


@pytest.mark.slow
@pytest.mark.one_runtime("tf1")  # (plain Python around an eval and a predict of both)
def test_a_run_tunes_on_dev_records_the_threshold_and_predicts_by_it(tmp_path, tiny_checkpoint,
                                                                     caplog):
  output_dir = str(tmp_path / "out")
  dev = os.path.join(JIGSAW, "valid.csv")
  flags = common_flags(tiny_checkpoint, output_dir) + [
      "--do_train", "--do_eval", "--do_predict", "--num_train_steps=6",
      "--predict_file=" + dev]
  run_flags(*flags + ["--tune_thresholds=recall@0.9"])
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    results = json.load(f)
  threshold = results["threshold"]
  assert results["threshold_objective"] == "recall@0.9" and 0 <= threshold <= 1
  with open(os.path.join(output_dir, "model_card.json")) as f:
    assert json.load(f)["label_spec"]["thresholds"] == {"1": threshold}
  rows = _tsv(os.path.join(output_dir, "test_results.tsv"))
  # The predictions of the dev file decide at the tuned threshold, and give its figures.
  # (The written text is 9 digits: read as float32 it is the output itself; the threshold
  # lies midway between two dev rows' outputs.)
  scores = [float(np.float32(r["probability_1"])) for r in rows]
  assert [r["prediction"] for r in rows] == ["1" if p >= threshold else "0" for p in scores]
  with io.open(dev, encoding="utf-8", newline="") as f:
    truth = [r["toxic"] == "1" for r in csv.DictReader(f)]
  for at, value in (("0.5", 0.5), ("threshold", threshold)):
    figures = thresholds.figures_at(scores, truth, value)
    for name, figure in zip(("precision", "recall", "f1"), figures):
      # (one row near the threshold may fall the other way in another graph's floats)
      assert results["%s_at_%s" % (name, at)] == pytest.approx(figure, abs=0.05)
  assert results["recall_at_threshold"] >= 0.9
  # (the Predictor, the HTTP server, the ONNX predictor and --saved_model decide by the
  # export's card too: their tests read the shared model of conftest, tuned for F1)
  # A later eval and predict run decides by the card's threshold and says so, and its
  # eval adds the dev figures at that threshold.
  os.rename(os.path.join(output_dir, "test_results.tsv"), str(tmp_path / "first.tsv"))
  with caplog.at_level("INFO"):
    run_flags("--output_dir=" + output_dir, "--data_dir=" + JIGSAW, "--do_eval",
              "--do_predict", "--predict_file=" + dev)
  assert ("labels are decided at the thresholds the model card gives: 1 %.4g" % threshold
          in caplog.text)
  assert [r["prediction"] for r in _tsv(os.path.join(output_dir, "test_results.tsv"))] == [
      r["prediction"] for r in rows]
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    again = json.load(f)
  assert (again["thresholds_from"], again["threshold"]) == ("model card", threshold)
  assert again["recall_at_threshold"] == results["recall_at_threshold"]  # (the same graph)
  # An edited threshold is one line naming the card and the fix.
  card_path = os.path.join(output_dir, "model_card.json")
  with open(card_path) as f:
    card = json.load(f)
  card["label_spec"]["thresholds"] = {"1": "high"}
  with open(card_path, "w") as f:
    json.dump(card, f)
  with pytest.raises(FlagError) as error:
    run_flags("--output_dir=" + output_dir, "--do_predict", "--predict_file=" + dev)
  assert str(error.value) == (
      '%s: label_spec\'s thresholds: the threshold of 1 is "high", not a number in [0, 1] (the '
      "file was edited): restore the card, or tune again with --do_eval --tune_thresholds"
      % card_path)


def test_a_training_keeps_tuned_thresholds_only_while_the_model_does_not_change(caplog):
  """A --do_train run on a tuned folder (or from a tuned --init_checkpoint): with no step
  left to train the card's thresholds still decide; a training that changes the model
  drops them, and the log says so."""
  from pipeline.card import carry_over
  card = {"label_spec": {"kind": "classification", "columns": ["toxic"],
                         "classes": ["0", "1"], "thresholds": {"1": 0.3125}}}
  kept, dropped = SingleLabel(["toxic"], ["0", "1"]), SingleLabel(["toxic"], ["0", "1"])
  with caplog.at_level("INFO"):
    carry_over(card, kept, trains=False)
    carry_over(card, dropped, trains=True)
    carry_over({"label_spec": {"kind": "classification"}}, dropped, trains=True)  # (untuned)
  assert (kept.thresholds, dropped.thresholds) == ({"1": 0.3125}, {})
  assert caplog.text.count("were tuned for the model before this training") == 1
  assert ("the model card's decision thresholds (1 0.3125) were tuned for the model before "
          "this training: the labels of the model it trains are decided at 0.5 until they "
          "are tuned again (--do_eval --tune_thresholds)") in caplog.text


def test_tuning_is_refused_where_it_cannot_work(tmp_path, tiny_checkpoint):
  base = common_flags(tiny_checkpoint, str(tmp_path / "out")) + ["--num_train_steps=1"]
  for extra, message in (
      (["--do_train", "--tune_thresholds=f1"],
       "--tune_thresholds chooses thresholds on the dev split: add --do_eval"),
      (["--do_train", "--do_eval", "--tune_thresholds=accuracy"],
       "--tune_thresholds=accuracy is not one of f1, precision@P, recall@R (e.g. "
       "precision@0.9)"),
      (["--do_train", "--num_folds=3", "--fold=1", "--tune_thresholds=f1"],
       "--tune_thresholds with --num_folds tunes on every fold's out-of-fold predictions; "
       "--fold=1 runs one fold: drop --fold (or tune later, on one model's dev split)"),
      (["--do_train", "--num_folds=3", "--tune_thresholds=f1", "--head=soft_target",
        "--label_column=toxic"],
       "--tune_thresholds tunes the decision of a binary classification head or of each "
       "multi-label column; a soft_target head on toxic has none: drop --tune_thresholds")):
    with pytest.raises(FlagError) as error:
      run_flags(*base + extra)
    assert str(error.value) == message
