"""The SavedModel of a fine-tuned model, and predicting a file from such an export alone
(--saved_model)."""

import itertools
import logging
import os
import time

import tensorflow.compat.v1 as tf

from data.features import Truncation
from data.files import write_manifest
from data.graph_tokenizer import GraphTokenizer
from data.reread import read_checked
from data.vocabulary import load_vocab
from modeling import export_graph
from pipeline import build, card, evaluation, hf_export, onnx_export, stopping
from pipeline.outputs import ModelRun, write_test_results
from pipeline.progress import format_seconds
from serving.predictor import Predictor
from spec import model_card, signature
from spec.run_errors import FlagError

log = logging.getLogger(__name__)

# Rows an export predicts at a time: enough that each chunk's length order leaves little
# padding, few enough that a chunk's features stay small (about 25 MB at 512 tokens).
EXPORT_CHUNK_ROWS = 4096


def export_model(outputs, model_fn, label_spec, checkpoint, export_card, vocab_file,
                 held_out=None):
  """The SavedModel of checkpoint and a serving model_fn (build.model_fn_of(serving=True):
  built on this machine's CPU, also after a TPU run), into --export_dir or a new version
  folder under <output_dir>/export, with the card and the vocabulary as assets, taking text
  or token ids; with the other --export_format formats inside it (held_out: the dev
  split's examples, when the run evaluated, for the ONNX int8 model's quality). Returns
  its path."""
  export_dir = outputs.export_dir or export_graph.versioned_export_dir(
      os.path.join(outputs.output_dir, "export"))
  if "hf" in outputs.export_format:
    hf_export.check_hf_export_of_card(export_card, outputs.output_dir)
  log.info("exporting %s into %s", checkpoint, export_dir)
  with tf.io.gfile.GFile(vocab_file, "r") as f:  # a hub module's may be in a bucket
    vocab_text = f.read()
  vocab = load_vocab(vocab_file, text=vocab_text)

  def seal(folder):  # the other formats, then the list of every file
    if "hf" in outputs.export_format:
      hf_export.write_hf_folder(os.path.join(folder, hf_export.HF_FOLDER), checkpoint,
                                export_card, vocab_text, vocab)
    if "onnx" in outputs.export_format:
      onnx_export.write_onnx_folder(os.path.join(folder, signature.ONNX_FOLDER), model_fn,
                                    checkpoint, export_card, vocab_text, vocab, held_out)
    write_manifest(folder)

  export_graph.export_saved_model(
      model_fn, checkpoint, export_dir, signature.output_name(label_spec),
      {signature.CARD_ASSET: model_card.to_json(export_card),
       signature.VOCAB_ASSET: vocab_text},
      text_features_of(export_card, vocab), seal=seal)
  log.info("exported %s to %s: predict from it alone with --saved_model=%s, or load it in "
           "Python with serving.predictor.Predictor",
           evaluation.describe_checkpoint(checkpoint), export_dir, export_dir)
  if "hf" in outputs.export_format:
    log.info("  with a transformers folder %s: AutoModelForSequenceClassification and "
             "AutoTokenizer load it", os.path.join(export_dir, hf_export.HF_FOLDER))
  if "onnx" in outputs.export_format:
    log.info("  with an ONNX folder %s: onnxruntime runs it without TensorFlow "
             "(serving/onnx_predictor.py)", os.path.join(export_dir, signature.ONNX_FOLDER))
  return export_dir


def text_features_of(card, vocab):
  """The export's text inputs and their ids, as the card says training made them (casing,
  max_seq_length, truncation, single texts or pairs): modeling.export_graph's text_features.
  None for a model that reads long texts in windows (--doc_stride), which a graph cannot
  split and aggregate: its export takes token ids only, and the Predictor, the server and
  --saved_model window the texts in Python."""
  if card["truncation"].get("windows"):
    log.info("the export has no text signature: the model reads long texts in windows "
             "(--doc_stride), which its graph cannot split; its signature %r takes token "
             "ids, and the Predictor, ./run.sh serve and --saved_model window the texts",
             signature.IDS_SIGNATURE)
    return None

  def text_features():
    tokenizer = GraphTokenizer(vocab, card["do_lower_case"], card["max_seq_length"],
                               Truncation.from_dict(card["truncation"]))
    names = signature.text_input_names(card["text_pair"])
    texts = [tf.placeholder(tf.string, [None], name=name) for name in names]
    return dict(zip(names, texts)), tokenizer.features(*texts)
  return text_features


def predict_with_export(c):
  """--saved_model: the predict file's rows scored by an export alone, into
  test_results.tsv in --output_dir. The export's model card gives the task, the file
  layout, the labels and the tokenisation; flags that contradict it are refused."""
  model = c.model
  try:
    predictor = Predictor(model.saved_model, tokenizer=model.tokenizer,
                          batch_size=c.training.predict_batch_size)
  except FlagError as e:  # no export there, or its card cannot be read
    raise FlagError("--saved_model=%s: %s" % (model.saved_model, e))
  with predictor:
    where = os.path.join(predictor.export_dir, "assets", signature.CARD_ASSET)
    c = card.apply_model_card(c, dict(predictor.card, hub_module=None), where)
    build.truncation_of(c.model)
    processor = build.make_processor(c.data, head_options=c.heads)
    card.check_matches_task(predictor.card, processor, where)
    c = card.settle_head_options(predictor.card, processor.label_spec, c, where)
    card.apply_card_reading(predictor.card, processor.label_spec)  # (the rows' predictions)
    tf.io.gfile.makedirs(c.outputs.output_dir)
    log.info("predicting the rows of %s with the export %s, %d rows at a time",
             processor.file_for("test"), predictor.export_dir, EXPORT_CHUNK_ROWS)
    start = time.time()
    with stopping.phase("predict"):
      run = ModelRun(predictions=write_test_results(
          c.outputs.output_dir, processor,
          predicted_in_chunks(predictor, read_checked(processor, "test")),
          {"saved_model": predictor.export_dir}))
    log.info("predicted in %s", format_seconds(time.time() - start))
    return run


def predicted_in_chunks(predictor, examples):
  """(example, its outputs) for examples (an iterable, read as it goes), predicted
  EXPORT_CHUNK_ROWS at a time (each chunk in length order): the file is never held."""
  examples = iter(examples)
  while True:
    chunk = list(itertools.islice(examples, EXPORT_CHUNK_ROWS))
    if not chunk:
      return
    stopping.check()
    yield from zip(chunk, predictor.predict_outputs(chunk))

