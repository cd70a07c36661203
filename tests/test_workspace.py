"""The folders a run writes (pipeline/workspace.py): refused before any work when they
cannot be written, a fault of the place (a full disk) reported in one line wherever it
strikes, with nothing half-written left, and one training run per --output_dir."""

import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT, common_flags, run_flags
from pipeline import workspace
from spec.run_errors import FlagError

FULL_DISK_FIX = ("No space left on device. Fix: free space on that disk, or pass a folder on "
                 "another (--output_dir, --cache_dir, where featurisation also keeps its "
                 "scratch files), and run the same command again (training resumes from its "
                 "newest checkpoint)")


def test_folders_that_cannot_be_written_are_refused_before_any_work(tmp_path, tiny_checkpoint):
  a_file = tmp_path / "results.txt"
  a_file.write_text(u"not a folder")
  nowhere = tmp_path / "nowhere"
  os.symlink(str(tmp_path / "gone"), str(nowhere))  # a link to a folder since deleted
  cases = (
      (["--output_dir=%s" % (nowhere / "out")],
       "--output_dir=%s cannot be created: %s is a link to %s, which does not exist. Create "
       "that folder, or pass another" % (nowhere / "out", nowhere, tmp_path / "gone")),
      (["--output_dir=%s" % a_file], "--output_dir=%s is a file, not a folder: pass a folder "
                                     "(it is created if missing)" % a_file),
      (["--output_dir=%s" % (a_file / "run" / "1")],
       "--output_dir=%s cannot be created: %s is a file, not a folder. Pass a folder whose "
       "parents are folders" % (a_file / "run" / "1", a_file)),
      (["--output_dir=%s" % (tmp_path / "out"), "--cache_dir=%s" % a_file],
       "--cache_dir=%s is a file, not a folder: pass a folder (it is created if missing)"
       % a_file),
      (["--output_dir=%s" % (tmp_path / "out"), "--do_export",
        "--export_dir=%s" % (a_file / "1")],
       "--export_dir=%s cannot be created: %s is a file, not a folder. Pass a folder whose "
       "parents are folders" % (a_file / "1", a_file)))
  for flags, message in cases:
    with pytest.raises(FlagError) as error:
      run_flags(*common_flags(tiny_checkpoint, "unused") + ["--do_train"] + flags)
    assert str(error.value) == message
  assert sorted(os.listdir(str(tmp_path))) == ["nowhere", "results.txt"]  # nothing was made


def _can_make_namespaces():
  try:
    return subprocess.run(["unshare", "-Urm", "true"], stderr=subprocess.DEVNULL,
                          timeout=60).returncode == 0
  except (OSError, subprocess.TimeoutExpired):
    return False


@pytest.mark.slow
@pytest.mark.skipif(not _can_make_namespaces(), reason="mounting a read-only and a small file "
                    "system needs user namespaces (unshare -Urm), which this machine refuses")
def test_read_only_and_full_disks_are_one_line_and_leave_nothing_half_written(
    tmp_path, tiny_checkpoint):
  """Real file systems (tests/place_faults.py mounts them in a namespace of its own): each
  fault is one line naming the path and the fix, never a traceback; the record files and
  the checkpoint being written when the disk filled are gone, and with space the same
  command trains."""
  done = subprocess.run(["unshare", "-Urm", sys.executable,
                         os.path.join(ROOT, "tests", "place_faults.py"), str(tmp_path),
                         tiny_checkpoint], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        universal_newlines=True, timeout=900)
  assert done.returncode == 0, done.stderr[-3000:]
  report = json.loads(done.stdout.strip().splitlines()[-1])
  read_only = str(tmp_path / "read_only")
  assert report["read_only"] == {
      "exit": 2, "traceback": False, "left": [],
      "last_line": "run_classifier: flag error: --output_dir=%s/out cannot be written: it is "
                   "on a read-only file system (in %s, the nearest folder that exists). Pass "
                   "a folder on one you can write to" % (read_only, read_only)}
  full_cache = report["full_cache"]
  # (the split's lock stays: an empty file, not records)
  assert (full_cache["exit"], full_cache["traceback"], full_cache["left"]) == (
      1, False, ["train.tf_record.lock"])
  assert re.match(r"run_classifier: file error: %s/small/out/features/train\.tf_record\.tmp-"
                  r"\d+-[0-9a-f]{8}: " % re.escape(str(tmp_path)),
                  full_cache["last_line"]), full_cache["last_line"]
  assert full_cache["last_line"].endswith(": " + FULL_DISK_FIX)
  # TensorFlow's own error for the checkpoint (its folder is model.ckpt-<step>_temp, or
  # model.ckpt-<step>_temp_<id> on TF 1.15; the first is step 2's, since no checkpoint is
  # saved when the session starts) gives the path.
  fault = report["full_checkpoint"]["fault"]
  assert re.match(r"%s/medium/out/model\.ckpt-2_temp(_[0-9a-f]+)?/part-00000-of-00001\.data"
                  % re.escape(str(tmp_path)), fault), fault
  assert fault.endswith(": " + FULL_DISK_FIX)
  assert [name for name in report["full_checkpoint"]["left"]
          if not name.startswith("events.out.tfevents.")] == ["features", "graph.pbtxt",
                                                              "model_card.json"]
  assert report["with_space"] == {"checkpoint": "model.ckpt-2"}
  # A featurisation worker's fault reaches the parent as the same line, and its scratch
  # files are removed.
  workers = report["full_workers"]
  assert re.match(r"%s/workers/out/features/train\.tf_record\.featurise-\w+/bodies-0[01]: "
                  % re.escape(str(tmp_path)), workers["fault"]), workers["fault"]
  assert workers["fault"].endswith(": " + FULL_DISK_FIX)
  assert workers["left"] == ["train.tf_record.lock"]


def test_file_faults_are_told_apart_from_other_errors():
  """A place's fault gets its fix; any other error (a bug, a missing file) stays itself."""
  import errno
  import tensorflow.compat.v1 as tf
  fault = workspace.file_fault(OSError(errno.EROFS, os.strerror(errno.EROFS), "/data/x"))
  assert str(fault) == ("/data/x: Read-only file system. Fix: pass a folder on a file system "
                        "you can write to")
  assert workspace.file_fault(OSError(errno.ENOENT, "No such file", "/x")) is None
  assert workspace.file_fault(OSError("no errno")) is None
  # TensorFlow's OOM is a ResourceExhaustedError too, but no fault of a place.
  assert workspace.file_fault(tf.errors.ResourceExhaustedError(
      None, None, "OOM when allocating tensor with shape[32,128,768]")) is None
  quota = workspace.file_fault(tf.errors.ResourceExhaustedError(
      None, None, "gs://b/out/model.ckpt-9.index; Disk quota exceeded"))
  assert str(quota).startswith("gs://b/out/model.ckpt-9.index: Disk quota exceeded. Fix: ")


# --- One training run per folder ----------------------------------------------------------

def _lock(folder):
  with open(os.path.join(folder, workspace.LOCK_NAME)) as f:
    return json.load(f)


def _training_command(tiny_checkpoint, folder, steps):
  return [sys.executable, os.path.join(ROOT, "run_classifier.py")] + common_flags(
      tiny_checkpoint, folder) + ["--do_train", "--num_train_steps=%d" % steps]


@pytest.mark.slow
@pytest.mark.one_runtime("tf2")
def test_a_folder_in_use_by_another_training_is_refused(tmp_path, tiny_checkpoint, caplog):
  """Two runs at once into one --output_dir: the second stops with one line naming the first
  (before, both wrote features/train.tf_record.tmp and one died on it). A lock left by a
  run that was killed is taken over, and the log says so; the lock goes when a run ends."""
  folder = str(tmp_path / "model")
  first = subprocess.Popen(_training_command(tiny_checkpoint, folder, 100000), cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    deadline = time.time() + 300
    while not os.path.exists(os.path.join(folder, workspace.LOCK_NAME)):
      assert first.poll() is None and time.time() < deadline, "the first run never locked"
      time.sleep(0.2)
    time.sleep(0.5)  # (written whole by now)
    holder = _lock(folder)
    assert (holder["pid"], holder["host"]) == (first.pid, socket.gethostname())
    with pytest.raises(FlagError) as error:
      run_flags(*common_flags(tiny_checkpoint, folder) + ["--do_train",
                                                          "--num_train_steps=100000"])
    assert str(error.value) == (
        "--output_dir=%s is in use by another training run (process %d on %s, since %s; see "
        "%s). Wait for it to end, or train into another --output_dir" % (
            folder, first.pid, socket.gethostname(), holder["since"],
            os.path.join(folder, workspace.LOCK_NAME)))
  finally:
    first.kill()
    first.wait()
  # Killed, the run left its lock; the next training takes it over and removes it at its end.
  assert _lock(folder)["pid"] == first.pid
  caplog.set_level("WARNING")
  run_flags(*common_flags(tiny_checkpoint, folder) + ["--do_train", "--num_train_steps=1"])
  assert ("%s: taking over the lock of a training run that ended without removing it (pid %d"
          % (os.path.join(folder, workspace.LOCK_NAME), first.pid)) in caplog.text
  assert not os.path.exists(os.path.join(folder, workspace.LOCK_NAME))


def test_a_lock_is_taken_over_only_from_a_run_seen_to_have_ended(tmp_path, caplog):
  """A lock of a process gone from this machine is taken over; one of another machine is
  not (nothing here can tell whether that run is alive), and the fix says to delete it."""
  folder = str(tmp_path)
  lock = os.path.join(folder, workspace.LOCK_NAME)
  ended = subprocess.Popen([sys.executable, "-c", "pass"])
  ended.wait()
  with open(lock, "w") as f:
    json.dump({"pid": ended.pid, "host": socket.gethostname(), "since": "earlier"}, f)
  caplog.set_level("WARNING")
  with workspace.training_lock(folder):
    assert _lock(folder)["pid"] == os.getpid()
  assert ("%s: taking over the lock of a training run that ended without removing it (pid %d, "
          "since earlier)" % (lock, ended.pid)) in caplog.text
  assert not os.path.exists(lock)
  with open(lock, "w") as f:
    json.dump({"pid": os.getpid(), "host": "tpu-vm-7", "since": "2026-01-02 03:04:05"}, f)
  with pytest.raises(FlagError) as error:
    with workspace.training_lock(folder):
      pass
  assert str(error.value) == (
      "--output_dir=%s is in use by another training run (process %d on tpu-vm-7, since "
      "2026-01-02 03:04:05; see %s). Wait for it to end, or train into another --output_dir. "
      "If that run has ended (its machine stopped), delete %s" % (folder, os.getpid(), lock,
                                                                  lock))
  with workspace.training_lock(folder, holds=False):  # eval, predict, a worker: no lock
    pass


def test_a_folder_where_a_lock_file_belongs_is_named(tmp_path):
  """Both ended in IsADirectoryError or FailedPreconditionError tracebacks."""
  from data.files import hold
  lock = tmp_path / "train.tf_record.lock"
  lock.mkdir()
  with pytest.raises(FlagError) as error:
    hold(str(lock))
  assert str(error.value) == ("%s is a folder, where runs sharing this cache keep a lock file: "
                              "remove it (it holds no records)" % lock)
  (tmp_path / "out" / "training.lock").mkdir(parents=True)
  with pytest.raises(FlagError) as error:
    with workspace.training_lock(str(tmp_path / "out"), True):
      pass
  assert str(error.value) == (
      "%s is a folder, where a training run keeps its lock file: remove it (it is no part of "
      "the model)" % (tmp_path / "out" / "training.lock"))


def test_a_folds_run_holds_its_own_fold(tmp_path, tiny_checkpoint):
  """One machine per fold, each --fold=<i> into one --output_dir, as the README says: the
  second was refused, since the lock was the whole folder's."""
  out = tmp_path / "out"
  (out / "fold_1").mkdir(parents=True)
  lock = {"pid": 1, "host": "another-machine", "started": None, "since": "2026-01-01 00:00:00",
          "command": "run_classifier.py", "token": "x"}
  (out / "fold_1" / workspace.LOCK_NAME).write_text(json.dumps(lock))
  with pytest.raises(FlagError) as error:
    run_flags(*common_flags(tiny_checkpoint, str(out)) + ["--do_train", "--num_folds=2",
                                                          "--fold=1"])
  assert str(error.value).startswith(
      "--output_dir=%s is in use by another training run (process 1 on another-machine"
      % (out / "fold_1"))
  assert sorted(os.listdir(str(out))) == ["fold_1"]  # (the whole folder is not held)
