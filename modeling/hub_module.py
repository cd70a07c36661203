"""BERT as a TF1-format TF-Hub module: using one in model_fn, and exporting ours as one.

A module has the `tokens` signature (input_ids, input_mask, segment_ids ->
pooled_output, sequence_output) and `tokenization_info` (vocab_file,
do_lower_case), the interface of Google's published BERT modules.
"""

import tensorflow.compat.v1 as tf

from modeling.bert import BertModel

TAGS_TRAIN = {"train"}


def _hub():
  try:
    import tensorflow_hub as hub
  except ImportError:
    raise RuntimeError("--bert_hub_module_handle needs the tensorflow_hub package: "
                       "pip install -r requirements.txt")
  if not hasattr(hub, "Module"):
    raise RuntimeError(
        "tensorflow_hub %s cannot load TF1-format hub modules (hub.Module was removed in 0.16). "
        "Install tensorflow-hub<=0.15 (requirements.txt pins a working version), or use "
        "--init_checkpoint with a checkpoint instead of a hub module." % hub.__version__)
  return hub


def hub_pooled_output(handle, features, is_training, pooling="cls"):
  """The module's pooled output [batch, hidden]; with pooling "mean", the mean of its
  sequence output over the real tokens instead."""
  hub = _hub()
  module = hub.Module(handle, tags=TAGS_TRAIN if is_training else set(), trainable=True)
  inputs = {"input_ids": features["input_ids"], "input_mask": features["input_mask"],
            "segment_ids": features["segment_ids"]}
  outputs = module(inputs=inputs, signature="tokens", as_dict=True)
  if pooling == "mean":
    from modeling.head import mean_pool
    return mean_pool(outputs["sequence_output"], features["input_mask"])
  return outputs["pooled_output"]


def tokenization_info(handle):
  """(vocab_file, do_lower_case) stored in a BERT hub module."""
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
