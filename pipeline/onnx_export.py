"""A fine-tuned model as an ONNX folder (--export_format=onnx), written inside the export as
onnx/, which onnxruntime runs with no TensorFlow (serving/onnx_predictor.py):

  model.onnx        the model from token ids (the ids signature's inputs input_ids,
                    input_mask and segment_ids, int32 [batch, length]; its output
                    probabilities or values), fp32, converted by tf2onnx, each layer
                    normalisation one node (onnx_fusion), no shape arithmetic
                    (onnx_reshapes)
  model.int8.onnx   the same with its weights quantised to int8 by onnxruntime's dynamic
                    quantisation: smaller and faster on a CPU, with outputs that differ
                    a little (docs/guide/export_and_serving.md: when to use it)
  model_card.json, vocab.txt
                    the export's card and vocabulary (labels, casing, max_seq_length,
                    truncation)
  tokenizer.json    Google's ids with the tokenizers package, [CLS] and [SEP] added, a
                    single text truncated to max_seq_length (for a client of its own;
                    the predictor lays out pairs and head_tail as training did)
  files.json        every file's size and sha256, checked before the folder is used

Converting needs tf2onnx and onnxruntime, which the TF 2.15 environment has. The
conversion is checked when written: onnxruntime's outputs of model.onnx on batches of
several widths up to max_seq_length equal TensorFlow's within ONNX_TOLERANCE.
"""

import importlib
import logging
import os
import shutil
import tempfile

import numpy as np
import tensorflow.compat.v1 as tf

from data.fast_tokenization import tokenizer_json
from data.vocabulary import vocab_size
from data.files import write_manifest
from modeling import export_graph
from pipeline import int8_quality, onnx_fusion, onnx_reshapes
from pipeline.hf_export import tokenizer_truncation
from spec.heads import from_card
from spec import model_card, signature
from spec.run_errors import FlagError

log = logging.getLogger(__name__)

# ONNX operator set 17 (2022), the first with LayerNormalization (pipeline/onnx_fusion.py),
# which every onnxruntime since 1.12 runs.
ONNX_OPSET = onnx_fusion.LAYER_NORM_OPSET
ONNX_TOLERANCE = 1e-4


def check_onnx_export():
  """A FlagError, before any work, when this environment cannot convert to ONNX (a package
  missing or broken: each is imported)."""
  try:
    for module in ("tf2onnx", "onnxruntime.quantization"):
      importlib.import_module(module)
  except ImportError as e:
    raise FlagError(
        "--export_format=onnx converts with tf2onnx and checks with onnxruntime, and this "
        "environment cannot import %s (TF 1.15's has neither: tf2onnx converts TF 2 "
        "graphs). Export on TF 2.15, where a checkpoint trained on TF 1.15 loads "
        "unchanged: %s" % (e.name or e, signature.ONNX_EXPORT_COMMAND))


def write_onnx_folder(folder, model_fn, checkpoint, card, vocab_text, vocab, held_out=None):
  """Writes the ONNX folder of checkpoint (a fine-tuned model of card; model_fn its
  serving model_fn) into folder, which must not exist: vocab_text is the vocabulary's
  text, vocab that text read ({token: id}); held_out, the dev split's examples of a run
  that evaluated, on which the int8 model's quality is measured (int8_quality). Returns
  folder."""
  label_spec = from_card(card["label_spec"])
  output_name = signature.output_name(label_spec)
  samples = check_batches(vocab_size(vocab), card["max_seq_length"])
  graph_def, expected = export_graph.frozen_ids_graph(model_fn, checkpoint, output_name, samples)
  # Staged beside the export when it is local (a full disk is then the export's, and
  # reported so), else in the temp folder before its copy into the bucket.
  local = "://" not in folder
  staging = tempfile.mkdtemp(prefix=".onnx-staging-",
                             dir=os.path.dirname(folder) if local else None)
  try:
    fp32 = os.path.join(staging, signature.ONNX_MODEL)
    int8 = os.path.join(staging, signature.ONNX_INT8_MODEL)
    converted(convert, graph_def, output_name, fp32)
    difference = largest_difference(fp32, samples, expected)
    if not difference <= ONNX_TOLERANCE:  # (NaN too)
      raise FlagError(
          "--export_format=onnx: onnxruntime's outputs of the converted model differ from "
          "TensorFlow's by %.3g (at most %g is allowed), so no export was written: export "
          "without onnx" % (difference, ONNX_TOLERANCE))
    converted(quantize, fp32, int8)
    log.info("ONNX: model.onnx gives TensorFlow's outputs within %.1g; model.int8.onnx "
             "within %.3g, on the same batches", difference,
             largest_difference(int8, samples, expected))
    texts = {signature.CARD_ASSET: model_card.to_json(card),
             signature.VOCAB_ASSET: vocab_text,
             "tokenizer.json": card_tokenizer_json(card, vocab, folder)}
    for name, text in texts.items():
      with open(os.path.join(staging, name), "w", encoding="utf-8") as f:
        f.write(text)
    write_manifest(staging)  # (the predictors that measure the int8 model check it)
    int8_quality.write(staging, label_spec, held_out)
    if held_out is not None:  # (int8_quality.json joins the list)
      write_manifest(staging)
    if local:
      os.rename(staging, folder)
    else:
      tf.io.gfile.makedirs(folder)
      for name in sorted(os.listdir(staging)):
        tf.io.gfile.copy(os.path.join(staging, name), os.path.join(folder, name))
  finally:
    shutil.rmtree(staging, ignore_errors=True)
  return folder


def converted(step, *args):
  """step(*args) (the conversion, or the quantisation); a model the converter cannot take
  is one line (the run's checkpoints stay, and an export without onnx still works)."""
  try:
    step(*args)
  except (OSError, FlagError):
    raise
  except Exception as e:  # (tf2onnx and onnxruntime raise many kinds of their own)
    raise FlagError("--export_format=onnx: %s failed on this model (%s: %s), so no export "
                    "was written: export without onnx" % (
                        step.__name__, type(e).__name__, (str(e).splitlines() or [""])[0]))


def check_batches(vocab_size, max_seq_length, seed=0):
  """What the conversion is checked on: batches padded to several widths (as the predictor
  pads each batch to its longest text), each of rows from its width down to 1 token, the
  first two with a second segment. Random ids, so every width, padding and segment is
  exercised without any text."""
  rng = np.random.RandomState(seed)
  batches = []
  for width in sorted({max_seq_length, max(max_seq_length // 2, 1), min(3, max_seq_length)}):
    lengths = [width, max(width // 2, 1), 1]
    ids = rng.randint(0, vocab_size, size=[len(lengths), width]).astype(np.int32)
    mask = np.zeros_like(ids)
    segments = np.zeros_like(ids)
    for row, length in enumerate(lengths):
      mask[row, :length] = 1
      if row < 2:
        segments[row, length // 2:length] = 1
    batches.append({"input_ids": ids * mask, "input_mask": mask, "segment_ids": segments})
  return batches


def convert(graph_def, output_name, path):
  """Writes the ONNX model of graph_def (export_graph.frozen_ids_graph's) to path, with inputs
  and output named as the ids signature's, its layer normalisations one node each, its
  exact GELUs in the form onnxruntime fuses (onnx_fusion) and its dense layers' rows not
  flattened, with no shape computed at run time to restore them (onnx_reshapes)."""
  import onnx
  import tf2onnx
  logging.getLogger("tf2onnx").setLevel(logging.WARNING)
  names = {name + ":0": name for name in signature.INPUT_NAMES + (output_name,)}
  model, _ = tf2onnx.convert.from_graph_def(
      graph_def, input_names=[name + ":0" for name in signature.INPUT_NAMES],
      output_names=[output_name + ":0"], opset=ONNX_OPSET, tensors_to_rename=names)
  log.info("ONNX: %d layer normalisations made one node each, %d GELUs written as "
           "onnxruntime fuses them, %d reshapes of run-time shapes removed or made constant",
           onnx_fusion.fuse_layer_norms(model), onnx_fusion.divide_gelu_arguments(model),
           onnx_reshapes.keep_rows_unflattened(model))
  onnx.save(model, path)


def quantize(fp32_path, int8_path):
  """onnxruntime's dynamic quantisation of the matrix products: int8 weights with a scale
  per output column, activations quantised as they run; the embedding tables stay fp32
  (looked up without dequantising). Closer to the fp32 model than onnxruntime's defaults
  (one scale per matrix, the tables quantised too), and no slower: CHANGELOG.md gives the
  comparison, docs/predictor/results.md the int8 model's figures."""
  from onnxruntime.quantization import QuantType, quantize_dynamic
  root = logging.getLogger()
  level = root.level
  root.setLevel(logging.ERROR)  # (it logs every tensor it leaves as it is, and advice)
  try:
    quantize_dynamic(fp32_path, int8_path, weight_type=QuantType.QInt8, per_channel=True,
                     op_types_to_quantize=["MatMul"])
  finally:
    root.setLevel(level)


def largest_difference(model_path, samples, expected):
  """The largest difference between onnxruntime's outputs of model_path on samples and
  expected (one array each), relative for outputs above 1 in magnitude (a regression
  head's values: float32 keeps about 7 digits of any size)."""
  from serving.onnx_predictor import OnnxRunner
  runner = OnnxRunner(model_path)  # (as the predictors run it)
  try:
    largest = 0.0
    for (outputs,), wanted in zip(runner.map(samples), expected):
      largest = max(largest, float(np.max(np.abs(outputs - wanted) /
                                          np.maximum(1.0, np.abs(wanted)))))
  finally:
    runner.close()
  return largest


def card_tokenizer_json(card, vocab, folder):
  """tokenizer.json of the card's casing, truncating a single text to max_seq_length as
  training did where it can (hf_export.tokenizer_truncation: the head for head_tail, with
  a warning)."""
  side = tokenizer_truncation(card, folder)
  return tokenizer_json(vocab, card["do_lower_case"], card["max_seq_length"],
                        keep_end=side == "left")
