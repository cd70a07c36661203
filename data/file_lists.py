"""The files a file option names: one path, or several read as one split (a
comma-separated list, glob patterns)."""

import collections
import os
import re

import tensorflow.compat.v1 as tf

from data.data_error import DataError


def expand_files(value):
  """The files a file option names, in order: one path; or a comma-separated list whose
  parts may be glob patterns (*, ?, [...]), each matching at least one file, expanded in
  sorted order. A path that exists is that file, commas or brackets in its name and all.
  A file named twice (by any spelling of its path) is refused: its rows would be read
  twice."""
  if "," not in value and not _GLOB.search(value) or tf.io.gfile.exists(value):
    return [value]
  paths = []
  for part in (p.strip() for p in value.split(",")):
    if not part:
      continue
    if "://" not in part:
      part = os.path.normpath(part)  # (a//b and ./a name the file a/b and a)
    if _GLOB.search(part) and not tf.io.gfile.exists(part):
      matched = sorted(tf.io.gfile.glob(part))
      if not matched:
        raise DataError(part, "no file matches this pattern",
                        "check the pattern (a list of files is separated by commas)")
      paths.extend(matched)
    elif not tf.io.gfile.exists(part):
      raise DataError(part, "the file does not exist (%r was read as a list of files, "
                      "split at its commas)" % value, "check the names; a file whose name "
                      "holds a comma can be given only alone")
    else:
      paths.append(part)
  counts = collections.Counter(same_file_key(p) for p in paths)
  twice = [p for p in paths if counts[same_file_key(p)] > 1]
  if twice:
    raise DataError(twice[0], "the file is named %d times in %r: its rows would be read "
                    "more than once" % (counts[same_file_key(twice[0])], value),
                    "name each file once")
  if not paths:
    raise DataError(value, "no file is named", "name a file, or a comma-separated list")
  return paths


def same_file_key(path):
  """What two spellings of one file's path have in common (its real path, for a local
  file)."""
  return path if "://" in path else os.path.realpath(path)


_GLOB = re.compile(r"[*?\[]")
