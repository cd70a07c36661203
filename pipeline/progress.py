"""Progress lines: a training hook that reports step, loss, examples/sec and time left, on any
device, and a rate report for other long work (prediction)."""

import logging
import time

import tensorflow.compat.v1 as tf

log = logging.getLogger(__name__)


def format_seconds(seconds):
  seconds = int(round(seconds))
  if seconds >= 3600:
    return "%dh%02dm" % (seconds // 3600, seconds % 3600 // 60)
  if seconds >= 60:
    return "%dm%02ds" % (seconds // 60, seconds % 60)
  return "%ds" % seconds


class ProgressHook(tf.train.SessionRunHook):
  """Logs progress every `every_steps` steps.

  The loss is read from the tensor named loss_tensor_name when fetch_loss is set
  (not on TPU, where the loss lives on the device and TPUEstimator reports it).
  Rates are measured from the end of the first step, so graph building and the
  first step's compilation are not counted as training time.
  """

  def __init__(self, total_steps, batch_size, every_steps=10, loss_tensor_name=None,
               fetch_loss=True, report=None, step_after_run=False):
    self.total_steps = total_steps
    # On a TPU one run is a loop of many steps, and a step fetched with it may be read
    # before the loop: the step is then read after each run.
    self.step_after_run = step_after_run
    self.batch_size = batch_size
    self.every_steps = max(1, every_steps)
    self.loss_tensor_name = loss_tensor_name
    self.fetch_loss = fetch_loss
    self.report = report or log.info
    self.history = []  # (step, loss, examples_per_sec) at each report
    self.losses = []  # (step, loss) of every step whose loss was fetched
    self.train_started = None  # the caller's time.time() when it called train()
    # One per train() call (periodic evaluation trains in several): the start-up seconds
    # (train() to the end of its first step) and the steady window after it.
    self.startups = []
    self.windows = []  # (first_step, first_time, last_step, last_time)
    self.start_step = None  # the global step this process's training began at (the caller's)
    self._reset_window()

  def _reset_window(self):
    # The steady-state window: from the end of the first step seen to the last one.
    self.first_step = self.first_step_time = None
    self.last_step = self.last_step_time = None

  def begin(self):
    self._global_step = tf.train.get_global_step()
    self._loss = None
    if self.fetch_loss and self.loss_tensor_name:
      try:
        self._loss = tf.get_default_graph().get_tensor_by_name(self.loss_tensor_name + ":0")
      except KeyError:
        self._loss = None
    self._window_losses = []
    self._window_start = None
    self._reset_window()

  def before_run(self, run_context):
    fetches = {"step": self._global_step}
    if self._loss is not None:
      fetches["loss"] = self._loss
    return tf.train.SessionRunArgs(fetches)

  def after_run(self, run_context, run_values):
    if self.step_after_run:
      step = int(run_context.session.run(self._global_step))
    else:
      step = int(run_values.results["step"]) + 1  # (read before this step's increment)
    now = time.time()
    if "loss" in run_values.results:
      loss = float(run_values.results["loss"])
      self._window_losses.append(loss)
      self.losses.append((step, loss))
    self.last_step, self.last_step_time = step, now
    if self.first_step is None:
      self.first_step, self.first_step_time = step, now
      if self.train_started is not None:
        self.startups.append(now - self.train_started)
      self._window_start = (step, now)
      self._window_losses = []
      return
    if step - self._window_start[0] >= self.every_steps or step >= self.total_steps:
      self._log(step, now)

  def end(self, session):
    if self.first_step is not None and self.last_step > self.first_step:
      self.windows.append((self.first_step, self.first_step_time, self.last_step,
                           self.last_step_time))

  def _log(self, step, now):
    window_steps = step - self._window_start[0]
    rate = window_steps * self.batch_size / max(now - self._window_start[1], 1e-9)
    overall = (step - self.first_step) / max(now - self.first_step_time, 1e-9)
    eta = (self.total_steps - step) / overall if overall > 0 else 0.0
    loss = (sum(self._window_losses) / len(self._window_losses)) if self._window_losses else None
    self.history.append((step, loss, rate))
    self.report("step %d/%d  loss %s  %.1f examples/sec  ETA %s" % (
        step, self.total_steps, "%.4f" % loss if loss is not None else "n/a (on TPU)", rate,
        format_seconds(eta)))
    self._window_start = (step, now)
    self._window_losses = []

  def measured(self):
    """(steps, seconds) of the steady windows of every train() call so far."""
    steps = sum(last - first for first, _, last, _ in self.windows)
    seconds = sum(t_last - t_first for _, t_first, _, t_last in self.windows)
    return steps, seconds

  def steady_examples_per_second(self):
    """Examples/sec after each train() call's first step (None with no such step)."""
    steps, seconds = self.measured()
    if steps <= 0:
      return None
    return steps * self.batch_size / max(seconds, 1e-9)

  def mean_loss_between(self, after_step, up_to_step):
    """The mean fetched loss of the steps in (after_step, up_to_step], or None."""
    values = [loss for step, loss in self.losses if after_step < step <= up_to_step]
    return sum(values) / len(values) if values else None


class RateReport(object):
  """A progress line every `every` seconds for long work of a known size: report(done)
  after each item logs "<verb> 1200/97320 rows (640 rows/s, about 2m32s left)" when a
  line is due."""

  def __init__(self, verb, total, every=30.0, clock=time.time, report=None):
    self.verb, self.total, self.every, self.clock = verb, total, every, clock
    self.report = report or log.info
    self.started = self.last = clock()

  def __call__(self, done):
    now = self.clock()
    if now - self.last < self.every or done >= self.total:
      return
    self.last = now
    rate = done / max(now - self.started, 1e-9)
    self.report("%s %d/%d rows (%.0f rows/s, about %s left)" % (
        self.verb, done, self.total, rate, format_seconds((self.total - done) / rate)))
