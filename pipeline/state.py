"""What a training run asks, against what its --output_dir already holds, before step 1.

A folder's model card records what its model was trained on (the batches, and each train
file with its sha256 and rows). A run that would continue that model must do so on the
same batches (a resumed input skips the examples the steps used), and on the same data
unless --continue_on_new_data says to go on with other data; a folder whose model has
reached its steps trains nothing more, and the log says so.
"""

import logging

from spec.errors import FlagError

log = logging.getLogger(__name__)


def training_state(training, train_split, train_file, num_train_steps):
  """The card's "training" entry of a run that trains from scratch (spec/model_card.py
  TRAINING_FIELDS): its batch, steps and seed, and its train file."""
  return {"per_update": training.per_update(), "num_train_steps": num_train_steps,
          "seed": training.seed,
          "data": [{"file": train_file, "sha256": train_split.metadata["source_sha256"],
                    "examples": len(train_split.examples),
                    "train_fraction": training.train_fraction, "from_step": 0}]}


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
    state = dict(state, data=previous["data"])
    if resumed_step >= state["num_train_steps"]:
      log.info("the model in the folder of %s has reached step %d of %d: there is nothing "
               "left to train (pass a larger --num_train_steps to train on)", where,
               resumed_step, state["num_train_steps"])
    return state, trained_on["from_step"]
  if not continue_on_new_data:
    raise FlagError(
        "%s: its model was trained to step %d on %s (sha256 %s..., %d rows%s), and this "
        "run's train file is %s (sha256 %s..., %d rows%s): it would go on training that "
        "model on other data. Pass --continue_on_new_data to do so (the card then lists "
        "both files), or train a new model into another --output_dir" % (
            where, resumed_step, trained_on["file"], trained_on["sha256"][:12],
            trained_on["examples"], _seed_note(previous["seed"]), asked["file"],
            asked["sha256"][:12], asked["examples"], _seed_note(state["seed"])))
  log.info("--continue_on_new_data: the model trained to step %d on %s goes on from there "
           "on %s", resumed_step, trained_on["file"], asked["file"])
  state = dict(state, data=previous["data"] + [dict(asked, from_step=resumed_step)])
  return state, resumed_step


def _same_data(trained_on, asked):
  return all(trained_on[k] == asked[k] for k in ("sha256", "examples", "train_fraction"))


def _seed_note(seed):
  return ", --seed=%d" % seed
