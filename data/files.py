"""Files written whole. A writer stages a file under a name of its own (its process id
and a random part), then renames it over the name readers open: a kill leaves the old
file or the new one, never half of one, and two runs writing the same file at once (two
commands on one --output_dir or --cache_dir) never write into each other's staging file.
"""

import hashlib
import os
import uuid

import tensorflow.compat.v1 as tf


def staging_path(path):
  """A name beside path that no other writer uses."""
  return "%s.tmp-%d-%s" % (path, os.getpid(), uuid.uuid4().hex[:8])


def write_whole(path, content):
  """Writes content (text or bytes) to path whole, or leaves path as it was."""
  staging = staging_path(path)
  try:
    with tf.io.gfile.GFile(staging, "wb" if isinstance(content, bytes) else "w") as out:
      out.write(content)
    tf.io.gfile.rename(staging, path, overwrite=True)
  except BaseException:
    remove_quietly(staging)
    raise


def remove_quietly(path):
  """Removes path if it exists (clean-up after a failure, which must not hide it)."""
  try:
    if tf.io.gfile.exists(path):
      tf.io.gfile.remove(path)
  except (OSError, tf.errors.OpError):
    pass


def file_sha256(path):
  digest = hashlib.sha256()
  with tf.io.gfile.GFile(path, "rb") as f:
    while True:
      block = f.read(1 << 20)
      if not block:
        break
      digest.update(block)
  return digest.hexdigest()
