"""Files written whole, and checked when read again. A writer stages a file under a name
of its own (its process id and a random part), then renames it over the name readers
open: a kill leaves the old file or the new one, never half of one, and two runs writing
the same file at once (two commands on one --output_dir or --cache_dir) never write into
each other's staging file. A folder written for later use (an export) lists its files
with their sizes and sha256 (its manifest), which a reader checks before use.
"""

import contextlib
import errno
import hashlib
import json
import os
import uuid

try:
  import fcntl
except ImportError:  # (Windows: no POSIX locks; files are then not held)
  fcntl = None

from data.gfile import FILE_ERRORS, gfile
from spec import paths
from spec.run_errors import ArtefactFault, FlagError


def staging_path(path):
  """A name beside path that no other writer uses."""
  return "%s.tmp-%d-%s" % (path, os.getpid(), uuid.uuid4().hex[:8])


def write_whole(path, content):
  """Writes content (text or bytes) to path whole, or leaves path as it was."""
  with staged_file(path, "wb" if isinstance(content, bytes) else "w") as out:
    out.write(content)


@contextlib.contextmanager
def staged_file(path, mode="w", verify=None):
  """with staged_file(path) as out: writes out (opened in mode) under a staging name,
  renamed over path when the block ends; if it fails, path is left as it was. verify(the
  staging path), if given, reads the closed file back first and raises if it is not
  what was meant."""
  staging = staging_path(path)
  try:
    with gfile.GFile(staging, mode) as out:
      yield out
    if verify is not None:
      verify(staging)
    if gfile.isdir(path):  # (a rename over it fails, far from the cause)
      raise ArtefactFault("%s is a folder, where this run writes a file of that name. Fix: "
                          "move the folder away, or pass another --output_dir" % path)
    gfile.rename(staging, path, overwrite=True)
  except BaseException:
    remove_quietly(staging)
    raise


def not_a_file_problem(path):
  """Why path, which exists, is no file a reader may open, or None (spec.paths)."""
  return paths.not_a_file_problem(path, gfile.isdir)


def exists(path):
  """Whether anything is at path, a link that loops included (spec.paths)."""
  return paths.exists(path, gfile.exists)


def read_written(path, fix, binary=False):
  """The content of a file the project wrote for later use (text, or bytes with binary),
  or None when there is none. Anything at path that is not a readable file (a folder, a
  pipe, a link that loops, bytes that are not UTF-8 text) is an ArtefactFault naming path,
  what is wrong, and fix (the way forward)."""
  if not exists(path):
    return None
  problem = not_a_file_problem(path)
  if problem is None:
    try:
      with gfile.GFile(path, "rb") as f:
        content = f.read()
      return content if binary else content.decode("utf-8")
    except FILE_ERRORS as e:
      problem = "it cannot be read (%s)" % _first_line(e)
    except UnicodeDecodeError as e:
      problem = "it is not UTF-8 text (byte %d is 0x%02x)" % (e.start, e.object[e.start])
  raise ArtefactFault("%s: %s. Fix: %s" % (path, problem, fix))


def _first_line(error):
  text = getattr(error, "message", None) or getattr(error, "strerror", None) or str(error)
  return str(text).strip().splitlines()[0] if str(text).strip() else type(error).__name__


def remove_quietly(path):
  """Removes path if it exists (clean-up after a failure, which must not hide it)."""
  try:
    if gfile.exists(path):
      gfile.remove(path)
  except FILE_ERRORS:
    pass


def file_sha256(path):
  digest = hashlib.sha256()
  with gfile.GFile(path, "rb") as f:
    while True:
      block = f.read(1 << 20)
      if not block:
        break
      digest.update(block)
  return digest.hexdigest()


def files_sha256(paths):
  """The sha256 of one file; of several (one split's), the sha256 of their sha256s in
  order: it changes with any file's bytes and with which file comes where."""
  return combined_sha256([file_sha256(path) for path in paths])


def combined_sha256(digests):
  """One file's sha256 itself; several files' sha256 (in order), the sha256 of them."""
  if len(digests) == 1:
    return digests[0]
  return hashlib.sha256(" ".join(digests).encode("ascii")).hexdigest()


def file_check(path):
  """What a reader later checks a written file against: its size and sha256."""
  return {"bytes": gfile.stat(path).length, "sha256": file_sha256(path)}


# A folder's list of its files (an export's), each with its size and sha256, written last.
MANIFEST = "files.json"


def write_manifest(folder):
  """Lists every file under folder with its bytes and sha256 in folder/MANIFEST."""
  files = {name: file_check(os.path.join(folder, name))
           for name in sorted(_names_under(folder))}
  write_whole(os.path.join(folder, MANIFEST), json.dumps({"files": files}, indent=1,
                                                         sort_keys=True))


# What manifest_problem says of a folder with no MANIFEST (an export of an earlier version,
# or a copy without it): its files cannot be checked.
NO_MANIFEST = "no manifest"


def manifest_problem(folder):
  """None when folder holds exactly the files folder/MANIFEST lists, each with its size and
  sha256, else what is wrong (the first file that differs, in name order): a file listed
  and missing or changed, a file there and not listed, a manifest that cannot be read or
  lists no files. NO_MANIFEST when there is none."""
  path = os.path.join(folder, MANIFEST)
  if not exists(path):
    return NO_MANIFEST
  problem = not_a_file_problem(path)
  if problem:
    return "its %s: %s" % (MANIFEST, problem)
  try:
    with gfile.GFile(path, "rb") as f:
      files = json.loads(f.read().decode("utf-8"))["files"]
  except (ValueError, KeyError, TypeError):  # (UnicodeDecodeError is a ValueError)
    return "its %s cannot be read (no JSON object with a \"files\" entry)" % MANIFEST
  if not isinstance(files, dict):
    return "its %s cannot be read (its \"files\" entry is not an object)" % MANIFEST
  if not files:
    return "its %s lists no files" % MANIFEST
  for name, expected in sorted(files.items()):
    if not _inside(name):
      return "its %s lists %r, which is not a path inside the folder" % (MANIFEST, name)
    if not (isinstance(expected, dict) and type(expected.get("bytes")) is int and
            isinstance(expected.get("sha256"), str)):
      return "its %s gives no size and sha256 of %s" % (MANIFEST, name)
  present = set(_names_under(folder))
  for name in sorted(present.union(files)):
    if name not in files:
      return "it holds %s, which its %s does not list" % (name, MANIFEST)
    if name not in present:
      return "%s is missing" % name
    where = os.path.join(folder, name)
    problem = not_a_file_problem(where)
    if problem:  # (a pipe would never finish hashing)
      return "%s: %s" % (name, problem)
    size = gfile.stat(where).length
    expected = files[name]
    if size != expected["bytes"]:
      return "%s has %d bytes, and %d were written" % (name, size, expected["bytes"])
    if file_sha256(where) != expected["sha256"]:
      return "%s is not the file that was written (its sha256 differs)" % name
  return None


def _inside(name):
  """Whether a name the manifest lists is a relative path that stays inside the folder."""
  parts = name.split("/")
  return bool(name) and not name.startswith("/") and "\\" not in name and ":" not in name \
      and all(part not in ("", ".", "..") for part in parts)


def _names_under(folder):
  """The names (relative, with /) of the files under folder, the manifest left out."""
  for path in _files_under(folder):
    yield os.path.relpath(path, folder).replace(os.sep, "/")


def _files_under(folder):
  for root, _, names in gfile.walk(folder):
    for name in names:
      if not (root == folder and name == MANIFEST):
        yield os.path.join(root, name)


# This process's POSIX locks, one open file per lock path. POSIX locks belong to the
# process: its own never conflict (taking one converts the other, atomically), they end
# with it, and forked children do not inherit them.
_HELD = {}


def hold(lock_path, exclusive=False, wait=True):
  """Takes this process's lock on lock_path (an empty file, created if missing): shared by
  readers, exclusive for a writer. With wait, blocks while another process holds a lock
  that conflicts; without, returns False then. True once held. Remote paths have no
  locks (always True). The lock is held until the process ends or takes another on the
  same path."""
  if fcntl is None or "://" in lock_path:
    return True
  handle = _HELD.get(lock_path)
  if handle is not None and not _same_file(handle, lock_path):
    handle.close()
    handle = None
  if handle is None:
    if os.path.isdir(lock_path):
      raise FlagError("%s is a folder, where runs sharing this cache keep a lock file: remove "
                      "it (it holds no records)" % lock_path)
    # (reading too: a shared POSIX lock needs a descriptor open for reading)
    handle = _HELD[lock_path] = open(lock_path, "a+")
  try:
    fcntl.lockf(handle, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) |
                (0 if wait else fcntl.LOCK_NB))
  except OSError as e:
    if not wait and e.errno in (errno.EACCES, errno.EAGAIN):
      return False
    raise
  return True


def _same_file(handle, path):
  """Whether handle is still the file at path (not one since deleted and made again: a
  lock on that would exclude nobody)."""
  try:
    return os.path.samestat(os.fstat(handle.fileno()), os.stat(path))
  except OSError:
    return False


def release(lock_path):
  """Gives up this process's lock on lock_path, if it holds one."""
  handle = _HELD.get(lock_path)
  if fcntl is not None and handle is not None:
    fcntl.lockf(handle, fcntl.LOCK_UN)
