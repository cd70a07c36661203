"""A run stopped by a signal (SIGTERM from a scheduler, SIGINT from Ctrl-C), or by a peer
that never came: it ends with one line naming the signal or the peer, the phase, and how
to go on, within a bounded time, with its lock released and nothing half-written kept.

Where the run is in Python of its own (start-up, featurisation), a signal raises
RunStopped at once, so every clean-up on the way out runs. Where TensorFlow builds and
runs graphs (training, evaluation, prediction, export), an exception raised at an
arbitrary point would strike inside TensorFlow's own bookkeeping, so the signal is noted
and the run stops at its next safe point: training after the step under way (its
checkpoint saved: a rerun resumes there), evaluation and prediction before anything is
written. A watchdog thread, woken by the signal even while TensorFlow blocks in C++ (a
session waiting for a peer), ends the process GRACE_SECONDS later if the run has not.

  stop_on_signals()          in the entry point, before the run
  with phase("training"):    what the run is doing (pipeline.outputs.timed sets it)
  check()                    at a safe point: RunStopped if a signal came
  at_forced_exit(callback)   what must happen before a forced exit (the lock's release)
"""

import contextlib
import os
import signal
import sys
import threading
import time

# The signals that stop a run, and the exit code of each (128 + its number, as a shell
# reports a process a signal ended).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Phases of the project's own Python, where a signal raises at once.
AWAITING_PEERS = "the wait for the cluster's other tasks"
RAISING_PHASES = ("start-up", "featurisation", AWAITING_PEERS)
GRACE_SECONDS = 20
_PHASE = ["start-up"]
_SIGNAL = [None]  # the signal that asked the run to stop, once one has
_CLEANUPS = []


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


def stop_on_signals(out=sys.stderr):
  """Makes SIGTERM and SIGINT stop the run (see the module's doc), and starts the
  watchdog. From the main thread, once."""
  def noted(signum, frame):
    del frame
    again = _SIGNAL[0] is not None
    _SIGNAL[0] = signum
    if again or _PHASE[0] in RAISING_PHASES:  # (a second signal: at once, wherever)
      raise RunStopped(signum)
  for number in STOP_SIGNALS:
    signal.signal(number, noted)
  read_end, write_end = os.pipe()
  os.set_blocking(write_end, False)
  signal.set_wakeup_fd(write_end)  # (written by the C handler, even while C++ blocks)
  threading.Thread(target=_watch, args=(read_end, out), name="stop watchdog",
                   daemon=True).start()


def _watch(read_end, out):
  """The watchdog: after a stop signal, GRACE_SECONDS for the run to end on its own."""
  while True:
    signum = os.read(read_end, 1)[0]
    if signum not in STOP_SIGNALS:
      continue
    time.sleep(GRACE_SECONDS)
    force_exit("%s (it had not stopped %d s after the signal, so the process ends here)"
               % (how_to_go_on(RunStopped(signum)), GRACE_SECONDS), 128 + signum, out)


def force_exit(line, code, out=sys.stderr):
  """Ends the process from any thread: the clean-ups (at_forced_exit), the line, exit
  code. For what the main thread cannot be woken from."""
  for callback in reversed(_CLEANUPS):
    try:
      callback()
    except Exception:  # pylint: disable=broad-except  (the exit must happen)
      pass
  out.write("run_classifier: %s\n" % line)
  out.flush()
  os._exit(code)


def at_forced_exit(callback):
  """Registers callback to run before a forced exit; returns a function that removes it."""
  _CLEANUPS.append(callback)
  return lambda: _CLEANUPS.remove(callback) if callback in _CLEANUPS else None


def requested():
  """Whether a signal has asked the run to stop."""
  return _SIGNAL[0] is not None


def check():
  """At a safe point: RunStopped if a signal has asked the run to stop."""
  if _SIGNAL[0] is not None:
    raise RunStopped(_SIGNAL[0])


@contextlib.contextmanager
def phase(name):
  """with phase("training"): what RunStopped reports the run was doing. A signal noted
  during it stops the run when it ends, at the latest."""
  before = _PHASE[0]
  _PHASE[0] = name
  try:
    yield
    check()  # (named for the phase it struck in)
  finally:
    _PHASE[0] = before


def session_hook():
  """A SessionRunHook that ends TensorFlow's loop (training, evaluation) after the step
  under way once a signal has asked the run to stop: training saves its checkpoint there,
  and the caller's check() then raises."""
  import tensorflow.compat.v1 as tf

  class StopOnSignal(tf.train.SessionRunHook):
    def after_run(self, run_context, run_values):
      if requested():
        run_context.request_stop()
  return StopOnSignal()


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
