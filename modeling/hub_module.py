"""BERT from TF-Hub: a TF1-format hub module or a TF2 SavedModel, used in model_fn; and
exporting ours as a TF1 hub module.

A TF1 module has the `tokens` signature (input_ids, input_mask, segment_ids ->
pooled_output, sequence_output) and `tokenization_info` (vocab_file, do_lower_case), the
interface of Google's published BERT modules. A TF2 SavedModel (the BERT encoders
published for TF2, e.g. bert_en_uncased_L-12_H-768_A-12/4) is called with a dict of
input_word_ids, input_mask and input_type_ids and returns pooled_output and
sequence_output; its vocab_file asset and do_lower_case variable give the tokenisation.
"""

import os

import tensorflow.compat.v1 as tf
from tensorflow.core.protobuf import saved_model_pb2

from modeling.bert import BertModel
from spec.run_errors import FlagError

TAGS_TRAIN = {"train"}
# The name scope of a TF2 encoder's variables: apart from any checkpoint's names, so that
# --init_checkpoint (the head's) never overrides the hub model's weights.
TF2_ENCODER_SCOPE = "hub_encoder"


def _hub_package():
  try:
    import tensorflow_hub as hub
  except ImportError:
    raise RuntimeError("--bert_hub_module_handle needs the tensorflow_hub package: "
                       "pip install -r requirements.txt")
  return hub


def _hub():
  hub = _hub_package()
  if not hasattr(hub, "Module"):
    raise RuntimeError(
        "tensorflow_hub %s cannot load TF1-format hub modules (hub.Module was removed in 0.16). "
        "Install tensorflow-hub<=0.15 (requirements.txt pins a working version), or use "
        "--init_checkpoint with a checkpoint instead of a hub module." % hub.__version__)
  return hub


def tf2_saved_model(handle):
  """The local folder of handle (a path or a TF-Hub URL) when it is a TF2 SavedModel, None
  for a TF1 hub module. A FlagError on TF 1.15, which cannot load the TF2 models that
  TensorFlow 2.10 and later write, and for a folder that is neither."""
  try:
    path = _hub_package().resolve(handle)
  except (OSError, ValueError) as e:  # (a path that is gone; a URL out of reach)
    raise FlagError("--bert_hub_module_handle=%s cannot be found (%s): check the path, or "
                    "the network for a URL (a local copy, or TFHUB_CACHE_DIR, works "
                    "offline)" % (handle, str(e).splitlines()[0] if str(e) else type(e).__name__))
  if tf.io.gfile.exists(os.path.join(path, "tfhub_module.pb")):
    return None
  if not tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
    raise FlagError("--bert_hub_module_handle=%s holds neither a TF1 hub module "
                    "(tfhub_module.pb) nor a TF2 SavedModel (saved_model.pb)" % handle)
  if tf.__version__.startswith("1."):
    raise FlagError(
        "--bert_hub_module_handle=%s is a TF2 SavedModel, which TF 1.15 cannot load (its "
        "functions use ops TF 1.15 lacks): run on TF 2.15 (./run.sh shell tf2 -- python "
        "run_classifier.py ...), or use a TF1-format hub module or --init_checkpoint"
        % handle)
  return path


def initialised_from(checkpoint, variables):
  """The variables that checkpoint initialises: all but a TF2 hub encoder's, and those too
  when the checkpoint holds them (a run's, fine-tuned with the encoder); otherwise the
  encoder's come from the hub model."""
  names = {name for name, _ in tf.train.list_variables(checkpoint)} if checkpoint else set()
  return [v for v in variables if not v.op.name.startswith(TF2_ENCODER_SCOPE + "/") or
          v.op.name in names]


def hub_pooled_output(handle, features, is_training, pooling="cls", trainable=True):
  """The module's pooled output [batch, hidden]; with pooling "mean", the mean of its
  sequence output over the real tokens instead. trainable: whether its variables join the
  trainable ones."""
  path = tf2_saved_model(handle)
  if path is not None:
    return tf2_pooled_output(path, features, is_training, pooling, trainable)
  hub = _hub()
  module = hub.Module(handle, tags=TAGS_TRAIN if is_training else set(), trainable=trainable)
  inputs = {"input_ids": features["input_ids"], "input_mask": features["input_mask"],
            "segment_ids": features["segment_ids"]}
  outputs = module(inputs=inputs, signature="tokens", as_dict=True)
  if pooling == "mean":
    from modeling.head import mean_pool
    return mean_pool(outputs["sequence_output"], features["input_mask"])
  return outputs["pooled_output"]


def tf2_pooled_output(path, features, is_training, pooling="cls", trainable=True):
  """hub_pooled_output of a TF2 SavedModel: its variables (under TF2_ENCODER_SCOPE, and
  initialised from the model) join the trainable ones when trainable, which loading one
  in a graph does not do."""
  with tf.name_scope(TF2_ENCODER_SCOPE):
    encoder = _hub_package().load(path)
  outputs = encoder({"input_word_ids": features["input_ids"],
                     "input_mask": features["input_mask"],
                     "input_type_ids": features["segment_ids"]}, training=is_training)
  for variable in encoder.trainable_variables if trainable else ():
    tf.add_to_collection(tf.GraphKeys.TRAINABLE_VARIABLES, variable)
  if pooling == "mean":
    from modeling.head import mean_pool
    return mean_pool(outputs["sequence_output"], features["input_mask"])
  return outputs["pooled_output"]


def tf2_tokenization_info(path, handle):
  """(vocab_file, do_lower_case) of a TF2 BERT SavedModel: its vocab_file asset and its
  do_lower_case variable, read from the files without loading the model."""
  model = saved_model_pb2.SavedModel()
  with tf.io.gfile.GFile(os.path.join(path, "saved_model.pb"), "rb") as f:
    model.ParseFromString(f.read())
  meta_graph = model.meta_graphs[0]
  nodes = meta_graph.object_graph_def.nodes
  children = {child.local_name: child.node_id for child in nodes[0].children}
  if "vocab_file" not in children or "do_lower_case" not in children:
    raise FlagError("--bert_hub_module_handle=%s is a TF2 SavedModel without the vocab_file "
                    "asset and do_lower_case variable of a BERT encoder: pass --vocab_file "
                    "and --do_lower_case" % handle)
  asset = meta_graph.asset_file_def[nodes[children["vocab_file"]].asset.asset_file_def_index]
  vocab_file = os.path.join(path, "assets", asset.filename)
  do_lower_case = tf.train.load_variable(os.path.join(path, "variables", "variables"),
                                         "do_lower_case/.ATTRIBUTES/VARIABLE_VALUE")
  return vocab_file, bool(do_lower_case)


def tokenization_info(handle):
  """(vocab_file, do_lower_case) stored in a BERT hub module (TF1) or SavedModel (TF2)."""
  path = tf2_saved_model(handle)
  if path is not None:
    return tf2_tokenization_info(path, handle)
  hub = _hub()
  with tf.Graph().as_default():
    module = hub.Module(handle)
    info = module(signature="tokenization_info", as_dict=True)
    with tf.Session() as session:
      vocab_file, do_lower_case = session.run([info["vocab_file"], info["do_lower_case"]])
  return vocab_file.decode("utf-8"), bool(do_lower_case)


def export_hub_module(bert_config, init_checkpoint, vocab_file, do_lower_case, export_dir):
  """Writes the encoder, with weights from init_checkpoint, as a TF1 hub module."""
  hub = _hub()

  def module_fn(is_training):
    shape = [None, None]
    inputs = {name: tf.placeholder(tf.int32, shape, name=name)
              for name in ("input_ids", "input_mask", "segment_ids")}
    model = BertModel(bert_config, is_training, inputs["input_ids"], inputs["input_mask"],
                      inputs["segment_ids"])
    hub.add_signature("tokens", inputs=inputs,
                      outputs={"pooled_output": model.get_pooled_output(),
                               "sequence_output": model.get_sequence_output()})
    vocab = tf.constant(vocab_file)
    tf.add_to_collection(tf.GraphKeys.ASSET_FILEPATHS, vocab)
    hub.add_signature("tokenization_info", inputs={},
                      outputs={"vocab_file": vocab, "do_lower_case": tf.constant(do_lower_case)})

  spec = hub.create_module_spec(
      module_fn, tags_and_args=[(TAGS_TRAIN, {"is_training": True}),
                                (set(), {"is_training": False})])
  with tf.Graph().as_default():
    module = hub.Module(spec, trainable=True)
    by_checkpoint_name = dict(module.variable_map)
    in_checkpoint = dict(tf.train.list_variables(init_checkpoint))
    absent = sorted(set(by_checkpoint_name) - set(in_checkpoint))
    if absent:
      raise ValueError("%s lacks encoder variables: %s" % (init_checkpoint, ", ".join(absent)))
    tf.train.init_from_checkpoint(init_checkpoint, by_checkpoint_name)
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      module.export(export_dir, session)
  return export_dir
