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
import concurrent.futures
import ctypes
import io
import json
import logging
import os
import platform
import struct
import sys

from data.gfile import gfile
from serving.predicting import (ExportNotFound, ExportPredictor, check_batch_size,
                                check_export_files, find_export, read_export_card)
from spec import signature
from spec.cores import usable_cores

log = logging.getLogger(__name__)


ONNX_EXPORT_AGAIN = "export it again with its ONNX model: " + signature.ONNX_EXPORT_COMMAND


def find_onnx_folder(path):
  """The ONNX folder of path: path itself when it holds an ONNX model, else onnx/ of the
  export that path is or holds (serving.predicting.find_export). Local paths only:
  onnxruntime reads files from this machine."""
  if "://" in path:
    raise ExportNotFound("%s: onnxruntime reads the model from this machine's disk: copy the "
                         "folder here first (e.g. gsutil -m cp -r %s .)" % (path, path))
  if any(gfile.exists(os.path.join(path, name))
         for name in (signature.ONNX_MODEL, signature.ONNX_INT8_MODEL)):
    return path
  try:
    export_dir = find_export(path)
  except ExportNotFound:
    raise ExportNotFound("%s holds no ONNX model (no %s, and no export with an %s/ folder): "
                         "export one on TF 2.15: %s" % (path, signature.ONNX_MODEL,
                                                         signature.ONNX_FOLDER,
                                                         signature.ONNX_EXPORT_COMMAND))
  folder = os.path.join(export_dir, signature.ONNX_FOLDER)
  if not gfile.exists(folder):
    raise ExportNotFound("%s has no ONNX model (no %s/ folder): %s" % (
        export_dir, signature.ONNX_FOLDER, ONNX_EXPORT_AGAIN))
  return folder


# onnxruntime's fusions whose CPU kernels ran slower than the nodes they replace (the MiniLM
# int8 model's one-text runs, timed by hand): the residual Add and LayerNormalization as
# one SkipLayerNormalization.
DISABLED_FUSIONS = ["SkipLayerNormFusion"]


class OnnxRunner(object):
  """An ONNX model in one onnxruntime session on the CPU, run from runners threads of its
  own (threads: onnxruntime's threads within an operator; default every core), in which
  denormal floats are flushed to zero, as TensorFlow's CPU kernels flush them. A padded
  text's masked attention scores (-10000) make the softmax's exponentials denormal, which
  the CPU computes many times slower: the softmax of a padded batch would take ten times
  as long (the masked weights are zero either way). onnxruntime's option flushes them on
  its own threads, and on the thread that makes a process's first session; the runner
  threads flush them themselves (flush_denormals), and the caller's thread computes as
  it did. run and map may be called from several threads at once.

  Raises what onnxruntime raises when the model cannot be loaded."""

  def __init__(self, model_path, threads=None, runners=1):
    import onnxruntime
    check_counts("OnnxRunner", threads=threads, runners=runners)
    self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=runners,
                                                       initializer=flush_denormals)

    def open_session():
      options = onnxruntime.SessionOptions()
      if threads:
        options.intra_op_num_threads = threads
      options.add_session_config_entry("session.set_denormal_as_zero", "1")
      return onnxruntime.InferenceSession(model_path, options,
                                          providers=["CPUExecutionProvider"],
                                          disabled_optimizers=DISABLED_FUSIONS)
    try:
      self._session = self._pool.submit(open_session).result()
    except BaseException:
      self.close()
      raise

  def _run(self, feeds, outputs):
    return self._session.run(outputs, feeds)

  def run(self, feeds, outputs=None):
    """The session's outputs (a list of numpy arrays) for feeds ({input name: array})."""
    return self._pool.submit(self._run, feeds, outputs).result()

  def map(self, feeds, outputs=None):
    """run of each of feeds (an iterable), in order, as many at once as there are runners."""
    return self._pool.map(lambda one: self._run(one, outputs), feeds)

  def close(self):
    self._pool.shutdown(wait=True)


def check_counts(owner, **counts):
  """A ValueError naming owner and the count, unless each of counts is None (the default)
  or a whole number of 1 or more (threads, runners)."""
  for name, value in sorted(counts.items()):
    if value is not None and not (isinstance(value, int) and value >= 1):
      raise ValueError("%s: %s=%r must be a whole number, 1 or more" % (owner, name, value))


# The SSE control register's flush-to-zero and denormals-are-zero bits, and where glibc's
# fenv_t holds that register on x86-64 (after the x87 environment's 28 bytes).
_FTZ_DAZ, _MXCSR_OFFSET = 0x8040, 28


def flush_denormals():
  """Makes this thread's float arithmetic flush denormal floats to zero (64-bit x86-64
  Linux with glibc; elsewhere onnxruntime's option alone flushes them, on its own threads
  and the thread that made the first session, so runs on one thread each are slower
  there). Whether it did."""
  if not (sys.platform.startswith("linux") and platform.machine() == "x86_64" and
          struct.calcsize("P") == 8 and platform.libc_ver()[0] == "glibc"):
    return False  # (a 32-bit Python on x86-64 has the x87 layout alone: no mxcsr there)
  try:
    libc = ctypes.CDLL(None)
    environment = ctypes.create_string_buffer(64)  # (fenv_t is 32 bytes there)
    if libc.fegetenv(environment) != 0:
      return False
    mxcsr = struct.unpack_from("<I", environment.raw, _MXCSR_OFFSET)[0]
    struct.pack_into("<I", environment, _MXCSR_OFFSET, mxcsr | _FTZ_DAZ)
    return libc.fesetenv(environment) == 0
  except (OSError, AttributeError):  # (no C library to call: computed as before, slower)
    return False


class OnnxPredictor(ExportPredictor):
  """An export's ONNX model in an onnxruntime session (the CPU).

  path: the ONNX folder, the export holding it, or a training --output_dir (its newest
  export). int8: run model.int8.onnx, the dynamically quantised model: faster, with
  outputs that differ a little (docs/predictor/results.md gives its metric on real data),
  run one text at a time: its activations are quantised with one scale per run, the
  largest value of every text in it, so a text's outputs would otherwise depend on the
  texts batched with it (by up to 0.1 in a probability). threads: onnxruntime's threads
  within an operator; runs_at_once: how many runs are made at once, each from its own
  thread. By default the int8 model makes a run on each core at once, one thread each (a
  run of one text gains little from a second thread), and the fp32 model one run at a
  time on every core. tokenizer and batch_size: as Predictor's. Its runs may also be
  made from several threads of the caller's at once (onnxruntime's sessions allow it).
  """

  # A run costs about 5 ms plus 0.2 ms a padded token (MiniLM fp32, 2 cores, runs of 1 to 8
  # texts of 16 to 128 tokens): 25 tokens' worth.
  run_overhead_tokens = 25

  def __init__(self, path, int8=False, tokenizer="auto", batch_size=32, threads=None,
               runs_at_once=None):
    import onnxruntime
    check_batch_size(batch_size)  # (before the folder's files are read and hashed)
    folder = find_onnx_folder(path)
    check_export_files(folder, ONNX_EXPORT_AGAIN)
    super(OnnxPredictor, self).__init__(read_export_card(folder, files=()), tokenizer,
                                        batch_size)
    self.export_dir = folder
    self.model_path = os.path.join(
        folder, signature.ONNX_INT8_MODEL if int8 else signature.ONNX_MODEL)
    if int8:
      self.max_run_texts = 1
      if runs_at_once is None and threads is None:
        runs_at_once, threads = usable_cores(), 1
    check_counts("OnnxPredictor", threads=threads, runs_at_once=runs_at_once)
    try:
      self._runner = OnnxRunner(self.model_path, threads, runs_at_once or 1)
    except Exception as e:  # (onnxruntime raises its own types; the files were as listed)
      raise ExportNotFound("%s cannot be loaded by onnxruntime %s (%s): %s" % (
          self.model_path, onnxruntime.__version__, (str(e).splitlines() or [""])[0],
          ONNX_EXPORT_AGAIN))
    log.info("loaded %s: %s, max_seq_length %d", self.model_path, self.label_spec.describe(),
             self.max_seq_length)

  def run_batch(self, batch):
    (outputs,) = self._runner.run(batch, [self.output_name])
    return outputs

  def _run_batches(self, batches):
    return (outputs for (outputs,) in self._runner.map(batches, [self.output_name]))

  def close(self):
    self._runner.close()


def int8_problem(folder):
  """Why a server does not serve the int8 model of an ONNX folder (whose files are
  checked), or None: the export measured no held-out quality of it, or measured it more
  than INT8_AUC_BOUND below the fp32 model's ROC-AUC. The figures are logged when it
  serves."""
  path = os.path.join(folder, signature.ONNX_INT8_QUALITY)
  fix = "serve the fp32 model (drop --int8)"
  if not gfile.exists(path):
    return ("--int8: %s records no held-out quality of its int8 model (its outputs differ "
            "from the fp32 model's), so it is not served: export in a run that evaluates "
            "(--do_eval --do_export --export_format=onnx) to measure it, or %s" % (folder, fix))
  with gfile.GFile(path, "r") as f:
    figures = json.load(f)
  if figures["fp32"] is None:
    return ("--int8: no held-out ROC-AUC measures this model's head on its %d dev rows "
            "(%s), so its int8 model is not served: %s" % (figures["rows"], path, fix))
  if not signature.int8_keeps_quality(figures):
    return ("--int8: the int8 model's held-out ROC-AUC is %.4f against the fp32 model's "
            "%.4f on the %d dev rows its export measured (%s), more than %g below, so it "
            "is not served: %s" % (figures["int8"], figures["fp32"], figures["rows"], path,
                                   signature.INT8_AUC_BOUND, fix))
  log.info("serving the int8 model: its held-out ROC-AUC is %.4f against the fp32 model's "
           "%.4f on %d dev rows", figures["int8"], figures["fp32"], figures["rows"])
  return None


class InputError(ValueError):
  """A line of the texts to predict that cannot be one input; the message names it."""


def read_inputs(lines, pairs, source):
  """The texts of lines (one a line, its line end dropped: \\n or \\r\\n; a lone \\r stays
  in its text), or (text, text_b) pairs split at the one tab of each line; an InputError
  naming source and the line otherwise."""
  inputs = []
  for number, line in enumerate(lines, 1):
    if line.endswith("\n"):
      line = line[:-2] if line.endswith("\r\n") else line[:-1]
    if not pairs:
      inputs.append(line)
      continue
    parts = line.split("\t")
    if len(parts) != 2:
      raise InputError("%s, line %d: %d tab-separated texts, and a model of pairs takes two "
                       "a line (text<TAB>text_b)" % (source, number, len(parts)))
    inputs.append(tuple(parts))
  return inputs


def read_input_file(path, pairs):
  """read_inputs of a file (None: standard input), read as UTF-8 whatever the locale."""
  source = path or "<standard input>"
  try:
    if path:
      with open(path, encoding="utf-8", newline="\n") as f:
        return read_inputs(f, pairs, source)
    return read_inputs(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", newline="\n"),
                       pairs, source)
  except UnicodeDecodeError as e:
    raise InputError("%s is not UTF-8 text (byte %d cannot be decoded): save it as UTF-8"
                     % (source, e.start))


def main(argv=None):
  parser = argparse.ArgumentParser(
      description="Predict texts with an export's ONNX model in onnxruntime: one text a line "
      "on standard input (text<TAB>text_b for a model of pairs), one JSON result a line out.")
  parser.add_argument("path", help="the ONNX folder, the export holding it, or a training "
                      "--output_dir (its newest export)")
  parser.add_argument("--int8", action="store_true", help="run the int8 model (faster; see "
                      "docs/predictor/results.md for its metric against fp32)")
  parser.add_argument("--batch_size", type=int, default=32, help="texts per run (the int8 "
                      "model runs one at a time, so that a text's result is its own)")
  parser.add_argument("--input", help="a file of texts instead of standard input")
  args = parser.parse_args(argv)
  logging.basicConfig(level=logging.WARNING, format="%(message)s")
  try:
    predictor = OnnxPredictor(args.path, int8=args.int8, batch_size=args.batch_size)
    results = predictor.predict(read_input_file(args.input, predictor.reads_pairs))
    for result in results:
      sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()
  except ImportError as e:
    raise SystemExit("predict-onnx: %s is not installed here: ./run.sh setup onnx makes the "
                     "environment that has it" % (e.name or e))
  except (ExportNotFound, InputError) as e:
    raise SystemExit("predict-onnx: %s" % e)
  except BrokenPipeError:  # (the reader stopped early, as head does)
    sys.stderr.close()
  except OSError as e:
    raise SystemExit("predict-onnx: %s: %s" % (e.filename or args.input or args.path,
                                               e.strerror or e))


if __name__ == "__main__":
  main()
