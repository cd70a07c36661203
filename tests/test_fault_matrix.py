"""The fault matrix, generated from the inventory (spec/inventory.py): every artefact a run
reads back, and every input it reads, under every fault its entry lists.

Each cell copies a real run's folder (files linked, the faulted one copied), applies the
fault, and does what a run does before it uses the artefact (REUSE). The one allowed
outcome: the same value as from the untouched folder (the fault did not matter, or a
cache was found unusable and is rebuilt, on_fault "rebuild"), or one line of a project
error naming the file or its folder, never a traceback of another kind, never a value
that differs (a fault used as if nothing were wrong), never a wait for ever (each cell
has 60 s).
"""

import os
import shutil
import signal

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import JIGSAW, TINY, TINY_VOCAB
from data.data_error import DataError
from modeling.hf_folder import ConversionError
from spec import inventory
from spec.run_errors import FileFault, FlagError, NumericFault, ProcessFault

PROJECT_ERRORS = (FlagError, DataError, FileFault, NumericFault, ProcessFault,
                  ConversionError)
CELL_SECONDS = 60


# --- the faults -------------------------------------------------------------------------

def _own_copy(path):
  """path as a file of its own (a cell's copy links to the run's files: change none)."""
  if os.path.islink(path) or not os.path.isfile(path):
    return
  data = open(path, "rb").read()
  os.remove(path)
  with open(path, "wb") as f:
    f.write(data)


def apply_fault(path, fault, other=None):
  """Does fault (spec.inventory.FILE_FAULTS) to the file at path; other: the same file of
  another run."""
  _own_copy(path)
  if fault == "missing":
    os.remove(path)
  elif fault == "empty":
    open(path, "wb").close()
  elif fault == "truncated":  # (half its bytes, never at a line's end)
    data = open(path, "rb").read()
    cut = len(data) // 2
    while 0 < cut < len(data) and data[cut - 1:cut] == b"\n":
      cut += 1
    with open(path, "wb") as f:
      f.write(data[:cut])
  elif fault == "flipped":
    data = bytearray(open(path, "rb").read())
    middle, span = len(data) // 2, max(1, min(64, len(data) // 8))
    for i in range(max(0, middle - span), min(len(data), middle + span)):
      data[i] ^= 0xFF
    with open(path, "wb") as f:
      f.write(bytes(data))
  elif fault == "folder":
    os.remove(path)
    os.mkdir(path)
  elif fault == "fifo":
    os.remove(path)
    os.mkfifo(path)
  elif fault == "unreadable":
    os.remove(path)
    os.symlink(os.path.basename(path), path)  # (a link to itself: open fails, ELOOP)
  elif fault == "other_run":
    os.remove(path)
    shutil.copyfile(other, path)
  else:
    raise ValueError(fault)


def linked_copy(source, target):
  """A copy of a folder whose files are hard links (cheap); _own_copy before a change."""
  shutil.copytree(source, target, copy_function=os.link)
  return target


class Timeout(Exception):
  pass


def within(seconds, function, *args):
  """function(*args), or Timeout after seconds (a read that waits for ever)."""
  def expire(signum, frame):
    raise Timeout("still waiting after %d s" % seconds)
  previous = signal.signal(signal.SIGALRM, expire)
  signal.alarm(seconds)
  try:
    return function(*args)
  finally:
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


# --- what a run does before it uses each artefact ----------------------------------------

def _head_checkpoint(folder):
  from pipeline.evaluation import head_checkpoint
  from spec.heads.classification import SingleLabel
  used = head_checkpoint(folder, None, False, "predict", SingleLabel(["toxic"], ["0", "1"]))
  return os.path.basename(used)


def _best(folder):
  from pipeline.eval_history import read_best
  record = read_best(folder)
  return record and dict(record, checkpoint=os.path.basename(record["checkpoint"]))


def _history(folder):
  from pipeline.eval_history import HISTORY_CSV, EvalHistory
  return EvalHistory.load(os.path.join(folder, HISTORY_CSV), 10 ** 9).rows


def _records(folder):
  """(fingerprint, examples) of the train records when a run would reuse them, else None
  (rebuilt): what data.tfrecord._reusable decides, against the untouched run's key."""
  from data.tfrecord import files_problem, read_metadata
  metadata = read_metadata(os.path.join(folder, "features", "train.tf_record"))
  if metadata is None or metadata["fingerprint"] != REUSE_KEY[0] or files_problem(metadata):
    return None
  return metadata["fingerprint"], metadata["num_examples"]


def _export_dir(folder):
  export = os.path.join(folder, "export")
  return os.path.join(export, sorted(os.listdir(export))[-1])


def _export(folder):
  from serving.predicting import check_export_files, read_export_card
  export = _export_dir(folder)
  check_export_files(export)
  return read_export_card(export)


def _onnx(folder):
  from serving.predicting import check_export_files
  onnx = os.path.join(_export_dir(folder), "onnx")
  check_export_files(onnx)
  return sorted(os.listdir(onnx))


def _card(folder):
  from pipeline.card import read_model_card
  return read_model_card(folder)


def _state(folder):
  from modeling.checkpoint import newest_checkpoint
  newest = newest_checkpoint(folder)
  return newest and os.path.relpath(newest, folder)


REUSE_KEY = [None]  # the untouched run's records' fingerprint
# artefact name -> (the run whose folder it is in, what a run does before using it)
REUSE = {
    "model card": ("jigsaw_model", _card),
    "checkpoint state": ("jigsaw_model", _state),
    "checkpoint index": ("jigsaw_model", _head_checkpoint),
    "checkpoint data": ("jigsaw_model", _head_checkpoint),
    "eval history": ("best_run", _history),
    "best record": ("best_run", _best),
    "best checkpoint": ("best_run", _best),
    "records' metadata": ("jigsaw_model", _records),
    "records": ("jigsaw_model", _records),
    "export manifest": ("jigsaw_model", _export),
    "SavedModel": ("jigsaw_model", _export),
    "SavedModel variables": ("jigsaw_model", _export),
    "export card": ("jigsaw_model", _export),
    "export vocabulary": ("jigsaw_model", _export),
    "ONNX folder": ("jigsaw_model", _onnx),
}
ROOTS = {"output_dir": "", "cache_dir": "features", "export": None}


def targets(folder, artefact):
  """The files of a run's folder a fault of artefact strikes: every file its pattern
  matches (of the newest checkpoint only, for a checkpoint's files)."""
  import fnmatch
  base = folder if artefact.root == "output_dir" else (
      os.path.join(folder, "features") if artefact.root == "cache_dir" else _export_dir(folder))
  found = []
  for root, dirs, names in os.walk(base):
    for name in names + dirs:
      relative = os.path.relpath(os.path.join(root, name), base).replace(os.sep, "/")
      if fnmatch.fnmatch(relative, artefact.pattern) and os.path.isfile(
          os.path.join(root, name)):
        found.append(relative)
  if artefact.name in ("checkpoint index", "checkpoint data"):
    newest = os.path.basename(_state(folder))
    found = [f for f in found if f.startswith(newest + ".")]
  if artefact.name == "records":
    found = [f for f in found if f.startswith("train.tf_record")]
  if artefact.name == "records' metadata":
    found = [f for f in found if f.startswith("train.")]
  return [os.path.join(base, f) for f in sorted(found)]


def state_cells():
  cells = []
  for artefact, fault in inventory.matrix(inventory.ARTEFACTS):
    marks = [pytest.mark.tf2_only] if artefact.name == "ONNX folder" else []
    cells.append(pytest.param(artefact, fault, id="%s-%s" % (artefact.name, fault),
                              marks=marks))
  return cells


def test_every_artefact_read_back_has_its_reuse():
  """A new artefact that a run reads back joins the matrix with what a run does first."""
  read_back = {a.name for a in inventory.ARTEFACTS if a.verified_by and a.faults}
  assert read_back == set(REUSE)


def check_outcome(reuse, folder, expected, places, on_fault):
  """places: the paths one of which the error must name (the faulted file, or a folder it
  is in)."""
  try:
    got = within(CELL_SECONDS, reuse, folder)
  except PROJECT_ERRORS as error:
    message = str(error)
    assert "\n" not in message, message
    assert any(place in message for place in places), (
        "the error names no place of %s: %s" % (places, message))
    return "refused"
  if on_fault == "rebuild" and got is None:
    return "rebuilt"
  assert got == expected, "a fault was used as if nothing were wrong: %r != %r" % (
      got, expected)
  return "same"


@pytest.mark.slow
@pytest.mark.parametrize("artefact, fault", state_cells())
def test_state(artefact, fault, jigsaw_model, best_run, tmp_path):
  runs = {"jigsaw_model": jigsaw_model, "best_run": best_run}
  which, reuse = REUSE[artefact.name]
  source = runs[which].output_dir
  if REUSE_KEY[0] is None:
    from data.tfrecord import read_metadata
    REUSE_KEY[0] = read_metadata(os.path.join(
        jigsaw_model.output_dir, "features", "train.tf_record"))["fingerprint"]
  expected = reuse(source)
  folder = linked_copy(source, str(tmp_path / "run"))
  other = runs["best_run" if which == "jigsaw_model" else "jigsaw_model"].output_dir
  paths = targets(folder, artefact)
  assert paths, "no file of %s in %s" % (artefact.name, source)
  for path in paths:
    counterpart = os.path.join(other, os.path.relpath(path, folder))
    assert fault != "other_run" or os.path.exists(counterpart), counterpart
    apply_fault(path, fault, counterpart)
  check_outcome(reuse, folder, expected, paths + [folder], artefact.on_fault)


# --- the user's inputs ----------------------------------------------------------------------

def _vocab(path):
  """A run's vocabulary: read, and its size checked against the BERT config."""
  from data.vocabulary import check_vocab_matches_config, load_vocab
  check_vocab_matches_config(path, 30522, "bert_config.json")
  return load_vocab(path)


def _config(path):
  from pipeline.build import read_bert_config
  return read_bert_config(path).to_dict()


def _init_checkpoint(prefix):
  from pipeline.checks import check_model_inputs
  from spec.options import ModelOptions
  check_model_inputs(ModelOptions(init_checkpoint=prefix))
  reader = tf.train.load_checkpoint(prefix)
  return {name: float(np.sum(reader.get_tensor(name)))
          for name in sorted(reader.get_variable_to_shape_map())}


def _data(folder):
  """A run's dev split: its files checked as a run checks them first, then read."""
  from pipeline.build import make_processor
  from pipeline.splits import check_hashed_then_read
  from spec.options import DataOptions
  processor = make_processor(DataOptions(task_name="jigsaw_toxic", data_dir=folder))
  check_hashed_then_read(processor, ["dev"])
  return [(e.guid, e.text_a, e.label) for e in processor.iter_examples("dev")]


def _hf(folder):
  from modeling.convert_hf import convert
  out = folder + "_converted"
  shutil.rmtree(out, ignore_errors=True)
  _, prefix, _ = convert(folder, out)
  reader = tf.train.load_checkpoint(prefix)
  return {name: float(np.sum(reader.get_tensor(name)))
          for name in sorted(reader.get_variable_to_shape_map())}


def _hf_folder(tmp_path):
  from test_convert_hf import _hf_config, _hf_tensors, _write_hf_dir
  config = _hf_config()
  return _write_hf_dir(str(tmp_path / "hf"), _hf_tensors(config), config,
                       config["vocab_size"])


# input name -> (make a copy of a good one under tmp_path: (what reuse takes, the file to
# fault)), what a run does with it)
INPUT_CASES = {
    "vocabulary": (lambda t, c: (shutil.copy(TINY_VOCAB, str(t / "vocab.txt")),) * 2,
                   _vocab),
    "BERT config": (lambda t, c: (shutil.copy(os.path.join(TINY, "bert_config.json"),
                                              str(t / "bert_config.json")),) * 2, _config),
    "pre-trained checkpoint": (
        lambda t, c: (c(str(t)), c(str(t)) + ".data-00000-of-00001"), _init_checkpoint),
    "data file": (lambda t, c: (shutil.copytree(JIGSAW, str(t / "data")),
                                str(t / "data" / "valid.csv")), _data),
    "Hugging Face weights": (lambda t, c: (_hf_folder(t), str(t / "hf" / "model.safetensors")),
                             _hf),
    "Hugging Face config": (lambda t, c: (_hf_folder(t), str(t / "hf" / "config.json")), _hf),
}


def input_cells():
  return [pytest.param(artefact, fault, id="%s-%s" % (artefact.name, fault))
          for artefact, fault in inventory.matrix(inventory.INPUTS) if fault != "other_run"]


def test_every_input_has_its_case():
  assert {a.name for a in inventory.INPUTS} == set(INPUT_CASES)


@pytest.mark.parametrize("artefact, fault", input_cells())
def test_input(artefact, fault, tmp_path, tiny_checkpoint):
  def checkpoint_copy(folder):
    prefix = os.path.join(folder, "bert_model.ckpt")
    if not os.path.exists(prefix + ".index"):
      for name in os.listdir(os.path.dirname(tiny_checkpoint)):
        if name.startswith("bert_model.ckpt"):
          shutil.copy(os.path.join(os.path.dirname(tiny_checkpoint), name), folder)
    return prefix

  make, reuse = INPUT_CASES[artefact.name]
  given, faulted = make(tmp_path, checkpoint_copy)
  expected = reuse(given)
  if artefact.name == "pre-trained checkpoint" and fault in ("missing", "folder", "unreadable",
                                                             "empty"):
    faulted = given + ".index"  # (the index names the checkpoint)
  apply_fault(faulted, fault)
  check_outcome(reuse, given, expected, [faulted, given], "refuse")
