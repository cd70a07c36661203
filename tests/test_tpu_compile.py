"""The training step that TPUEstimator places on a TPU, compiled whole by XLA on the CPU.

No TPU is reachable here, so this is the closest proxy for "--use_tpu runs the same
graph": model_fn in TRAIN mode with use_tpu=True (one-hot embeddings, static shapes,
bfloat16 where --use_bf16 asks for it), forward, gradients, clipping and the optimizer
update, in one XLA computation (tf.xla.experimental.compile, on TF 1.15 and through
compat.v1 on TF 2.15). It must compile, and give the loss and the updated weights of
the same step run op by op. An op a TPU cannot run (a string op, a py_func) fails to
compile here too.

The one difference from a TPU: over a single shard the cross-core gradient sum is the
identity, and its CrossReplicaSum has no CPU kernel on TF 1.15, so the step applies
the core's own gradients (cross_shard=False).
"""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import THREE_CLASSES, model_features, small_config
from modeling.model_fn import ModelSettings, model_fn_builder

# Dropout off: the op-by-op and the compiled step draw different random numbers.
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def tpu_train_step(config, features, precision="float32", extra=None):
  """(loss, train_op) of model_fn's TPU graph for one step; extra(features) may add an op
  to the step (for the negative tests)."""
  model_fn = model_fn_builder(config, THREE_CLASSES, ModelSettings(
      learning_rate=1e-3, num_train_steps=10, use_tpu=True, precision=precision,
      cross_shard=False))
  with tf.variable_scope(tf.get_variable_scope(), reuse=tf.AUTO_REUSE):
    spec = model_fn(features, None, tf.estimator.ModeKeys.TRAIN, {"batch_size": 4})
  dependencies = [spec.train_op] + ([extra(features)] if extra else [])
  with tf.control_dependencies(dependencies):
    return tf.identity(spec.loss)


def compiled_step(config, features, precision="float32", extra=None):
  keys = sorted(features)

  def step(*tensors):
    return tpu_train_step(config, dict(zip(keys, tensors)), precision, extra)

  (loss,) = tf.xla.experimental.compile(step, [features[k] for k in keys])
  return loss


def weights_after(session, loss, variables, start):
  """The loss of one step and every variable after it, from the same starting values."""
  for variable, value in zip(variables, start):
    variable.load(value, session)
  value = session.run(loss)
  return value, session.run(variables)


# bfloat16 on TF 2.15 alone: today's TPUs (TPU VMs) run TF 2.15; TF 1.15 had TPU nodes only.
@pytest.mark.parametrize("precision", [
    "float32", pytest.param("bfloat16", marks=pytest.mark.one_runtime("tf2"))])
def test_the_compiled_tpu_step_matches_the_step_run_op_by_op(precision):
  """Loss, weights, Adam moments and the global step, all of them within 1e-5 (float32);
  bfloat16 rounds the encoder's activations, which XLA may fuse in another order, so its
  bound is that of bfloat16's 8-bit mantissa."""
  # One layer has every op of the encoder; XLA's CPU compiler is slow, on bfloat16 most.
  config = small_config(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=24, **NO_DROPOUT)
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    features = model_features(config)
    plain = tpu_train_step(config, features, precision)
    compiled = compiled_step(config, features, precision)
    variables = tf.global_variables()
    names = [v.op.name for v in variables]
    assert "global_step" in names and any(n.endswith("/adam_m") for n in names)
    # One-hot embeddings, as on a TPU: no gather of the word table in either step.
    gathers = [op.name for op in tf.get_default_graph().get_operations()
               if op.type in ("GatherV2", "ResourceGather") and "word_embeddings" in op.name]
    assert not gathers, gathers
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      start = session.run(variables)
      plain_loss, plain_weights = weights_after(session, plain, variables, start)
      compiled_loss, compiled_weights = weights_after(session, compiled, variables, start)
  tolerance = 1e-5 if precision == "float32" else 2e-2
  assert np.isfinite(plain_loss) and compiled_loss == pytest.approx(plain_loss, rel=tolerance)
  changed = 0
  for name, before, a, b in zip(names, start, plain_weights, compiled_weights):
    np.testing.assert_allclose(b, a, rtol=tolerance, atol=tolerance, err_msg=name)
    changed += not np.array_equal(a, before)
  assert dict(zip(names, compiled_weights))["global_step"] == 1
  # The update happened: every weight (decayed where it had no gradient), its two
  # moments and the step moved.
  assert changed == len(names)


@pytest.mark.parametrize("op", ["string", "py_func"])
def test_an_op_a_tpu_cannot_run_fails_to_compile(op):
  """The proxy catches what a TPU would refuse: a string op on the input, a py_func."""
  config = small_config(num_hidden_layers=1, **NO_DROPOUT)

  def string_op(features):
    return tf.strings.length(tf.strings.as_string(features["input_ids"]))

  def python_op(features):
    return tf.py_func(lambda x: x, [features["input_ids"]], tf.int32)

  extra = string_op if op == "string" else python_op
  with tf.Graph().as_default():
    features = model_features(config)
    tpu_train_step(config, features)  # the variables, made outside the compiled step
    compiled = compiled_step(config, features, extra=extra)
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      with pytest.raises(tf.errors.OpError) as failure:
        session.run(compiled)
  message = str(failure.value)
  assert ("AsString" in message or "StringLength" in message) if op == "string" else \
      "PyFunc" in message, message
