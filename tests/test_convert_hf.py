"""Hugging Face -> Google checkpoint conversion: exact weights, clear refusals.

The reference is an independent numpy forward pass over the original safetensors
tensors, written here from the BERT equations (post-LayerNorm, erf GELU).
"""

import json
import math
import os

import numpy as np
import pytest
import safetensors.numpy as safetensors_numpy
import tensorflow.compat.v1 as tf

from conftest import fetched, small_config
from data.tokenization import FullTokenizer
from modeling.bert import BertConfig, BertModel
from modeling.checkpoint import assignment_map
from modeling.convert_hf import ConversionError, bert_config_from_hf, convert, google_name

SENTENCES = ["The gorgeously elaborate continuation is so huge that words cannot describe it.",
             "Effective but too tepid biopic.",
             "A relentless, bombastic and ultimately empty World War II action flick!"]


# --- an independent numpy BERT ---------------------------------------------------------

def _erf(x):
  # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), so the reference needs no scipy or torch.
  sign = np.sign(x)
  x = np.abs(x)
  t = 1.0 / (1.0 + 0.3275911 * x)
  poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 +
                                                                          t * 1.061405429))))
  return sign * (1.0 - poly * np.exp(-x * x))


def _layer_norm(x, weight, bias, eps=1e-12):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * weight + bias


def _linear(x, t, name):
  return x @ t[name + ".weight"].T + t[name + ".bias"]  # PyTorch layout: weight is [out, in]


def numpy_bert(t, config, ids, mask, segments):
  """(sequence_output, pooled_output) of a Hugging Face BertModel state dict."""
  t = {k: v.astype(np.float64) for k, v in t.items() if v.dtype != np.int64}
  seq = ids.shape[1]
  x = (t["embeddings.word_embeddings.weight"][ids] +
       t["embeddings.token_type_embeddings.weight"][segments] +
       t["embeddings.position_embeddings.weight"][:seq][None])
  x = _layer_norm(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"])
  heads = config["num_attention_heads"]
  size = config["hidden_size"] // heads
  bias = (1.0 - mask[:, None, None, :]) * -10000.0
  for n in range(config["num_hidden_layers"]):
    p = "encoder.layer.%d." % n

    def split(h):
      return h.reshape(h.shape[0], seq, heads, size).transpose(0, 2, 1, 3)

    q, k, v = (split(_linear(x, t, p + "attention.self." + w)) for w in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + bias
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape)
    x = _layer_norm(_linear(context, t, p + "attention.output.dense") + x,
                    t[p + "attention.output.LayerNorm.weight"],
                    t[p + "attention.output.LayerNorm.bias"])
    h = _linear(x, t, p + "intermediate.dense")
    h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
    x = _layer_norm(_linear(h, t, p + "output.dense") + x, t[p + "output.LayerNorm.weight"],
                    t[p + "output.LayerNorm.bias"])
  return x, np.tanh(_linear(x[:, 0], t, "pooler.dense"))


def our_bert(model_dir, ids, mask, segments):
  """(sequence_output, pooled_output, missing, unused) of the converted checkpoint."""
  config = BertConfig.from_json_file(os.path.join(model_dir, "bert_config.json"))
  checkpoint = os.path.join(model_dir, "bert_model.ckpt")
  with tf.Graph().as_default():
    model = BertModel(config, False, tf.constant(ids), tf.constant(mask), tf.constant(segments))
    mapping, _, missing = assignment_map(tf.global_variables(), checkpoint)
    unused = sorted(set(n for n, _ in tf.train.list_variables(checkpoint)) - set(mapping))
    tf.train.init_from_checkpoint(checkpoint, mapping)
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      seq_out, pooled = session.run([model.get_sequence_output(), model.get_pooled_output()])
  return seq_out, pooled, missing, unused


def _encode(tokenizer, texts, length):
  ids = np.zeros((len(texts), length), np.int32)
  mask = np.zeros_like(ids)
  for i, text in enumerate(texts):
    tokens = ["[CLS]"] + tokenizer.tokenize(text)[:length - 2] + ["[SEP]"]
    ids[i, :len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
    mask[i, :len(tokens)] = 1
  segments = np.zeros_like(ids)
  segments[:, length // 2:] = mask[:, length // 2:]  # exercise the type embeddings too
  return ids, mask, segments


# --- a small synthetic Hugging Face checkpoint -----------------------------------------

def _hf_tensors(config, seed=0):
  rng = np.random.RandomState(seed)
  h, i = config["hidden_size"], config["intermediate_size"]

  def r(*shape):
    return (rng.randn(*shape) * 0.2).astype(np.float32)

  t = {"embeddings.word_embeddings.weight": r(config["vocab_size"], h),
       "embeddings.position_embeddings.weight": r(config["max_position_embeddings"], h),
       "embeddings.token_type_embeddings.weight": r(2, h),
       "embeddings.LayerNorm.weight": 1 + r(h), "embeddings.LayerNorm.bias": r(h),
       "embeddings.position_ids": np.arange(config["max_position_embeddings"])[None],
       "pooler.dense.weight": r(h, h), "pooler.dense.bias": r(h)}
  for n in range(config["num_hidden_layers"]):
    p = "encoder.layer.%d." % n
    for name, shape in (("attention.self.query", (h, h)), ("attention.self.key", (h, h)),
                        ("attention.self.value", (h, h)), ("attention.output.dense", (h, h)),
                        ("intermediate.dense", (i, h)), ("output.dense", (h, i))):
      t[p + name + ".weight"], t[p + name + ".bias"] = r(*shape), r(shape[0])
    for name in ("attention.output.LayerNorm", "output.LayerNorm"):
      t[p + name + ".weight"], t[p + name + ".bias"] = 1 + r(h), r(h)
  return t


def _hf_config():
  values = small_config().to_dict()
  values.update(model_type="bert", hidden_act="gelu", layer_norm_eps=1e-12)
  return values


def _write_hf_dir(folder, tensors, config, vocab_size):
  os.makedirs(folder, exist_ok=True)
  safetensors_numpy.save_file(tensors, os.path.join(folder, "model.safetensors"))
  with open(os.path.join(folder, "config.json"), "w") as f:
    json.dump(config, f)
  with open(os.path.join(folder, "vocab.txt"), "w") as f:
    f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] +
                      ["w%d" % n for n in range(vocab_size - 4)]) + "\n")
  return folder


def test_synthetic_checkpoint_converts_exactly(tmp_path):
  config = _hf_config()
  tensors = _hf_tensors(config)
  hf_dir = _write_hf_dir(str(tmp_path / "hf"), tensors, config, config["vocab_size"])
  converted, _, head = convert(hf_dir, str(tmp_path / "google"))
  assert head is None  # an encoder
  assert converted.hidden_act == "gelu_exact"
  rng = np.random.RandomState(1)
  ids = rng.randint(0, config["vocab_size"], (3, 11)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[0, 6:] = 0
  segments = np.zeros_like(ids)
  segments[:, 5:] = 1
  seq_out, pooled, missing, unused = our_bert(str(tmp_path / "google"), ids, mask, segments)
  assert missing == [] and unused == []
  expected_seq, expected_pooled = numpy_bert(tensors, config, ids, mask, segments)
  np.testing.assert_allclose(seq_out, expected_seq, atol=1e-4, rtol=0)
  np.testing.assert_allclose(pooled, expected_pooled, atol=1e-4, rtol=0)


# (the conversion and our BERT's forward pass against numpy's are the synthetic test's
# above, on both runtimes; the real weights' names and shapes are Python)
@pytest.mark.one_runtime("tf1")
def test_real_minilm_matches_numpy_forward_pass(tmp_path):
  from tools import assets
  hf_dir = fetched(assets.minilm_hf_dir)
  google_dir = assets.minilm_google_dir()
  with open(os.path.join(hf_dir, "config.json")) as f:
    config = json.load(f)
  tensors = safetensors_numpy.load_file(os.path.join(hf_dir, "model.safetensors"))
  ids, mask, segments = _encode(FullTokenizer(os.path.join(google_dir, "vocab.txt"), True),
                                SENTENCES, 24)
  seq_out, pooled, missing, unused = our_bert(google_dir, ids, mask, segments)
  assert missing == [] and unused == []
  assert len(tf.train.list_variables(os.path.join(google_dir, "bert_model.ckpt"))) == 5 + 2 + 6 * 16
  expected_seq, expected_pooled = numpy_bert(tensors, config, ids, mask, segments)
  np.testing.assert_allclose(seq_out, expected_seq, atol=1e-4, rtol=0)
  np.testing.assert_allclose(pooled, expected_pooled, atol=1e-4, rtol=0)
  assert np.abs(expected_pooled).mean() > 0.05


def test_names_and_transposes():
  assert google_name("encoder.layer.3.attention.self.query.weight") == (
      "bert/encoder/layer_3/attention/self/query/kernel", True)
  assert google_name("bert.encoder.layer.0.output.LayerNorm.gamma") == (
      "bert/encoder/layer_0/output/LayerNorm/gamma", False)
  assert google_name("embeddings.word_embeddings.weight") == (
      "bert/embeddings/word_embeddings", False)
  assert google_name("embeddings.LayerNorm.bias") == ("bert/embeddings/LayerNorm/beta", False)
  assert google_name("pooler.dense.weight") == ("bert/pooler/dense/kernel", True)


def test_refuses_a_tensor_it_cannot_map(tmp_path):
  config = _hf_config()
  tensors = _hf_tensors(config)
  tensors["cls.predictions.bias"] = np.zeros(config["vocab_size"], np.float32)
  hf_dir = _write_hf_dir(str(tmp_path / "hf"), tensors, config, config["vocab_size"])
  with pytest.raises(ConversionError) as error:
    convert(hf_dir, str(tmp_path / "out"))
  assert "tensor 'cls.predictions.bias' has no counterpart in Google's BERT encoder layout" in \
      str(error.value)
  assert not os.path.exists(str(tmp_path / "out" / "bert_model.ckpt.index"))


def test_refuses_wrong_shapes_missing_tensors_and_extra_layers(tmp_path):
  config = _hf_config()
  tensors = _hf_tensors(config)
  bad = dict(tensors)
  bad["encoder.layer.1.intermediate.dense.weight"] = np.zeros((5, 32), np.float32)
  with pytest.raises(ConversionError, match=r"tensor 'encoder.layer.1.intermediate.dense.weight' "
                                            r"has shape \[5, 32\]"):
    convert(_write_hf_dir(str(tmp_path / "a"), bad, config, config["vocab_size"]),
            str(tmp_path / "o"))
  bad = dict(tensors)
  del bad["pooler.dense.bias"]
  with pytest.raises(ConversionError, match="lacks 1 of the model.s tensors, e.g. bert/pooler/dense/bias"):
    convert(_write_hf_dir(str(tmp_path / "b"), bad, config, config["vocab_size"]),
            str(tmp_path / "o"))
  bad = dict(tensors)
  bad["encoder.layer.7.output.dense.bias"] = np.zeros(32, np.float32)
  with pytest.raises(ConversionError, match="maps to bert/encoder/layer_7/output/dense/bias, which "
                                            "a 2-layer config does not have"):
    convert(_write_hf_dir(str(tmp_path / "c"), bad, config, config["vocab_size"]),
            str(tmp_path / "o"))


def test_refuses_missing_files_and_inexact_configs(tmp_path):
  folder = tmp_path / "hf"
  folder.mkdir()
  (folder / "config.json").write_text(u"{}")
  with pytest.raises(ConversionError) as error:
    convert(str(folder), str(tmp_path / "out"))
  assert "model.safetensors is missing from %s" % folder in str(error.value)
  with pytest.raises(ConversionError, match="hidden_act 'swish' has no exact counterpart"):
    bert_config_from_hf(dict(_hf_config(), hidden_act="swish"))
  with pytest.raises(ConversionError, match="position_embedding_type 'relative_key'"):
    bert_config_from_hf(dict(_hf_config(), position_embedding_type="relative_key"))
  with pytest.raises(ConversionError, match="layer_norm_eps 1e-05 differs"):
    bert_config_from_hf(dict(_hf_config(), layer_norm_eps=1e-5))
  assert bert_config_from_hf(dict(_hf_config(), hidden_act="gelu_new")).hidden_act == "gelu"


def test_cli_reports_refusal(tmp_path):
  from tools import convert_hf_checkpoint
  assert convert_hf_checkpoint.main([str(tmp_path), str(tmp_path / "out")]) == 1
  config = _hf_config()
  hf_dir = _write_hf_dir(str(tmp_path / "hf"), _hf_tensors(config), config, config["vocab_size"])
  assert convert_hf_checkpoint.main([hf_dir, str(tmp_path / "out")]) == 0
  assert os.path.isfile(str(tmp_path / "out" / "bert_model.ckpt.index"))
