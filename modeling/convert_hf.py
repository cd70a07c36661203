"""Exact conversion between Hugging Face BERT checkpoints (safetensors) and Google's layout,
both ways.

Into this project (convert): a folder of config.json, model.safetensors and vocab.txt
or tokenizer.json (tokenizer_config.json read when present) becomes bert_config.json,
bert_model.ckpt.{index,data-*} and vocab.txt; a sequence-classification checkpoint
(BertForSequenceClassification) brings its head too, as output_weights/output_bias,
with flags.txt naming the run flags its labels need.
Out of it (hf_tensors, hf_config): a fine-tuned checkpoint's variables and BERT config
become a BertForSequenceClassification's tensors and config.json, with the labels and
problem_type of its head.

Names are mapped one to one, dense kernels are transposed (PyTorch stores
[out, in], TensorFlow [in, out]; the head's output_weights is [outputs, hidden] in
both), and the embeddings and pooler are kept. Any tensor that has no place in Google's
layout is refused by name rather than dropped.
"""

import os
import re

import numpy as np
import tensorflow.compat.v1 as tf

from modeling import hf_folder
from modeling.hf_folder import ConversionError
from modeling.bert import BertConfig, BertConfigError
from modeling.checkpoint import encoder_variable_shapes
from spec.heads import SPECS

# Buffers that some exports carry; they hold no learnt weights.
IGNORED_BUFFERS = ("embeddings.position_ids",)
# Hugging Face activation name -> this project's (Google's "gelu" is the tanh form).
ACTIVATION_NAMES = {"gelu": "gelu_exact", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu",
                    "relu": "relu", "tanh": "tanh", "linear": "linear"}
REQUIRED_FILES = ("config.json", "model.safetensors")
# This project's activation -> Hugging Face's name for the same function.
HF_ACTIVATIONS = {"gelu": "gelu_new", "gelu_exact": "gelu", "relu": "relu", "tanh": "tanh",
                  "linear": "linear"}
# config.json's record of the head kind, where problem_type names two (a soft-target head
# is transformers' multi-label one): an import gives the kind back.
HEAD_KIND_KEY = "bert_text_classifier_head"
# config.json's record of a head's tuned decision thresholds ({output name: threshold}; the
# model card's label_spec.thresholds), absent when untuned: transformers keeps it as an
# attribute of the config, for code that decides labels to read.
THRESHOLDS_KEY = "bert_text_classifier_thresholds"
# config.json's record of the temperature (spec/calibration.py) a calibrated head's
# classifier weights and bias were divided by: its logits come out calibrated, in
# transformers as in an import here, which takes the weights as they are.
TEMPERATURE_KEY = "bert_text_classifier_temperature_in_weights"
# config.json's record of the windows a model reads long texts in (--doc_stride: the model
# card's truncation.windows), for a client that windows its texts as training did
# (transformers' own pipeline truncates them).
WINDOWS_KEY = "bert_text_classifier_windows"
# A sequence-classification head's tensors and their names here (the same layout).
HEAD_TENSORS = {"classifier.weight": "output_weights", "classifier.bias": "output_bias"}
# The head kind of each problem_type, and the problem_type of each head kind (its label
# class's hf_problem_type; a soft-target head is a sigmoid per column, trained on
# fractions: transformers' multi-label head).
HEAD_KIND_OF_PROBLEM = {"single_label_classification": "classification",
                        "multi_label_classification": "multi_label", "regression": "regression"}
PROBLEM_OF_HEAD_KIND = {kind: spec.hf_problem_type for kind, spec in SPECS.items()}

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
      "layers, pooler). Convert a BertModel checkpoint, or a BertForSequenceClassification "
      "one (its config.json's architectures say so) for its classifier.* head; other task "
      "heads such as cls.* have no place here" % hf_name)


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
  eps = values.get("layer_norm_eps", 1e-12)
  if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not (
      abs(eps - 1e-12) <= 1e-15):  # (NaN compares false with everything: refused too)
    raise ConversionError("%s: layer_norm_eps %r differs from BERT's 1e-12" %
                          (source, values["layer_norm_eps"]))
  act = values.get("hidden_act", "gelu")
  if act not in ACTIVATION_NAMES:
    raise ConversionError("%s: hidden_act %r has no exact counterpart (known: %s)" %
                          (source, act, ", ".join(sorted(ACTIVATION_NAMES))))
  fields = {k: values[k] for k in BertConfig.FIELDS if k in values}
  fields["hidden_act"] = ACTIVATION_NAMES[act]
  try:
    return BertConfig.from_dict(fields)
  except BertConfigError as e:  # (a field of the wrong kind, or a value out of range)
    raise ConversionError("%s: %s" % (source, e))


def convert_tensors(tensors, config, num_labels=None):
  """{hf_name: array} -> {google_name: float32 array}, checked against the config's shapes.
  num_labels: the head's outputs of a sequence-classification checkpoint, whose
  classifier.* tensors become the head (None: an encoder, which has none)."""
  expected = dict(encoder_variable_shapes(config))
  if num_labels is not None:
    expected.update(output_weights=[num_labels, config.hidden_size], output_bias=[num_labels])
  converted, origin = {}, {}
  for hf_name in sorted(tensors):
    if hf_name in IGNORED_BUFFERS or hf_name.replace("bert.", "", 1) in IGNORED_BUFFERS:
      continue
    if num_labels is not None and hf_name in HEAD_TENSORS:
      name, transpose = HEAD_TENSORS[hf_name], False
    else:
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
    raise ConversionError("the checkpoint lacks %d of the model's tensors, e.g. %s" %
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


def hf_head(values, source="config.json"):
  """(head kind, output names) of a BertForSequenceClassification config.json, or None for
  an encoder. The kind is its problem_type's, or as transformers infers it when the
  config has none: one output regression, more classification."""
  if "BertForSequenceClassification" not in (values.get("architectures") or ()):
    return None
  id2label = values.get("id2label") or {str(i): "LABEL_%d" % i
                                        for i in range(values.get("num_labels", 2))}
  try:
    names = [id2label[key] for key in sorted(id2label, key=int)]
  except ValueError:
    raise ConversionError("%s: id2label's keys %s are not the outputs' numbers" % (
        source, sorted(id2label)))
  if sorted(int(key) for key in id2label) != list(range(len(names))):
    raise ConversionError("%s: id2label numbers outputs %s, not 0 to %d" % (
        source, sorted(int(key) for key in id2label), len(names) - 1))
  problem = values.get("problem_type") or (
      "regression" if len(names) == 1 else "single_label_classification")
  if problem not in HEAD_KIND_OF_PROBLEM:
    raise ConversionError("%s: problem_type %r is not one of %s" % (
        source, problem, ", ".join(sorted(HEAD_KIND_OF_PROBLEM))))
  kind = values.get(HEAD_KIND_KEY)
  if PROBLEM_OF_HEAD_KIND.get(kind) != problem:  # (absent, or not this problem's)
    kind = HEAD_KIND_OF_PROBLEM[problem]
  return kind, names


def head_flags(kind, names, source="config.json"):
  """The run flags that give a run this head's kind and its outputs' order; a name that a
  comma-separated flag cannot carry is refused."""
  for name in names:
    if not name.strip() or "," in name or name != name.strip():
      raise ConversionError("%s: the output name %r cannot be given in a comma-separated "
                            "flag (--labels, --label_column): rename it in id2label" % (
                                source, name))
  if len(set(names)) < len(names):
    raise ConversionError("%s: id2label names two outputs alike (%s)" % (
        source, ", ".join(names)))
  if SPECS[kind].has_classes:
    return ["--head=" + kind, "--labels=" + ",".join(names)]
  return ["--head=" + kind, "--label_column=" + ",".join(names)]


def hf_names(config):
  """The Hugging Face name of each encoder tensor of a BertForSequenceClassification."""
  names = ["embeddings.%s.weight" % table for table in
           ("word_embeddings", "position_embeddings", "token_type_embeddings")]
  names += ["embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias",
            "pooler.dense.weight", "pooler.dense.bias"]
  for layer in range(config.num_hidden_layers):
    names += ["encoder.layer.%d.%s.%s" % (layer, part, leaf)
              for part in _LAYER_PARTS for leaf in ("weight", "bias")]
  return ["bert." + name for name in names]


def hf_tensors(checkpoint, config):
  """{hf_name: float32 array} of a BertForSequenceClassification (the encoder, its pooler
  and the head) from a fine-tuned checkpoint of config; its other variables (the
  optimizer's) are not read."""
  reader = tf.train.load_checkpoint(checkpoint)
  tensors = {}
  for hf_name in hf_names(config) + sorted(HEAD_TENSORS):
    name, transpose = (HEAD_TENSORS[hf_name], False) if hf_name in HEAD_TENSORS else (
        google_name(hf_name))
    if not reader.has_tensor(name):
      raise ConversionError("%s has no %s, which %s needs" % (checkpoint, name, hf_name))
    array = np.asarray(reader.get_tensor(name), np.float32)
    tensors[hf_name] = np.ascontiguousarray(array.T if transpose else array)
  return tensors


def hf_config(config, head_kind, names, thresholds=None, temperature=None, windows=None):
  """The config.json of a BertForSequenceClassification of config (a BertConfig) whose head
  (head_kind, spec/labels.py) has outputs named names, and decides by thresholds (tuned:
  {output name: threshold}) if any. temperature: the calibration its classifier's weights
  were divided by (spec/calibration.py), recorded for the reader; windows: how it reads
  long texts (the card's truncation.windows), recorded likewise."""
  if config.hidden_act not in HF_ACTIVATIONS:
    raise ConversionError("hidden_act %r has no counterpart in transformers (known: %s)" % (
        config.hidden_act, ", ".join(sorted(HF_ACTIVATIONS))))
  values = {name: getattr(config, name) for name in BertConfig.FIELDS}
  values.update(
      architectures=["BertForSequenceClassification"], model_type="bert",
      hidden_act=HF_ACTIVATIONS[config.hidden_act], layer_norm_eps=1e-12,
      position_embedding_type="absolute", pad_token_id=0,
      id2label={str(i): name for i, name in enumerate(names)},
      label2id={name: i for i, name in enumerate(names)},
      problem_type=PROBLEM_OF_HEAD_KIND[head_kind])
  values[HEAD_KIND_KEY] = head_kind
  if thresholds:
    values[THRESHOLDS_KEY] = dict(thresholds)
  if temperature is not None:
    values[TEMPERATURE_KEY] = temperature
  if windows:
    values[WINDOWS_KEY] = dict(windows)
  return values


def convert(hf_dir, output_dir):
  """Converts hf_dir into output_dir, a new or empty folder. Returns (BertConfig, checkpoint
  prefix, head): head is (kind, output names) for a sequence-classification checkpoint,
  else None. The flags a run needs to use the checkpoint go to output_dir/flags.txt
  (absl's --flagfile), with absolute paths. Everything is read and checked before
  anything is written."""
  from safetensors.numpy import load_file  # numpy backend: no torch needed
  for name in REQUIRED_FILES:
    if not os.path.isfile(os.path.join(hf_dir, name)):
      raise ConversionError("%s is missing from %s (a Hugging Face BERT folder needs %s, and "
                            "vocab.txt or tokenizer.json)" % (name, hf_dir,
                                                               ", ".join(REQUIRED_FILES)))
  output_dir = os.path.abspath(output_dir)
  if os.path.exists(output_dir) and (not os.path.isdir(output_dir) or os.listdir(output_dir)):
    raise ConversionError("%s is not a new or empty folder: pass a new one (a conversion "
                          "never writes over another model's files)" % output_dir)
  config_path = os.path.join(hf_dir, "config.json")
  values = hf_folder.json_of(hf_dir, "config.json")
  if not isinstance(values, dict):
    raise ConversionError("%s is not a JSON object (a transformers config.json is one)"
                          % config_path)
  config = bert_config_from_hf(values, config_path)
  head = hf_head(values, config_path)
  flags_of_head = head_flags(*head, source=config_path) if head else []
  tokens = hf_folder.vocabulary(hf_dir)
  do_lower_case = hf_folder.google_casing(hf_dir)
  weights = os.path.join(hf_dir, "model.safetensors")
  try:
    tensors = load_file(weights)
  except Exception as e:  # (safetensors raises its own SafetensorError, and others)
    raise ConversionError("%s cannot be read as safetensors (%s): the file is cut short or "
                          "damaged; download it again" % (
                              weights, str(e).strip().splitlines()[0] if str(e).strip()
                              else type(e).__name__))
  for name in sorted(tensors):  # (safetensors has no checksum: its values are all there is)
    values = np.asarray(tensors[name])
    if values.dtype.kind == "f" and not np.isfinite(values).all():
      raise ConversionError("%s: tensor %r holds values that are not numbers (NaN or "
                            "infinity): the file is damaged, or the model diverged; "
                            "download it again" % (weights, name))
  arrays = convert_tensors(tensors, config, len(head[1]) if head else None)
  if not os.path.isdir(output_dir):
    os.makedirs(output_dir)
  with open(os.path.join(output_dir, "bert_config.json"), "w") as f:
    f.write(config.to_json_string())
  with open(os.path.join(output_dir, "vocab.txt"), "w", encoding="utf-8") as f:
    f.write("".join(token + "\n" for token in tokens))
  prefix = write_checkpoint(arrays, os.path.join(output_dir, "bert_model.ckpt"))
  flags = ["--bert_config_file=" + os.path.join(output_dir, "bert_config.json"),
           "--vocab_file=" + os.path.join(output_dir, "vocab.txt"), "--init_checkpoint=" + prefix,
           "--do_lower_case=%s" % do_lower_case] + flags_of_head
  with open(os.path.join(output_dir, "flags.txt"), "w") as f:
    f.write("\n".join(flags) + "\n")
  return config, prefix, head
