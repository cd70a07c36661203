"""The ONNX folder of an export (--export_format=onnx, pipeline/onnx_export.py) and the
predictor that runs it in onnxruntime (serving/onnx_predictor.py): every head kind, pairs
and truncation against the SavedModel's predictor, the int8 model, the checks before it is
written and before it is used, and, in the TensorFlow-free environment .venvs/onnx
(Python 3.12), the project's ONNX predictor and a process that imports nothing of the
project, each giving the CLI's predictions."""

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from conftest import IN_CI, IS_TF1, JIGSAW, ROOT, TINY_VOCAB, run_flags
from data.vocabulary import load_vocab
from pipeline import onnx_export
from serving.predicting import ExportNotFound
from serving.predictor import Predictor
from spec.heads.soft_target import SoftTarget
from spec.run_errors import FlagError
from test_export import SPECS as EXPORT_SPECS
from test_export import TEXTS, export_tiny, tiny_card, tiny_exports, tiny_model_fn  # noqa: F401
from test_hf_export import PROJECT_MODULES

ONNX_PYTHON = os.path.join(ROOT, ".venvs", "onnx", "bin", "python")


def real_comments(count):
  with open(os.path.join(JIGSAW, "test.csv"), encoding="utf-8", newline="") as f:
    return [row["comment_text"] for row in csv.DictReader(f)][:count]


# Real comments (some longer than the model's 24 tokens), hand-made ones (accents, CJK,
# capitals), a long one and an empty one.
ONNX_TEXTS = real_comments(12) + TEXTS + [" ".join("word%d" % i for i in range(60)), ""]
# test_export's heads, and the one it leaves out.
SPECS = dict(EXPORT_SPECS, soft_target=SoftTarget(["toxic", "insult"]))


def onnx_environment():
  """The ONNX environment's Python; the test is left out (with its reason) when it has not
  been built, except in CI, which builds it."""
  if not os.path.exists(ONNX_PYTHON) and not IN_CI:
    pytest.skip("no ONNX environment .venvs/onnx: ./run.sh setup onnx builds it (Python "
                "3.12, tools/requirements-onnx.txt)")
  return ONNX_PYTHON


def export_with_onnx(tmp_path, kind, truncation=None, text_pair=False, exports=None):
  """export_tiny's SavedModel (or, with exports, test_export's tiny_exports, read only),
  and its ONNX folder written under tmp_path as --do_export writes one into an export."""
  spec = SPECS[kind]
  shared = exports and kind in EXPORT_SPECS  # (its own heads' exports are test_export's)
  export_dir, checkpoint = (exports(kind, truncation, text_pair) if shared else
                            export_tiny(tmp_path, kind, truncation, text_pair, spec=spec))
  card = tiny_card(spec, truncation, text_pair)
  with open(TINY_VOCAB, encoding="utf-8") as f:
    vocab_text = f.read()
  folder = onnx_export.write_onnx_folder(
      os.path.join(str(tmp_path), kind + "-onnx"), tiny_model_fn(spec), checkpoint, card,
      vocab_text, load_vocab(TINY_VOCAB))
  return export_dir, folder


@pytest.mark.tf2_only
@pytest.mark.parametrize("kind,truncation,text_pair", [
    ("classification", None, False), ("multi_label", {"mode": "tail"}, False),
    ("soft_target", None, True), ("regression", {"mode": "head_tail", "head_tokens": 3}, True)])
def test_onnx_gives_the_saved_models_outputs(tmp_path, tiny_exports, kind, truncation,
                                            text_pair):
  """For every head kind, pairs and each truncation: the fp32 ONNX model within 1e-4 of the
  SavedModel's predictor, and its results in the same shape; int8 near it."""
  from serving.onnx_predictor import OnnxPredictor
  export_dir, folder = export_with_onnx(tmp_path, kind, truncation, text_pair, tiny_exports)
  assert sorted(os.listdir(folder)) == ["files.json", "model.int8.onnx", "model.onnx",
                                        "model_card.json", "tokenizer.json", "vocab.txt"]
  items = list(zip(ONNX_TEXTS, ONNX_TEXTS[::-1])) if text_pair else ONNX_TEXTS
  with Predictor(export_dir, batch_size=3) as predictor:
    expected = predictor.predict(items)
    expected_outputs = predictor.predict_outputs([predictor.example(i, item)
                                                  for i, item in enumerate(items)])
  onnx = OnnxPredictor(folder, batch_size=3)
  outputs = onnx.predict_outputs([onnx.example(i, item) for i, item in enumerate(items)])
  np.testing.assert_allclose(outputs, expected_outputs, atol=1e-4)
  for got, wanted, row in zip(onnx.predict(items), expected, expected_outputs):
    key = "values" if kind == "regression" else "probabilities"
    assert list(got) == list(wanted) and list(got[key]) == list(wanted[key])
    np.testing.assert_allclose(list(got[key].values()), row, atol=1e-4)
    if kind == "classification" and np.sort(row)[-1] - np.sort(row)[-2] > 1e-3:
      assert got["label"] == wanted["label"]
    if kind == "multi_label" and min(abs(p - 0.5) for p in row) > 1e-3:
      assert got["labels"] == wanted["labels"]
  int8 = OnnxPredictor(folder, int8=True, batch_size=3)
  int8_outputs = int8.predict_outputs([int8.example(i, item) for i, item in enumerate(items)])
  assert int8.model_path.endswith("model.int8.onnx")
  np.testing.assert_allclose(int8_outputs, expected_outputs, atol=0.05)
  assert not np.allclose(int8_outputs, expected_outputs, atol=1e-7)  # (really the int8 one)
  alone = [int8.predict_outputs([int8.example(0, item)])[0] for item in items]
  assert alone == int8_outputs  # (each text its own run: no other text's scale in it)
  assert_matrix_products_quantised_per_column(os.path.join(folder, "model.int8.onnx"))
  for name in ("model.onnx", "model.int8.onnx"):
    assert_layer_norms_one_node_each(os.path.join(folder, name))
    assert_no_shape_arithmetic(os.path.join(folder, name))


@pytest.mark.tf2_only
def test_the_onnx_runner_flushes_denormal_floats_to_zero_and_leaves_the_callers_alone():
  """The runner the predictors and the export's check run models in computes with
  denormal floats as zero, as TensorFlow's CPU kernels do (a padded text's masked softmax
  makes them, and the CPU is many times slower on them); normal floats are untouched,
  from every runner thread, and the calling thread still computes denormals."""
  import onnx
  from onnx import TensorProto, helper, numpy_helper
  from serving.onnx_predictor import OnnxRunner
  graph = helper.make_graph(
      [helper.make_node("Mul", ["x", "factor"], ["y"])], "tiny",
      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])],
      [numpy_helper.from_array(np.float32(1e-20), "factor")])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
  with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, "tiny.onnx")
    onnx.save(model, path)
    x = np.array([1e-20, 1e-17, 1.0], np.float32)
    runner = OnnxRunner(path, threads=1, runners=2)
    try:
      answers = [runner.run({"x": x})] + list(runner.map([{"x": x}] * 4))
    finally:
      runner.close()
  smallest_normal, smallest_denormal = 2.0 ** -126, 2.0 ** -149  # (float32's)
  assert smallest_denormal < 1e-20 * 1e-20 < smallest_normal  # (Python's floats: exact here)
  for (y,) in answers:
    assert y[0] == 0
    assert y[1] == pytest.approx(1e-37, rel=1e-6) and y[2] == pytest.approx(1e-20, rel=1e-6)
  assert np.float32(1e-20) * np.float32(1e-20) > 0  # (this thread's arithmetic as it was)


@pytest.mark.tf2_only
def test_the_runners_counts_are_whole_numbers_and_a_short_answer_loses_no_row_silently(
    tiny_exports, monkeypatch):
  """A runner of 0, negative or fractional threads or runs is refused with its name (not
  reported as a model that cannot load); and a backend that answers fewer batches or rows
  than it was given makes predict_outputs fail, not leave rows without outputs."""
  from serving.onnx_predictor import OnnxRunner, check_counts
  for make, message in (
      (lambda: OnnxRunner("unread.onnx", runners=0), "OnnxRunner: runners=0 must be"),
      (lambda: OnnxRunner("unread.onnx", threads=1.5), "OnnxRunner: threads=1.5 must be"),
      (lambda: check_counts("OnnxPredictor", threads=None, runs_at_once=-1),
       "OnnxPredictor: runs_at_once=-1 must be a whole number, 1 or more")):
    with pytest.raises(ValueError) as raised:
      make()
    assert str(raised.value).startswith(message)
  with Predictor(tiny_exports("classification")[0], batch_size=2) as predictor:
    examples = [predictor.example(i, text) for i, text in enumerate(TEXTS[:5])]
    assert len(predictor.predict_outputs(examples)) == 5
    answer = predictor._run_batches
    monkeypatch.setattr(predictor, "_run_batches",
                        lambda batches: list(answer(batches))[:-1])
    with pytest.raises(RuntimeError, match="gave the outputs of 2 of 3 batches"):
      predictor.predict_outputs(examples)
    monkeypatch.setattr(predictor, "_run_batches",
                        lambda batches: [v[:1] for v in answer(batches)])
    with pytest.raises(RuntimeError, match="gave 1 outputs for a batch of 2 inputs"):
      predictor.predict_outputs(examples)


def assert_layer_norms_one_node_each(path):
  """The model's every layer normalisation is one node (pipeline/onnx_fusion.py): BERT-Tiny's
  embeddings' and two in each of its 2 layers, and none of their means left."""
  import onnx
  ops = [node.op_type for node in onnx.load(path).graph.node]
  assert ops.count("LayerNormalization") == 1 + 2 * 2
  assert not {"GlobalAveragePool", "ReduceMean", "Reciprocal", "Sqrt"} & set(ops)


def assert_no_shape_arithmetic(path):
  """The model computes no shape at run time but the length its position embeddings are
  sliced to (pipeline/onnx_reshapes.py): one Shape of the ids, and no Concat."""
  import onnx
  graph = onnx.load(path).graph
  shapes = [node.input[0] for node in graph.node if node.op_type == "Shape"]
  assert shapes == ["input_ids"] and "Concat" not in {node.op_type for node in graph.node}


def assert_matrix_products_quantised_per_column(path):
  """Every matrix product of the int8 model multiplies int8 weights with a zero point (and
  so a scale) per output column; the embedding tables are looked up in fp32."""
  import onnx
  model = onnx.load(path)
  weights = {tensor.name: tensor for tensor in model.graph.initializer}
  products = [node for node in model.graph.node if node.op_type == "MatMulInteger"]
  assert len(products) >= 6 * 2  # (BERT-Tiny: six of its layer's seven products, twice)
  for node in products:
    weight, zero_point = weights[node.input[1]], weights[node.input[3]]
    assert weight.data_type == onnx.TensorProto.INT8
    assert list(zero_point.dims) == [weight.dims[-1]]
  assert not [node for node in model.graph.node if node.op_type == "DequantizeLinear"]
  gathered = [node.input[0] for node in model.graph.node if node.op_type == "Gather"]
  assert gathered and all(weights[name].data_type == onnx.TensorProto.FLOAT
                          for name in gathered if name in weights)


@pytest.mark.tf2_only
def test_a_conversion_that_differs_or_fails_is_not_written(tmp_path, monkeypatch):
  """A converted model that differs from TensorFlow's, or that the converter cannot make,
  is one line, and leaves nothing (no folder, no staging)."""
  monkeypatch.setattr(onnx_export, "largest_difference", lambda *args: 0.5)
  with pytest.raises(FlagError) as error:
    export_with_onnx(tmp_path, "classification")
  assert str(error.value) == (
      "--export_format=onnx: onnxruntime's outputs of the converted model differ from "
      "TensorFlow's by 0.5 (at most 0.0001 is allowed), so no export was written: export "
      "without onnx")

  def unconvertible(*args):
    raise RuntimeError("Unsupported ops: Counter({'SomeOp': 1})\nmore detail")
  monkeypatch.setattr(onnx_export, "convert", unconvertible)
  with pytest.raises(FlagError) as error:
    export_with_onnx(tmp_path / "again", "classification")
  assert str(error.value) == (
      "--export_format=onnx: unconvertible failed on this model (RuntimeError: Unsupported "
      "ops: Counter({'SomeOp': 1})), so no export was written: export without onnx")
  for root in (tmp_path, tmp_path / "again"):
    assert sorted(name for name in os.listdir(str(root)) if "onnx" in name) == []


@pytest.mark.tf2_only
def test_the_onnx_predictor_uses_only_a_folder_it_can_check(tmp_path):
  from serving.onnx_predictor import OnnxPredictor, find_onnx_folder
  export_dir, folder = export_with_onnx(tmp_path, "classification")
  again = ("export it again with its ONNX model: ./run.sh shell tf2 -- python "
           "run_classifier.py --do_export --export_format=saved_model,onnx "
           "--output_dir=<its output_dir>")
  # An export without an ONNX folder, or a folder with no export, says how to make one.
  with pytest.raises(ExportNotFound) as error:
    find_onnx_folder(export_dir)
  assert str(error.value) == "%s has no ONNX model (no onnx/ folder): %s" % (export_dir, again)
  with pytest.raises(ExportNotFound) as error:
    find_onnx_folder(str(tmp_path / "nothing"))
  assert str(error.value).startswith(
      "%s holds no ONNX model (no model.onnx, and no export with an onnx/ folder): export one "
      "on TF 2.15: ./run.sh shell tf2 -- python run_classifier.py" % (tmp_path / "nothing"))
  with pytest.raises(ExportNotFound, match="onnxruntime reads the model from this machine's "
                     "disk: copy the folder here first"):
    OnnxPredictor("gs://bucket/run/export/1/onnx")
  with pytest.raises(ValueError, match="batch_size=0"):
    OnnxPredictor(folder, batch_size=0)
  shutil.copytree(folder, os.path.join(export_dir, "onnx"))
  assert find_onnx_folder(export_dir) == os.path.join(export_dir, "onnx")
  assert find_onnx_folder(os.path.dirname(os.path.dirname(export_dir))) == os.path.join(
      export_dir, "onnx")  # (the training output_dir: its newest export)
  with open(os.path.join(folder, "model.int8.onnx"), "r+b") as f:
    f.seek(1000)
    byte = f.read(1)
    f.seek(1000)
    f.write(bytes([byte[0] ^ 1]))
  with pytest.raises(ExportNotFound) as error:
    OnnxPredictor(folder)
  assert str(error.value) == ("%s is damaged: model.int8.onnx is not the file that was written "
                              "(its sha256 differs). Copy the whole export again, or %s"
                              % (folder, again))
  os.remove(os.path.join(folder, "files.json"))
  with pytest.raises(ExportNotFound, match="has no files.json"):
    OnnxPredictor(folder)


def test_onnx_needs_tf2onnx_and_says_where_it_is(tmp_path, monkeypatch):
  """TF 1.15 has no tf2onnx: --export_format=onnx is refused before any work, saying to
  export on TF 2.15. On TF 2.15 the same check passes, and fails where a package lacks."""
  message = ("--export_format=onnx converts with tf2onnx and checks with onnxruntime, and "
             "this environment cannot import %s")
  if IS_TF1:
    with pytest.raises(FlagError) as error:
      run_flags("--task_name=jigsaw_toxic", "--data_dir=" + JIGSAW, "--do_export",
                "--export_format=saved_model,onnx", "--output_dir=" + str(tmp_path / "out"),
                "--vocab_file=" + TINY_VOCAB)
    assert str(error.value) == message % "tf2onnx" + (
        " (TF 1.15's has neither: tf2onnx converts TF 2 graphs). Export on TF 2.15, where a "
        "checkpoint trained on TF 1.15 loads unchanged: ./run.sh shell tf2 -- python "
        "run_classifier.py --do_export --export_format=saved_model,onnx "
        "--output_dir=<its output_dir>")
    assert not os.path.exists(str(tmp_path / "out"))
    return
  onnx_export.check_onnx_export()
  monkeypatch.setitem(sys.modules, "onnxruntime.quantization", None)  # (as if not installed)
  with pytest.raises(FlagError, match=message % r"onnxruntime\.quantization \(TF 1\.15's"):
    onnx_export.check_onnx_export()


def test_export_format_onnx_needs_do_export(tmp_path):
  with pytest.raises(FlagError, match="--export_format says what --do_export writes"):
    run_flags("--task_name=jigsaw_toxic", "--data_dir=" + JIGSAW, "--do_predict",
              "--export_format=onnx", "--output_dir=" + str(tmp_path))


def read_test_results(path):
  with open(path, newline="") as f:
    return [[float(row[name]) for name in row if name.startswith("probability_")]
            for row in csv.DictReader(f, delimiter="\t")]


# Reads an export's onnx/ folder with onnxruntime and tokenizers alone: its tokenizer.json
# gives the ids ([CLS] and [SEP] added, truncated as the card says), the model the
# probabilities of test.csv's comments.
PROJECT_FREE = """
import csv, json, sys
import numpy as np
import onnxruntime
from tokenizers import Tokenizer
folder, texts_file = sys.argv[1:3]
tokenizer = Tokenizer.from_file(folder + "/tokenizer.json")
with open(texts_file, encoding="utf-8", newline="") as f:
  texts = [row["comment_text"] for row in csv.DictReader(f)]
encoded = tokenizer.encode_batch(texts)
longest = max(len(e.ids) for e in encoded)
batch = {name: np.zeros([len(texts), longest], np.int32)
         for name in ("input_ids", "input_mask", "segment_ids")}
for row, e in enumerate(encoded):
  batch["input_ids"][row, :len(e.ids)] = e.ids
  batch["input_mask"][row, :len(e.ids)] = e.attention_mask
  batch["segment_ids"][row, :len(e.ids)] = e.type_ids
session = onnxruntime.InferenceSession(folder + "/model.onnx",
                                       providers=["CPUExecutionProvider"])
(probabilities,) = session.run(None, batch)
assert not any(m.split(".")[0] in %r for m in sys.modules)
print(json.dumps({"probabilities": probabilities.tolist(), "longest": longest}))
""" % (PROJECT_MODULES,)


@pytest.mark.tf2_only
@pytest.mark.slow
def test_the_clis_onnx_export_without_tensorflow(jigsaw_model, tmp_path):
  """The CLI's export, run in the ONNX environment (no TensorFlow there), by a process that
  imports nothing of the project and by ./run.sh predict-onnx: test_results.tsv's
  probabilities within 1e-4, for every row."""
  python = onnx_environment()
  check = subprocess.run([python, "-c", "import tensorflow"], stderr=subprocess.PIPE,
                         universal_newlines=True)
  assert "No module named 'tensorflow'" in check.stderr
  export_base = os.path.join(jigsaw_model.output_dir, "export")
  (version,) = os.listdir(export_base)
  folder = os.path.join(export_base, version, "onnx")
  expected = read_test_results(os.path.join(jigsaw_model.output_dir, "test_results.tsv"))
  test_csv = os.path.join(JIGSAW, "test.csv")

  done = subprocess.run([python, "-c", PROJECT_FREE, folder, test_csv], cwd="/",
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        universal_newlines=True, timeout=300,
                        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
  assert done.returncode == 0, done.stderr[-3000:]
  free = json.loads(done.stdout.splitlines()[-1])
  assert len(free["probabilities"]) == len(expected) == 33
  assert free["longest"] == 32  # (some comments were truncated to max_seq_length)
  np.testing.assert_allclose(free["probabilities"], expected, atol=1e-4)

  with open(test_csv, encoding="utf-8", newline="") as f:
    texts = [row["comment_text"].replace("\n", " ").replace("\r", " ")
             for row in csv.DictReader(f)]
  texts_file = tmp_path / "texts.txt"
  texts_file.write_text("".join(text + "\n" for text in texts), encoding="utf-8")
  done = subprocess.run([os.path.join(ROOT, "run.sh"), "predict-onnx", jigsaw_model.output_dir,
                         "--input", str(texts_file)], cwd=str(tmp_path),
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        universal_newlines=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  results = [json.loads(line) for line in done.stdout.splitlines()]
  assert len(results) == 33
  got = [[r["probabilities"]["0"], r["probabilities"]["1"]] for r in results]
  np.testing.assert_allclose(got, expected, atol=1e-4)
  with open(os.path.join(folder, "model_card.json")) as f:  # (tuned for F1: decided there)
    threshold = json.load(f)["label_spec"]["thresholds"]["1"]
  assert [r["threshold"] for r in results] == [threshold] * 33
  assert [r["label"] for r, row in zip(results, expected) if abs(row[1] - threshold) > 1e-4] == [
      "1" if row[1] >= threshold else "0" for row in expected if abs(row[1] - threshold) > 1e-4]

  done = subprocess.run([os.path.join(ROOT, "run.sh"), "predict-onnx", str(tmp_path)],
                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
  assert done.returncode == 1
  assert done.stderr.splitlines()[-1].startswith("predict-onnx: %s holds no ONNX model" %
                                                 tmp_path)


@pytest.mark.slow
@pytest.mark.one_runtime("tf1")  # (the legacy route: a model trained on TF 1.15)
def test_a_run_exports_its_onnx_model_on_tf2(jigsaw_model, tmp_path):
  """The way out for a model trained on TF 1.15: TF 2.15's environment exports the run's
  folder with --export_format=saved_model,onnx, in its own process, and the ONNX model
  gives the run's own test_results.tsv within 1e-4, read without TensorFlow."""
  tf2_python = os.path.join(ROOT, ".venvs", "tf2", "bin", "python")
  if not os.path.exists(tf2_python):
    pytest.skip("no TF 2.15 environment .venvs/tf2: ./run.sh setup builds it")
  python = onnx_environment()
  output_dir = jigsaw_model.copy_to(str(tmp_path / "run"))
  done = subprocess.run([tf2_python, os.path.join(ROOT, "run_classifier.py"), "--do_export",
                         "--export_format=saved_model,onnx", "--output_dir=" + output_dir],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                        universal_newlines=True, timeout=600,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert done.returncode == 0, done.stderr[-3000:]
  (version,) = os.listdir(os.path.join(output_dir, "export"))
  done = subprocess.run([python, "-c", PROJECT_FREE,
                         os.path.join(output_dir, "export", version, "onnx"),
                         os.path.join(JIGSAW, "test.csv")], cwd="/",
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        universal_newlines=True, timeout=300,
                        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
  assert done.returncode == 0, done.stderr[-3000:]
  np.testing.assert_allclose(
      json.loads(done.stdout.splitlines()[-1])["probabilities"],
      read_test_results(os.path.join(jigsaw_model.output_dir, "test_results.tsv")), atol=1e-4)


def test_the_command_lines_texts_are_read_line_by_line(tmp_path):
  """One input a line: \\n or \\r\\n ends it, a lone \\r stays in its text (results line up
  with lines); pairs split at their one tab; a wrong line or a file that is not UTF-8 is
  one line naming it."""
  from serving.onnx_predictor import InputError, read_input_file, read_inputs
  lines = ["first\r\n", "a\rb\n", "\n", "tab\tinside\n", "last"]
  assert read_inputs(lines, False, "x") == ["first", "a\rb", "", "tab\tinside", "last"]
  assert read_inputs(["q\ta\r\n", "q2\ta2"], True, "x") == [("q", "a"), ("q2", "a2")]
  with pytest.raises(InputError) as error:
    read_inputs(["q\ta\n", "no tab\n"], True, "texts.txt")
  assert str(error.value) == ("texts.txt, line 2: 1 tab-separated texts, and a model of pairs "
                              "takes two a line (text<TAB>text_b)")
  path = tmp_path / "texts.txt"
  path.write_bytes(u"caf\u00e9\r\nx\ry\n".encode("utf-8"))
  assert read_input_file(str(path), False) == [u"caf\u00e9", "x\ry"]
  path.write_bytes(u"caf\u00e9\n".encode("latin-1"))
  with pytest.raises(InputError) as error:
    read_input_file(str(path), False)
  assert str(error.value) == ("%s is not UTF-8 text (byte 3 cannot be decoded): save it as "
                              "UTF-8" % path)


@pytest.mark.tf2_only
@pytest.mark.slow
def test_the_server_on_onnxruntime_answers_as_the_tensorflow_predictor(jigsaw_model, tmp_path):
  """./run.sh serve --backend=onnx: the HTTP server in the ONNX environment (no TensorFlow
  there) on the CLI's export, its answers those of the SavedModel's predictor (the
  calibrated probabilities within 1e-4, the labels at the card's tuned threshold), its
  status and its refusals as the TensorFlow server's."""
  import urllib.error
  import urllib.request
  from tools.bench_serve import free_port, serving
  onnx_environment()
  with open(os.path.join(JIGSAW, "test.csv"), encoding="utf-8", newline="") as f:
    texts = [row["comment_text"] for row in csv.DictReader(f)]
  with Predictor(jigsaw_model.output_dir) as predictor:
    expected = predictor.predict(texts)
  port = free_port()
  process, status = serving([os.path.join(ROOT, "run.sh"), "serve", jigsaw_model.output_dir,
                             "--backend=onnx", "--port", str(port)], str(tmp_path), port,
                            str(tmp_path / "server.log"))
  try:
    with urllib.request.urlopen(status, timeout=30) as answer:
      assert json.loads(answer.read().decode())["model_version_status"][0]["state"] == \
          "AVAILABLE"
    request = urllib.request.Request(status + ":predict", data=json.dumps(
        {"instances": texts}).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
      got = json.loads(answer.read().decode())["predictions"]
    bad = urllib.request.Request(status + ":predict", data=b'{"instances": [3]}',
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
      urllib.request.urlopen(bad, timeout=30)
    assert refused.value.code == 400
  finally:
    process.terminate()
    process.wait(30)
  with open(str(tmp_path / "server.log")) as f:
    log = f.read()
  assert "%s: " % os.path.join("onnx", "model.onnx") in log  # (the fp32 ONNX model loaded)
  assert len(got) == len(expected) == 33
  np.testing.assert_allclose([list(r["probabilities"].values()) for r in got],
                             [list(r["probabilities"].values()) for r in expected], atol=1e-4)
  threshold = expected[0]["threshold"]
  assert [r["threshold"] for r in got] == [threshold] * 33
  assert [g["label"] for g, e in zip(got, expected)
          if abs(e["probabilities"]["1"] - threshold) > 1e-4] == [
              e["label"] for e in expected if abs(e["probabilities"]["1"] - threshold) > 1e-4]


@pytest.mark.tf2_only
def test_the_int8_model_is_served_only_where_its_export_measured_its_quality_held(
    jigsaw_model, tmp_path):
  """An export made by a run that evaluated records the fp32 and int8 ONNX models' ROC-AUC
  on the dev rows (scikit-learn's, of the ONNX predictor's outputs of valid.csv); the
  server loads the int8 model only where it is at most 0.002 below, and otherwise, or
  with no figures, refuses in one line."""
  import sklearn.metrics as sk
  from data.features import InputExample
  from data.files import write_manifest
  from serving import server
  from serving.onnx_predictor import OnnxPredictor, int8_problem
  folder = os.path.join(jigsaw_model.result.export, "onnx")
  with open(os.path.join(folder, "int8_quality.json")) as f:
    figures = json.load(f)
  with open(os.path.join(JIGSAW, "valid.csv"), encoding="utf-8", newline="") as f:
    dev = list(csv.DictReader(f))
  examples = [InputExample(i, row["comment_text"]) for i, row in enumerate(dev)]
  truth = [row["toxic"] == "1" for row in dev]
  for name, int8 in (("fp32", False), ("int8", True)):
    outputs = np.array(OnnxPredictor(folder, int8=int8).predict_outputs(examples))
    assert figures[name] == pytest.approx(sk.roc_auc_score(truth, outputs[:, 1]), abs=1e-12)
  assert (figures["rows"], figures["split"], figures["bound"]) == (25, "dev", 0.002)

  def load(path):
    return server.load_predictor(server.server_options.parse_args(
        [path, "--backend=onnx", "--int8"]))
  if figures["int8"] >= figures["fp32"] - 0.002:
    assert int8_problem(folder) is None
    assert load(folder).model_path.endswith("model.int8.onnx")
  else:
    with pytest.raises(FlagError, match="more than 0.002 below, so it is not served"):
      load(folder)
  copy = str(tmp_path / "onnx")  # (what another export would have measured)
  shutil.copytree(folder, copy)
  quality = os.path.join(copy, "int8_quality.json")
  for written, problem in (
      (dict(figures, fp32=0.9, int8=0.8975), "--int8: the int8 model's held-out ROC-AUC is "
       "0.8975 against the fp32 model's 0.9000 on the 25 dev rows its export measured (%s), "
       "more than 0.002 below, so it is not served: serve the fp32 model (drop --int8)"
       % quality),
      (dict(figures, fp32=None, int8=None), "--int8: no held-out ROC-AUC measures this "
       "model's head on its 25 dev rows (%s), so its int8 model is not served: serve the "
       "fp32 model (drop --int8)" % quality),
      (None, "--int8: %s records no held-out quality of its int8 model (its outputs differ "
       "from the fp32 model's), so it is not served: export in a run that evaluates "
       "(--do_eval --do_export --export_format=onnx) to measure it, or serve the fp32 "
       "model (drop --int8)" % copy)):
    if written is None:
      os.remove(quality)
    else:
      with open(quality, "w") as f:
        json.dump(written, f)
    write_manifest(copy)
    with pytest.raises(FlagError) as error:
      load(copy)
    assert str(error.value) == problem
  with open(quality, "w") as f:
    json.dump(dict(figures, fp32=0.9, int8=0.8985), f)
  write_manifest(copy)
  assert load(copy).model_path.endswith("model.int8.onnx")


def test_the_servers_backend_options_are_checked_before_anything_loads(tmp_path):
  from serving import server
  from spec.cores import usable_cores
  cores = usable_cores()
  for argv, message in (
      (["--int8"], "serve: --int8 serves an export's int8 ONNX model: add --backend=onnx"),
      (["--workers", "2"], "serve: --workers runs onnxruntime's batches side by side: add "
       "--backend=onnx (TensorFlow runs one batch at a time, on every core)"),
      (["--backend=onnx", "--workers", "0"], "serve: --workers=0 must be 1 or more"),
      (["--backend=onnx", "--workers", str(cores + 1)], "serve: --workers=%d: this server may "
       "use %d cores, and each worker runs its batches on one at least: give at most %d" % (
           cores + 1, cores, cores))):
    done = subprocess.run([sys.executable, "-m", "serving.server", str(tmp_path)] + argv,
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)
    assert (done.returncode, done.stderr.strip()) == (2, message)
  options = server.server_options
  assert options.parse_args([str(tmp_path)]).backend == "tf"
  for argv, wanted in (([], (1, None)), (["--backend=onnx"], (1, None)),
                       (["--backend=onnx", "--int8"], (cores, 1 if cores > 1 else None)),
                       (["--backend=onnx", "--int8", "--workers", "1"], (1, None)),
                       (["--backend=onnx", "--workers", str(cores)],
                        (cores, 1 if cores > 1 else None))):
    assert options.workers(options.parse_args([str(tmp_path)] + argv)) == wanted
  if IS_TF1:  # (TF 1.15's environment has no onnxruntime: the one line says where it is)
    from tools.bench_serve import free_port
    done = subprocess.run([sys.executable, "-m", "serving.server", str(tmp_path),
                           "--backend=onnx", "--port", str(free_port())], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (
        2, "serve: --backend=onnx needs onnxruntime, which this Python lacks: run ./run.sh "
        "serve, which builds the environment it needs")
