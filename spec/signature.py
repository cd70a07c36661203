"""What an exported SavedModel and its readers agree on: the signature, its tensors and
the assets that make the export enough to predict from text.

modeling/export_graph.py writes it; serving/predictor.py and TF Serving read it.
"""

SERVE_TAG = "serve"
# Two signatures share one model. The default takes text (string [batch], and text_b for
# a model of pairs) and tokenises it in the graph, so a TF Serving request is
# {"instances": ["some text"]}; IDS_SIGNATURE takes the token ids a tokenizer outside
# made. An export written before exports took text has one signature, the default,
# taking ids.
SIGNATURE_NAME = "serving_default"
IDS_SIGNATURE = "ids"
# int32 [batch, length]; any length up to the model card's max_seq_length, so a batch is
# padded only to its longest text.
INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")
CARD_ASSET = "model_card.json"
VOCAB_ASSET = "vocab.txt"
# The ONNX folder inside an export (--export_format=onnx): the model from ids, with the
# ids signature's input and output names, in fp32 and int8, beside the card and the
# vocabulary (pipeline/onnx_export.py writes it, serving/onnx_predictor.py reads it).
ONNX_FOLDER = "onnx"
ONNX_MODEL = "model.onnx"
ONNX_INT8_MODEL = "model.int8.onnx"
# What an export that evaluated measured of its int8 model against its fp32 model on the
# dev split (pipeline/int8_quality.py), and how far below the fp32 model's ROC-AUC the
# int8 model's may be for a server to serve it.
ONNX_INT8_QUALITY = "int8_quality.json"
INT8_AUC_BOUND = 0.002


def int8_keeps_quality(figures):
  """Whether int8_quality.json's figures say the int8 model keeps the fp32 model's
  quality: a held-out ROC-AUC at most INT8_AUC_BOUND below the fp32 model's."""
  return (figures.get("fp32") is not None and figures.get("int8") is not None and
          figures["int8"] >= figures["fp32"] - INT8_AUC_BOUND)
# How an export gets its ONNX folder: on TF 2.15, from the training run's folder.
ONNX_EXPORT_COMMAND = ("./run.sh shell tf2 -- python run_classifier.py --do_export "
                       "--export_format=saved_model,onnx --output_dir=<its output_dir>")


def text_input_names(text_pair):
  """The text signature's inputs: one string per row, two for a model of pairs."""
  return ("text", "text_b") if text_pair else ("text",)


def ids_signature_of(signature_defs):
  """The name of the signature that takes ids among an export's signature_defs: IDS_SIGNATURE,
  or the default one of an export written before exports took text."""
  return IDS_SIGNATURE if IDS_SIGNATURE in signature_defs else SIGNATURE_NAME


def output_name(label_spec):
  """The signature's one output [batch, num_outputs], named for what it holds: per-class
  (softmax) or per-column (sigmoid) probabilities, or a regression head's values."""
  return label_spec.output_name
