"""The model card: what a fine-tuned model in an output directory is.

Training writes model_card.json next to its checkpoints: the task, the label
specification (the head's kind, its label columns and, for classification, the class
names in the order of the head's outputs), the sequence length,
the casing, the vocabulary and its hash, the BERT config, the starting checkpoint
and the flags. A later eval or predict run reads it, so the labels and the encoder's
settings come from the model itself rather than from flags that may disagree.
"""

import json
import os

from spec.errors import FlagError

CARD_NAME = "model_card.json"
CARD_FORMAT = "bert-text-classifier-model-card"
CARD_VERSION = 2  # 2: label_spec (head kind, label columns, classes)
# What the head may read, and which tokens of a long text are kept: settings a card records.
POOLINGS = ("cls", "mean")
TRUNCATION_MODES = ("head", "tail", "head_tail")


class CardError(FlagError):
  """A model card that cannot be read: not JSON, not a card, or a version this program
  does not know."""


class CardMismatch(FlagError):
  """A setting of this run contradicts the model card; the message names both values."""


def card_path(output_dir):
  return os.path.join(output_dir, CARD_NAME)


def build_card(task, label_spec, max_seq_length, do_lower_case, vocab_file, vocab_sha256,
               bert_config, init_checkpoint, hub_module, flags, pooling="cls",
               truncation=None):
  """The card's content as a dict. label_spec is a spec/labels.py LabelSpec; its kind,
  classes and output count are also shown at the top level, for readers."""
  return {
      "format": CARD_FORMAT, "version": CARD_VERSION, "task": task,
      "label_spec": label_spec.to_card(), "head": label_spec.kind,
      "labels": label_spec.classes, "label_columns": list(label_spec.columns),
      "num_outputs": label_spec.num_outputs, "pooling": pooling,
      "truncation": truncation or {"mode": "head"},
      "max_seq_length": max_seq_length,
      "do_lower_case": bool(do_lower_case), "vocab_file": vocab_file,
      "vocab_sha256": vocab_sha256, "bert_config": bert_config,
      "init_checkpoint": init_checkpoint, "hub_module": hub_module, "flags": flags,
  }


def to_json(card):
  return json.dumps(card, indent=2, sort_keys=True) + "\n"


def from_json(text, where):
  """Parses a card, checking it is one. Raises CardError naming where it came from."""
  try:
    card = json.loads(text)
  except ValueError as e:
    raise CardError("%s is not valid JSON (%s): delete it, or train again into a new "
                    "--output_dir" % (where, e))
  if not isinstance(card, dict) or card.get("format") != CARD_FORMAT:
    raise CardError("%s is not a model card of this project" % where)
  if card.get("version") == 1:
    return _upgraded_from_version_1(card)
  if card.get("version") != CARD_VERSION:
    raise CardError("%s has card version %r; this program reads versions 1 and %d"
                    % (where, card.get("version"), CARD_VERSION))
  return card


def _upgraded_from_version_1(card):
  """A version 1 card (a classification or a one-output regression head) in version 2's
  terms. Its label column was recorded only when a flag named it; otherwise
  label_columns is None (unknown: the task's default applies and is not checked)."""
  card = dict(card, version=CARD_VERSION, pooling="cls", truncation={"mode": "head"})
  # Version 1 read --label_column only for these tasks; others ignored the flag.
  column = (card.get("flags") or {}).get("label_column") if card["task"] in (
      "csv", "jigsaw_toxic") else None
  card["label_columns"] = [str(column)] if column is not None else None
  card["label_spec"] = {"kind": card["head"], "columns": card["label_columns"] or ["label"],
                        "classes": card.get("labels")}
  return card


def check_agrees(card, where, **settings):
  """Raises CardMismatch for the first setting given (not None) that differs from the card.

  Each setting is compared with the card's entry of the same name; the message
  names the flag, both values and the fix.
  """
  for name, value in sorted(settings.items()):
    if value is None:
      continue
    expected = card.get(name)
    if _normalised(value) != _normalised(expected):
      raise CardMismatch(
          "%s says %s=%s, but this run has %s. The model was trained with %s: drop the flag "
          "to use the model's own, or train a new model into another --output_dir"
          % (where, name, _shown(expected), _shown(value), _shown(expected)))


def _normalised(value):
  if isinstance(value, (list, tuple)):
    return [_normalised(v) for v in value]
  if isinstance(value, dict):
    return {k: _normalised(v) for k, v in value.items()}
  return value


def _shown(value):
  if isinstance(value, (list, tuple)):
    return ",".join(str(v) for v in value)
  if isinstance(value, dict):
    return json.dumps(value, sort_keys=True)
  return str(value)
