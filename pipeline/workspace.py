"""The folders a run writes: checked before any work (each must be a folder this process
can write, or one it can create), held against a second training run, and the faults of
a place (a full disk, a read-only file system, no permission) reported as one line that
names the path and the fix, wherever in the run they strike.

Local folders are checked through the operating system; gs:// and other remote folders
are left to the storage service, whose refusals reach the same report.
"""

import contextlib
import errno
import json
import logging
import os
import re
import socket
import sys
import time
import uuid

import tensorflow.compat.v1 as tf

from pipeline import stopping
from spec.run_errors import PLACE_FAULTS, ArtefactFault, FileFault, FlagError, MemoryFault

log = logging.getLogger(__name__)

LOCK_NAME = "training.lock"
PARTIAL_CHECKPOINT = re.compile(r"model\.ckpt-\d+_temp(_[0-9a-f]+)?$")

# The faults of a place rather than of the program, each with its fix. A run stopped by one
# resumes from its newest checkpoint when the same command runs again.
_AGAIN = "and run the same command again (training resumes from its newest checkpoint)"
FIXES = {
    errno.ENOSPC: "free space on that disk, or pass a folder on another (--output_dir, "
                  "--cache_dir, where featurisation also keeps its scratch files), " + _AGAIN,
    errno.EDQUOT: "free space within your quota, or pass a folder elsewhere, " + _AGAIN,
    errno.EFBIG: "the file system's largest file is smaller than this one: pass a folder on "
                 "another file system, " + _AGAIN,
    errno.EROFS: "pass a folder on a file system you can write to",
    errno.EACCES: "pass a folder you can write to, or change its permissions",
    errno.EPERM: "pass a folder you can write to, or change its permissions",
    errno.EIO: "the device failed to read or write: check the disk, " + _AGAIN,
}
assert set(FIXES) == PLACE_FAULTS


def is_remote(path):
  return "://" in path


# --- Before any work ----------------------------------------------------------------------

def check_writable(outputs, modes, saved_model=None):
  """FlagError unless every folder the run writes is one this process can write or create:
  --output_dir, the cache (--cache_dir, or <output_dir>/features; not read with
  --saved_model) and the parent of --export_dir. Nothing is created here."""
  folders = [("output_dir", outputs.output_dir)]
  if outputs.cache_dir and not saved_model:
    folders.append(("cache_dir", outputs.cache_dir))
  if outputs.export_dir and modes.do_export:
    folders.append(("export_dir", outputs.export_dir))
  for flag, folder in folders:
    if folder and not is_remote(folder):
      problem = folder_problem(folder)
      if problem:
        raise FlagError("--%s=%s %s" % (flag, folder, problem))


def folder_problem(folder):
  """Why folder cannot be written or created by this process (a sentence that ends in its
  fix), or None. A missing folder is judged by the nearest folder above it that exists."""
  path = os.path.abspath(folder)
  if os.path.exists(path) and not os.path.isdir(path):
    return "is a file, not a folder: pass a folder (it is created if missing)"
  existing = path
  while not os.path.exists(existing):
    if os.path.islink(existing):  # (exists() follows links: this one points nowhere)
      return ("cannot be created: %s is a link to %s, which does not exist. Create that "
              "folder, or pass another" % (existing, os.readlink(existing)))
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    return ("cannot be created: %s is a file, not a folder. Pass a folder whose parents are "
            "folders" % existing)
  if os.access(existing, os.W_OK | os.X_OK):
    return None
  where = "" if existing == path else " (in %s, the nearest folder that exists)" % existing
  if _read_only(existing):
    return ("cannot be written: it is on a read-only file system%s. Pass a folder on one you "
            "can write to" % where)
  return ("cannot be written: no permission%s. Pass a folder you can write to, or change its "
          "permissions" % where)


def _read_only(path):
  try:
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
  except (AttributeError, OSError):  # (no statvfs on Windows)
    return False


# --- While it runs ------------------------------------------------------------------------

@contextlib.contextmanager
def faults_reported(output_dir):
  """Turns the fault of a place met anywhere inside (an OSError, or TensorFlow's error for
  it) into a FileFault naming the path and the fix, after removing the checkpoint that was
  being written when it struck. Any other error passes through unchanged."""
  try:
    yield
  except (OSError, tf.errors.OpError) as error:
    fault = file_fault(error)  # (a full disk is a ResourceExhaustedError too: a place's)
    if fault is None and isinstance(error, tf.errors.ResourceExhaustedError):
      raise memory_fault(error) from error
    if fault is None:
      raise
    remove_partial_checkpoints(output_dir)
    raise fault from error


MEMORY_FIX = ("lower --train_batch_size (and keep the batch with "
              "--gradient_accumulation_steps), --eval_batch_size and --predict_batch_size, or "
              "--max_seq_length; add --dynamic_padding; on a GPU, add --use_fp16")


def memory_fault(error):
  """The MemoryFault of TensorFlow's out-of-memory error: the device, the tensor, the fix."""
  text = " ".join(str(error.message).split())
  device = re.search(r"device:([A-Z]+:\d+)", text)
  shape = re.search(r"shape\[([0-9,]+)\]", text)
  return MemoryFault("%s ran out of memory%s. Fix: %s" % (
      device.group(1) if device else "the device",
      " allocating a tensor of shape [%s]" % shape.group(1) if shape else "", MEMORY_FIX))


def file_fault(error):
  """The FileFault of an OSError or a TensorFlow OpError whose cause is one of FIXES, else
  None. TensorFlow's errors carry the system's reason in their text ("<path>; No space
  left on device"), so they are matched by it."""
  if isinstance(error, OSError):
    if error.errno not in FIXES:
      return None
    where = error.filename or "a file of the run"
    return FileFault("%s: %s. Fix: %s" % (where, os.strerror(error.errno), FIXES[error.errno]))
  for number, fix in FIXES.items():
    reason = os.strerror(number)
    for line in str(error.message).splitlines():
      if reason in line:
        where = line.split(";")[0].strip() if ";" in line else line.strip()
        return FileFault("%s: %s. Fix: %s" % (where, reason, fix))
  text = str(error.message)
  if any(sign in text for sign in REMOTE_SIGNS):  # (a bucket out of reach)
    where = next((w.rstrip(";,:") for w in text.split() if "://" in w), "Cloud Storage")
    return FileFault(
        "%s cannot be reached (%s). Fix: check this machine's network and credentials "
        "(gcloud auth application-default login, or GOOGLE_APPLICATION_CREDENTIALS), or use "
        "local paths" % (where, _first_line_of(text, REMOTE_SIGNS)))
  if isinstance(error, tf.errors.DataLossError):  # (a checksum that TensorFlow checks)
    return ArtefactFault(
        "a file this run reads was damaged after it was written (%s). Fix: copy the "
        "checkpoint or records again from where they came from, or delete the cached "
        "records (--cache_dir, or <output_dir>/features) to build them again"
        % str(error.message).strip().splitlines()[0])
  return None


# What TensorFlow's errors say when a bucket cannot be reached (no network, no credentials).
REMOTE_SIGNS = ("Could not resolve host", "Couldn't resolve host", "Error executing an HTTP",
                "UNAUTHENTICATED", "Anonymous caller", "storage.objects", "metadata server",
                "Could not connect to")


def _first_line_of(text, signs):
  """The line of text that holds one of signs (its first line otherwise), shortened."""
  lines = [l.strip() for l in text.splitlines() if l.strip()]
  line = next((l for l in lines if any(s in l for s in signs)), lines[0] if lines else "")
  return line[:200]


def remove_partial_checkpoints(output_dir):
  """Removes the folders TensorFlow writes a checkpoint into before it is whole
  (model.ckpt-<step>_temp, and _temp_<id> on TF 1.15), so a fault leaves no half checkpoint
  taking space."""
  if not output_dir or is_remote(output_dir) or not os.path.isdir(output_dir):
    return
  for name in os.listdir(output_dir):
    if PARTIAL_CHECKPOINT.match(name):
      try:
        tf.io.gfile.rmtree(os.path.join(output_dir, name))
      except (OSError, tf.errors.OpError):
        pass


# --- One training run per folder ----------------------------------------------------------

@contextlib.contextmanager
def training_lock(output_dir, holds=True):
  """Holds output_dir for this training run (a file training.lock in it), refusing the
  folder when another run holds it: two trainings of one model would write the same
  checkpoints. A lock left by a run that has ended on this machine is taken over, and the
  log says so. holds=False (no training, or a task of a cluster other than the chief)
  does nothing. A folder made for the lock alone (the run stopped before writing into it)
  is removed with it."""
  if not holds:
    yield
    return
  path = os.path.join(output_dir, LOCK_NAME)
  made = not tf.io.gfile.exists(output_dir)
  tf.io.gfile.makedirs(output_dir)
  token = _acquire(path)
  forget = stopping.at_forced_exit(lambda: _release(path, token))
  try:
    yield
  finally:
    forget()
    _release(path, token)
    if made and not tf.io.gfile.listdir(output_dir):
      tf.io.gfile.rmtree(output_dir)


def _this_process():
  return {"pid": os.getpid(), "host": socket.gethostname(), "started": _start_time(os.getpid()),
          "since": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv),
          "token": uuid.uuid4().hex}


def _acquire(path):
  """Writes this process's lock file at path; FlagError when another run holds it."""
  mine = _this_process()
  for _ in range(3):
    if _create_exclusively(path, json.dumps(mine, indent=1)):
      return mine["token"]
    holder = _read_lock(path)
    if holder is None:
      continue  # (it went as it was read)
    if not _has_ended(holder):
      raise FlagError(_in_use(path, holder))
    log.warning("%s: taking over the lock of a training run that ended without removing it "
                "(pid %s, since %s)", path, holder.get("pid"), holder.get("since"))
    _set_aside(path)
  raise FlagError("%s: other runs keep taking this folder's lock; run one training at a time "
                  "into it" % path)


def _create_exclusively(path, text):
  """Whether path was created with text, by this call alone. On remote storage, which has
  no exclusive create, a file that exists already counts as another's."""
  if is_remote(path):
    if tf.io.gfile.exists(path):
      return False
    with tf.io.gfile.GFile(path, "w") as f:
      f.write(text)
    return True
  try:
    descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
  except FileExistsError:
    return False
  with os.fdopen(descriptor, "w") as f:
    f.write(text)
  return True


def _read_lock(path):
  """The holder recorded in a lock file; {} when it cannot be parsed (being written, or
  damaged); None when it is gone."""
  if tf.io.gfile.isdir(path):
    raise FlagError("%s is a folder, where a training run keeps its lock file: remove it "
                    "(it is no part of the model)" % path)
  try:
    with tf.io.gfile.GFile(path, "r") as f:
      text = f.read()
  except tf.errors.NotFoundError:
    return None
  try:
    holder = json.loads(text)
  except ValueError:
    return {}
  return holder if isinstance(holder, dict) else {}


def _has_ended(holder):
  """Whether the run that wrote holder has ended, as far as this machine can tell: only a
  run of this machine can be seen to have ended (its process is gone, or its id now
  belongs to a process started at another time)."""
  if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
    return False
  try:
    os.kill(holder["pid"], 0)
  except ProcessLookupError:
    return True
  except PermissionError:  # another user's process: alive
    pass
  started = _start_time(holder["pid"])
  return started is not None and holder.get("started") not in (None, started)


def _start_time(pid):
  """When process pid started (clock ticks after boot; /proc's field 22), or None where
  there is no /proc."""
  try:
    with open("/proc/%d/stat" % pid) as f:
      return int(f.read().rsplit(")", 1)[1].split()[19])
  except (OSError, IndexError, ValueError):
    return None


def _in_use(path, holder):
  """The refusal of a folder whose lock holder has not ended; its command is in the file."""
  who = ("process %s on %s, since %s" % (holder.get("pid"), holder.get("host"),
                                         holder.get("since"))
         if holder else "its lock cannot be read")
  elsewhere = holder.get("host") not in (None, socket.gethostname())
  return ("--output_dir=%s is in use by another training run (%s; see %s). Wait for it to "
          "end, or train into another --output_dir%s" % (
              os.path.dirname(path), who, path,
              ". If that run has ended (its machine stopped), delete %s" % path
              if elsewhere or not holder else ""))


def _set_aside(path):
  """Removes a stale lock so that exactly one taker succeeds: each renames it to a name of
  its own first (the rename of a file already taken fails)."""
  aside = "%s.ended-%s" % (path, uuid.uuid4().hex[:8])
  try:
    tf.io.gfile.rename(path, aside)
  except (tf.errors.NotFoundError, OSError):
    return
  try:
    tf.io.gfile.remove(aside)
  except (tf.errors.OpError, OSError):
    pass


def _release(path, token):
  """Removes the lock if it is still this run's."""
  holder = _read_lock(path)
  if holder and holder.get("token") == token:
    try:
      tf.io.gfile.remove(path)
    except (tf.errors.OpError, OSError):
      log.warning("could not remove %s: delete it before the next training into this folder",
                  path)
