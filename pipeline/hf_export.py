"""A fine-tuned model as a Hugging Face transformers folder (--export_format=hf): what
AutoModelForSequenceClassification and AutoTokenizer load, written inside the export as
hf/.

  config.json              a BertForSequenceClassification: the BERT config, id2label and
                           label2id in the head's order, problem_type for its kind
  model.safetensors        the encoder, its pooler and the head (modeling/convert_hf.py)
  tokenizer.json, vocab.txt, tokenizer_config.json, special_tokens_map.json
                           a tokenizer with the card's casing and max_seq_length, and
                           Google's ids (words of up to 200 characters spelt out)

No torch or transformers is needed to write it; tests/test_hf_export.py loads it with
transformers in the optional Hugging Face environment.
"""

import json
import logging
import os

import numpy
import tensorflow.compat.v1 as tf

from data.fast_tokenization import tokenizer_json
from data.vocabulary import CLS_TOKEN, SEP_TOKEN, UNK_TOKEN
from modeling.bert import BertConfig
from modeling.convert_hf import HF_ACTIVATIONS, hf_config, hf_tensors
from spec.heads import from_card
from spec.run_errors import FlagError

log = logging.getLogger(__name__)

HF_FOLDER = "hf"
SPECIAL_TOKENS = {"unk_token": UNK_TOKEN, "sep_token": SEP_TOKEN, "pad_token": "[PAD]",
                  "cls_token": CLS_TOKEN, "mask_token": "[MASK]"}


def check_hf_export(pooling, hub_module, hidden_act, where):
  """A FlagError when a model (its pooling, hub module or None, and activation, None when
  not yet known) has no transformers counterpart: checked from the flags before any work,
  and from the model card before an export."""
  problem = None
  if hub_module:
    problem = ("its encoder is the hub module %s, not a BERT checkpoint whose variables "
               "have Google's names" % hub_module)
  elif pooling != "cls":
    problem = ("its head reads the encoder's mean over the tokens (--pooling=mean), and "
               "transformers' BertForSequenceClassification reads the pooled [CLS] output")
  elif hidden_act is not None and hidden_act not in HF_ACTIVATIONS:
    problem = "its activation %r has no counterpart in transformers" % (hidden_act,)
  if problem:
    raise FlagError("--export_format=hf: the model of %s cannot be a transformers "
                    "BertForSequenceClassification: %s. Export it without hf" % (where, problem))


def check_hf_export_of_card(card, where):
  check_hf_export(card["pooling"], card.get("hub_module"),
                  (card.get("bert_config") or {}).get("hidden_act"), where)


def write_hf_folder(folder, checkpoint, card, vocab_text, vocab):
  """Writes the transformers folder of checkpoint (a fine-tuned model of card) into
  folder, which must not exist: vocab_text is its vocab.txt, vocab that text read
  ({token: id}). Returns folder."""
  from safetensors.numpy import save
  config = BertConfig.from_dict(card["bert_config"])
  label_spec = from_card(card["label_spec"])
  names = list(label_spec.classes or label_spec.columns)
  tensors = hf_tensors(checkpoint, config)
  temperatures = label_spec.temperatures()
  if temperatures is not None:  # (a calibrated head's logits / T: its weights and bias / T)
    scale = 1.0 / numpy.asarray(temperatures, numpy.float32)
    tensors["classifier.weight"] = numpy.ascontiguousarray(
        tensors["classifier.weight"] * scale[:, None])
    tensors["classifier.bias"] = tensors["classifier.bias"] * scale
  tf.io.gfile.makedirs(folder)  # (a bucket's export too)
  # transformers reads only safetensors files that say which framework wrote them.
  _write(folder, "model.safetensors", save(tensors, metadata={"format": "pt"}), "wb")
  special = {key: token for key, token in SPECIAL_TOKENS.items() if token in vocab}
  # The generic class loads tokenizer.json as written (transformers' BertTokenizer builds
  # its own from vocab.txt, which gives [UNK] for a word of 101 to 200 characters).
  tokenizer_config = dict(
      special, tokenizer_class="PreTrainedTokenizerFast", do_lower_case=card["do_lower_case"],
      model_input_names=["input_ids", "token_type_ids", "attention_mask"],
      model_max_length=card["max_seq_length"], padding_side="right",
      truncation_side=tokenizer_truncation(card, folder),
      clean_up_tokenization_spaces=False)
  files = {"config.json": hf_config(config, label_spec.kind, names, label_spec.thresholds,
                                    label_spec.temperature,
                                    card["truncation"].get("windows")),
           "tokenizer_config.json": tokenizer_config, "special_tokens_map.json": special}
  for name, values in sorted(files.items()):
    _write(folder, name, json.dumps(values, indent=2, sort_keys=True) + "\n")
  _write(folder, "vocab.txt", vocab_text)
  _write(folder, "tokenizer.json", tokenizer_json(vocab, card["do_lower_case"]))
  return folder


def tokenizer_truncation(card, folder):
  """The side a tokenizers/transformers tokenizer of the card's model (in folder) cuts a long
  text from: 'right' keeps the head, 'left' the tail. Where that tokenizer cannot do as
  training did, a warning says so: it keeps the head of a head_tail model's text, truncates
  the text of a model that reads long texts in windows, and truncates a pair by its own
  rule."""
  mode = card["truncation"]["mode"]
  windows = card["truncation"].get("windows")
  if windows:
    log.warning("the tokenizer.json of %s truncates a long text to its first %d tokens; "
                "this model reads long texts in windows (every %d tokens, aggregated by "
                "their %s), as its Predictor does: a client of its own windows them alike",
                folder, card["max_seq_length"] - 2, windows["doc_stride"],
                windows["aggregation"])
  if mode == "head_tail":
    log.warning("the tokenizer.json of %s cannot keep a long text's head and tail (this "
                "model's truncation): it keeps the head", folder)
  if card["text_pair"]:
    log.warning("the tokenizer.json of %s truncates a pair by its own rule: when both texts "
                "are longer than half the room and the room is odd, the longer text (here: "
                "the first) keeps the odd token", folder)
  return "left" if mode == "tail" else "right"


def _write(folder, name, content, mode="w"):
  with tf.io.gfile.GFile(os.path.join(folder, name), mode) as f:
    f.write(content)
