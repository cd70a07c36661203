"""Exact conversion of a Hugging Face BERT checkpoint (safetensors) to Google's layout.

Input folder: config.json, model.safetensors, vocab.txt.
Output folder: bert_config.json, bert_model.ckpt.{index,data-*}, vocab.txt.

Names are mapped one to one, dense kernels are transposed (PyTorch stores
[out, in], TensorFlow [in, out]), and the embeddings and pooler are kept. Any
tensor that has no place in Google's layout is refused by name rather than dropped.
"""

import json
import os
import re
import shutil

import numpy as np
import tensorflow.compat.v1 as tf

from modeling.bert import BertConfig, encoder_variable_shapes

# Buffers that some exports carry; they hold no learnt weights.
IGNORED_BUFFERS = ("embeddings.position_ids",)
# Hugging Face activation name -> this project's (Google's "gelu" is the tanh form).
ACTIVATION_NAMES = {"gelu": "gelu_exact", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu",
                    "relu": "relu", "tanh": "tanh"}
REQUIRED_FILES = ("config.json", "model.safetensors", "vocab.txt")

_LAYER_PARTS = {
    "attention.self.query": "attention/self/query",
    "attention.self.key": "attention/self/key",
    "attention.self.value": "attention/self/value",
    "attention.output.dense": "attention/output/dense",
    "attention.output.LayerNorm": "attention/output/LayerNorm",
    "intermediate.dense": "intermediate/dense",
    "output.dense": "output/dense",
    "output.LayerNorm": "output/LayerNorm",
}
_LEAF = {"weight": "kernel", "bias": "bias", "gamma": "gamma", "beta": "beta"}


class ConversionError(ValueError):
  """A checkpoint that cannot be converted exactly; the message names the tensor or file."""


def google_name(hf_name):
  """Maps a Hugging Face BERT tensor name to (Google variable name, transpose?).

  Raises ConversionError for a name with no place in Google's encoder layout.
  """
  name = hf_name[len("bert."):] if hf_name.startswith("bert.") else hf_name
  match = re.match(r"^embeddings\.(word_embeddings|position_embeddings|token_type_embeddings)"
                   r"\.weight$", name)
  if match:
    return "bert/embeddings/" + match.group(1), False
  match = re.match(r"^(embeddings|pooler\.dense)\.(LayerNorm\.)?(weight|bias|gamma|beta)$", name)
  if match:
    scope = "bert/embeddings" if match.group(1) == "embeddings" else "bert/pooler/dense"
    if match.group(2):
      return "%s/LayerNorm/%s" % (scope, _layer_norm_leaf(match.group(3))), False
    if scope == "bert/pooler/dense":
      return "%s/%s" % (scope, _LEAF[match.group(3)]), match.group(3) == "weight"
  match = re.match(r"^encoder\.layer\.(\d+)\.(.+)\.(weight|bias|gamma|beta)$", name)
  if match and match.group(2) in _LAYER_PARTS:
    part = _LAYER_PARTS[match.group(2)]
    prefix = "bert/encoder/layer_%s/%s/" % (match.group(1), part)
    if part.endswith("LayerNorm"):
      return prefix + _layer_norm_leaf(match.group(3)), False
    return prefix + _LEAF[match.group(3)], match.group(3) == "weight"
  raise ConversionError(
      "tensor %r has no counterpart in Google's BERT encoder layout (embeddings, encoder "
      "layers, pooler). Convert a plain BertModel checkpoint; task heads such as cls.* or "
      "classifier.* are not part of the encoder" % hf_name)


def _layer_norm_leaf(leaf):
  return {"weight": "gamma", "gamma": "gamma", "bias": "beta", "beta": "beta"}[leaf]


def bert_config_from_hf(values, source="config.json"):
  """A BertConfig from a Hugging Face config.json dict, refusing what would not be exact."""
  model_type = values.get("model_type", "bert")
  if model_type != "bert":
    raise ConversionError("%s: model_type %r is not BERT" % (source, model_type))
  if values.get("position_embedding_type", "absolute") != "absolute":
    raise ConversionError("%s: position_embedding_type %r is not supported (only absolute)" %
                          (source, values["position_embedding_type"]))
  if abs(values.get("layer_norm_eps", 1e-12) - 1e-12) > 1e-15:
    raise ConversionError("%s: layer_norm_eps %g differs from BERT's 1e-12" %
                          (source, values["layer_norm_eps"]))
  act = values.get("hidden_act", "gelu")
  if act not in ACTIVATION_NAMES:
    raise ConversionError("%s: hidden_act %r has no exact counterpart (known: %s)" %
                          (source, act, ", ".join(sorted(ACTIVATION_NAMES))))
  fields = {k: values[k] for k in BertConfig.FIELDS if k in values}
  fields["hidden_act"] = ACTIVATION_NAMES[act]
  return BertConfig.from_dict(fields)


def convert_tensors(tensors, config):
  """{hf_name: array} -> {google_name: float32 array}, checked against the config's shapes."""
  expected = encoder_variable_shapes(config)
  converted, origin = {}, {}
  for hf_name in sorted(tensors):
    if hf_name in IGNORED_BUFFERS or hf_name.replace("bert.", "", 1) in IGNORED_BUFFERS:
      continue
    name, transpose = google_name(hf_name)
    array = np.asarray(tensors[hf_name], dtype=np.float32)
    if transpose:
      array = array.T
    if name in converted:
      raise ConversionError("tensors %r and %r both map to %s" % (origin[name], hf_name, name))
    if name not in expected:
      raise ConversionError("tensor %r maps to %s, which a %d-layer config does not have" %
                            (hf_name, name, config.num_hidden_layers))
    if list(array.shape) != expected[name]:
      raise ConversionError("tensor %r has shape %s; %s needs %s for this config" %
                            (hf_name, list(tensors[hf_name].shape), name, expected[name]))
    converted[name], origin[name] = np.ascontiguousarray(array), hf_name
  missing = sorted(set(expected) - set(converted))
  if missing:
    raise ConversionError("the checkpoint lacks %d encoder tensors, e.g. %s" %
                          (len(missing), ", ".join(missing[:3])))
  return converted


def write_checkpoint(arrays, prefix):
  """Saves {name: array} as a TF checkpoint at prefix (readable by TF 1.15 and 2.15)."""
  with tf.Graph().as_default():
    variables = [tf.Variable(value, name=name) for name, value in sorted(arrays.items())]
    saver = tf.train.Saver(variables)
    with tf.Session() as session:
      session.run(tf.variables_initializer(variables))
      saver.save(session, prefix, write_meta_graph=False)
  return prefix


def convert(hf_dir, output_dir):
  """Converts hf_dir into output_dir. Returns (BertConfig, checkpoint prefix)."""
  from safetensors.numpy import load_file  # numpy backend: no torch needed
  for name in REQUIRED_FILES:
    if not os.path.isfile(os.path.join(hf_dir, name)):
      raise ConversionError("%s is missing from %s (a Hugging Face BERT folder needs %s)" %
                            (name, hf_dir, ", ".join(REQUIRED_FILES)))
  config_path = os.path.join(hf_dir, "config.json")
  with open(config_path) as f:
    config = bert_config_from_hf(json.load(f), config_path)
  arrays = convert_tensors(load_file(os.path.join(hf_dir, "model.safetensors")), config)
  if not os.path.isdir(output_dir):
    os.makedirs(output_dir)
  with open(os.path.join(output_dir, "bert_config.json"), "w") as f:
    f.write(config.to_json_string())
  shutil.copyfile(os.path.join(hf_dir, "vocab.txt"), os.path.join(output_dir, "vocab.txt"))
  prefix = write_checkpoint(arrays, os.path.join(output_dir, "bert_model.ckpt"))
  return config, prefix
