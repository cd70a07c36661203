"""A fine-tuned model as an ONNX folder (--export_format=onnx), written inside the export as
onnx/, which onnxruntime runs with no TensorFlow (serving/onnx_predictor.py):

  model.onnx        the model from token ids (the ids signature's inputs input_ids,
                    input_mask and segment_ids, int32 [batch, length]; its output
                    probabilities or values), fp32, converted by tf2onnx
  model.int8.onnx   the same with its weights quantised to int8 by onnxruntime's dynamic
                    quantisation: smaller and faster on a CPU, with outputs that differ
                    a little (README: when to use it)
  model_card.json, vocab.txt
                    the export's card and vocabulary (labels, casing, max_seq_length,
                    truncation)
  tokenizer.json    Google's ids with the tokenizers package, [CLS] and [SEP] added, a
                    single text truncated as the card says (for a client of its own)
  files.json        every file's size and sha256, checked before the folder is used

Converting needs tf2onnx and onnxruntime, which the TF 2.15 environment has. The
conversion is checked when written: onnxruntime's outputs of model.onnx on a batch of
every length up to max_seq_length equal TensorFlow's within ONNX_TOLERANCE.
"""

import importlib.util
import logging
import os
import shutil
import tempfile

import numpy as np
import tensorflow.compat.v1 as tf

from data.fast_tokenization import tokenizer_json
from data.files import write_manifest
from modeling import export
from spec import labels as label_specs
from spec import model_card, signature
from spec.errors import FlagError

log = logging.getLogger(__name__)

# ONNX operator set 15 (2021) is the newest that tf2onnx's TF 2.15 release writes by
# default, and every onnxruntime since 1.10 runs it.
ONNX_OPSET = 15
ONNX_TOLERANCE = 1e-4


def check_onnx_export():
  """A FlagError, before any work, when this environment cannot convert to ONNX."""
  missing = [name for name in ("tf2onnx", "onnxruntime")
             if importlib.util.find_spec(name) is None]
  if missing:
    raise FlagError(
        "--export_format=onnx converts with tf2onnx and checks with onnxruntime, and this "
        "environment lacks %s (TF 1.15's has neither: tf2onnx converts TF 2 graphs). Export "
        "on TF 2.15, where a checkpoint trained on TF 1.15 loads unchanged: ./run.sh shell "
        "tf2 -- python run_classifier.py --do_export --export_format=saved_model,onnx "
        "--output_dir=<the run's output_dir>" % " and ".join(missing))


def write_onnx_folder(folder, model_fn, checkpoint, card, vocab_text, vocab):
  """Writes the ONNX folder of checkpoint (a fine-tuned model of card; model_fn its
  serving model_fn) into folder, which must not exist: vocab_text is the vocabulary's
  text, vocab that text read ({token: id}). Returns folder."""
  output_name = signature.output_name(label_specs.from_card(card["label_spec"]))
  sample = check_batch(len(vocab), card["max_seq_length"])
  graph_def, expected = export.frozen_ids_graph(model_fn, checkpoint, output_name, sample)
  staging = tempfile.mkdtemp(prefix="onnx-export-")
  try:
    fp32 = os.path.join(staging, signature.ONNX_MODEL)
    convert(graph_def, output_name, fp32)
    difference = largest_difference(fp32, sample, expected)
    if not difference <= ONNX_TOLERANCE:  # (NaN too)
      raise FlagError(
          "--export_format=onnx: onnxruntime's outputs of the converted model differ from "
          "TensorFlow's by %.3g (at most %g is allowed), so it is not written: export "
          "without onnx" % (difference, ONNX_TOLERANCE))
    int8 = os.path.join(staging, signature.ONNX_INT8_MODEL)
    quantize(fp32, int8)
    log.info("ONNX: model.onnx gives TensorFlow's outputs within %.1g; model.int8.onnx "
             "within %.3g on the same batch", difference,
             largest_difference(int8, sample, expected))
    texts = {signature.CARD_ASSET: model_card.to_json(card),
             signature.VOCAB_ASSET: vocab_text,
             "tokenizer.json": card_tokenizer_json(card, vocab)}
    for name, text in texts.items():
      with open(os.path.join(staging, name), "w", encoding="utf-8") as f:
        f.write(text)
    write_manifest(staging)
    tf.io.gfile.makedirs(folder)  # (an export in a bucket too)
    for name in sorted(os.listdir(staging)):
      tf.io.gfile.copy(os.path.join(staging, name), os.path.join(folder, name))
  finally:
    shutil.rmtree(staging, ignore_errors=True)
  return folder


def check_batch(vocab_size, max_seq_length, seed=0):
  """Token ids of four rows, padded, of lengths from max_seq_length down to 1, with a
  second segment in two: what the conversion is checked on. Random ids, so every
  length, padding and segment the model takes is exercised without any text."""
  rng = np.random.RandomState(seed)
  lengths = [max_seq_length, max(max_seq_length // 2, 1), min(3, max_seq_length), 1]
  ids = rng.randint(0, vocab_size, size=[len(lengths), max_seq_length]).astype(np.int32)
  mask = np.zeros_like(ids)
  segments = np.zeros_like(ids)
  for row, length in enumerate(lengths):
    mask[row, :length] = 1
    if row < 2:
      segments[row, length // 2:length] = 1
  return {"input_ids": ids * mask, "input_mask": mask, "segment_ids": segments}


def convert(graph_def, output_name, path):
  """Writes the ONNX model of graph_def (export.frozen_ids_graph's) to path, with inputs
  and output named as the ids signature's."""
  import tf2onnx
  logging.getLogger("tf2onnx").setLevel(logging.WARNING)
  names = {name + ":0": name for name in signature.INPUT_NAMES + (output_name,)}
  tf2onnx.convert.from_graph_def(
      graph_def, input_names=[name + ":0" for name in signature.INPUT_NAMES],
      output_names=[output_name + ":0"], opset=ONNX_OPSET, tensors_to_rename=names,
      output_path=path)


def quantize(fp32_path, int8_path):
  """onnxruntime's dynamic quantisation: int8 weights, activations quantised as they run."""
  from onnxruntime.quantization import QuantType, quantize_dynamic
  root = logging.getLogger()
  level = root.level
  root.setLevel(logging.ERROR)  # (it logs every tensor it leaves as it is, and advice)
  try:
    quantize_dynamic(fp32_path, int8_path, weight_type=QuantType.QInt8)
  finally:
    root.setLevel(level)


def largest_difference(model_path, sample, expected):
  """The largest absolute difference between onnxruntime's outputs of model_path on sample
  and expected."""
  import onnxruntime
  session = onnxruntime.InferenceSession(model_path, providers=["CPUExecutionProvider"])
  (outputs,) = session.run(None, sample)
  return float(np.max(np.abs(outputs - expected)))


def card_tokenizer_json(card, vocab):
  """tokenizer.json of the card's casing; a single text truncated as training truncated it
  (head or tail; head_tail has no counterpart there: serving/onnx_predictor.py keeps it)."""
  mode = card["truncation"]["mode"]
  return tokenizer_json(vocab, card["do_lower_case"],
                        None if mode == "head_tail" else card["max_seq_length"],
                        keep_end=mode == "tail")
