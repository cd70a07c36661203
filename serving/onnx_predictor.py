"""Predicting with an export's ONNX model in onnxruntime, where TensorFlow is not installed:
texts in, labels and probabilities out, as serving.predictor.Predictor gives them.

  from serving.onnx_predictor import OnnxPredictor
  predictor = OnnxPredictor("out/export/1700000000")   # the export, its onnx/, or --output_dir
  predictor.predict(["you are great", "you are an idiot"])
  # [{'label': '0', 'probabilities': {'0': 0.97, '1': 0.03}}, ...]

or from the command line, one text a line (a tab between the two texts of a pair), one
JSON result a line:

  ./run.sh predict-onnx out/export/1700000000 [--int8] < texts.txt

It needs onnxruntime, numpy and the tokenizers package only (./run.sh setup onnx makes
that environment, on Python 3.12). The folder (--export_format=onnx) is checked against
its files.json first; its model card gives the labels, casing, max_seq_length and
truncation, and texts are tokenised and laid out as training laid them out.
"""

import argparse
import io
import json
import logging
import os
import sys

from data.gfile import gfile
from serving.predicting import (EXPORT_AGAIN, ExportNotFound, ExportPredictor,
                                check_export_files, find_export, read_export_card)
from spec import signature

log = logging.getLogger(__name__)


def find_onnx_folder(path):
  """The ONNX folder of path: path itself when it holds model.onnx, else onnx/ of the
  export that path is or holds (serving.predicting.find_export)."""
  if gfile.exists(os.path.join(path, signature.ONNX_MODEL)):
    return path
  export_dir = find_export(path)
  folder = os.path.join(export_dir, signature.ONNX_FOLDER)
  if not gfile.exists(os.path.join(folder, signature.ONNX_MODEL)):
    raise ExportNotFound(
        "%s has no ONNX model (%s): export it with --export_format=saved_model,onnx: "
        "./run.sh shell tf2 -- python run_classifier.py --do_export "
        "--export_format=saved_model,onnx --output_dir=<its output_dir>"
        % (export_dir, os.path.join(folder, signature.ONNX_MODEL)))
  return folder


class OnnxPredictor(ExportPredictor):
  """An export's ONNX model in an onnxruntime session (the CPU).

  path: the ONNX folder, the export holding it, or a training --output_dir (its newest
  export). int8: run model.int8.onnx, the dynamically quantised model: faster, with
  outputs that differ a little (the README gives its metric on real data). threads:
  onnxruntime's threads within an operator (default: every core). tokenizer and
  batch_size: as Predictor's.
  """

  def __init__(self, path, int8=False, tokenizer="auto", batch_size=32, threads=None):
    import onnxruntime
    folder = find_onnx_folder(path)
    check_export_files(folder)
    super(OnnxPredictor, self).__init__(read_export_card(folder, files=()), tokenizer,
                                        batch_size)
    self.export_dir = folder
    self.model_path = os.path.join(
        folder, signature.ONNX_INT8_MODEL if int8 else signature.ONNX_MODEL)
    options = onnxruntime.SessionOptions()
    if threads:
      options.intra_op_num_threads = threads
    try:
      self._session = onnxruntime.InferenceSession(
          self.model_path, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # (onnxruntime raises its own types; the files were as listed)
      raise ExportNotFound("%s cannot be loaded by onnxruntime %s (%s): %s" % (
          self.model_path, onnxruntime.__version__, str(e).splitlines()[0], EXPORT_AGAIN))
    log.info("loaded %s: %s, max_seq_length %d", self.model_path, self.label_spec.describe(),
             self.max_seq_length)

  def run_batch(self, batch):
    (outputs,) = self._session.run([self.output_name], batch)
    return outputs


def read_inputs(lines, pairs):
  """The texts of lines (one a line, its line end dropped), or (text, text_b) pairs split at
  the one tab of each line; a ValueError naming the line otherwise."""
  inputs = []
  for number, line in enumerate(lines, 1):
    line = line.rstrip("\r\n")
    if not pairs:
      inputs.append(line)
      continue
    parts = line.split("\t")
    if len(parts) != 2:
      raise ValueError("line %d has %d tab-separated texts: a model of pairs takes two a line "
                       "(text<TAB>text_b)" % (number, len(parts)))
    inputs.append(tuple(parts))
  return inputs


def main(argv=None):
  parser = argparse.ArgumentParser(
      description="Predict texts with an export's ONNX model in onnxruntime: one text a line "
      "on standard input (text<TAB>text_b for a model of pairs), one JSON result a line out.")
  parser.add_argument("path", help="the ONNX folder, the export holding it, or a training "
                      "--output_dir (its newest export)")
  parser.add_argument("--int8", action="store_true", help="run the int8 model (faster; see "
                      "the README for its metric against fp32)")
  parser.add_argument("--batch_size", type=int, default=32, help="texts per run")
  parser.add_argument("--input", help="a file of texts instead of standard input")
  args = parser.parse_args(argv)
  logging.basicConfig(level=logging.WARNING, format="%(message)s")
  try:
    predictor = OnnxPredictor(args.path, int8=args.int8, batch_size=args.batch_size)
    if args.input:
      with open(args.input, encoding="utf-8", newline="") as f:
        inputs = read_inputs(f, predictor.reads_pairs)
    else:  # (UTF-8 whatever the locale says)
      inputs = read_inputs(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", newline=""),
                           predictor.reads_pairs)
    results = predictor.predict(inputs)
  except ImportError as e:
    raise SystemExit("predict-onnx: %s is not installed: ./run.sh setup onnx makes the "
                     "environment that has it" % (e.name or e))
  except (ValueError, OSError) as e:  # (ExportNotFound is a ValueError)
    raise SystemExit("predict-onnx: %s" % e)
  for result in results:
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")


if __name__ == "__main__":
  main()
