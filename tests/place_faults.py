"""Faults of a place, made real: run as root of a new user and mount namespace (unshare
-Urm) by tests/test_workspace.py, it mounts a read-only file system and small ones that
fill up, runs run_classifier against them (its command line, and run() in this process),
and prints what happened as JSON on its last line. The mounts end with the process.

  unshare -Urm python tests/place_faults.py WORK_FOLDER TINY_CHECKPOINT
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

from conftest import ROOT, common_flags  # noqa: E402


def mount(folder, options):
  os.makedirs(folder, exist_ok=True)
  subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", folder], check=True)


def command_line(flags):
  """The exit code and the last line of stderr of run_classifier.py with flags."""
  done = subprocess.run([sys.executable, os.path.join(ROOT, "run_classifier.py")] + flags,
                        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        universal_newlines=True, timeout=900)
  return {"exit": done.returncode, "last_line": done.stderr.strip().splitlines()[-1],
          "traceback": "Traceback" in done.stderr}


def in_process(flags):
  """run() on flags: the FileFault's message, or the step trained to."""
  from run_classifier import parse_flags, run
  from spec.run_errors import FileFault
  try:
    result = run(parse_flags(["run_classifier.py"] + flags))
  except FileFault as e:
    return {"fault": str(e)}
  return {"checkpoint": os.path.basename(result.checkpoint)}


def listing(folder):
  return sorted(os.listdir(folder)) if os.path.isdir(folder) else None


def main(work, checkpoint):
  training = ["--do_train", "--num_train_steps=2"]
  report = {}

  def flags(output_dir, *extra):
    return common_flags(checkpoint, output_dir) + training + list(extra)

  # A read-only file system: refused before any work, nothing created.
  read_only = os.path.join(work, "read_only")
  mount(read_only, "ro,size=64k")
  report["read_only"] = command_line(flags(os.path.join(read_only, "out")))
  report["read_only"]["left"] = listing(read_only)
  # A disk that fills while the cache is written: one line, no record file left.
  small = os.path.join(work, "small")
  mount(small, "size=64k")
  report["full_cache"] = command_line(flags(os.path.join(small, "out"),
                                            "--featurise_workers=1"))
  report["full_cache"]["left"] = listing(os.path.join(small, "out", "features"))
  # A disk that fills while the first checkpoint is written; then, with space, the same
  # command trains.
  medium = os.path.join(work, "medium")
  mount(medium, "size=30m")
  out = os.path.join(medium, "out")
  report["full_checkpoint"] = in_process(flags(out))
  report["full_checkpoint"]["left"] = listing(out)
  subprocess.run(["mount", "-o", "remount,size=400m", medium], check=True)
  report["with_space"] = in_process(flags(out))
  # Featurisation's worker processes writing their scratch files on a full disk.
  workers = os.path.join(work, "workers")
  mount(workers, "size=12k")  # (full before the records: while the workers write)
  report["full_workers"] = in_process(flags(os.path.join(workers, "out"),
                                            "--featurise_workers=2"))
  report["full_workers"]["left"] = listing(os.path.join(workers, "out", "features"))
  print(json.dumps(report))


if __name__ == "__main__":
  main(*sys.argv[1:])
