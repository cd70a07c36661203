"""Training one model: to the last step, or in stretches with an evaluation after each
(--eval_every_steps), keeping the best checkpoint and stopping early when asked. A run
started again continues from the newest checkpoint, its input stream after the examples
those steps used."""

import logging
import os
import time

import tensorflow.compat.v1 as tf

from data.files import write_whole
from modeling.checkpoint import checkpoint_global_step
from modeling.model_fn import TRAIN_LOSS_NAME
from modeling.summaries import scalar_events
from pipeline import eval_history, stopping
from pipeline.evaluation import NOT_METRICS, format_metric, metric_names_of
from pipeline.outputs import timed
from pipeline.progress import ProgressHook, format_seconds
from spec.run_errors import FlagError

log = logging.getLogger(__name__)


class Trainer(object):
  """Trains a model's train split with its estimator in output_dir to num_train_steps,
  as the TrainingOptions say (batch, accumulation, logging, evaluations during training).
  fetch_loss: each step's loss is readable (not on a TPU, where it stays on the device).
  data_from_step: the step at which the model began training on this split's data (0, or
  where --continue_on_new_data went on with it): a resumed input skips the examples of
  the steps since then. saver_hooks: what saves its checkpoints in place of the
  Estimator's own saver (modeling.estimator.checkpoint_hooks)."""

  def __init__(self, estimator, split, training, output_dir, num_train_steps, fetch_loss=True,
               data_from_step=0, saver_hooks=()):
    self.estimator, self.split, self.training = estimator, split, training
    self.output_dir, self.num_train_steps = output_dir, num_train_steps
    self.fetch_loss, self.data_from_step = fetch_loss, data_from_step
    self.saver_hooks = list(saver_hooks)
    self.progress = None  # the ProgressHook, carried from one train() call to the next

  def train(self, seconds, evaluator=None, dev_split=None):
    """Trains to the last step (with evaluations when --eval_every_steps asks, each by
    evaluator on dev_split). Returns (the checkpoint that later modes use: the best with
    --best_metric, else the last; the eval results of that checkpoint when it was the last
    evaluated, else None)."""
    if self.training.eval_every_steps:
      return self.train_with_evaluations(evaluator, dev_split, seconds)
    with timed(seconds, "training"):
      self.train_to(self.num_train_steps)
    return tf.train.latest_checkpoint(self.output_dir), None

  def train_to(self, until_step):
    """Trains from the newest checkpoint in output_dir to until_step, continuing the input
    stream after the examples its steps used."""
    per_update = self.training.per_update()
    start_step = resumed_step(self.output_dir)
    if self.progress is None:
      log.info("training: %d examples, batch %d, %d steps", self.split.num_examples,
               per_update, self.num_train_steps)
      if 0 < start_step < self.num_train_steps:
        trained_on = (start_step - self.data_from_step) * per_update
        log.info("resuming from the checkpoint at step %d of %d: the input continues after "
                 "the %d examples those steps trained on (epoch %.2f)%s", start_step,
                 self.num_train_steps, trained_on, trained_on / float(self.split.num_examples),
                 " of this train file, which it began at step %d" % self.data_from_step
                 if self.data_from_step else "")
      self.progress = ProgressHook(self.num_train_steps, per_update,
                                   self.training.log_every_steps,
                                   loss_tensor_name=TRAIN_LOSS_NAME, fetch_loss=self.fetch_loss,
                                   report=log.info, step_after_run=not self.fetch_loss)
      self.progress.start_step = start_step
    input_fn = self.split.input_fn(
        is_training=True, skip_examples=max(0, start_step - self.data_from_step) * per_update)
    self.progress.train_started = time.time()
    if start_step < until_step:
      try:
        self.estimator.train(input_fn=input_fn, max_steps=until_step,
                             hooks=[self.progress, stopping.session_hook()] +
                             self.saver_hooks)
      except tf.train.NanLossDuringTrainingError:
        raise FlagError(
            "training diverged: the loss became NaN before step %d (the checkpoints kept in "
            "%s are from before it). Lower --learning_rate (or raise --warmup_proportion), "
            "and check that the train file's targets and weights are of a sensible size"
            % (until_step, self.output_dir))
      stopping.check()  # (a signal ended the loop after its step's checkpoint)
      log.info("trained to step %d in %s", until_step,
               format_seconds(time.time() - self.progress.train_started))

  def train_with_evaluations(self, evaluator, dev_split, seconds):
    """--eval_every_steps: training to each multiple of N steps (and to the end), each
    followed by an evaluation of its checkpoint; on a TPU, alternating training and
    evaluation loops. Every evaluation is a row of eval_history.csv; --best_metric keeps
    the best checkpoint in <output_dir>/best, and --early_stopping_patience stops when that
    many evaluations in a row have not improved on it. A re-run of the command continues
    where the history and the newest checkpoint stand."""
    training, output_dir = self.training, self.output_dir
    goal = eval_history.Goal(training.best_metric) if training.best_metric else None
    history = eval_history.EvalHistory.load(
        os.path.join(output_dir, eval_history.HISTORY_CSV), resumed_step(output_dir),
        needs=goal and goal.metric)
    if history.rows:
      log.info("%d evaluations in %s so far (up to step %d)", len(history.rows), history.path,
               history.steps()[-1])
    seconds.setdefault("training", 0.0)
    seconds.setdefault("eval", 0.0)
    before = {"training": history.last("train_seconds_so_far", 0.0),
              "eval": history.last("eval_seconds_so_far", 0.0)}
    last_results = None
    while True:
      step = resumed_step(output_dir)
      due = step % training.eval_every_steps == 0 or step >= self.num_train_steps
      if step and due and step not in history.steps():
        last_results = self.evaluate_at(evaluator, dev_split, step, history, goal, seconds,
                                        before)
      if step >= self.num_train_steps:
        break
      if goal and training.early_stopping_patience and (
          history.evaluations_since_best(goal) >= training.early_stopping_patience):
        refuse_undefined_goal(history, goal)
        best = history.best_row(goal)
        log.info("early stopping at step %d of %d: %s has not improved for %d evaluations "
                 "(best %s at step %s)", step, self.num_train_steps, goal.metric,
                 history.evaluations_since_best(goal),
                 best and format_metric(best[goal.metric]), best and best["step"])
        break
      until = min(self.num_train_steps,
                  (step // training.eval_every_steps + 1) * training.eval_every_steps)
      started = time.time()
      self.train_to(until)
      seconds["training"] += time.time() - started
      if resumed_step(output_dir) <= step:  # never loop on a training that cannot advance
        raise RuntimeError("training from step %d to %d saved no later checkpoint in %s" % (
            step, until, output_dir))
    draw_learning_curve(output_dir, history, goal)
    latest = tf.train.latest_checkpoint(output_dir)
    if goal:
      refuse_undefined_goal(history, goal)
      kept = eval_history.read_best(output_dir)
      if kept is not None:
        log.info("the best checkpoint by %s: %s at step %d (%s); eval, predict and export use "
                 "it", goal.describe(), format_metric(kept["value"]), kept["step"],
                 kept["checkpoint"])
        if kept["step"] != checkpoint_global_step(latest):
          return kept["checkpoint"], None
    return latest, last_results

  def evaluate_at(self, evaluator, dev_split, step, history, goal, seconds, seconds_before):
    """Evaluates the checkpoint at step, appends its row to the history, and keeps it when
    it is the best so far. Returns its eval results."""
    checkpoint = tf.train.latest_checkpoint(self.output_dir)
    started = time.time()
    results = evaluator.evaluate(dev_split, checkpoint)
    seconds["eval"] += time.time() - started
    previous = history.steps()[-1] if history.rows else 0
    train_loss = self.progress.mean_loss_between(previous, step) if self.progress else None
    if train_loss is None:  # on a TPU (or when resumed right here): the summaries' losses
      losses = [v for s, v in scalar_events(self.output_dir, "loss") if previous < s <= step]
      train_loss = sum(losses) / len(losses) if losses else None
    row = {k: v for k, v in results.items() if k not in NOT_METRICS}
    is_best = False
    if goal:
      is_best = goal.improves(results.get(goal.metric), history.best_value(goal))
      if results.get(goal.metric) is None:
        log.warning("eval at step %d: %s is undefined, so this checkpoint cannot be the best",
                    step, goal.metric)
      if is_best:
        kept = eval_history.keep_best(checkpoint, self.output_dir, goal, results[goal.metric],
                                      step)
        log.info("new best %s = %s at step %d, kept as %s", goal.metric,
                 format_metric(results[goal.metric]), step, kept)
    # (so far: this command's seconds after those of the commands before it, on a resume)
    row.update(step=step, train_loss=train_loss, best=int(is_best), checkpoint=checkpoint,
               train_seconds_so_far=seconds["training"] + seconds_before["training"],
               eval_seconds_so_far=seconds["eval"] + seconds_before["eval"])
    history.append(row)
    return results


def refuse_undefined_goal(history, goal):
  """FlagError when no evaluation so far has given a value of the metric that chooses the
  best checkpoint (an AUC on a dev split of one class, say): early stopping would stop on
  nothing, and no checkpoint could be called the best."""
  if history.rows and history.best_row(goal) is None:
    raise FlagError(
        "--best_metric=%s was undefined at all %d evaluations up to step %d (an AUC, say, "
        "on a dev split whose rows are all of one class), so no checkpoint can be chosen "
        "by it. Fix: choose a metric this dev split defines (--best_metric=loss), or give "
        "a dev file with rows of every class; the checkpoints so far are kept in %s"
        % (goal.metric, len(history.rows), history.steps()[-1],
           os.path.dirname(history.path)))


def check_best_metric(best_metric, output_dir, task, dev_examples):
  """--best_metric names a metric of this run's evaluation, and an output_dir that already
  keeps a best checkpoint keeps it by the same metric."""
  if best_metric:
    names = metric_names_of(task, dev_examples)
    if best_metric not in names:
      raise FlagError("--best_metric=%s is not a metric of this run's evaluation (%s head); "
                      "choose one of: %s" % (best_metric, task.processor.label_spec.kind,
                                              ", ".join(names)))
  kept = eval_history.read_best(output_dir)
  if kept and kept["metric"] != best_metric:
    raise FlagError(
        "%s keeps the best checkpoint by --best_metric=%s (step %d), and this run %s. Pass "
        "--best_metric=%s --eval_every_steps=N to go on with that run, or use a new "
        "--output_dir" % (eval_history.best_dir(output_dir), kept["metric"], kept["step"],
                          "chooses by %s" % best_metric if best_metric else "keeps none",
                          kept["metric"]))


def draw_learning_curve(output_dir, history, goal):
  """learning_curve.png: the history's training and eval loss (and the chosen metric)
  against step."""
  if not history.rows:
    return
  metric = goal.metric if goal else "loss"
  png = eval_history.learning_curve_png(history.rows, metric)
  path = os.path.join(output_dir, eval_history.CURVE_PNG)
  write_whole(path, png)
  log.info("%d evaluations in %s; learning curve in %s", len(history.rows), history.path, path)


def resumed_step(output_dir):
  """The global step of the newest checkpoint in output_dir (0 when there is none): where
  Estimator.train continues."""
  latest = tf.train.latest_checkpoint(output_dir)
  return (checkpoint_global_step(latest) or 0) if latest else 0


def newest_step(output_dir):
  """The step of the newest checkpoint in output_dir, or None (none, no folder, or one
  that cannot be read: for a stopped run's last line, which must not fail)."""
  try:
    return resumed_step(output_dir) or None if output_dir else None
  except Exception:  # pylint: disable=broad-except
    return None


def evaluate_checkpoints(estimator, dev_split, output_dir, num_train_steps):
  """The evaluator task of a multi-worker run: evaluates each checkpoint the chief saves,
  for TensorBoard (<output_dir>/eval_evaluator), until the last. Returns the last one's
  step."""
  log.info("evaluating each new checkpoint in %s on %d dev examples, until step %d",
           output_dir, len(dev_split.examples), num_train_steps)
  estimator.evaluate_checkpoints(dev_split.input_fn(), num_train_steps)
  step = checkpoint_global_step(tf.train.latest_checkpoint(output_dir))
  log.info("the evaluator has evaluated the checkpoints up to step %s", step)
  return step
