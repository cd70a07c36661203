"""The model card of a run's model: read from its folder, its settings taken where no
flag gives them, checked against the task, and written when training."""

import logging
import os

import tensorflow.compat.v1 as tf

from data import vocabulary
from data.files import read_written, write_whole
from data.processors import canonical_task_name, processor_class
from modeling.bert import BertConfig, BertConfigError
from modeling.checkpoint import head_shape
from pipeline import build, multi_device, eval_history
from spec import calibration, model_card
from spec.heads import from_card, options_of
from spec.run_errors import FlagError
from spec.model_card import LAYOUT_OPTIONS
from spec.thresholds import DEFAULT_THRESHOLD, listed

log = logging.getLogger(__name__)



def settle(c, cluster=None):
  """(the configuration this process runs, the model card of its model or None, the
  card's path or None): this task's part of a cluster's run, with the settings of the
  model where no flag gives them (the one place a model card's settings are applied to a
  run). The model's card is the one in --output_dir, else, for a fine-tuned
  --init_checkpoint, the one beside it: wherever a fine-tuned checkpoint is named, its
  card comes with it."""
  c = multi_device.for_this_task(c, cluster)
  card, where = read_model_card(c.outputs.output_dir), model_card.card_path(
      c.outputs.output_dir)
  if card is None and c.model.init_checkpoint and head_shape(c.model.init_checkpoint):
    folder = model_folder_of(c.model.init_checkpoint)
    card, where = read_model_card(folder, "--init_checkpoint"), model_card.card_path(folder)
  if card:
    c = apply_model_card(c, card, where)
  build.truncation_of(c.model)  # (refused here, before any work)
  build.windowing_of(c.model)
  return c, card, where if card else None


def model_folder_of(checkpoint):
  """The folder whose model card describes a fine-tuned checkpoint: its own, or for the
  best checkpoint kept in <output_dir>/best, that output folder's."""
  folder = os.path.dirname(checkpoint)
  if tf.io.gfile.exists(os.path.join(folder, eval_history.BEST_JSON)):
    return os.path.dirname(folder)
  return folder


def read_model_card(folder, flag="--output_dir"):
  """The model card in folder (the one flag names, or where it points), or None."""
  path = model_card.card_path(folder)
  try:
    text = read_written(path, "restore it, or train again into a new %s" % (
        "--output_dir" if flag == "--output_dir" else "folder"))
  except tf.errors.OpError as e:  # (the folder itself: a bucket out of reach, say)
    raise FlagError("%s=%s cannot be read (%s): check the path and your access to it"
                    % (flag, folder, e.message.splitlines()[0]))
  return None if text is None else model_card.from_json(text, path)


def apply_model_card(c, card, where=None):
  """The configuration with the model's settings from its card where no flag gives them;
  a flag that contradicts the card is a FlagError naming both values. where: the card's
  file, for messages (default: the one in --output_dir)."""
  where = where or model_card.card_path(c.outputs.output_dir)
  task = canonical_task_name(c.data.task_name or "") or c.data.task_name
  if not c.is_given("task_name"):
    c = c.replace(task_name=card["task"])
  elif not same_task_family(task, card["task"]):
    raise FlagError("%s says the model was trained for task %s, but this run has --task_name=%s."
                    " Drop the flag (or use --task_name=csv to read another file layout with "
                    "the model's labels), or train a new model into another --output_dir"
                    % (where, card["task"], c.data.task_name))
  c = _with_card_defaults(c, card)
  truncation_given = any(c.is_given(name) for name in (
      "truncation", "truncation_head_tokens", "doc_stride", "window_aggregation"))
  model_card.check_agrees(
      card, where, labels=c.if_given("labels"), pooling=c.if_given("pooling"),
      max_seq_length=c.if_given("max_seq_length"),
      truncation=build.reading_entry(c.model) if truncation_given else None,
      do_lower_case=c.if_given("do_lower_case"),
      hub_module=c.if_given("bert_hub_module_handle"))
  if c.is_given("bert_config_file") and tf.io.gfile.exists(c.model.bert_config_file):
    try:
      config = BertConfig.from_json_file(c.model.bert_config_file)
    except BertConfigError as e:
      raise FlagError("--bert_config_file=%s cannot be used: %s"
                      % (c.model.bert_config_file, e))
    model_card.check_agrees(card, where, bert_config=config.to_dict())
  if not c.is_given("labels") and card["labels"]:
    c = c.replace(labels=tuple(card["labels"]))
  c = _with_card_freezing(c, card, where)
  if not c.is_given("do_lower_case"):
    c = c.replace(do_lower_case=card["do_lower_case"])
  c = _with_card_vocabulary(c, card, where)
  if not c.is_given("bert_config_file") and not c.model.bert_hub_module_handle:
    c = c.replace(bert_config_file=None)  # build.bert_config_of takes the card's config
  if (canonical_task_name(c.data.task_name) or c.data.task_name) == card["task"] and \
      not c.is_given("xnli_language") and card["flags"].get("xnli_language"):
    c = c.replace(xnli_language=card["flags"]["xnli_language"])  # (the language it learnt)
  log.info("model card %s: task %s, %s, max_seq_length %d, do_lower_case=%s", where,
           card["task"], from_card(card["label_spec"]).describe(),
           card["max_seq_length"], card["do_lower_case"])
  return c


def _with_card_defaults(c, card):
  """The model's shape from the card: its hub module, sequence length, head, pooling,
  truncation and label columns, where no flag gives them."""
  # The head's outputs are the card's: its kind and, unless this run reads other files'
  # columns for them, its label columns.
  windows = card["truncation"].get("windows")
  changes = {name: value for name, value in (
      ("bert_hub_module_handle", card["hub_module"]), ("max_seq_length", card["max_seq_length"]),
      ("head", card["head"]), ("pooling", card["pooling"]),
      ("truncation", card["truncation"]["mode"]),
      ("truncation_head_tokens", card["truncation"].get("head_tokens")),
      ("doc_stride", windows["doc_stride"] if windows else 0))
             if not c.is_given(name)}
  if windows and not c.is_given("window_aggregation"):
    changes["window_aggregation"] = windows["aggregation"]
  if not card["hub_module"]:
    changes.pop("bert_hub_module_handle", None)
  if c.data.auxiliary_targets and card["label_columns"]:
    log.info("--auxiliary_targets: the model card lists the label columns (%s)",
             ", ".join(card["label_columns"]))
    changes["auxiliary_targets"] = False  # the card's columns already say which
  if not c.is_given("label_column") and card["label_columns"] and (
      _label_columns_name_outputs(card["task"]) or not reads_labels(c.modes)):
    # (A Jigsaw column names what an output means. A csv file's label column only says
    # where that file keeps its labels: a run that reads labels names its own file's, and
    # one that only predicts takes the card's names for its outputs.)
    changes["label_column"] = ",".join(card["label_columns"])
  return c.replace(**changes)


def reads_labels(modes):
  """Whether a run reads labels from its files (training or evaluating)."""
  return modes.do_train or modes.do_eval


def _label_columns_name_outputs(task):
  return processor_class(task).label_columns_name_outputs


def _with_card_vocabulary(c, card, where):
  """The card's vocabulary where no flag names one; a vocabulary that is not the model's
  is a FlagError."""
  if not c.is_given("vocab_file") and not card["hub_module"]:
    c = c.replace(vocab_file=card["vocab_file"])
    if not tf.io.gfile.exists(c.model.vocab_file):
      raise FlagError("%s names the vocabulary %s, which no longer exists: pass --vocab_file="
                      "<the same vocab.txt> (its sha256 must be %s)"
                      % (where, c.model.vocab_file, card["vocab_sha256"]))
  vocab_file = c.model.vocab_file
  if vocab_file and not tf.io.gfile.exists(vocab_file):
    raise FlagError("--vocab_file=%s does not exist" % vocab_file)
  if vocab_file and vocabulary.vocab_fingerprint(vocab_file) != card["vocab_sha256"]:
    raise FlagError("--vocab_file=%s is not the vocabulary the model was trained with (%s names "
                    "%s, sha256 %s): token ids would not mean what the model learnt. Pass the "
                    "model's own vocab.txt, or drop --vocab_file"
                    % (vocab_file, where, card["vocab_file"], card["vocab_sha256"]))
  return c


def _with_card_freezing(c, card, where):
  """A model trained with its encoder frozen has no optimizer state for the encoder: a run
  continuing it keeps it frozen (the card's setting where no flag gives one), and a flag
  that would train the encoder on from its checkpoint is refused."""
  frozen = bool((card.get("flags") or {}).get("freeze_encoder"))
  if not c.is_given("freeze_encoder"):
    return c.replace(freeze_encoder=frozen)
  if frozen and not c.model.freeze_encoder and c.modes.do_train:
    raise FlagError("%s says the model was trained with --freeze_encoder, so its checkpoint "
                    "holds no optimizer state for the encoder to train on: keep "
                    "--freeze_encoder, or fine-tune it whole into another --output_dir with "
                    "--init_checkpoint=<its checkpoint>" % where)
  return c


def same_task_family(task, trained_task):
  """Whether a model trained for trained_task may serve task: the same task, MNLI's matched
  and mismatched sets and GLUE's diagnostic pairs (AX, which an MNLI model predicts), or
  any task through csv (labels are checked separately)."""
  mnli = ("mnli", "mnli-mm", "ax")
  return (task == trained_task or "csv" in (task, trained_task) or
          (task in mnli and trained_task in mnli))


def check_matches_task(card, processor, where):
  """The task's head and labels must be the model's: the same kind, the same classes in
  the same order, and as many outputs; single texts or pairs as the model read them; and
  the same label columns where their names say
  what the outputs mean (a Jigsaw column), and in the same order wherever they are the
  card's names. Where they only say where a file keeps its labels (csv: the file's
  layout), another file may keep them in columns named otherwise.
  where: the card's file, for messages."""
  spec = processor.label_spec
  model_card.check_agrees(card, where, head=spec.kind, labels=spec.classes,
                          num_outputs=spec.num_outputs)
  model_card.check_text_pairs(card, where, processor.reads_pairs)
  if not card["label_columns"]:
    return
  # The same names in another order would name each output after another's column.
  same_names = set(spec.columns) == set(card["label_columns"])
  if same_names or (processor.label_columns_name_outputs and processor.name == card["task"]):
    model_card.check_agrees(card, where, label_columns=list(spec.columns))


def classes_source(card, where, given):
  """where, when the run's classes are the model card's (it lists them, and no --labels
  was given); else None."""
  return where if card and card["labels"] and "labels" not in given else None


def settle_head_options(card, label_spec, c, where):
  """The head's own options are the card's model's (an older card's are the defaults)
  where no flag gives them. A flag that gives another value is refused where the run
  scores or goes on training that model (its --output_dir's), so that a resumed training
  and a later evaluation learn and score as it did; a training that starts from the
  fine-tuned --init_checkpoint into a new folder trains by the flag. Returns the
  configuration with the values the head takes (as the run's card records its flags)."""
  if label_spec.options is None:
    return c
  recorded = options_of(label_spec, card["label_spec"].get("options") or {})
  new_model = c.modes.do_train and where != model_card.card_path(c.outputs.output_dir)
  values = {}
  for name in sorted(vars(recorded)):
    ours, theirs = getattr(label_spec.options, name), getattr(recorded, name)
    if c.is_given(name) and ours != theirs and not new_model:
      raise FlagError("--%s=%r contradicts %s: its model was trained with %s=%r. Drop the "
                      "flag (the card's value is used), or train a new model into another "
                      "--output_dir" % (name, ours, where, name, theirs))
    values[name] = ours if c.is_given(name) else theirs
  label_spec.options = type(recorded)(**values)
  return c.replace(**values)


def apply_card_reading(card, label_spec):
  """The card's temperature (--calibrate) scales label_spec's logits, and its tuned
  thresholds (--tune_thresholds) decide its labels."""
  entry = card["label_spec"]  # (checked when the card was read)
  if entry.get("temperature") is not None:
    label_spec.set_temperature(entry["temperature"])
    log.info("the head's logits are divided by the temperature the model card gives: %s",
             calibration.listed(label_spec.temperature))
  if entry.get("thresholds") is not None:
    label_spec.set_thresholds(entry["thresholds"])
    log.info("labels are decided at the thresholds the model card gives: %s",
             listed(label_spec.thresholds))


def carry_over(card, label_spec, trains):
  """A training run on a folder (or from a checkpoint) whose card has a temperature or
  tuned thresholds: they still read the outputs when no step is trained (trains False),
  and are dropped, saying so, when the model trains on."""
  entry = card["label_spec"]
  if not trains:
    apply_card_reading(card, label_spec)
    return
  if entry.get("temperature") is not None:
    log.warning("the model card's temperature (%s) was fitted to the model before this "
                "training: the model it trains is uncalibrated until it is calibrated again "
                "(--do_eval --calibrate)", calibration.listed(entry["temperature"]))
  if entry.get("thresholds"):
    log.warning("the model card's decision thresholds (%s) were tuned for the model before "
                "this training: the labels of the model it trains are decided at %g until "
                "they are tuned again (--do_eval --tune_thresholds)",
                listed(entry["thresholds"]), DEFAULT_THRESHOLD)


def record_label_spec(output_dir, label_spec, what="thresholds"):
  """Writes label_spec's fitted temperature and tuned thresholds into the folder's model
  card (none: a model this project did not train keeps its what in this run alone)."""
  found = read_model_card(output_dir)
  if found is None:
    log.warning("%s has no model card: the %s are in eval_results.json only", output_dir,
                "fitted temperature" if what == "temperature" else "tuned thresholds")
    return
  found["label_spec"] = label_spec.to_card()
  write_model_card(output_dir, found)


def write_model_card(output_dir, card):
  """Writes the card into output_dir, whole (workers of a cluster read it)."""
  path = model_card.card_path(output_dir)
  write_whole(path, model_card.to_json(card))
  log.info("wrote the model card %s", path)


def card_of_run(model, flags, processor, vocab_file, tokenizer, bert_config, training=None):
  """The model card of the model a run trains (or, without a card, exports): its task and
  labels, the ModelOptions it reads texts with, every option's value (flags), and what
  it was trained on (training: pipeline.state)."""
  return model_card.build_card(
      task=processor.name, label_spec=processor.label_spec, pooling=model.pooling,
      truncation=build.reading_entry(model),
      max_seq_length=model.max_seq_length, do_lower_case=tokenizer.do_lower_case,
      vocab_file=os.path.abspath(vocab_file) if "://" not in vocab_file else vocab_file,
      vocab_sha256=vocabulary.vocab_fingerprint(vocab_file),
      bert_config=bert_config.to_dict() if bert_config else None,
      init_checkpoint=model.init_checkpoint, hub_module=model.bert_hub_module_handle,
      flags={name: value for name, value in flags.items() if name not in LAYOUT_OPTIONS},
      text_pair=processor.reads_pairs, training=training)
