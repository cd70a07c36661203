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

from spec.heads import SPECS, from_card
from spec.run_errors import FlagError

CARD_NAME = "model_card.json"
CARD_FORMAT = "bert-text-classifier-model-card"
# The card's versions, each read by a migration to the next:
#   1  the head's kind and its classes (labels)
#   2  label_spec: the head's kind, label columns and classes. Later cards of version 2
#      also record pooling and truncation (written before the version was raised)
#   3  pooling and truncation always; text_pair; training: the batches and the data the
#      model was trained on, which a resumed training must continue
#   4  training.input: how the train records were read (their shards, the input
#      pipelines, dynamic padding, the TensorFlow version), which a resumed input must
#      read the same way; and each train file's rows as read (training.data[].rows)
#   5  each train file's resolved --class_weights (training.data[].class_weights)
#   6  training.input.length_grouping: how dynamic padding grouped the examples by length
CARD_VERSION = 6
# How a file is laid out: always the run's own (its flags, else the task's defaults). A model
# reads files of any layout, so its card never records these, nor gives them to a run.
LAYOUT_OPTIONS = ("text_column", "text_b_column", "id_column", "has_header",
                  "train_has_header", "eval_has_header", "predict_has_header", "delimiter",
                  "quoting", "skip_malformed_rows")
# What the head may read, and which tokens of a long text are kept: settings a card records.
POOLINGS = ("cls", "mean")
TRUNCATION_MODES = ("head", "tail", "head_tail")
# How the outputs of a long text's windows (--doc_stride) become its row's: a card's
# truncation entry records them as {"windows": {"doc_stride": N, "aggregation": one}}.
WINDOW_AGGREGATIONS = ("mean", "max", "first")
# The tasks whose examples are pairs of texts (a csv task when it names --text_b_column).
PAIR_TASKS = ("mnli", "mnli-mm", "mrpc", "qqp", "rte", "sts-b")

# Every entry of a version 4 card and what its value is (None: may be null).
FIELDS = {
    "format": (str,), "version": (int,), "task": (str,), "label_spec": (dict,),
    "head": (str,), "labels": (list, None), "label_columns": (list, None),
    "num_outputs": (int,), "pooling": (str,), "truncation": (dict,),
    "max_seq_length": (int,), "do_lower_case": (bool,), "vocab_file": (str, None),
    "vocab_sha256": (str,), "bert_config": (dict, None), "init_checkpoint": (str, None),
    "hub_module": (str, None), "flags": (dict,), "text_pair": (bool,),
    "training": (dict, None),
}
# A training entry: the batch (examples per optimizer update), the steps asked for, the
# seed, and each train file in the order the model was trained on them.
TRAINING_FIELDS = {"per_update": (int,), "num_train_steps": (int,), "seed": (int,),
                   "data": (list,), "input": (dict, None)}
# How the train records were read: the examples a resumed training skips are those of this
# same stream (input is None for a card of version 3: not known).
INPUT_FIELDS = {"record_shards": (int,), "input_pipelines": (int,), "dynamic_padding": (bool,),
                "length_grouping": (str,), "train_batch_size": (int,), "tensorflow": (str,)}
# How versions 4 and 5 (which did not record it) grouped examples with dynamic padding, and
# a training without dynamic padding (data/input_fn.py names the grouping of today's).
BUCKETS_OF_16_TOKENS = "length buckets of 16 tokens"
NO_LENGTH_GROUPING = "none"
# rows: a fingerprint of what the file's rows held as read (its columns, labels, weights,
# tokenisation); null in a card of version 3 (not known). class_weights: the weight of each
# class, or of each label column's positives, that --class_weights gave its rows (null:
# none asked for, or a card of version 4 or before).
DATA_FIELDS = {"file": (str,), "sha256": (str,), "examples": (int,),
               "train_fraction": (float, int), "from_step": (int,), "rows": (str, None),
               "class_weights": (dict, None)}


class CardError(FlagError):
  """A model card that cannot be read: not JSON, not a card, a version this program does
  not know, or an entry missing or of the wrong kind."""


class CardMismatch(FlagError):
  """A setting of this run contradicts the model card; the message names both values."""


def card_path(output_dir):
  return os.path.join(output_dir, CARD_NAME)


def build_card(task, label_spec, max_seq_length, do_lower_case, vocab_file, vocab_sha256,
               bert_config, init_checkpoint, hub_module, flags, pooling="cls",
               truncation=None, text_pair=False, training=None):
  """The card's content as a dict. label_spec is a spec/labels.py LabelSpec; its kind,
  classes and output count are also shown at the top level, for readers. training: see
  TRAINING_FIELDS (None for a model this project did not train)."""
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
      "text_pair": bool(text_pair), "training": training,
  }


def to_json(card):
  return json.dumps(card, indent=2, sort_keys=True) + "\n"


def from_json(text, where):
  """Parses a card of any version this project has written, in the current version's terms.
  Raises CardError naming where it came from and what is wrong."""
  try:
    card = json.loads(text)
  except ValueError as e:
    raise CardError("%s is not valid JSON (%s): delete it, or train again into a new "
                    "--output_dir" % (where, e))
  if not isinstance(card, dict) or card.get("format") != CARD_FORMAT:
    raise CardError("%s is not a model card of this project" % where)
  version = card.get("version")
  if not isinstance(version, int) or isinstance(version, bool):  # (true == 1 in Python)
    raise CardError("%s: its version is %r, not a whole number: the file was edited; "
                    "restore the card, or train again into a new --output_dir"
                    % (where, version))
  if version not in MIGRATIONS and version != CARD_VERSION:
    raise CardError("%s has card version %r; this program reads versions 1 to %d (a newer "
                    "program wrote it: use that one)" % (where, version, CARD_VERSION))
  while card["version"] != CARD_VERSION:  # (each version's entries checked, then migrated)
    _check_entries(card, _FIELDS_OF_VERSION[card["version"]], where, "")
    card = MIGRATIONS[card["version"]](card, where)
  return _checked(card, where)


def _checked(card, where):
  """card, when every entry of the current version is there and of its kind, and what
  it shows twice (the head's kind, classes and columns, at the top level for readers) is
  the same in both places."""
  _check_entries(card, FIELDS, where, "")
  spec = card["label_spec"]
  for name, shown in (("head", spec.get("kind")), ("labels", spec.get("classes")),
                      ("label_columns", spec.get("columns"))):
    if card[name] != shown and not (name == "label_columns" and card[name] is None):
      raise CardError("%s contradicts itself: %s is %s, and label_spec says %s (the file was "
                      "edited): restore the card, or train again into a new --output_dir"
                      % (where, name, json.dumps(card[name]), json.dumps(shown)))
  if card["head"] in SPECS and SPECS[card["head"]].has_classes and not card["labels"]:
    raise CardError("%s: a classification head's card lists no classes (labels is %s): "
                    "restore the card, or train again into a new --output_dir"
                    % (where, json.dumps(card["labels"])))
  for name, flag in (("thresholds", "--tune_thresholds"), ("temperature", "--calibrate")):
    if spec.get(name) is not None:  # (how a head's outputs are read: each a number)
      try:  # (each read alone, so that the message names the one that is wrong)
        from_card({k: v for k, v in spec.items() if k in ("kind", "columns", "classes", name)})
      except FlagError as error:
        raise CardError("%s: label_spec's %s: %s (the file was edited): restore the card, "
                        "or %s again with --do_eval %s" % (
                            where, name, error, "tune" if name == "thresholds" else
                            "calibrate", flag))
  if spec.get("options") is not None:  # (how the head was trained: its own options)
    try:
      if not isinstance(spec["options"], dict):
        raise FlagError("%s is no object of option values" % json.dumps(spec["options"]))
      from_card({k: v for k, v in spec.items() if k in ("kind", "columns", "classes",
                                                        "options")})
    except FlagError as error:
      raise CardError("%s: label_spec's options: %s (the file was edited): restore the card, "
                      "or train again into a new --output_dir" % (where, error))
  _check_windows(card, where)
  if card["training"] is not None:
    _check_entries(card["training"], TRAINING_FIELDS, where, "training.")
    for i, entry in enumerate(card["training"]["data"]):
      _check_entries(entry, DATA_FIELDS, where, "training.data[%d]." % i)
      _check_class_weights(entry["class_weights"], spec, where, i)
    if card["training"]["input"] is not None:
      _check_entries(card["training"]["input"], INPUT_FIELDS, where, "training.input.")
  return card


def _check_windows(card, where):
  """The truncation entry's windows: absent or null, or a doc_stride from 1 to
  max_seq_length - 2 and an aggregation of WINDOW_AGGREGATIONS."""
  windows = card["truncation"].get("windows")
  if windows is None:
    return
  stride = windows.get("doc_stride") if isinstance(windows, dict) else None
  if not (isinstance(stride, int) and not isinstance(stride, bool) and
          1 <= stride <= card["max_seq_length"] - 2 and
          windows.get("aggregation") in WINDOW_AGGREGATIONS and len(windows) == 2):
    raise CardError("%s: truncation.windows is %s, not a doc_stride from 1 to %d and an "
                    "aggregation of %s (the file was edited): restore the card, or train "
                    "again into a new --output_dir" % (
                        where, json.dumps(windows, sort_keys=True),
                        card["max_seq_length"] - 2, ", ".join(WINDOW_AGGREGATIONS)))


def _check_class_weights(weights, spec, where, i):
  """A data entry's class weights: null, or a positive finite number for each of the
  head's classes (or label columns), and nothing else."""
  if weights is None:
    return
  names = spec.get("classes") or spec.get("columns") or []
  if sorted(weights) != sorted(str(n) for n in names) or not all(
      isinstance(w, (int, float)) and not isinstance(w, bool) and 0 < w < float("inf")
      for w in weights.values()):
    raise CardError("%s: training.data[%d].class_weights is %s, not a positive number for "
                    "each of %s (the file was edited): restore the card, or train again "
                    "into a new --output_dir" % (where, i, json.dumps(weights, sort_keys=True),
                                                 ", ".join(str(n) for n in names)))


# The least value of a card's whole-number entries (wherever they appear): a card edited
# to hold less would be used (a max_seq_length of -1 failed on the first text).
MINIMUMS = {"max_seq_length": 3, "num_outputs": 1, "per_update": 1, "num_train_steps": 0,
            "examples": 1, "from_step": 0, "record_shards": 1, "input_pipelines": 1,
            "train_batch_size": 1}


def _check_entries(values, fields, where, prefix):
  if not isinstance(values, dict):
    raise CardError("%s: %s is not an object" % (where, prefix.rstrip(".") or "the card"))
  for name, kinds in sorted(fields.items()):
    if name not in values:
      raise CardError("%s has no entry %s%s (its version, %s, has one): the file was cut "
                      "or edited; train again into a new --output_dir, or restore the card"
                      % (where, prefix, name, values.get("version", CARD_VERSION)))
    value = values[name]
    if not (value is None and None in kinds or isinstance(value, tuple(
        k for k in kinds if k is not None)) and not (isinstance(value, bool) and
                                                     bool not in kinds)):
      raise CardError("%s: %s%s is %r, which is not %s" % (
          where, prefix, name, value, " or ".join("null" if k is None else k.__name__
                                                  for k in kinds)))
    least = MINIMUMS.get(name)
    if least is not None and isinstance(value, int) and value < least or (
        value == [] and name == "data"):
      raise CardError("%s: %s%s is %r, which no model of this project has (%s): the file "
                      "was edited; restore the card, or train again into a new --output_dir"
                      % (where, prefix, name, value, "at least %d" % least if least is not None
                                                     else "a train file at least"))


def _version_1_to_2(card, where):
  """A version 1 card (a classification or a one-output regression head) in version 2's
  terms. Its label column was recorded only when a flag named it; otherwise
  label_columns is None (unknown: the task's default applies and is not checked)."""
  card = dict(card, version=2)
  # Version 1 read --label_column only for these tasks; others ignored the flag.
  column = (card.get("flags") or {}).get("label_column") if card["task"] in (
      "csv", "jigsaw_toxic") else None
  card["label_columns"] = [str(column)] if column is not None else None
  card["label_spec"] = {"kind": card["head"], "columns": card["label_columns"] or ["label"],
                        "classes": card.get("labels")}
  return card


def _version_2_to_3(card, where):
  """A version 2 card in version 3's terms: the first ones had no pooling or truncation
  (then BERT's pooled [CLS] and the first tokens), and none records whether its examples
  were pairs (its task says, or --text_b_column) or what it was trained on (unknown: a
  resumed training is not checked against it, and the log says so)."""
  flags = card.get("flags") or {}
  return dict(card, version=3, pooling=card.get("pooling", "cls"),
              truncation=card.get("truncation", {"mode": "head"}),
              text_pair=card["task"] in PAIR_TASKS or bool(flags.get("text_b_column")),
              training=None)


def _version_3_to_4(card, where):
  """A version 3 card in version 4's terms: how its train records were read is not known
  (a resumed training is not checked against it, and the log says so)."""
  training = card["training"]
  if training is not None:
    _check_entries(training, {k: v for k, v in TRAINING_FIELDS.items() if k != "input"},
                   where, "training.")
    training = dict(training, input=None, data=[
        dict(entry, rows=None) if isinstance(entry, dict) else entry
        for entry in training["data"]])
  return dict(card, version=4, training=training)


def _version_4_to_5(card, where):
  """A version 4 card in version 5's terms: its train files' class weights are not
  recorded (null)."""
  training = card["training"]
  if isinstance(training, dict) and isinstance(training.get("data"), list):
    training = dict(training, data=[
        dict(entry, class_weights=None) if isinstance(entry, dict) else entry
        for entry in training["data"]])
  return dict(card, version=5, training=training)


def _version_5_to_6(card, where):
  """A version 5 card in version 6's terms: with dynamic padding, its training grouped the
  examples into length buckets of 16 tokens (BUCKETS_OF_16_TOKENS), else not at all."""
  training = card["training"]
  if isinstance(training, dict) and isinstance(training.get("input"), dict):
    stream = training["input"]
    grouping = (BUCKETS_OF_16_TOKENS if stream.get("dynamic_padding") is True
                else NO_LENGTH_GROUPING)
    training = dict(training, input=dict(stream, length_grouping=grouping))
  return dict(card, version=6, training=training)


MIGRATIONS = {1: _version_1_to_2, 2: _version_2_to_3, 3: _version_3_to_4, 4: _version_4_to_5,
              5: _version_5_to_6}
# What each version's migration reads.
_FIELDS_OF_VERSION = {
    1: {name: FIELDS[name] for name in ("task", "head", "labels", "max_seq_length",
                                        "do_lower_case", "vocab_file", "vocab_sha256",
                                        "bert_config", "flags")},
    2: {name: FIELDS[name] for name in ("task", "label_spec", "head", "labels",
                                        "label_columns", "max_seq_length", "do_lower_case",
                                        "vocab_file", "vocab_sha256", "bert_config",
                                        "flags")},
    3: FIELDS,
    4: FIELDS,
    5: FIELDS,
}


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


def check_text_pairs(card, where, reads_pairs):
  """Raises CardMismatch when a run reads pairs of texts for a model trained on single
  texts, or single texts for one trained on pairs: the second segment would be missing, or
  one the model never saw."""
  if bool(reads_pairs) == card["text_pair"]:
    return
  if card["text_pair"]:
    raise CardMismatch("%s says the model reads pairs of texts (task %s), but this run reads "
                       "single texts: name the file's second text with --text_b_column (or "
                       "use the model's task)" % (where, card["task"]))
  raise CardMismatch("%s says the model reads single texts (task %s), but this run reads "
                     "pairs of texts: drop --text_b_column, or train a model on pairs into "
                     "another --output_dir" % (where, card["task"]))


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
