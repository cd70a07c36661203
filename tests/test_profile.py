"""The step profile's pieces (tools/profile_step.py): the matrix multiplies it times as
the matmul floor, the categories it sorts this project's training ops into, and the
encoder it times with parts left out."""

import argparse
import collections
import os
import re

import pytest
import tensorflow.compat.v1 as tf

from conftest import ROOT, THREE_CLASSES, model_features, small_config
from tools.flops import (backward_matmuls, forward_flops_per_example, forward_matmuls,
                            matmul_flops)
from modeling.model_fn import ModelSettings, model_fn_builder
from tools.profile_step import (CATEGORIES, OTHER, category_of, encoder_without,
                                fusion_lines, fusion_of, parse_args, parse_without, report,
                                without_lines)


def closed_form_macs(config, s, num_outputs, pooled_only):
  """BERT's forward multiply-adds per example, written out: per layer and token the four
  projections and the feed-forward pair, plus 2 S H for attention scores and context."""
  h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
  full = s * (4 * h * h + 2 * h * i) + 2 * s * s * h
  macs = h * h + h * num_outputs
  if pooled_only:  # the last layer: keys and values of every token, the rest for [CLS]
    return macs + (layers - 1) * full + s * 2 * h * h + 2 * h * h + 2 * h * i + 2 * s * h
  return macs + layers * full


@pytest.mark.parametrize("pooled_only", [False, True])
def test_the_floor_multiplies_are_the_counted_flops(pooled_only):
  config = small_config()
  for seq in (1, 17, 64):
    forward = forward_matmuls(config, seq, 3, pooled_only, batch=5)
    assert matmul_flops(forward) == 5 * 2 * closed_form_macs(config, seq, 3, pooled_only)
    assert forward_flops_per_example(config, seq, 3, pooled_only) == 2 * closed_form_macs(
        config, seq, 3, pooled_only)
    backward = backward_matmuls(forward)
    assert len(backward) == 2 * len(forward)
    assert matmul_flops(backward) == 2 * matmul_flops(forward)


def test_every_training_op_of_the_model_finds_its_category():
  """On the real graph of a training step: every product is a matrix multiply, the
  update is the optimizer's, and each named category finds ops (a renamed scope would
  leave its category empty and its ops in "other")."""
  config = small_config()
  found, ops = collections.Counter(), []
  for fused in (False, True):  # (TensorFlow's ops, and the encoder's fused kernels)
    with tf.Graph().as_default():
      features = model_features(config)
      model_fn = model_fn_builder(config, THREE_CLASSES, ModelSettings(
          learning_rate=1e-3, num_train_steps=10, fused_kernels=fused))
      model_fn(features, None, tf.estimator.ModeKeys.TRAIN, {})
      graph_ops = tf.get_default_graph().get_operations()
    found.update(category_of(op.name, op.type) for op in graph_ops)
    # (The rest: mostly variables' creation, reads and initialisers, and shape arithmetic;
    # with the fused kernels the update is one op a variable, so the rest's share is larger.)
    assert sum(category_of(op.name, op.type) == OTHER for op in graph_ops) < len(graph_ops) / 3
    ops += graph_ops
  for op in ops:
    if op.type.startswith("Bert"):  # every fused kernel, forward and backward
      assert category_of(op.name, op.type) != OTHER, op.name
    if op.type in ("MatMul", "BatchMatMul", "BatchMatMulV2"):
      assert category_of(op.name, op.type) == "matrix multiplies", op.name
    if op.type in ("AssignVariableOp", "ResourceApplyAdam", "BertAdamWeightDecay") and (
        "optimizer_update" in op.name):
      assert category_of(op.name, op.type) == "optimizer update", op.name
  named = [category for category, _ in CATEGORIES if category != "input pipeline"]
  assert all(found[category] > 0 for category in named), found


def training_graph_ops():
  """{op name: op type} and {trainable variable: shape} of a small model's training step."""
  config = small_config()
  with tf.Graph().as_default():
    model_fn = model_fn_builder(config, THREE_CLASSES, ModelSettings(
        learning_rate=1e-3, num_train_steps=10))
    model_fn(model_features(config), None, tf.estimator.ModeKeys.TRAIN, {})
    ops = {op.name: op.type for op in tf.get_default_graph().get_operations()}
    # (Not the optimizer's slots: a part left out has variables without gradients.)
    variables = {v.op.name: v.shape.as_list() for v in tf.trainable_variables()}
  return ops, variables


def encoder_ops(ops, marker):
  return [name for name in ops if name.startswith("bert/") and marker(name, ops[name])]


DROPOUT = lambda name, kind: "dropout" in name  # noqa: E731
MOMENTS = lambda name, kind: "/moments/" in name  # noqa: E731
GELU_TANH = lambda name, kind: "/intermediate/" in name and kind == "Tanh"  # noqa: E731


def test_the_encoder_without_each_part_has_none_of_its_ops_and_the_same_variables():
  full_ops, full_variables = training_graph_ops()
  for marker in (DROPOUT, MOMENTS, GELU_TANH):
    assert encoder_ops(full_ops, marker)  # each part is there to begin with
  for parts, gone in [(("dropout",), [DROPOUT]), (("layer_norm",), [MOMENTS]),
                      (("gelu",), [GELU_TANH]),
                      (("dropout", "gelu", "layer_norm"), [DROPOUT, MOMENTS, GELU_TANH])]:
    with encoder_without(parts):
      ops, variables = training_graph_ops()
    assert variables == full_variables, parts  # the model's variables, all of them
    for marker in (DROPOUT, MOMENTS, GELU_TANH):
      assert bool(encoder_ops(ops, marker)) == (marker not in gone), (parts, marker)
  assert training_graph_ops()[0] == full_ops  # everything is back after the context


def test_without_runs_are_parsed_and_unknown_parts_refused():
  assert parse_without("dropout,layer_norm+gelu") == [("dropout",), ("gelu", "layer_norm")]
  assert parse_without("none") == []
  with pytest.raises(argparse.ArgumentTypeError, match="unknown part 'softmax' in "
                     "'dropout[+]softmax'; the parts are dropout, gelu, layer_norm"):
    parse_without("dropout+softmax")
  with pytest.raises(argparse.ArgumentTypeError, match="unknown part ''"):
    parse_without("dropout,")
  with pytest.raises(argparse.ArgumentTypeError, match="names the run 'dropout[+]gelu' twice"):
    parse_without("gelu+dropout,dropout+gelu")
  with pytest.raises(SystemExit):  # argparse's own error message and exit
    parse_args(["--without", "softmax"])


def test_the_encoder_is_restored_when_building_fails():
  from modeling import bert
  before = (bert.dropout, bert.layer_norm, dict(bert.ACTIVATIONS))
  with pytest.raises(RuntimeError):
    with encoder_without(("dropout", "gelu", "layer_norm")):
      raise RuntimeError("a failed build")
  assert (bert.dropout, bert.layer_norm, dict(bert.ACTIVATIONS)) == before


def test_the_without_table_divides_by_the_same_floor():
  result = {"steps": 2, "step_seconds": [0.5, 0.7], "floor_seconds": 0.4,
            "step_seconds_tensorflow_ops": [0.75, 0.85],
            "step_seconds_without": {"dropout": [0.4, 0.6], "gelu+layer_norm": [0.3, 0.3]}}
  assert without_lines(result)[2:] == [
      "| encoder | ms per step | step ÷ matmul floor | time against TensorFlow's ops |",
      "|---|---|---|---|",
      "| fused kernels (a run's default on a CPU) | 600 | 3.00x | -25% |",
      "| TensorFlow's ops | 800 | 4.00x | - |",
      "| TensorFlow's ops without dropout | 500 | 2.50x | -38% |",
      "| TensorFlow's ops without GELU, layer norm | 300 | 1.50x | -62% |", ""]
  assert without_lines(dict(result, step_seconds_without={},
                            step_seconds_tensorflow_ops=None)) == []


def test_the_report_names_the_precision_of_the_step_and_of_its_floor():
  """A step in bfloat16 is set against a floor of matrix multiplies in bfloat16 (a
  float32 floor would make the step look faster than its own matrix multiplies)."""
  result = {"tensorflow": "2.15.1", "python": "3.11.7", "precision": "bfloat16", "steps": 2,
            "lengths": [64, 32], "step_seconds": [0.3, 0.2], "floor_seconds": 0.25,
            "train_gflops": 50.0, "traced_steps": 1, "traced_lengths": [64],
            "traced_step_seconds": [0.3], "op_micros": [["matrix multiplies", "MatMul", 100]]}
  args = argparse.Namespace(model="minilm", seq=128, batch=32, data="comments.csv")
  lines = report([result], args, "a machine").splitlines()
  assert ("- 2 timed steps (untraced), the encoder in bfloat16, mean length 48.0 tokens: "
          "250 ms per step, 100.0 GFLOP/s of matrix multiplies.") in lines
  assert ("- **Matmul floor**: the same steps' matrix multiplies alone (forward and "
          "backward, the same shapes, this runtime, in bfloat16) take 125 ms per step: the "
          "step takes **2.00x its matmul floor**.") in lines


def test_the_fusion_table_names_what_each_op_fuses():
  assert fusion_of("_MklNativeFusedMatMul[BiasAdd, Tanh]") == (
      "matrix multiply + bias, tanh (oneDNN's rewrite)")
  assert fusion_of("_FusedMatMul[BiasAdd]") == "matrix multiply + bias (grappler's remapper)"
  assert fusion_of("BertBf16MatMul") == ("this project's kernel: matrix multiply of "
                                         "bfloat16-rounded operands, summed in float32 (on AMX or "
                                         "AVX512_BF16)")
  assert fusion_of("BertBiasGeluGrad") == "this project's kernel: bias + GELU, backward"
  assert fusion_of("BertAttentionSoftmax") == (
      "this project's kernel: scale + mask + softmax + dropout, forward")
  # Every op of the kernels' sources that a training graph can hold says what it does (the
  # multipliers' op serves tests alone, the units' op the precision's choice).
  registered = []
  for source in ("fused_ops.cc", "bf16_matmul.cc"):
    with open(os.path.join(ROOT, "modeling", "kernels", source)) as f:
      registered += re.findall(r'REGISTER_OP\("(\w+)"\)', f.read())
  assert {"BertAdamWeightDecay", "BertSplitHeadsGrad", "BertBf16MatMul"} <= set(registered)
  for op in set(registered) - {"BertDropoutMultipliers", "BertBf16MatMulUnits"}:
    assert fusion_of(op).startswith("this project's kernel: "), op
  results = [{"tensorflow": "2.15.1", "fused_ops": {"BertBiasGelu": 6, "_FusedMatMul[BiasAdd]": 20},
              "fused_ops_tensorflow_ops": {"_FusedMatMul[BiasAdd]": 38}}]
  assert fusion_lines(results)[4:] == [
      "| op | fuses | TF 2.15.1, fused kernels | TF 2.15.1, TensorFlow's ops |",
      "|---|---|---|---|",
      "| `BertBiasGelu` | this project's kernel: bias + GELU, forward | 6 | 0 |",
      "| `_FusedMatMul[BiasAdd]` | matrix multiply + bias (grappler's remapper) | 20 | 38 |",
      ""]
