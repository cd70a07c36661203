"""The file system the project's readers and writers use: TensorFlow's gfile where
TensorFlow is installed (local paths, and buckets such as gs://), else a stand-in for
local paths with the same calls.

The stand-in is for the environment that runs an ONNX export with onnxruntime and has no
TensorFlow at all (serving/onnx_predictor.py): it still checks an export's files before
using them, with the same code (data/files.py).
"""

import os
import shutil

try:
  import tensorflow.compat.v1 as _tf
except ImportError:
  _tf = None


class _LocalStat(object):
  def __init__(self, length):
    self.length = length


class LocalGFile(object):
  """The tf.io.gfile calls that data/files.py and the predictors make, on local paths."""

  @staticmethod
  def GFile(path, mode="r"):  # (text as gfile reads it: UTF-8, line ends untouched)
    if "b" in mode:
      return open(path, mode)
    return open(path, mode, encoding="utf-8", newline="")

  exists = staticmethod(os.path.exists)
  isdir = staticmethod(os.path.isdir)
  listdir = staticmethod(os.listdir)
  makedirs = staticmethod(lambda path: os.makedirs(path, exist_ok=True))
  remove = staticmethod(os.remove)
  rmtree = staticmethod(shutil.rmtree)

  @staticmethod
  def walk(top):  # (into linked folders too, as gfile's walk goes)
    return os.walk(top, followlinks=True)

  @staticmethod
  def rename(source, target, overwrite=False):
    if not overwrite and os.path.exists(target):
      raise FileExistsError("%s already exists" % target)
    os.replace(source, target)

  @staticmethod
  def stat(path):
    return _LocalStat(os.stat(path).st_size)


if _tf is not None:
  gfile = _tf.io.gfile
  # What a failed file operation raises: gfile raises TensorFlow's OpError for most.
  FILE_ERRORS = (OSError, _tf.errors.OpError)
else:
  gfile = LocalGFile
  FILE_ERRORS = (OSError,)
