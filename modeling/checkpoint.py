"""Initialising a graph's variables from a BERT checkpoint by name."""

import collections
import logging
import re

import tensorflow.compat.v1 as tf

from modeling.optimization import variable_name

log = logging.getLogger(__name__)


def assignment_map(variables, init_checkpoint):
  """Maps every variable whose name is in the checkpoint to itself.

  Returns (assignment_map, initialised_names, missing_names). A name present with
  another shape raises ValueError naming both shapes, since that means the config
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
    if list(in_checkpoint[name]) != shape:
      raise ValueError(
          "variable %s has shape %s in the graph but %s in %s: the bert_config.json does not "
          "belong to this checkpoint" % (name, shape, list(in_checkpoint[name]), init_checkpoint))
    mapping[name] = name
    initialised.append(name)
  return mapping, initialised, missing


HEAD_WEIGHTS = "output_weights"


def head_shape(checkpoint):
  """The shape [num_outputs, hidden] of the classifier head in a checkpoint, or None when
  the checkpoint has no head (a pre-trained encoder)."""
  return dict(tf.train.list_variables(checkpoint)).get(HEAD_WEIGHTS)


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


def init_from_checkpoint(init_checkpoint, variables, use_tpu, report=True):
  """Sets up initialisation from init_checkpoint. Returns the scaffold_fn for TPUEstimatorSpec.

  On TPU the initialisation must happen inside the scaffold function, which
  TPUEstimator runs on the host; elsewhere it happens right away. report=False
  keeps quiet (eval and predict normally restore the fine-tuned checkpoint instead).
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
  if missing:
    info("  %d variables start from random values: %s", len(missing), ", ".join(missing))

  if use_tpu:
    def scaffold_fn():
      tf.train.init_from_checkpoint(init_checkpoint, mapping)
      return tf.train.Scaffold()
    return scaffold_fn
  tf.train.init_from_checkpoint(init_checkpoint, mapping)
  return None
