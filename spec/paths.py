"""What a path holds, as a reader needs to know before it opens it (plain Python, for
every layer): a file, or something a read would fail on or wait at for ever."""

import os
import stat


def not_a_file_problem(path, remote_isdir=None):
  """Why path, which exists, is no file a reader may open, or None: a folder, a pipe (whose
  read would wait for a writer for ever), a device or socket, a link that loops.
  remote_isdir(path): how a remote path (gs://...) is told to be a folder."""
  if "://" in path:
    return "it is a folder, not a file" if remote_isdir and remote_isdir(path) else None
  try:
    mode = os.stat(path).st_mode
  except OSError as e:
    return "it cannot be opened (%s)" % (e.strerror or e)
  if stat.S_ISDIR(mode):
    return "it is a folder, not a file"
  if stat.S_ISFIFO(mode):
    return "it is a pipe, not a file (reading it would wait for a writer for ever)"
  if not stat.S_ISREG(mode):
    return "it is a device or socket, not a file"
  return None


def exists(path, remote_exists=None):
  """Whether anything is at path (a link that points nowhere or loops counts: it is a
  fault to report, not an absence)."""
  if "://" in path:
    return bool(remote_exists and remote_exists(path))
  return os.path.lexists(path)
