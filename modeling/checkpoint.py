"""Initialising a graph's variables from a BERT checkpoint by name, and checking a
checkpoint before it is used: its files, and what it holds against a BERT config."""

import collections
import logging
import os
import re

import tensorflow.compat.v1 as tf

from modeling.optimization import variable_name
from spec.run_errors import ArtefactFault, FlagError
from spec.paths import exists, not_a_file_problem

log = logging.getLogger(__name__)

# The variables a fine-tuning run adds to a pre-trained encoder: they alone may start from
# random values (and the pooler under mean pooling: variables_allowed_random).
HEAD_WEIGHTS = "output_weights"
HEAD_VARIABLES = (HEAD_WEIGHTS, "output_bias")
POOLER_VARIABLES = ("bert/pooler/dense/kernel", "bert/pooler/dense/bias")


def variables_allowed_random(pooling):
  """The variables that may be absent from a pre-trained checkpoint and start from random
  values: the new head's, and the pooler's under mean pooling."""
  return HEAD_VARIABLES + (POOLER_VARIABLES if pooling == "mean" else ())


class CheckpointError(FlagError):
  """A checkpoint that lacks what the run needs of it: a file, or variables."""


def files_problem(prefix):
  """None when a checkpoint's files hold what its index lists, else what is wrong: no
  index, a data shard gone, or data files shorter than the variables the index lists
  (a copy cut short). Reads the index only, not the values."""
  if not exists(prefix + ".index", tf.io.gfile.exists):
    return "there is no file %s.index" % prefix
  shards = tf.io.gfile.glob(prefix + ".data-*-of-*")
  for path in [prefix + ".index"] + sorted(shards):
    problem = not_a_file_problem(path, tf.io.gfile.isdir)
    if problem:
      return "%s: %s" % (path, problem)
  counts = set(int(re.search(r"-of-(\d+)$", s).group(1)) for s in shards)
  expected = set("%s.data-%05d-of-%05d" % (prefix, i, n) for n in counts for i in range(n))
  if not shards:
    return ("its data file (%s.data-00000-of-00001) is missing: the .index alone names the "
            "variables, not their values" % prefix)
  if len(counts) > 1 or set(shards) != expected:
    return "its data files %s are missing" % ", ".join(sorted(expected - set(shards)))
  try:
    reader = tf.train.load_checkpoint(prefix)
  except tf.errors.OpError as e:
    return "its index cannot be read (%s)" % e.message.splitlines()[0]
  shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
  needed = sum(_num_elements(shapes[name]) * dtypes[name].size for name in shapes
               if dtypes[name] != tf.string)
  held = sum(tf.io.gfile.stat(s).length for s in shards)
  if held < needed:
    return ("its data files hold %d bytes, and the %d variables its index lists need %d: "
            "the copy was cut short" % (held, len(shapes), needed))
  return None


# An optimizer's own variables beside a model's (Adam's moments, the step): not the model.
OPTIMIZER_VARIABLE = re.compile(r"(/adam_[mv]$|/Adam(_1)?$|^global_step$|/accum)")


def values_problem(prefix):
  """(None, False) when every model variable of a checkpoint (optimizer slots left out)
  reads back whole (TensorFlow checks each one's checksum) and holds finite numbers; else
  (what is wrong, whether it is numbers that are not finite): damaged data, or the first
  variable, in name order, with a NaN or an infinity (as a diverged run can leave). Reads
  the model's values: once per run, before the checkpoint evaluates, predicts or
  exports."""
  import numpy as np
  reader = tf.train.load_checkpoint(prefix)
  dtypes = reader.get_variable_to_dtype_map()
  for name in sorted(dtypes):
    if OPTIMIZER_VARIABLE.search(name) or not dtypes[name].is_floating:
      continue
    try:
      value = reader.get_tensor(name)
    except tf.errors.OpError as e:
      return "its value of %s cannot be read (%s): the file was damaged" % (
          name, e.message.strip().splitlines()[0]), False
    bad = ~np.isfinite(value)
    if bad.any():
      return "its variable %s holds %d values that are not numbers (%s)" % (
          name, int(bad.sum()), "NaN" if np.isnan(value).any() else "infinity"), True
  return None, False


def _num_elements(shape):
  count = 1
  for size in shape:
    count *= size
  return count


def encoder_problem(checkpoint, config, pooling="cls"):
  """None when checkpoint holds every encoder variable the BertConfig describes, with its
  shape, and no encoder layer beyond it; else what does not match. (With mean pooling the
  pooler is not trained, and may be absent.)"""
  held = dict(tf.train.list_variables(checkpoint))
  expected = encoder_variable_shapes(config)
  missing = sorted(name for name in expected if name not in held and
                   name not in variables_allowed_random(pooling))
  if missing:
    return "it lacks %d of the encoder's variables: %s" % (len(missing),
                                                          summarise_names(missing))
  wrong = ["%s is %s, not %s" % (name, list(held[name]), shape)
           for name, shape in sorted(expected.items())
           if name in held and list(held[name]) != list(shape)]
  if wrong:
    return "%d variables have other shapes: %s" % (len(wrong), "; ".join(wrong[:3]))
  layers = set(int(m.group(1)) for m in (re.match(r"bert/encoder/layer_(\d+)/", name)
                                          for name in held) if m)
  extra = sorted(layer for layer in layers if layer >= config.num_hidden_layers)
  if extra:
    return "it holds encoder layers up to layer_%d, which a config of %d layers leaves out" % (
        extra[-1], config.num_hidden_layers)
  return None


def assignment_map(variables, init_checkpoint):
  """Maps the name of every variable in the checkpoint to the variable.

  Returns (assignment_map, initialised_names, missing_names). A name present with
  another shape raises CheckpointError naming both shapes, since that means the config
  and the checkpoint do not belong together.
  """
  in_checkpoint = dict(tf.train.list_variables(init_checkpoint))
  mapping, initialised, missing = {}, [], []
  for var in variables:
    name = variable_name(var.name)
    if name not in in_checkpoint:
      missing.append(name)
      continue
    shape = var.shape.as_list()
    if list(in_checkpoint[name]) != shape and name in HEAD_VARIABLES:
      raise CheckpointError(
          "the classifier head in %s has %d outputs, and this run's has %d: the checkpoint "
          "was fine-tuned for other labels. Use the labels it was trained with, or start "
          "from a pre-trained checkpoint" % (init_checkpoint, in_checkpoint[name][0],
                                             shape[0]))
    if list(in_checkpoint[name]) != shape:
      raise CheckpointError(
          "variable %s has shape %s in the graph but %s in %s: the bert_config.json does not "
          "belong to this checkpoint" % (name, shape, list(in_checkpoint[name]), init_checkpoint))
    # (the variable itself: one loaded from a TF2 SavedModel has no entry in the variable
    # store that a name would be looked up in)
    mapping[name] = var
    initialised.append(name)
  return mapping, initialised, missing


def head_shape(checkpoint):
  """The shape [num_outputs, hidden] of the classifier head in a checkpoint, or None when
  the checkpoint has no head (a pre-trained encoder)."""
  return dict(tf.train.list_variables(checkpoint)).get(HEAD_WEIGHTS)


# How a folder's newest checkpoint that cannot be read gives way to an earlier one (its
# `checkpoint` file, not the files present, says which is newest).
EARLIER_CHECKPOINT_FIX = ("to go back to an earlier checkpoint, name it in the folder's "
                          "`checkpoint` file (model_checkpoint_path: \"model.ckpt-<step>\")")


STATE_FILE = "checkpoint"  # (TensorFlow's record of a folder's checkpoints, newest first)
STATE_FIX = ("restore it, or write it anew: one line model_checkpoint_path: "
             "\"model.ckpt-<step>\" naming the newest checkpoint whose files are there; or "
             "train into a new --output_dir")


def newest_checkpoint(folder):
  """The newest checkpoint that folder's `checkpoint` file names, whether or not its files
  are there (files_problem says), or None when the folder holds none. (TensorFlow reads a
  `checkpoint` file it cannot parse, or one that is gone, as no checkpoint at all: a run
  would then start over and write its step-0 checkpoint over the model.) ArtefactFault
  for a `checkpoint` file that cannot be read, or is missing beside checkpoints."""
  from google.protobuf import text_format
  from tensorflow.python.training.checkpoint_state_pb2 import CheckpointState
  path = os.path.join(folder, STATE_FILE)
  if not exists(path, tf.io.gfile.exists):
    present = tf.io.gfile.glob(os.path.join(folder, "model.ckpt-*.index")) if (
        tf.io.gfile.isdir(folder)) else []  # (TF 1.15's glob fails on a missing folder)
    if present:
      raise ArtefactFault("%s: the file is missing, and the folder holds %d checkpoints "
                          "(%s, ...), which a run would otherwise start over beside. Fix: "
                          "%s" % (path, len(present), os.path.basename(present[0])[:-6],
                                  STATE_FIX))
    return None
  try:
    problem = not_a_file_problem(path, tf.io.gfile.isdir)
    if problem:
      raise ValueError(problem)
    with tf.io.gfile.GFile(path, "rb") as f:
      state = text_format.Parse(f.read().decode("utf-8"), CheckpointState())
  except (tf.errors.OpError, ValueError, text_format.ParseError) as e:
    raise ArtefactFault("%s cannot be read (%s). Fix: %s" % (
        path, str(getattr(e, "message", e)).strip().splitlines()[0], STATE_FIX))
  if not state.model_checkpoint_path:
    raise ArtefactFault("%s names no checkpoint (no model_checkpoint_path). Fix: %s"
                        % (path, STATE_FIX))
  newest = state.model_checkpoint_path
  if not (os.path.isabs(newest) or "://" in newest):
    return os.path.join(folder, newest)
  here = os.path.join(folder, newest.replace("\\", "/").rsplit("/", 1)[-1])
  if newest.rstrip("/") != here and tf.io.gfile.exists(here + ".index"):
    return here  # (a folder moved or copied: its own checkpoint of that name)
  if os.path.dirname(newest) != folder.rstrip("/") and not tf.io.gfile.exists(
      newest + ".index"):
    raise ArtefactFault("%s names the checkpoint %s, which is neither in this folder nor "
                        "anywhere else (a file copied from another run?). Fix: %s" % (
                            path, newest, STATE_FIX))
  if os.path.dirname(newest) != folder.rstrip("/"):
    raise ArtefactFault("%s names the checkpoint %s, in another folder (a file copied from "
                        "another run?): this folder's model would be another's. Fix: %s"
                        % (path, newest, STATE_FIX))
  return newest


def checkpoint_global_step(checkpoint):
  """The global step saved in a checkpoint, or None when it has none."""
  try:
    return int(tf.train.load_variable(checkpoint, "global_step"))
  except (tf.errors.NotFoundError, ValueError):
    return None


def summarise_names(names):
  """'bert/encoder/layer_N (96), bert/embeddings/LayerNorm (2), ...': scopes with counts."""
  counts = collections.OrderedDict()
  for name in names:
    scope = "/".join(re.sub(r"layer_\d+", "layer_N", name).split("/")[:3])
    counts[scope] = counts.get(scope, 0) + 1
  return ", ".join("%s (%d)" % item for item in counts.items())


def init_from_checkpoint(init_checkpoint, variables, use_tpu, report=True,
                         may_start_random=None):
  """Sets up initialisation from init_checkpoint. Returns the scaffold_fn for TPUEstimatorSpec.

  On TPU the initialisation must happen inside the scaffold function, which
  TPUEstimator runs on the host; elsewhere it happens right away. report=False
  keeps quiet (eval and predict normally restore the fine-tuned checkpoint instead).
  may_start_random: the names of the variables that may be missing from the checkpoint
  (None: any); another one missing is a CheckpointError, since it would start from random
  values unnoticed.
  """
  info = log.info if report else log.debug
  if not init_checkpoint:
    info("no init_checkpoint: all %d variables start from random values", len(variables))
    return None
  mapping, initialised, missing = assignment_map(variables, init_checkpoint)
  info("initialising %d of %d variables from %s", len(initialised), len(variables),
       init_checkpoint)
  info("  from the checkpoint: %s", summarise_names(initialised))
  for name in initialised:
    log.debug("  from the checkpoint: %s", name)
  unexpected = [n for n in missing if may_start_random is not None and n not in may_start_random]
  if unexpected:
    raise CheckpointError("%s lacks %d variables of the graph besides its new head: %s. The "
                          "BERT config does not belong to this checkpoint" % (
                              init_checkpoint, len(unexpected), summarise_names(unexpected)))
  if missing:
    info("  %d variables start from random values: %s", len(missing), ", ".join(missing))

  if use_tpu:
    def scaffold_fn():
      tf.train.init_from_checkpoint(init_checkpoint, mapping)
      return tf.train.Scaffold()
    return scaffold_fn
  tf.train.init_from_checkpoint(init_checkpoint, mapping)
  return None


def encoder_variable_shapes(config):
  """{name: shape} of every encoder variable, computed without building a graph."""
  h, i = config.hidden_size, config.intermediate_size
  shapes = {
      "bert/embeddings/word_embeddings": [config.vocab_size, h],
      "bert/embeddings/token_type_embeddings": [config.type_vocab_size, h],
      "bert/embeddings/position_embeddings": [config.max_position_embeddings, h],
      "bert/embeddings/LayerNorm/beta": [h], "bert/embeddings/LayerNorm/gamma": [h],
      "bert/pooler/dense/kernel": [h, h], "bert/pooler/dense/bias": [h],
  }
  for n in range(config.num_hidden_layers):
    p = "bert/encoder/layer_%d/" % n
    for name in ("attention/self/query", "attention/self/key", "attention/self/value",
                 "attention/output/dense"):
      shapes[p + name + "/kernel"] = [h, h]
      shapes[p + name + "/bias"] = [h]
    shapes[p + "intermediate/dense/kernel"] = [h, i]
    shapes[p + "intermediate/dense/bias"] = [i]
    shapes[p + "output/dense/kernel"] = [i, h]
    shapes[p + "output/dense/bias"] = [h]
    for name in ("attention/output/LayerNorm", "output/LayerNorm"):
      shapes[p + name + "/beta"] = [h]
      shapes[p + name + "/gamma"] = [h]
  return shapes
