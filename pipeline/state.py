"""What a training run asks, against what its --output_dir already holds, before step 1.

A folder's model card records what its model was trained on (the batches, and each train
file with its sha256 and rows). A run that would continue that model must do so on the
same batches (a resumed input skips the examples the steps used), and on the same data
unless --continue_on_new_data says to go on with other data; a folder whose model has
reached its steps trains nothing more, and the log says so.
"""

import hashlib
import json
import logging

import tensorflow.compat.v1 as tf

from data.input_fn import length_grouping
from spec.run_errors import FlagError

log = logging.getLogger(__name__)


def training_state(training, input_stream, train_split, train_file, num_train_steps):
  """The card's "training" entry of a run that trains from scratch (spec/model_card.py
  TRAINING_FIELDS): its batch, steps and seed, how its records are read (input_stream),
  and its train file with what its rows hold."""
  return {"per_update": training.per_update(), "num_train_steps": num_train_steps,
          "seed": training.seed, "input": input_stream,
          "data": [{"file": train_file, "sha256": train_split.metadata["source_sha256"],
                    "examples": train_split.num_examples,
                    "train_fraction": training.train_fraction, "from_step": 0,
                    "rows": rows_fingerprint(train_split.metadata),
                    "class_weights": train_split.metadata.get("class_weights")}]}


# What the train rows hold, from the records' metadata: the file, how it is read (its
# columns, quoting, header), the labels and weights, and the tokenisation. The same file
# read with another label column is other data.
ROW_SETTINGS = ("task", "source_sha256", "columns", "label_spec", "weights_sha256",
                "truncation", "max_seq_length", "vocab_sha256", "do_lower_case",
                "train_fraction")


def rows_fingerprint(metadata):
  settings = {k: metadata.get(k) for k in ROW_SETTINGS}
  if metadata.get("row_range"):  # (--train_rows: other rows of the file are other data;
    settings["row_range"] = metadata["row_range"]  # absent, the fingerprint is as before)
  if metadata.get("class_weights") and not (metadata.get("label_spec") or {}).get("classes"):
    settings["class_weights"] = metadata["class_weights"]  # (a column head's: its records
    # do not hold them, as a classification head's weights_sha256 does)
  blob = json.dumps(settings, sort_keys=True)
  return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def input_stream(device, training, input_pipelines):
  """How a training run reads its train records (spec/model_card.py INPUT_FIELDS): the
  record shards, the input pipelines that share them (machines, TPU hosts), dynamic
  padding, whose length grouping makes batches of train_batch_size examples each, and the
  TensorFlow version, whose seeded shuffle orders them (1.15's and 2.15's differ)."""
  return {"record_shards": device.num_record_shards, "input_pipelines": input_pipelines,
          "dynamic_padding": bool(device.dynamic_padding),
          "length_grouping": length_grouping(device.dynamic_padding),
          "train_batch_size": training.train_batch_size,
          "tensorflow": ".".join(tf.__version__.split(".")[:2])}


# What makes a resumed input another stream: (its entry, how a message names it with a
# value, the fix).
STREAM_SETTINGS = (
    ("record_shards", "--num_record_shards=%s", "pass --num_record_shards as before"),
    ("input_pipelines", "%s input pipelines (TF_CONFIG's training tasks, or a TPU pod's "
     "hosts)", "resume on as many machines or TPU hosts as before"),
    ("dynamic_padding", "--dynamic_padding=%s", "pass --dynamic_padding as before"),
    ("length_grouping", "%s", "resume with the version of this project that "
     "trained those steps"),
    ("tensorflow", "TensorFlow %s", "resume with the TensorFlow version of those steps (the "
     "seeded shuffle differs between versions)"))
BATCH_SETTING = ("train_batch_size", "--train_batch_size=%s",
                 "pass --train_batch_size as before")


def continued_state(state, card, where, resumed_step, continue_on_new_data):
  """The training state to record for a run whose folder holds a model trained to
  resumed_step (0: none; card: its card, where: the card's path). A run that would
  continue the model on other batches is refused, and on other data unless
  continue_on_new_data; then the new file is recorded after the old ones, from the step it
  starts at. Returns the state, and the step the current data started at."""
  previous = card and card.get("training")
  if not resumed_step:
    return state, 0
  if previous is None:
    log.warning("%s does not record what its model was trained on (an older version of "
                "this project wrote it): resuming at step %d without checking that this "
                "run's data and batches are the same", where, resumed_step)
    return state, 0
  if previous["per_update"] != state["per_update"]:
    raise FlagError(
        "%s: its model was trained to step %d on batches of %d examples (train_batch_size "
        "x gradient_accumulation_steps), and this run has %d: the resumed input would skip "
        "%d examples where those steps trained on %d. Pass --train_batch_size (and "
        "--gradient_accumulation_steps) as before, or train a new model into another "
        "--output_dir" % (where, resumed_step, previous["per_update"], state["per_update"],
                          resumed_step * state["per_update"],
                          resumed_step * previous["per_update"]))
  trained_on, asked = previous["data"][-1], state["data"][0]
  if _same_data(trained_on, asked) and previous["seed"] == state["seed"]:
    state = dict(state, data=previous["data"], input=_check_same_stream(
        previous["input"], state["input"], where, resumed_step))
    if resumed_step >= state["num_train_steps"]:
      log.info("the model in the folder of %s has reached step %d of %d: there is nothing "
               "left to train (pass a larger --num_train_steps to train on)", where,
               resumed_step, state["num_train_steps"])
    return state, trained_on["from_step"]
  if not continue_on_new_data:
    raise FlagError(
        "%s: its model was trained to step %d on %s (sha256 %s..., %d rows%s), and this "
        "run's train file is %s (sha256 %s..., %d rows%s%s): it would go on training that "
        "model on other data. Pass --continue_on_new_data to do so (the card then lists "
        "both files), or train a new model into another --output_dir" % (
            where, resumed_step, trained_on["file"], trained_on["sha256"][:12],
            trained_on["examples"], _seed_note(previous["seed"]), asked["file"],
            asked["sha256"][:12], asked["examples"], _seed_note(state["seed"]),
            _read_otherwise(trained_on, asked)))
  log.info("--continue_on_new_data: the model trained to step %d on %s goes on from there "
           "on %s", resumed_step, trained_on["file"], asked["file"])
  state = dict(state, data=previous["data"] + [dict(asked, from_step=resumed_step)])
  return state, resumed_step


def _read_otherwise(trained_on, asked):
  """What differs in the same train file read again (a data entry each), for the refusal:
  the class weights, when they do (both given), else the kinds of setting that may."""
  if trained_on["sha256"] != asked["sha256"] or trained_on["rows"] is None or (
      trained_on["rows"] == asked["rows"]):
    return ""
  weights = trained_on.get("class_weights"), asked.get("class_weights")
  if weights[0] != weights[1]:
    return ", read otherwise: its class weights were %s, this run's are %s" % tuple(
        json.dumps(w, sort_keys=True) if w else "none" for w in weights)
  return ", read otherwise: its columns, labels, weights or tokenisation"


def _check_same_stream(trained, asked, where, resumed_step):
  """FlagError when the resumed input would read the records otherwise than the steps
  trained so far did: it would skip other examples than those they trained on. Returns
  the input entry to record: this run's, or None (unknown) when the card has none."""
  if trained is None:
    log.warning("%s does not record how its model's train records were read (an older "
                "version of this project wrote it, or it was edited): resuming at step %d "
                "without checking that this run reads them the same way", where,
                resumed_step)
    return None
  settings = STREAM_SETTINGS + ((BATCH_SETTING,) if trained["dynamic_padding"] else ())
  for name, named, fix in settings:
    if trained[name] != asked[name]:
      raise FlagError(
          "%s: its model was trained to step %d reading its records with %s, and this run "
          "has %s: the resumed input would not continue where those steps stopped (some "
          "rows would be trained on twice, others never). %s, or train a new model into "
          "another --output_dir" % (where, resumed_step, named % _value(trained[name]),
                                    _value(asked[name]), fix[0].upper() + fix[1:]))
  return asked


def _value(value):
  return str(value).lower() if isinstance(value, bool) else str(value)


def _same_data(trained_on, asked):
  """Whether the rows are the same: the file, read the same way (unknown for a card of
  version 3, which did not record it: the file alone then)."""
  return all(trained_on[k] == asked[k] for k in ("sha256", "examples", "train_fraction")) and (
      trained_on["rows"] is None or trained_on["rows"] == asked["rows"])


def _seed_note(seed):
  return ", --seed=%d" % seed
