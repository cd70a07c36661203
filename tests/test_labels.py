"""Label specifications (spec/labels.py): parsing, record values, prediction columns and
the model card entry of each head, on real label cells."""

import csv
import io

import pytest

from conftest import sample_path
from spec import heads, labels
from spec.heads.classification import SingleLabel
from spec.heads.multi_label import MultiLabel
from spec.heads.regression import Regression
from spec.heads.soft_target import SoftTarget
from spec.labels import LabelError

TOXIC_COLUMNS = ["toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate"]


def _rows(path):
  with io.open(path, encoding="utf-8", newline="") as f:
    return list(csv.DictReader(f))


def test_single_label_parses_class_names_into_their_index():
  spec = SingleLabel(["label"], ["negative", "positive"])
  assert spec.parse([" positive "]) == "positive"
  assert spec.record_value("positive") == 1 and spec.unlabelled_value() == 0
  assert (spec.num_outputs, spec.record_width, spec.record_dtype) == (2, None, "int64")
  assert spec.prediction_header() == ["probability_negative", "probability_positive",
                                      "prediction"]
  assert spec.prediction_cells([0.25, 0.75]) == ["0.25", "0.75", "positive"]
  assert spec.prediction_cells([0.99999994, 1.1920929e-07]) == [
      "0.99999994", "1.1920929e-07", "negative"]
  with pytest.raises(LabelError) as error:
    spec.parse(["neutral"])
  assert str(error.value) == ("unknown label 'neutral'; the labels are negative, positive. Fix: "
                              "correct the row, or pick the right --task_name / --label_column")
  with pytest.raises(LabelError) as error:
    spec.parse(["NA"])
  assert error.value.missing and error.value.problem == "the label is 'NA', a missing value"


def test_single_label_refuses_what_cannot_be_a_classifier():
  with pytest.raises(ValueError, match="at least 2 classes, not 1"):
    SingleLabel(["label"], ["0"])
  with pytest.raises(ValueError, match="class listed twice: 0, 1, 0"):
    SingleLabel(["label"], ["0", "1", "0"])
  with pytest.raises(ValueError, match="reads one label column, not 2 .*multi_label"):
    SingleLabel(["toxic", "insult"], ["0", "1"])


def test_multi_label_reads_the_six_jigsaw_columns_of_every_row():
  rows = _rows(sample_path("jigsaw_toxic_sample", "train.csv"))
  spec = MultiLabel(TOXIC_COLUMNS)
  parsed = [spec.parse([r[c] for c in TOXIC_COLUMNS]) for r in rows]
  assert len(parsed) == 267
  assert parsed == [tuple(float(r[c]) for c in TOXIC_COLUMNS) for r in rows]
  assert {v for p in parsed for v in p} == {0.0, 1.0}
  assert spec.record_width == 6 and spec.num_outputs == 6
  assert spec.prediction_header() == ["probability_%s" % c for c in TOXIC_COLUMNS]
  with pytest.raises(LabelError) as error:
    spec.parse(["0", "0", "0.5", "0", "0", "0"])
  assert error.value.index == 2 and "use --head=soft_target" in str(error.value)


def test_soft_target_keeps_fractions_and_refuses_values_outside_0_1():
  rows = _rows(sample_path("davidson_hate_offensive", "labeled_data.csv"))
  spec = SoftTarget(["target"])
  for r in rows:
    fraction = (int(r["hate_speech"]) + int(r["offensive_language"])) / float(r["count"])
    assert spec.parse([repr(fraction)]) == (fraction,)
  with pytest.raises(LabelError) as error:
    spec.parse(["1.5"])
  assert "target '1.5' is outside [0, 1]" in str(error.value)
  with pytest.raises(LabelError) as error:
    spec.parse([""])
  assert error.value.missing


def test_regression_takes_any_finite_number():
  rows = _rows(sample_path("davidson_hate_offensive", "labeled_data.csv"))
  spec = Regression(["offensive_language"])
  assert [spec.parse([r["offensive_language"]])[0] for r in rows] == [
      float(r["offensive_language"]) for r in rows]
  assert spec.prediction_header() == ["prediction"]
  assert Regression(["a", "b"]).prediction_header() == ["prediction_a", "prediction_b"]
  for bad, message in (("abc", "'abc' is not a number"), ("inf", "is infinite")):
    with pytest.raises(LabelError, match=message):
      spec.parse([bad])
  with pytest.raises(LabelError) as error:
    spec.parse(["nan"])
  assert error.value.missing


@pytest.mark.parametrize("spec", [SingleLabel(["y"], ["b", "a"]), MultiLabel(TOXIC_COLUMNS),
                                  SoftTarget(["target", "insult"]), Regression(["score"])],
                         ids=lambda s: s.kind)
def test_the_card_entry_rebuilds_the_same_spec(spec):
  entry = spec.to_card()
  assert heads.from_card(entry) == spec
  assert entry["kind"] == spec.kind and entry["columns"] == list(spec.columns)


def test_build_spec_names_what_is_wrong():
  with pytest.raises(ValueError, match="^unknown head 'softmax'; heads: %s$" % ", ".join(
      heads.HEAD_KINDS)):
    heads.build_spec("softmax", ["y"])
  with pytest.raises(ValueError, match="a regression head has no class list .*drop --labels"):
    heads.build_spec("regression", ["y"], ["0", "1"])
  with pytest.raises(ValueError, match="label column listed twice: toxic, toxic"):
    MultiLabel(["toxic", "toxic"])


# --- one way to read a label -------------------------------------------------------------

@pytest.mark.parametrize("cells,canonical", [
    (["0", "0.0", "00", "+0", "-0", " 0 ", "0e5", "0.000"], "0"),
    (["1", "1.0", "01", "+1", "1e0", "\t1\n", "1.000"], "1"),
    (["0.5", ".5", "0.50", "5e-1"], "0.5"),
    (["10", "1e1", "10.0"], "10"),
    (["-2", "-2.0"], "-2"),
    (["True", "true", "TRUE", " tRuE "], "true"),
    (["False", "false", "FALSE"], "false"),
    (["positive", " positive"], "positive"),
    (["Positive"], "Positive"),  # text keeps its case: only true and false are words
    (["nan"], "nan"), (["inf"], "inf"),  # not numbers to compare (missing, or text)
])
def test_a_label_has_one_spelling(cells, canonical):
  assert {labels.canonical_label(cell) for cell in cells} == {canonical}


def test_classes_are_matched_by_value_and_listed_once():
  spec = SingleLabel(["y"], ["0", "1"])
  assert [spec.parse([c]) for c in ("1.0", " 01", "0.0", "+0")] == ["1", "1", "0", "0"]
  assert spec.record_value("1.0") == 1
  named = SingleLabel(["y"], ["True", "False"])  # the classes keep the spelling given
  assert [named.parse([c]) for c in ("TRUE", "false", " True")] == ["True", "False", "True"]
  assert named.prediction_header() == ["probability_True", "probability_False", "prediction"]
  for classes in (["1", "1.0"], ["True", "TRUE"], ["0", "00", "1"]):
    with pytest.raises(ValueError, match="class listed twice: %s \\(labels are read by value"
                                         % ", ".join(classes)):
      SingleLabel(["y"], classes)


def test_multi_label_columns_read_true_and_false():
  assert MultiLabel(["a", "b", "c"]).parse(["True", "false", "1.0"]) == (1.0, 0.0, 1.0)


def test_the_class_order_is_the_same_for_every_order_of_the_names():
  import random
  names = ["10", "2", "-1", "0.5", "true", "false", "b", "B", "a"]
  orders = set()
  for seed in range(500):
    random.Random(seed).shuffle(names)
    orders.add(tuple(labels.class_order(set(names))))
  assert orders == {("-1", "0.5", "2", "10", "false", "true", "B", "a", "b")}


def test_each_head_s_behaviour_outside_the_graph_is_its_label_class_s():
  """What the predictors, k-fold, the export's signature and the Hugging Face config do
  with a head comes from its class: results, strata, output names, problem types."""
  from data.features import InputExample
  from modeling.convert_hf import HEAD_KIND_OF_PROBLEM, PROBLEM_OF_HEAD_KIND
  from pipeline.cross_validation import fold_strata
  classes = SingleLabel(["label"], ["neg", "pos", "mixed"])
  columns = ["toxic", "insult"]
  cases = [  # (spec, outputs, result, the rows' labels, their strata)
      (classes, [0.2, 0.5, 0.3], {"label": "pos"}, ["neg", "mixed", "pos", "neg"],
       ["neg", "mixed", "pos", "neg"]),
      (MultiLabel(columns), [0.7, 0.2], {"labels": ["toxic"]},
       [(1.0, 0.0), (0.0, 1.0), (1.0, 1.0), (0.0, 0.0)], [True, False, True, False]),
      (SoftTarget(columns), [0.7, 0.2], {}, [(0.5, 0.0), (0.49, 1.0), (0.9, 0.1), (0.0, 0.0)],
       [True, False, True, False]),
      # (numbers: their quintiles' bins, of four values here)
      (Regression(["score"]), [2.5], {}, [(5.0,), (1.0,), (3.0,), (2.0,)], [3, 0, 2, 1])]
  for spec, outputs, extra, row_labels, strata in cases:
    names = spec.classes or list(spec.columns)
    result = spec.result(names, outputs)
    assert result == dict({spec.output_name: dict(zip(names, outputs))}, **extra), spec
    examples = [InputExample(i, "text", label=label) for i, label in enumerate(row_labels)]
    assert fold_strata(examples, spec) == strata, spec
    assert HEAD_KIND_OF_PROBLEM[PROBLEM_OF_HEAD_KIND[spec.kind]] == (
        "multi_label" if spec.kind == "soft_target" else spec.kind)
  assert [s.output_name for s in (classes, Regression(["score"]))] == ["probabilities", "values"]
  # The first of equal outputs wins, as numpy's argmax.
  assert classes.result(classes.classes, [0.4, 0.4, 0.2])["label"] == "neg"
