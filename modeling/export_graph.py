"""Exporting a fine-tuned model as a SavedModel for serving (spec/signature.py's contract).

The export graph is the model_fn's PREDICT graph on inputs of any batch size and length,
restored from one checkpoint, with two signatures: the default one takes text and
tokenises it in the graph, the other takes token ids. The ids are placeholders whose
default is the tokenised text, so the two signatures share one model, and feeding ids
leaves the tokenizer's ops unrun. The files needed to predict from text go in as assets.
It is built on the host's CPU, so a model trained on a TPU exports the same way as one
trained here.
"""

import logging
import os
import shutil
import tempfile
import time

import tensorflow.compat.v1 as tf
from tensorflow.core.protobuf import saved_model_pb2

from spec import signature

log = logging.getLogger(__name__)


def serving_features(defaults):
  """int32 [batch, length] inputs named as the ids signature's, each fed, or else taken from
  defaults (the ids of the text signature's input)."""
  return {name: tf.placeholder_with_default(defaults[name], [None, None], name=name)
          for name in signature.INPUT_NAMES}


def versioned_export_dir(export_base):
  """<export_base>/<unix seconds>: a new numbered version, as TF Serving expects them."""
  version = int(time.time())
  while tf.io.gfile.exists(os.path.join(export_base, str(version))):
    version += 1
  return os.path.join(export_base, str(version))


def export_saved_model(model_fn, checkpoint, export_dir, output_name, assets, text_features,
                       seal=None):
  """Writes the SavedModel of model_fn's predictions restored from checkpoint into
  export_dir (which must not exist; it appears only once complete).

  model_fn: a model_fn built for the CPU (use_tpu=False) without init_checkpoint.
  output_name: the signature's name for the predictions' "outputs".
  assets: {file name in assets/: its text}, e.g. the model card and the vocabulary.
  text_features: called in the export's graph, returns ({name: string placeholder [batch]},
    the int32 features of those texts by signature.INPUT_NAMES), e.g. with
    data.graph_tokenizer; tables it makes are initialised when the export is loaded.
    None: the export takes token ids only (no text signature).
  seal: called with the finished folder before it takes its name (to list its files).
  Returns export_dir.
  """
  if tf.io.gfile.exists(export_dir):
    raise ValueError("%s already exists: pass another export directory" % export_dir)
  parent = os.path.dirname(export_dir.rstrip("/"))
  tf.io.gfile.makedirs(parent)
  partial = os.path.join(parent, ".partial-%s-%d" % (os.path.basename(export_dir), os.getpid()))
  staging = tempfile.mkdtemp(prefix="export-assets-")
  try:
    with tf.Graph().as_default():
      if text_features is None:
        texts, features = None, {name: tf.placeholder(tf.int32, [None, None], name=name)
                                 for name in signature.INPUT_NAMES}
      else:
        texts, tokenised = text_features()
        features = serving_features(tokenised)
      spec = model_fn(features, None, tf.estimator.ModeKeys.PREDICT, {})
      outputs = {output_name: spec.predictions["outputs"]}
      asset_paths = []  # (only these: a TF2 hub encoder adds its own vocab.txt to the graph)
      for name, text in sorted(assets.items()):
        # The builder copies each asset under its own base name: stage them so named.
        staged = os.path.join(staging, name)
        with open(staged, "w", encoding="utf-8") as out:
          out.write(text)
        asset_paths.append(tf.constant(staged, name="asset_" + name.replace(".", "_")))
      predict = tf.saved_model.signature_def_utils.predict_signature_def
      signatures = {signature.IDS_SIGNATURE: predict(inputs=features, outputs=outputs)}
      if texts is not None:
        signatures[signature.SIGNATURE_NAME] = predict(inputs=texts, outputs=outputs)
      with tf.Session() as session:
        tf.train.Saver().restore(session, checkpoint)
        builder = tf.saved_model.builder.SavedModelBuilder(partial)
        builder.add_meta_graph_and_variables(
            session, [signature.SERVE_TAG],
            signature_def_map=signatures,
            assets_collection=asset_paths,
            main_op=tf.tables_initializer(), strip_default_attrs=True)
        builder.save()
    drop_debug_names(partial)
    if seal:
      seal(partial)
    tf.io.gfile.rename(partial, export_dir)
  finally:
    shutil.rmtree(staging, ignore_errors=True)
    if tf.io.gfile.exists(partial):
      tf.io.gfile.rmtree(partial)
  log.info("exported the model of %s as a SavedModel to %s", checkpoint, export_dir)
  return export_dir


def frozen_ids_graph(model_fn, checkpoint, output_name, samples):
  """The PREDICT graph of model_fn from token ids, restored from checkpoint with its
  variables made constants (what an ONNX converter takes), and its outputs on samples.

  The graph's inputs are int32 [batch, length] placeholders named signature.INPUT_NAMES,
  its output [batch, num_outputs] is named output_name. samples: batches, each {input
  name: int32 [rows, length]}. Returns (GraphDef, the outputs of each batch, numpy arrays).
  """
  with tf.Graph().as_default() as graph:
    features = {name: tf.placeholder(tf.int32, [None, None], name=name)
                for name in signature.INPUT_NAMES}
    spec = model_fn(features, None, tf.estimator.ModeKeys.PREDICT, {})
    output = tf.identity(spec.predictions["outputs"], name=output_name)
    with tf.Session() as session:
      tf.train.Saver().restore(session, checkpoint)
      session.run(tf.tables_initializer())
      outputs = [session.run(output, {features[name]: values for name, values in sample.items()})
                 for sample in samples]
      graph_def = tf.graph_util.convert_variables_to_constants(
          session, graph.as_graph_def(), [output_name])
  return graph_def, outputs


def drop_debug_names(export_dir):
  """Removes the `debug_name` attribute that TF 2.15 puts on variable handles.

  TF 1.15 refuses a graph with an attribute it does not know, and this one only labels
  the variable for debugging: without it a TF 2.15 export loads on TF 1.15 too, with the
  same outputs (tests/test_export.py checks both directions).
  """
  path = os.path.join(export_dir, "saved_model.pb")
  model = saved_model_pb2.SavedModel()
  with tf.io.gfile.GFile(path, "rb") as f:
    model.ParseFromString(f.read())
  dropped = 0
  for meta_graph in model.meta_graphs:
    nodes = list(meta_graph.graph_def.node)
    for function in meta_graph.graph_def.library.function:
      nodes.extend(function.node_def)
    for node in nodes:
      if "debug_name" in node.attr:
        del node.attr["debug_name"]
        dropped += 1
  if dropped:
    with tf.io.gfile.GFile(path, "wb") as f:
      f.write(model.SerializeToString())
