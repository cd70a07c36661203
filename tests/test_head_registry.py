"""The heads' registry (spec/heads/): every head found, each held to what the rest of the
project reads of a head, so a head added as one module is checked by these tests the day
it is written: its card, records, prediction columns, predictor result, graph loss and
outputs, evaluation statistics, Hugging Face problem, --head and the guide's row, and its
own options (flags of the heads group that other heads refuse)."""

import dataclasses
import os
import re

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import ROOT
from modeling import head, metrics
from modeling.convert_hf import HEAD_KIND_OF_PROBLEM
from run_classifier import parse_flags
from spec import heads, option_docs, option_index
from spec.heads.multi_label import MultiLabel
from spec.labels import LabelSpec
from spec.config import RunConfig
from spec.option_field import option
from spec.run_errors import FlagError


def _built(kind):
  """A spec of the head over the fewest label columns it takes (a, then a and b; classes
  x, y and z where it has classes)."""
  problems = []
  for columns in (["a"], ["a", "b"]):
    try:
      return heads.build_spec(kind, columns, ["x", "y", "z"] if heads.SPECS[kind].has_classes
                              else None)
    except ValueError as e:
      problems.append(str(e))
  raise AssertionError("the %s head builds over neither one nor two columns: %s" % (
      kind, problems))


@pytest.fixture(params=heads.HEAD_KINDS)
def spec(request):
  return _built(request.param)


def test_every_module_of_the_package_gives_a_head():
  names = sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, "spec", "heads"))
                 if name.endswith(".py") and name != "__init__.py")
  assert sorted({heads.SPECS[kind].__module__.split(".")[-1] for kind in heads.HEAD_KINDS}) == \
      names
  assert heads.HEAD_KINDS == tuple(sorted(heads.SPECS))


def test_the_registry_refuses_heads_that_clash_or_say_too_little():
  classes = [heads.SPECS[kind] for kind in heads.HEAD_KINDS]
  with pytest.raises(TypeError, match=r"two heads are of kind 'multi_label': MultiLabel and "
                     r"Twice"):
    heads._registry(classes + [type("Twice", (MultiLabel,), {})])
  with pytest.raises(TypeError, match=r"the head Shouting's kind 'Loud' is not a lower-case "
                     r"word"):
    heads._registry(classes + [type("Shouting", (MultiLabel,), {"kind": "Loud"})])
  with pytest.raises(TypeError, match=r"the head Mute names no loss"):
    heads._registry(classes + [type("Mute", (LabelSpec,), {"kind": "mute"})])
  assert "other" in heads._registry(classes + [type("Other", (MultiLabel,), {
      "kind": "other"})])


def test_the_card_gives_the_same_head_back(spec):
  entry = spec.to_card()
  assert heads.from_card(entry) == spec and entry["kind"] == spec.kind


def test_records_and_prediction_columns_fit_the_outputs(spec):
  value = spec.unlabelled_value()
  if spec.record_width is None:
    assert spec.record_dtype == "int64" and isinstance(value, int)
  else:
    assert spec.record_dtype == "float32" and len(value) == spec.record_width
  outputs = list(np.linspace(0.1, 0.9, spec.num_outputs))
  assert len(spec.prediction_header()) == len(spec.prediction_cells(outputs))
  names = list(spec.classes or spec.columns)
  assert len(names) == spec.num_outputs
  assert spec.result(names, outputs)[spec.output_name] == dict(zip(names, outputs))


def test_the_graph_loss_is_finite_and_keeps_the_outputs_serving_computes(spec):
  """Training and evaluation take the outputs loss_and_outputs gives; serving and the
  exports take outputs_of: they must be one and the same."""
  rng = np.random.RandomState(3)
  logits = rng.randn(4, spec.num_outputs).astype(np.float32) * 3
  targets = np.array([spec.record_value(spec.unlabelled_value()) if spec.record_width else 0
                      for _ in range(4)], np.int32 if spec.record_width is None else np.float32)
  with tf.Graph().as_default(), tf.Session() as session:
    loss, outputs = head.loss_and_outputs(spec, tf.constant(logits), tf.constant(targets))
    served = head.outputs_of(spec, tf.constant(logits))
    loss, outputs, served = session.run([loss, outputs, served])
  assert loss.shape == (4,) and np.isfinite(loss).all()
  np.testing.assert_allclose(outputs, served, rtol=1e-6)


def test_the_evaluation_has_its_statistics_and_hugging_face_its_problem(spec):
  names = metrics.metric_names(spec)
  assert "eval_loss" in names and "num_examples" in names
  for statistic in spec.column_statistics:
    assert statistic in metrics.STATISTICS
    assert statistic in names or "mean_%s" % statistic in names
  assert spec.loss in head.LOSSES
  assert spec.hf_problem_type in HEAD_KIND_OF_PROBLEM
  assert spec.calibrated_by() in ("head", "column", None)


def test_every_head_is_in_the_guide_and_head_takes_it():
  with open(os.path.join(ROOT, "docs", "guide", "heads.md")) as f:
    table = f.read().split("\n## Heads\n")[1].split("\n### ")[0]
  listed = [re.findall(r"`([^`]+)`", row.split(" | ")[0])[0]
            for row in table.splitlines() if row.startswith("| `") and "--head" not in row]
  assert sorted(listed) == list(heads.HEAD_KINDS)
  for kind in ("auto",) + heads.HEAD_KINDS:
    assert RunConfig(head=kind).data.head == kind
  with pytest.raises(ValueError, match="^%s$" % re.escape(
      "--head='softmax' is no head; the heads: auto, " + ", ".join(heads.HEAD_KINDS))):
    RunConfig(head="softmax")

# -- a head's own options ------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Smoothing(object):
  smoothing: float = option(0.0, "How much to smooth.",
                            check=lambda v: None if 0 <= v < 1 else "must be in [0, 1)",
                            example="--smoothing=0.1")


def _fake_heads():
  """A registry in which two heads share one option class and a third declares none."""
  return {"one": type("One", (MultiLabel,), {"kind": "one", "Options": _Smoothing}),
          "two": type("Two", (MultiLabel,), {"kind": "two", "Options": _Smoothing}),
          "plain": type("Plain", (MultiLabel,), {"kind": "plain"})}


def test_the_heads_options_are_collected_into_one_group():
  declared, fields = heads._declared_options(_fake_heads())
  assert declared == {"smoothing": ("one", "two")}
  assert [(kind, f.name) for kind, f in fields] == [(float, "smoothing")]
  group = heads._options_group(declared, fields)
  (field,) = dataclasses.fields(group)
  assert field.metadata["help"] == "How much to smooth. Heads: one, two."
  assert field.metadata["example"] == "--smoothing=0.1" and group().smoothing == 0.0
  with pytest.raises(dataclasses.FrozenInstanceError):
    group().smoothing = 0.5
  # A field that is no option; an annotation written as text (from __future__ import
  # annotations) is read as its type.
  bare = dataclasses.make_dataclass("Bare", [("smoothing", float, dataclasses.field(
      default=0.0))], frozen=True)
  with pytest.raises(TypeError, match="^the head one's option smoothing is no option: "
                                      "declare it with spec.option_field.option"):
    heads._declared_options({"one": type("One", (MultiLabel,), {"kind": "one",
                                                                "Options": bare})})
  text = dataclasses.make_dataclass("Text", [("smoothing", "float", option(0.0, "Text."))],
                                    frozen=True)
  assert heads._declared_options({"one": type("One", (MultiLabel,), {
      "kind": "one", "Options": text})})[1][0][0] is float
  other = dataclasses.make_dataclass("Other", [("smoothing", float, option(0.0, "Other."))])
  with pytest.raises(TypeError, match="^the heads one and three define the option smoothing "
                                      "differently$"):
    heads._declared_options(dict(_fake_heads(), three=type("Three", (MultiLabel,), {
        "kind": "three", "Options": other})))


def test_a_head_gets_its_options_and_another_head_refuses_them(monkeypatch):
  declared, fields = heads._declared_options(_fake_heads())
  monkeypatch.setattr(heads, "DECLARED_BY", declared)
  monkeypatch.setattr(heads, "HeadOptions", heads._options_group(declared, fields))
  one, plain = _fake_heads()["one"](["a"]), _fake_heads()["plain"](["a", "b"])
  assert one.options == _Smoothing(0.0) and plain.options is None
  assert heads.apply_options(one, heads.HeadOptions(smoothing=0.25)).options.smoothing == 0.25
  assert heads.apply_options(plain, heads.HeadOptions()).options is None  # (the default)
  assert heads.apply_options(plain, None) is plain
  with pytest.raises(FlagError, match="^%s$" % re.escape(
      "--smoothing is an option of the one and two heads; this run's head is plain: drop "
      "--smoothing")):
    heads.apply_options(plain, heads.HeadOptions(smoothing=0.25))


def test_a_cards_head_option_is_checked_as_a_flag_is():
  """A recorded value is taken only of its option's type, passing its check and among its
  choices (spec.option_field's checks, which RunConfig's values go through too)."""
  Mode = dataclasses.make_dataclass("Mode", [("mode", str, option(
      "mean", "How.", choices=("mean", "max")))], frozen=True)
  modal = type("Modal", (MultiLabel,), {"kind": "modal", "Options": Mode})(["a"])
  smoothing = _fake_heads()["one"](["a"])
  assert heads.options_of(modal, {"mode": "max"}) == Mode("max")
  assert heads.options_of(smoothing, {"smoothing": 0}) == _Smoothing(0.0)
  for spec, recorded, message in (
      (modal, {"mode": "sum"}, "its option mode='sum' is not one of mean, max"),
      (modal, {"mode": 1}, "its option mode is 1, not a str"),
      (smoothing, {"smoothing": True}, "its option smoothing is True, not a float"),
      (smoothing, {"smoothing": "0.1"}, "its option smoothing is '0.1', not a float"),
      (smoothing, {"smoothing": 2}, "its option smoothing=2 must be in [0, 1)")):
    with pytest.raises(FlagError, match="^%s$" % re.escape(message)):
      heads.options_of(spec, recorded)


@pytest.mark.parametrize("value,kinds", [
    (True, {bool}), (0, {int, float}), (2.5, {float}), ("2", {str}), (None, set()),
    ((1,), set())])
def test_an_options_type_takes_whole_numbers_as_floats_and_no_switch_as_a_number(value,
                                                                                   kinds):
  from spec.option_field import of_type
  assert {kind for kind in (bool, int, float, str) if of_type(value, kind)} == kinds


def test_every_head_option_is_a_flag_that_its_heads_take_and_the_others_refuse():
  """Over the options the real heads declare: each is in the heads group with its heads
  named, takes its example, and only its heads take it."""
  for name, kinds in heads.DECLARED_BY.items():
    assert option_index.group_of(name) == "heads"
    assert option_index.help_of(name).endswith(": %s." % ", ".join(kinds))
    example = option_docs.example(name)
    c = parse_flags(["run_classifier.py", example.split(" ")[0]])
    assert c.given == {name} and c.value(name) != option_index.default(name)
    for kind in heads.HEAD_KINDS:
      spec = _built(kind)
      if kind in kinds:
        assert getattr(heads.apply_options(spec, c.heads).options, name) == c.value(name)
        entry = spec.to_card()  # (the card keeps how the model was trained)
        assert entry["options"] == {name: c.value(name)}
        assert heads.from_card(entry).options == spec.options
        if option_index.base_type(option_index.option_field(name)) is float:
          # (a whole number in the card, as JSON may write one, is read as the float)
          whole = heads.from_card(dict(entry, options={name: 0})).options
          assert type(getattr(whole, name)) is float
        assert "options" not in _built(kind).to_card()  # (defaults: cards as before)
        for bad, message in ((dict(entry["options"], unknown=1),
                              "the %s head has no option unknown" % kind),
                             ({name: "text"}, "its option %s is 'text', not a " % name)):
          with pytest.raises(FlagError, match="^" + re.escape(message)):
            heads.from_card(dict(entry, options=bad))
      else:
        with pytest.raises(FlagError, match="^--%s is an option of the " % name):
          heads.apply_options(spec, c.heads)
  assert sorted(f.name for f in dataclasses.fields(heads.HeadOptions)) == sorted(
      heads.DECLARED_BY)


def test_the_heads_group_pickles_with_its_values():
  """A run's options cross to worker processes (featurisation, k-fold) as pickles."""
  import pickle
  values = heads.HeadOptions(**{name: getattr(parse_flags(
      ["run_classifier.py", option_docs.example(name).split(" ")[0]]).heads, name)
      for name in heads.DECLARED_BY})
  assert pickle.loads(pickle.dumps(values)) == values
  spec = heads.apply_options(_built("classification"), values)
  assert pickle.loads(pickle.dumps(spec)).options == spec.options
