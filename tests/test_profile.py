"""The step profile's pieces (tools/profile_step.py): the matrix multiplies it times as
the matmul floor, and the categories it sorts this project's training ops into."""

import collections

import pytest
import tensorflow.compat.v1 as tf

from conftest import THREE_CLASSES, model_features, small_config
from modeling.flops import (backward_matmuls, forward_flops_per_example, forward_matmuls,
                            matmul_flops)
from modeling.model_fn import model_fn_builder
from tools.profile_step import CATEGORIES, OTHER, category_of


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
  with tf.Graph().as_default():
    features = model_features(config)
    model_fn = model_fn_builder(config, THREE_CLASSES, None, 1e-3, 10, 0, use_tpu=False)
    model_fn(features, None, tf.estimator.ModeKeys.TRAIN, {})
    ops = tf.get_default_graph().get_operations()
  found = collections.Counter(category_of(op.name, op.type) for op in ops)
  for op in ops:
    if op.type in ("MatMul", "BatchMatMul", "BatchMatMulV2"):
      assert category_of(op.name, op.type) == "matrix multiplies", op.name
    if op.type in ("AssignVariableOp", "ResourceApplyAdam") and "optimizer_update" in op.name:
      assert category_of(op.name, op.type) == "optimizer update", op.name
  named = [category for category, _ in CATEGORIES if category != "input pipeline"]
  assert all(found[category] > 0 for category in named), found
  assert found[OTHER] < 0.2 * len(ops), found
