"""A run stopped by a signal (SIGTERM from a scheduler, SIGINT from Ctrl-C): the stop is
raised in the main thread as RunStopped, so every clean-up on the way out runs (staging
files removed, the training lock released, no export half-moved into place), and the run
ends with one line that names the signal, the phase it struck in, and how to go on.

  stop_on_signals()          in the entry point, before the run
  with phase("training"):    what the run is doing (pipeline.outputs.timed sets it)
"""

import contextlib
import signal

# The signals that stop a run, and the exit code of each (128 + its number, as a shell
# reports a process a signal ended).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_PHASE = ["start-up"]


class RunStopped(BaseException):
  """A signal asked the run to stop. Like KeyboardInterrupt (a BaseException), it passes
  the project's `except Exception` handlers on its way out."""

  def __init__(self, signum):
    super(RunStopped, self).__init__(signum)
    self.signum = signum
    self.phase = _PHASE[0]

  @property
  def name(self):
    return signal.Signals(self.signum).name

  @property
  def exit_code(self):
    return 128 + self.signum


def stop_on_signals():
  """Makes SIGTERM and SIGINT raise RunStopped in the main thread. (A signal that comes
  while TensorFlow runs a step takes effect when the step returns.)"""
  def stop(signum, frame):
    del frame
    raise RunStopped(signum)
  for number in STOP_SIGNALS:
    signal.signal(number, stop)


@contextlib.contextmanager
def phase(name):
  """with phase("training"): what RunStopped reports the run was doing."""
  before = _PHASE[0]
  _PHASE[0] = name
  try:
    yield
  finally:
    _PHASE[0] = before


def how_to_go_on(stopped, newest_step=None, last_step=None):
  """The line a stopped run ends with: what stopped it, where, and how to go on."""
  where = "during %s" % stopped.phase
  if stopped.phase == "training" and newest_step is not None:
    where += " (its newest checkpoint is at step %d%s)" % (
        newest_step, " of %d" % last_step if last_step else "")
    again = "run the same command again to resume training from that checkpoint"
  elif stopped.phase == "training":
    again = "run the same command again: training starts again (no checkpoint was saved yet)"
  else:
    again = ("run the same command again (the checkpoints and cached records written so "
             "far are reused; nothing half-written was kept)")
  return "stopped by %s %s. Fix: %s" % (stopped.name, where, again)
