"""Forked worker processes fed through pipes: the parent sends each one payloads in turn
and waits for them all; a child's fault of a place (a full disk) is raised in the parent
as its own."""

import json
import os
import pickle
import signal
import struct
import sys
import traceback

from spec.run_errors import PLACE_FAULTS, ProcessFault

_LENGTH = struct.Struct("<Q")


class ForkedWorkers(object):
  """Forked worker processes, child w running work(read_input, paths[w]) until its input
  closes; payload k goes to worker k % workers (received(read_input) reads one).

  Plain fork and pipes: a spawned process would import TensorFlow again (seconds).
  Forking a process whose TensorFlow has started threads is safe only for a child that
  never calls TensorFlow (its locks may be held by threads the child does not have): the
  children run plain Python (tokenizer, serialiser, file writes) and leave with os._exit.
  """

  def __init__(self, work, paths):
    self.paths = paths
    self.children, self.inputs, self.reports = [], [], []
    self.sent = 0
    try:
      for path in paths:
        read_input, write_input = os.pipe()
        self.inputs.append(write_input)  # (closed by _end, whatever happens next)
        read_report, write_report = os.pipe()
        self.reports.append(read_report)
        try:
          pid = os.fork()
        except OSError:
          for fd in (read_input, write_report):
            os.close(fd)
          raise
        if pid == 0:  # the child
          os.close(write_input)
          os.close(read_report)
          for fd in self.inputs[:-1]:  # (the other children's: their ends must close)
            os.close(fd)
          _child(lambda: work(read_input, path), write_report)
        os.close(read_input)
        os.close(write_report)
        self.children.append(pid)
    except BaseException:
      self.abandon()
      raise

  def __call__(self, chunk):
    payload = pickle.dumps(chunk, protocol=2)
    fd = self.inputs[self.sent % len(self.inputs)]
    try:
      _write_all(fd, _LENGTH.pack(len(payload)) + payload)
    except OSError:  # a worker that died: its report says why
      self._end()
      raise ProcessFault("a featurisation process ended early") from None
    self.sent += 1

  def finish(self):
    """Waits for every worker to finish its payloads; raises what one reported."""
    self._end()

  def abandon(self):
    try:
      self._end()
    except (OSError, ProcessFault):
      pass  # (the error being raised says what went wrong)

  def _end(self):
    """Closes the workers' inputs (each then finishes) and waits for them; raises what
    one reported."""
    for fd in self.inputs:
      os.close(fd)
    self.inputs = []
    statuses = [os.waitpid(pid, 0)[1] for pid in self.children]
    self.children = []
    faults = [_read_report(fd) for fd in self.reports]
    self.reports = []
    for fault in faults:
      if fault:  # a full disk, say: the parent raises it as its own, for the report it gets
        raise OSError(fault["errno"], os.strerror(fault["errno"]), fault["filename"])
    failed = [status for status in statuses if status != 0]
    if failed:
      killed = [os.WTERMSIG(s) for s in failed if os.WIFSIGNALED(s)]
      raise ProcessFault("%d of %d featurisation processes failed; %s" % (
          len(failed), len(statuses),
          "killed by signal %s (out of memory?)" % ", ".join(str(k) for k in killed)
          if killed else "their errors are printed above"))


def _write_all(fd, data):
  view = memoryview(data)
  while view:
    view = view[os.write(fd, view):]


def _child(function, report):
  """A forked child's life: work, then leave without running the parent's clean-up. The
  fault of a place (a full disk: its number and file) is written to the pipe report for the
  parent to raise as its own; any other error's traceback is printed."""
  status = 0
  # Ctrl-C reaches the whole process group (and a scheduler's SIGTERM may): the parent
  # stops and closes the inputs, and a child then finishes, instead of printing a
  # traceback of its own.
  for number in (signal.SIGINT, signal.SIGTERM):
    signal.signal(number, signal.SIG_IGN)
  try:
    function()
  except BaseException as e:  # the parent sees the exit status, and a fault's report
    if isinstance(e, OSError) and e.errno in PLACE_FAULTS:
      os.write(report, json.dumps({"errno": e.errno, "filename": e.filename}).encode("utf-8"))
    else:
      traceback.print_exc()
    status = 1
  finally:
    sys.stderr.flush()
    os._exit(status)


def _read_report(read_end):
  """The OSError a child reported ({"errno", "filename"}), or None."""
  with os.fdopen(read_end, "rb") as f:
    text = f.read()
  return json.loads(text.decode("utf-8")) if text else None


def received(read_input):
  """The payloads sent to a worker, read from its input until it closes."""
  source = os.fdopen(read_input, "rb")
  while True:
    head = source.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
      return
    size = _LENGTH.unpack(head)[0]
    payload = source.read(size)
    if len(payload) < size:
      return  # (the parent stopped while sending it: Ctrl-C, or an error of its own)
    yield pickle.loads(payload)
