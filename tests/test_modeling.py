"""The encoder: Google's variable names and shapes, and numerical parity with bert.modeling."""

import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import MINI, TINY, google_bert, small_config
from modeling.bert import BertConfig, BertModel
from modeling.checkpoint import encoder_variable_shapes
from modeling.checkpoint import assignment_map


def _graph_variables(config, seq_length=8):
  with tf.Graph().as_default():
    ids = tf.zeros([2, seq_length], tf.int32)
    BertModel(config, True, ids, tf.ones_like(ids), tf.zeros_like(ids))
    return {v.name[:-2]: v.shape.as_list() for v in tf.global_variables()}


@pytest.mark.parametrize("folder", [TINY, MINI], ids=["bert_tiny", "bert_mini"])
def test_variables_equal_official_checkpoint_index(folder):
  config = BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))
  official = {n: s for n, s in tf.train.list_variables(os.path.join(folder, "bert_model.ckpt"))
              if not n.startswith("cls/")}  # the pre-training head is not part of the encoder
  assert _graph_variables(config) == official
  assert encoder_variable_shapes(config) == official


def _random_inputs(batch, seq, vocab, seed=0):
  rng = np.random.RandomState(seed)
  ids = rng.randint(0, vocab, (batch, seq)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, seq // 2:] = 0
  segments = np.zeros_like(ids)
  segments[:, seq // 3:] = 1
  return ids, mask, segments


def fused_kernels(seed):
  from modeling.fused import FusedKernels
  return FusedKernels(seed)


@pytest.mark.tf1_only
@pytest.mark.parametrize("fused", [False, True], ids=["tensorflow_ops", "fused_kernels"])
def test_parity_with_google_bert_modeling(tmp_path, fused):
  """Same random checkpoint: pooled and sequence outputs within 1e-5 of bert.modeling,
  with TensorFlow's ops and with the fused CPU kernels (modeling/fused.py)."""
  google = google_bert("modeling")
  config_path = os.path.join(MINI, "bert_config.json")
  inputs = _random_inputs(3, 24, 30522)
  checkpoint = str(tmp_path / "random.ckpt")
  with tf.Graph().as_default():
    tf.set_random_seed(1)
    model = google.BertModel(google.BertConfig.from_json_file(config_path), False,
                             *[tf.constant(x) for x in inputs])
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      expected = session.run([model.get_pooled_output(), model.get_sequence_output()])
      tf.train.Saver().save(session, checkpoint)
  with tf.Graph().as_default():
    kernels = fused_kernels(tf.constant([1, 0], tf.int64)) if fused else None
    model = BertModel(BertConfig.from_json_file(config_path), False,
                      *[tf.constant(x) for x in inputs], fused_kernels=kernels)
    mapping, initialised, missing = assignment_map(tf.trainable_variables(), checkpoint)
    assert missing == [] and len(initialised) == len(tf.trainable_variables())
    tf.train.init_from_checkpoint(checkpoint, mapping)
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      actual = session.run([model.get_pooled_output(), model.get_sequence_output()])
  assert expected[0].shape == (3, 256) and expected[1].shape == (3, 24, 256)
  np.testing.assert_allclose(actual[0], expected[0], atol=1e-5, rtol=0)
  np.testing.assert_allclose(actual[1], expected[1], atol=1e-5, rtol=0)
  assert np.abs(expected[0]).mean() > 0.1  # a real signal, not zeros


def test_dynamic_sequence_length_matches_static():
  config = small_config()
  inputs = _random_inputs(2, 10, config.vocab_size)
  with tf.Graph().as_default():
    placeholders = [tf.placeholder(tf.int32, [None, None]) for _ in range(3)]
    with tf.variable_scope("m"):
      dynamic = BertModel(config, False, *placeholders)
    with tf.variable_scope("m", reuse=True):
      static = BertModel(config, False, *[tf.constant(x) for x in inputs])
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      a = session.run(dynamic.get_sequence_output(), dict(zip(placeholders, inputs)))
      b = session.run(static.get_sequence_output())
  np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("dynamic", [False, True])
def test_pooled_only_equals_full_model_in_output_and_every_gradient(dynamic):
  """The classifier's cheap last layer (first token only) is the same function."""
  config = small_config()
  inputs = _random_inputs(3, 12, config.vocab_size, seed=4)
  with tf.Graph().as_default():
    if dynamic:
      tensors = [tf.placeholder(tf.int32, [None, None]) for _ in range(3)]
      feed = dict(zip(tensors, inputs))
    else:
      tensors, feed = [tf.constant(x) for x in inputs], None
    with tf.variable_scope("m"):
      full = BertModel(config, False, *tensors)
    with tf.variable_scope("m", reuse=True):
      cheap = BertModel(config, False, *tensors, pooled_only=True)
    weights = tf.constant(np.random.RandomState(5).randn(3, 32).astype(np.float32))
    variables = tf.trainable_variables()
    gradients = [tf.gradients(tf.reduce_sum(model.get_pooled_output() * weights), variables)
                 for model in (full, cheap)]
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      pooled = session.run([full.get_pooled_output(), cheap.get_pooled_output()], feed)
      grads = session.run([[tf.convert_to_tensor(g) for g in gs] for gs in gradients], feed)
      last_layer = session.run(cheap.all_layers[-1], feed)
  assert last_layer.shape == (3, 1, 32)
  np.testing.assert_allclose(pooled[1], pooled[0], atol=1e-6, rtol=0)
  assert np.abs(pooled[0]).mean() > 0.01  # a real signal, not zeros
  for variable, full_grad, cheap_grad in zip(variables, *grads):
    np.testing.assert_allclose(cheap_grad, full_grad, atol=1e-5, rtol=1e-4, err_msg=variable.name)
  # Every variable gets a gradient, so the cheap layer drops nothing that trains.
  assert all(np.abs(g).max() > 0 for g in grads[1])
  with pytest.raises(ValueError, match="pooled_only=True"):
    cheap.get_sequence_output()


def test_shape_checks_and_config_errors():
  config = small_config(max_position_embeddings=16)
  with tf.Graph().as_default():
    with pytest.raises(ValueError, match="sequence length 20 exceeds max_position_embeddings 16"):
      BertModel(config, False, tf.zeros([2, 20], tf.int32))
    with pytest.raises(ValueError, match=r"input_ids must be \[batch, seq_length\]"):
      BertModel(config, False, tf.zeros([20], tf.int32))
  with pytest.raises(ValueError, match="not a multiple of num_attention_heads"):
    small_config(hidden_size=30)
  with pytest.raises(ValueError, match="unknown hidden_act 'swish'"):
    small_config(hidden_act="swish")
  from modeling.bert import BertConfigError
  for name in ("vocab_size", "num_hidden_layers", "hidden_size"):  # (-1 blamed the vocabulary)
    values = dict(small_config().to_dict(), **{name: -1})
    with pytest.raises(BertConfigError) as error:
      BertConfig.from_dict(values)
    assert str(error.value) == "%s is -1, not a whole number of at least 1" % name
  for name, value in (("hidden_dropout_prob", 1.0), ("attention_probs_dropout_prob", -0.1)):
    with pytest.raises(BertConfigError) as error:
      BertConfig.from_dict(dict(small_config().to_dict(), **{name: value}))
    assert str(error.value) == (
        "%s is %r, not a probability from 0 up to (not including) 1" % (name, value))


def test_checkpoint_shape_mismatch_is_explained(tmp_path):
  checkpoint = str(tmp_path / "c.ckpt")
  with tf.Graph().as_default():
    BertModel(small_config(), False, tf.zeros([1, 4], tf.int32))
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      tf.train.Saver().save(session, checkpoint)
  with tf.Graph().as_default():
    BertModel(small_config(intermediate_size=40), False, tf.zeros([1, 4], tf.int32))
    with pytest.raises(ValueError, match="intermediate/dense/kernel has shape \\[32, 40\\] in the "
                                         "graph but \\[32, 37\\]"):
      assignment_map(tf.trainable_variables(), checkpoint)


def test_pooled_only_flops_count_one_token_in_the_last_layer_except_keys_and_values():
  from tools.flops import forward_flops_per_example
  config = small_config()  # H 32, I 37, 2 layers
  h, i, s = 32, 37, 10
  layer = s * (4 * h * h + 2 * h * i) + 2 * s * s * h
  head = h * h + h * 2
  assert forward_flops_per_example(config, s) == 2 * (2 * layer + head)
  last = s * 2 * h * h + (2 * h * h + 2 * h * i) + 2 * s * h
  assert forward_flops_per_example(config, s, pooled_only=True) == 2 * (layer + last + head)
