"""SavedModel export (modeling/export_graph.py) and the predictor that loads it
(serving/predictor.py): the signature, the assets, the outputs against the model_fn's own
graph, batching, every head, the other runtime, and the command line end to end."""

import collections
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import (IN_CI, IS_TF1, JIGSAW, ROOT, TINY, TINY_VOCAB, common_flags, run_flags,
                      spread_over_runtimes)
from data.features import InputExample, Truncation
from data.files import NO_MANIFEST, manifest_problem, write_manifest
from data.graph_tokenizer import text_ops
from data.tokenization import FullTokenizer
from data.vocabulary import load_vocab, vocab_fingerprint
from modeling.bert import BertConfig
from modeling.export_graph import export_saved_model, versioned_export_dir
from modeling.model_fn import ModelSettings, model_fn_builder
from pipeline import export_run as pipeline_export
from spec.run_errors import FlagError
from serving.predicting import ExportNotFound, find_export
from serving.predictor import Predictor
from spec.heads.multi_label import MultiLabel
from spec.heads.regression import Regression
from spec.heads.classification import SingleLabel
from spec import model_card, signature

TEXTS = ["you are great", "What a STUPID idea!!", "ok", "a much longer comment about the "
         "article, which goes on and on about nothing in particular " * 3,
         u"caf\u00e9 na\u00efve \u4e2d\u6587 text"]
SPECS = {
    "classification": SingleLabel(["label"], ["neg", "neutral", "pos"]),
    "multi_label": MultiLabel(["toxic", "insult"]),
    "regression": Regression(["score"]),
}
MAX_LEN = 24


def tiny_model_fn(spec, pooling="cls"):
  config = BertConfig.from_json_file(os.path.join(TINY, "bert_config.json"))
  return model_fn_builder(config, spec, ModelSettings(
      learning_rate=1e-3, num_train_steps=1, pooling=pooling))


def random_classifier_checkpoint(folder, spec, seed=7):
  """A checkpoint of BERT-Tiny with a head of spec's outputs, all random (a stand-in for a
  fine-tuned model: export copies whatever the checkpoint holds)."""
  path = os.path.join(folder, "model.ckpt-3")
  tf.io.gfile.makedirs(folder)
  with tf.Graph().as_default():
    tf.set_random_seed(seed)
    features = {n: tf.zeros([1, 4], tf.int32) for n in signature.INPUT_NAMES}
    tiny_model_fn(spec)(features, None, tf.estimator.ModeKeys.PREDICT, {})
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      tf.train.Saver().save(session, path)
  return path


def tiny_card(spec, truncation=None, text_pair=False, vocab_sha256=None):
  return model_card.build_card(
      task="csv", label_spec=spec, max_seq_length=MAX_LEN, do_lower_case=True,
      vocab_file=TINY_VOCAB, vocab_sha256=vocab_sha256 or vocab_fingerprint(TINY_VOCAB),
      bert_config=None,
      init_checkpoint=None, hub_module=None, flags={}, truncation=truncation,
      text_pair=text_pair)


def export_tiny(tmp_path, kind="classification", truncation=None, text_pair=False,
                vocab_sha256=None, spec=None):
  """An export of a random BERT-Tiny classifier (of spec, by default SPECS[kind]), with its
  files listed (as --do_export)."""
  spec = spec or SPECS[kind]
  folder = str(tmp_path / kind)
  checkpoint = random_classifier_checkpoint(folder, spec)
  card = tiny_card(spec, truncation, text_pair, vocab_sha256)
  with open(TINY_VOCAB, encoding="utf-8") as f:
    assets = {signature.CARD_ASSET: model_card.to_json(card), signature.VOCAB_ASSET: f.read()}
  export_dir = versioned_export_dir(os.path.join(folder, "export"))
  export_saved_model(tiny_model_fn(spec), checkpoint, export_dir, signature.output_name(spec),
                     assets, pipeline_export.text_features_of(card, load_vocab(TINY_VOCAB)),
                     seal=write_manifest)
  return export_dir, checkpoint


_SHARED_EXPORTS = {}  # (kind, truncation, text_pair) -> (export_dir, checkpoint)


@pytest.fixture(scope="session")
def tiny_exports(tmp_path_factory):
  """export_tiny(kind, truncation, text_pair) for the tests that only read an export: each
  such export made once in a session (this module's tests and tests/test_onnx_export.py's
  share them), (export_dir, checkpoint). A test that changes an export, or the folder
  around it, makes its own with export_tiny."""

  def export(kind="classification", truncation=None, text_pair=False):
    key = (kind, json.dumps(truncation, sort_keys=True), text_pair)
    if key not in _SHARED_EXPORTS:
      _SHARED_EXPORTS[key] = export_tiny(tmp_path_factory.mktemp("export"), kind, truncation,
                                         text_pair)
    return _SHARED_EXPORTS[key]

  return export


def reference_outputs(spec, checkpoint, texts):
  """The model_fn's PREDICT outputs on the checkpoint, each text fed alone and padded to
  MAX_LEN, with ids from the pure-Python tokenizer: no export, no batching."""
  tokenizer = FullTokenizer(TINY_VOCAB, True)
  cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
  rows = []
  with tf.Graph().as_default():
    features = {n: tf.placeholder(tf.int32, [1, MAX_LEN], n) for n in signature.INPUT_NAMES}
    outputs = tiny_model_fn(spec)(features, None, tf.estimator.ModeKeys.PREDICT,
                                  {}).predictions["outputs"]
    with tf.Session() as session:
      tf.train.Saver().restore(session, checkpoint)
      for text in texts:
        ids = [cls_id] + tokenizer.encode(text)[:MAX_LEN - 2] + [sep_id]
        padded = np.zeros([1, MAX_LEN], np.int32)
        padded[0, :len(ids)] = ids
        rows.append(session.run(outputs, {
            features["input_ids"]: padded, features["input_mask"]: (padded > 0).astype(np.int32),
            features["segment_ids"]: np.zeros_like(padded)})[0].tolist())
  return rows


def test_signature_and_assets(tiny_exports):
  export_dir, _ = tiny_exports()
  assert sorted(os.listdir(export_dir)) == ["assets", "files.json", "saved_model.pb",
                                            "variables"]
  assert sorted(os.listdir(os.path.join(export_dir, "assets"))) == ["model_card.json",
                                                                     "vocab.txt"]
  assert os.listdir(os.path.dirname(export_dir)) == [os.path.basename(export_dir)]  # no partial
  with tf.Graph().as_default(), tf.Session() as session:
    meta_graph = tf.saved_model.loader.load(session, ["serve"], export_dir)
  assert sorted(meta_graph.signature_def) == ["ids", "serving_default"]
  text, ids = meta_graph.signature_def["serving_default"], meta_graph.signature_def["ids"]
  assert text.method_name == ids.method_name == "tensorflow/serving/predict"
  assert list(text.inputs) == ["text"]  # one input: TF Serving takes {"instances": [text]}
  assert text.inputs["text"].dtype == tf.string.as_datatype_enum
  assert [d.size for d in text.inputs["text"].tensor_shape.dim] == [-1]
  assert sorted(ids.inputs) == ["input_ids", "input_mask", "segment_ids"]
  for name in ("input_ids", "input_mask", "segment_ids"):
    tensor = ids.inputs[name]
    assert tensor.dtype == tf.int32.as_datatype_enum and tensor.name == name + ":0"
    assert [d.size for d in tensor.tensor_shape.dim] == [-1, -1]
  for served in (text, ids):
    assert list(served.outputs) == ["probabilities"]
    assert [d.size for d in served.outputs["probabilities"].tensor_shape.dim] == [-1, 3]
  with pytest.raises(ValueError, match="already exists"):
    export_saved_model(None, None, export_dir, "probabilities", {}, None)


@pytest.mark.parametrize("kind", spread_over_runtimes(
    ["classification"] + sorted(set(SPECS) - {"classification"})))
def test_predictor_equals_the_model_graph(tiny_exports, kind):
  export_dir, checkpoint = tiny_exports(kind)
  expected = reference_outputs(SPECS[kind], checkpoint, TEXTS)
  with Predictor(export_dir, tokenizer="python", batch_size=2) as predictor:
    # Batches of 2, each padded to its own longest text, give the fully padded outputs.
    outputs = predictor.predict_outputs([InputExample(i, t) for i, t in enumerate(TEXTS)])
    np.testing.assert_allclose(outputs, expected, atol=1e-5)
    results = predictor.predict(TEXTS, batch_size=5)
  names = SPECS[kind].classes or list(SPECS[kind].columns)
  for result, row in zip(results, expected):
    key = "values" if kind == "regression" else "probabilities"
    assert list(result[key]) == names
    np.testing.assert_allclose([result[key][n] for n in names], row, atol=1e-5)
    if kind == "classification":
      assert result["label"] == names[int(np.argmax(row))]
    if kind == "multi_label":
      assert result["labels"] == [n for n, p in zip(names, row) if p >= 0.5]


def signature_outputs(export_dir, inputs, name="serving_default"):
  """What a plain TensorFlow session gets from one signature of an export for inputs
  ({input name: values})."""
  text_ops()  # (registers the ops of the text signature)
  with tf.Graph().as_default(), tf.Session() as session:
    served = tf.saved_model.load(session, ["serve"], export_dir).signature_def[name]
    (output,) = served.outputs.values()
    return session.run(output.name, {served.inputs[k].name: v for k, v in inputs.items()})


@pytest.mark.parametrize("kind,truncation,text_pair", spread_over_runtimes([
    ("classification", None, False), ("multi_label", {"mode": "tail"}, False),
    ("regression", {"mode": "head_tail", "head_tokens": 3}, True)]))
def test_the_text_signature_equals_the_predictor(tiny_exports, kind, truncation, text_pair):
  """Text in, tokenised in the graph with the card's casing, truncation and pairing: the
  outputs of the predictor (which tokenises in Python and feeds the ids signature)."""
  export_dir, _ = tiny_exports(kind, truncation, text_pair)
  long_text = " ".join("word%d" % i for i in range(60))
  texts = TEXTS + [long_text, ""]
  inputs = {"text": texts}
  items = texts
  if text_pair:
    inputs["text_b"] = texts[::-1]
    items = list(zip(texts, texts[::-1]))
  with Predictor(export_dir, tokenizer="python", batch_size=3) as predictor:
    expected = predictor.predict_outputs([predictor.example(i, item)
                                          for i, item in enumerate(items)])
  np.testing.assert_allclose(signature_outputs(export_dir, inputs), expected, atol=1e-5)


# (the tokenizer's choice and the truncation are Python; the Rust path gives Google's ids
# on both runtimes in tests/test_tokenization.py, and the tests above load and predict)
@pytest.mark.one_runtime("tf2")
def test_predictor_tokenizers_and_truncation(tiny_exports):
  export_dir, _ = tiny_exports(truncation={"mode": "tail"})
  long_text = " ".join("word%d" % i for i in range(60))
  with Predictor(export_dir, tokenizer="python") as python, \
      Predictor(export_dir, tokenizer="auto") as auto:
    assert python.truncation == Truncation("tail")
    inputs = TEXTS + [long_text]
    a = python.predict(inputs)
    b = auto.predict(inputs, batch_size=1)
    # tail (the card's truncation) keeps a long text's last MAX_LEN - 2 tokens.
    kept_end = python.predict([" ".join(["good"] * 30 + ["bad"] * 30), " ".join(
        ["bad"] * (MAX_LEN - 2)), " ".join(["good"] * (MAX_LEN - 2))])
    assert kept_end[0] == kept_end[1] != kept_end[2]
    with pytest.raises(ValueError, match="input 0 is 3: give a text"):
      python.predict([3])
  for x, y in zip(a, b):
    np.testing.assert_allclose(list(x["probabilities"].values()),
                               list(y["probabilities"].values()), atol=1e-6)


# (the inputs' checks are Python; the tests above load and predict on both runtimes, and
# the next test predicts pairs on TF 2.15)
@pytest.mark.one_runtime("tf1")
def test_predictor_takes_the_inputs_the_model_was_trained_on(tiny_exports):
  """A text for a model of single texts, a pair for a model of pairs (the card's text_pair);
  anything else is refused. A str gave one result per character, and a pair went to a
  model of single texts."""
  single, _ = tiny_exports()
  pairs, _ = tiny_exports(text_pair=True)
  with Predictor(single, tokenizer="python") as predictor:
    assert not predictor.reads_pairs
    with pytest.raises(TypeError) as error:
      predictor.predict("some text")
    assert str(error.value) == ("predict takes a list of inputs, not one text: pass [text] to "
                                "predict one")
    with pytest.raises(ValueError) as error:
      predictor.predict(["fine", ("is this a question", "yes it is")])
    assert str(error.value) == ("input 1 is a pair of texts, but the model (task csv) was "
                                "trained on single texts: give a text (str)")
    assert len(predictor.predict(("one", "two"))) == 2  # a tuple of texts is a list too
  with Predictor(pairs, tokenizer="python") as predictor:
    assert predictor.reads_pairs
    with pytest.raises(ValueError) as error:
      predictor.predict(["is this a question"])
    assert str(error.value) == ("input 0 is one text, but the model (task csv) was trained on "
                                "pairs of texts: give a pair of texts (text, text_b)")
    yes, no = predictor.predict([("is this a question", "yes it is"),
                                 ["is this a question", "no"]])
  assert yes["probabilities"] != no["probabilities"]  # the second text counts


@pytest.mark.one_runtime("tf2")  # (Python checks of the inputs: the same on both runtimes)
def test_predict_takes_ordered_collections_of_inputs(tiny_exports):
  """Accepted: a list, a tuple, a 1-D array or Series, an iterator (and, for a model of
  pairs, an array of shape (n, 2)). Refused, naming the type and what to pass: a mapping
  (iterating gives its keys), a set (no order), a table (iterating gives its column
  names), an array of other dimensions, and what is not iterable."""
  import pandas as pd
  single, _ = tiny_exports()
  pairs, _ = tiny_exports(text_pair=True)
  texts = ["you are great", "ok", "What a STUPID idea!!"]
  start = "predict takes a list of inputs, not "
  with Predictor(single, tokenizer="python") as predictor:
    expected = predictor.predict(texts)
    assert [r["label"] for r in predictor.predict(texts, batch_size=1)] == [
        r["label"] for r in expected]
    for bad in (-1, 0, 2.5, True):  # (-1 was a TypeError deep inside; 0 the default, silently)
      with pytest.raises(ValueError) as error:
        predictor.predict(texts, batch_size=bad)
      assert str(error.value) == ("batch_size=%r: give a whole number of texts, at least 1"
                                  % (bad,))
    assert len(expected) == 3
    for same in (tuple(texts), iter(texts), (t for t in texts), np.array(texts),
                 np.array(texts, dtype=object), pd.Series(texts, index=[7, 3, 5]),
                 {"a": texts[0], "b": texts[1], "c": texts[2]}.values()):
      assert predictor.predict(same) == expected, type(same)
    refused = [
        ({"id1": "you are great"}, "a mapping (dict), whose keys iterating it gives: pass "
         "list(inputs.values()) to predict its values"),
        (collections.OrderedDict(a="ok"), "a mapping (OrderedDict), whose keys iterating it "
         "gives: pass list(inputs.values()) to predict its values"),
        (set(texts), "a set, which has no order (the results could not be matched to its "
         "inputs): pass a list, e.g. sorted(inputs)"),
        (frozenset(texts), "a frozenset, which has no order (the results could not be matched "
         "to its inputs): pass a list, e.g. sorted(inputs)"),
        (pd.DataFrame({"text": texts}), 'a table (DataFrame), whose column names iterating '
         'it gives: pass one column, df["<column>"]'),
        (np.array([texts, texts]).T, "a 2-D array (shape (3, 2)) for a model of single "
         "texts: pass a 1-D array of texts"),
        (np.array("ok"), "a 0-D array: pass a list of texts"),
        (None, "NoneType: pass a list of texts"),
        (b"some text", "one text: pass [text] to predict one"),
    ]
    for inputs, message in refused:
      with pytest.raises(TypeError) as error:
        predictor.predict(inputs)
      assert str(error.value) == start + message
  with Predictor(pairs, tokenizer="python") as predictor:
    rows = [("is this a question", "yes it is"), ("is this a question", "no")]
    expected = predictor.predict(rows)
    assert predictor.predict(np.array(rows)) == expected
    assert predictor.predict(pd.Series(rows)) == expected
    frame = pd.DataFrame(rows, columns=["text", "text_b"])
    assert predictor.predict(list(zip(frame["text"], frame["text_b"]))) == expected
    with pytest.raises(TypeError) as error:
      predictor.predict(frame)
    assert str(error.value) == start + (
        'a table (DataFrame), whose column names iterating it gives: pass a list of pairs, '
        'list(zip(df["<column>"], df["<column b>"]))')
    with pytest.raises(TypeError) as error:
      predictor.predict(np.array([["a", "b", "c"]]))
    assert str(error.value) == start + (
        "a 2-D array (shape (1, 3)) for a model of pairs of texts: pass an array of shape "
        "(n, 2), one (text, text_b) a row")


@pytest.mark.parametrize("file_system", ["tensorflow", "local"])
def test_a_manifest_lists_every_file_of_its_folder(tmp_path, monkeypatch, file_system):
  """manifest_problem: every file there is listed, every file listed is there with its
  size and sha256, and a manifest that lists nothing, or not as files with sizes and
  sha256, is a problem too; the same through TensorFlow's file system and through the
  stand-in of an environment without TensorFlow (data/gfile.py), a linked folder
  included."""
  import data.files
  from data.gfile import LocalGFile
  if file_system == "local":
    monkeypatch.setattr(data.files, "gfile", LocalGFile)
  folder = str(tmp_path / "folder")
  os.makedirs(os.path.join(folder, "assets"))
  for name, text in (("saved_model.pb", "graph"), ("assets/vocab.txt", "[PAD]\n")):
    with open(os.path.join(folder, name), "w") as f:
      f.write(text)
  manifest = os.path.join(folder, "files.json")
  assert manifest_problem(folder) == NO_MANIFEST
  write_manifest(folder)
  assert manifest_problem(folder) is None
  with open(manifest) as f:
    listed = json.load(f)
  assert sorted(listed["files"]) == ["assets/vocab.txt", "saved_model.pb"]

  def with_manifest(content):
    with open(manifest, "w") as f:
      f.write(content if isinstance(content, str) else json.dumps(content))
    return manifest_problem(folder)

  vocab = listed["files"]["assets/vocab.txt"]
  cases = [
      ("not json", 'its files.json cannot be read (no JSON object with a "files" entry)'),
      ([1], 'its files.json cannot be read (no JSON object with a "files" entry)'),
      ({"files": ["saved_model.pb"]},
       'its files.json cannot be read (its "files" entry is not an object)'),
      ({"files": {}}, "its files.json lists no files"),
      ({"files": {"assets/vocab.txt": vocab}},
       "it holds saved_model.pb, which its files.json does not list"),
      ({"files": dict(listed["files"], **{"assets/extra.txt": vocab})},
       "assets/extra.txt is missing"),
      ({"files": dict(listed["files"], **{"../vocab.txt": vocab})},
       "its files.json lists '../vocab.txt', which is not a path inside the folder"),
      ({"files": dict(listed["files"], **{"saved_model.pb": {"bytes": 5}})},
       "its files.json gives no size and sha256 of saved_model.pb"),
      ({"files": dict(listed["files"], **{"saved_model.pb": dict(vocab, bytes=5)})},
       "saved_model.pb is not the file that was written (its sha256 differs)"),
  ]
  for content, problem in cases:
    assert with_manifest(content) == problem, content
  with_manifest(listed)
  with open(os.path.join(folder, "assets", "notes.txt"), "w") as f:
    f.write("a file added to a copy")
  assert manifest_problem(folder) == "it holds assets/notes.txt, which its files.json does not list"
  os.remove(os.path.join(folder, "assets", "notes.txt"))
  with open(os.path.join(folder, "saved_model.pb"), "w") as f:
    f.write("grap")
  assert manifest_problem(folder) == "saved_model.pb has 4 bytes, and 5 were written"
  with open(os.path.join(folder, "saved_model.pb"), "w") as f:
    f.write("graph")
  linked = str(tmp_path / "elsewhere")
  os.makedirs(linked)
  with open(os.path.join(linked, "extra.txt"), "w") as f:
    f.write("in a linked folder")
  os.symlink(linked, os.path.join(folder, "linked"))
  assert manifest_problem(folder) == "it holds linked/extra.txt, which its files.json does not list"


# (the files' and the vocabulary's checks are Python; a damaged copy of the CLI's export is
# refused on both runtimes by test_an_export_is_checked_before_it_is_loaded)
@pytest.mark.one_runtime("tf2")
def test_the_predictor_loads_only_an_export_it_can_check(tmp_path):
  """An export holding a file its files.json does not list, or without files.json, is
  refused naming the folder (the same check as --saved_model's: it loads a Predictor); so
  is a vocabulary asset that is not the one the model card records."""
  fix = ("export the model again: run_classifier.py --do_export --output_dir=<its "
         "output_dir>")
  export_dir, _ = export_tiny(tmp_path)
  extra = os.path.join(export_dir, "assets", "notes.txt")
  with open(extra, "w") as f:
    f.write("a file added to a copy")
  with pytest.raises(ExportNotFound) as error:
    Predictor(export_dir)
  assert str(error.value) == (
      "%s is damaged: it holds assets/notes.txt, which its files.json does not list. Copy "
      "the whole export again, or %s" % (export_dir, fix))
  os.remove(extra)
  os.remove(os.path.join(export_dir, "files.json"))
  with pytest.raises(ExportNotFound) as error:
    Predictor(export_dir)
  assert str(error.value) == (
      "%s has no files.json, the list of its files and their sha256 that is checked before "
      "an export is loaded: copy the whole export again, or, if an earlier version exported "
      "it, %s" % (export_dir, fix))

  other, _ = export_tiny(tmp_path / "other", vocab_sha256="0" * 64)
  vocab = os.path.join(other, "assets", "vocab.txt")
  card = os.path.join(other, "assets", "model_card.json")
  with pytest.raises(ExportNotFound) as error:
    Predictor(other)
  assert str(error.value) == (
      "%s is not the vocabulary the model was trained with: its sha256 is %s, and %s records "
      "%s. Export the model again: run_classifier.py --do_export --output_dir=<its "
      "output_dir>" % (vocab, vocab_fingerprint(TINY_VOCAB), card, "0" * 64))


@pytest.mark.one_runtime("tf2")  # (Python over a folder's names: the same on both runtimes)
def test_find_export(tmp_path):
  export_dir, _ = export_tiny(tmp_path)
  output_dir = os.path.dirname(os.path.dirname(export_dir))
  newer = os.path.join(output_dir, "export", str(int(os.path.basename(export_dir)) + 5))
  assert find_export(output_dir) == export_dir
  assert find_export(export_dir) == export_dir
  # A newer version copied in part: the newest is still the one used, and refused (an older
  # one was loaded in its place, silently). Exports are written under a name of their own
  # and renamed whole, so no unfinished export has a version's name.
  tf.io.gfile.makedirs(newer)
  assert find_export(output_dir) == newer
  with pytest.raises(ExportNotFound) as error:
    Predictor(output_dir)
  assert str(error.value).startswith("%s has no files.json" % newer)
  with pytest.raises(ExportNotFound, match="--do_export --output_dir"):
    find_export(str(tmp_path))


OTHER_RUNTIME = "tf2" if IS_TF1 else "tf1"
LOAD_ON_OTHER = """
import json, sys
sys.path.insert(0, %r)
from data.features import InputExample
from serving.predictor import Predictor
texts = json.loads(sys.argv[2])
with Predictor(sys.argv[1], tokenizer="python") as p:
  print(json.dumps(p.predict_outputs([InputExample(i, t) for i, t in enumerate(texts)])))
"""


def test_an_export_loads_on_the_other_runtime(tiny_exports):
  """Exported here (TF 1.15 or TF 2.15), loaded and predicted by the other runtime's
  environment: the same outputs within 1e-5. The two runs of the suite cover both ways."""
  python = os.path.join(ROOT, ".venvs", OTHER_RUNTIME, "bin", "python")
  if not os.path.exists(python) and not IN_CI:
    pytest.skip("no %s environment (./run.sh setup creates both)" % OTHER_RUNTIME)
  export_dir, checkpoint = tiny_exports()
  expected = reference_outputs(SPECS["classification"], checkpoint, TEXTS)
  done = subprocess.run([python, "-c", LOAD_ON_OTHER % ROOT, export_dir, json.dumps(TEXTS)],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        universal_newlines=True, timeout=300,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert done.returncode == 0, done.stderr[-3000:]
  np.testing.assert_allclose(json.loads(done.stdout.splitlines()[-1]), expected, atol=1e-5)


PLAIN_TENSORFLOW_CLIENT = """
import json, sys
import numpy as np
import tensorflow.compat.v1 as tf
import tensorflow_text  # the ops of the export's text signature
assert not any(m.split(".")[0] in ("data", "modeling", "spec", "serving", "run_classifier")
               for m in sys.modules)
export_dir, records = sys.argv[1:]
names = ("input_ids", "input_mask", "segment_ids")
rows = {}
for serialized in tf.python_io.tf_record_iterator(records):
  example = tf.train.Example.FromString(serialized).features.feature
  if example["is_real_example"].int64_list.value[0]:
    rows[example["example_id"].int64_list.value[0]] = {
        n: list(example[n].int64_list.value) for n in names}
with tf.Session(graph=tf.Graph()) as session:
  served = tf.saved_model.load(session, ["serve"], export_dir).signature_def["ids"]
  feed = {served.inputs[n].name: np.array([rows[i][n] for i in sorted(rows)], np.int32)
          for n in names}
  values = session.run(served.outputs["probabilities"].name, feed)
print(json.dumps({str(i): v.tolist() for i, v in zip(sorted(rows), values)}))
"""


# The same with text: the predict file's comments, read with the csv module, go to the
# export's default signature as they are.
PLAIN_TEXT_CLIENT = """
import csv, json, sys
import tensorflow.compat.v1 as tf
import tensorflow_text  # the ops of the export's text signature
assert not any(m.split(".")[0] in ("data", "modeling", "spec", "serving", "run_classifier")
               for m in sys.modules)
export_dir, predict_file = sys.argv[1:]
with open(predict_file, newline="", encoding="utf-8") as f:
  texts = [row["comment_text"] for row in csv.DictReader(f)]
with tf.Session(graph=tf.Graph()) as session:
  served = tf.saved_model.load(session, ["serve"], export_dir).signature_def["serving_default"]
  values = session.run(served.outputs["probabilities"].name, {served.inputs["text"].name: texts})
print(json.dumps(values.tolist()))
"""


def read_results(path):
  with open(path) as f:
    lines = f.read().splitlines()
  return lines[0], [line.split("\t") for line in lines[1:]]


@pytest.mark.slow
def test_train_export_and_score_from_the_export_alone(jigsaw_model, tmp_path, monkeypatch):
  output_dir = jigsaw_model.output_dir  # trained, predicted and exported in one run
  export_dir = jigsaw_model.result.export
  assert os.path.dirname(export_dir) == os.path.join(output_dir, "export")
  assert ("exported %s/model.ckpt-6 (global step 6) to %s" % (output_dir, export_dir)
          in jigsaw_model.log)
  header, cli_rows = read_results(os.path.join(output_dir, "test_results.tsv"))
  with open(os.path.join(export_dir, "assets", "model_card.json")) as f:
    assert json.load(f) == json.load(open(os.path.join(output_dir, "model_card.json")))

  # One command scores a CSV from the export alone: no task, model or layout flag.
  scored = str(tmp_path / "scored")
  done = subprocess.run(
      [sys.executable, os.path.join(ROOT, "run_classifier.py"), "--do_predict",
       "--saved_model=" + export_dir, "--predict_file=" + os.path.join(JIGSAW, "test.csv"),
       "--output_dir=" + scored], cwd=str(tmp_path), stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, universal_newlines=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  assert "predicting the rows of %s with the export %s, 4096 rows at a time" % (
      os.path.join(JIGSAW, "test.csv"), export_dir) in done.stderr
  assert "wrote 33 predictions to %s" % os.path.join(scored, "test_results.tsv") in done.stderr
  export_header, export_rows = read_results(os.path.join(scored, "test_results.tsv"))
  assert export_header == header == "id\tprobability_0\tprobability_1\tprediction"
  assert [r[0] for r in export_rows] == [r[0] for r in cli_rows]
  np.testing.assert_allclose([[float(v) for v in r[1:3]] for r in export_rows],
                             [[float(v) for v in r[1:3]] for r in cli_rows], atol=1e-5)
  with open(os.path.join(scored, "test_results.json")) as f:
    assert json.load(f)["saved_model"] == export_dir
  # Predicted a few rows at a time (the file is never held whole): the same lines.
  monkeypatch.setattr(pipeline_export, "EXPORT_CHUNK_ROWS", 5)
  run_flags("--do_predict", "--saved_model=" + export_dir, "--output_dir=" + str(
      tmp_path / "chunked"), "--predict_file=" + os.path.join(JIGSAW, "test.csv"))
  chunked_header, chunked_rows = read_results(str(tmp_path / "chunked" / "test_results.tsv"))
  assert chunked_header == header and [r[0] for r in chunked_rows] == [r[0] for r in cli_rows]
  assert [r[3] for r in chunked_rows] == [r[3] for r in export_rows]
  np.testing.assert_allclose([[float(v) for v in r[1:3]] for r in chunked_rows],
                             [[float(v) for v in r[1:3]] for r in export_rows], atol=1e-6)

  # The in-process predictor, loaded from the output_dir (its newest export), gives the
  # same probabilities.
  import csv
  with open(os.path.join(JIGSAW, "test.csv"), newline="", encoding="utf-8") as f:
    texts = [row["comment_text"] for row in csv.DictReader(f)]
  assert len(texts) == 33
  with pytest.raises(ExportNotFound):
    Predictor(str(tmp_path))  # a folder with no export
  with Predictor(output_dir) as predictor:
    assert predictor.export_dir == export_dir
    results = predictor.predict(texts)
  np.testing.assert_allclose([[r["probabilities"]["0"], r["probabilities"]["1"]] for r in results],
                             [[float(v) for v in r[1:3]] for r in cli_rows], atol=1e-5)
  assert [r["label"] for r in results] == [r[3] for r in cli_rows]

  # A process that imports nothing of this project: plain TensorFlow reads the predict
  # split's cached records, feeds their ids to the export, and gets test_results.tsv's
  # probabilities back.
  records = os.path.join(output_dir, "features", "test.tf_record")
  independent = subprocess.run(
      [sys.executable, "-c", PLAIN_TENSORFLOW_CLIENT, export_dir, records], cwd=str(tmp_path),
      env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
  assert independent.returncode == 0, independent.stderr[-3000:]
  by_id = json.loads(independent.stdout.splitlines()[-1])
  assert sorted(int(i) for i in by_id) == list(range(33))
  np.testing.assert_allclose([by_id[str(i)] for i in range(33)],
                             [[float(v) for v in r[1:3]] for r in cli_rows], atol=1e-5)

  independent = subprocess.run(
      [sys.executable, "-c", PLAIN_TEXT_CLIENT, export_dir, os.path.join(JIGSAW, "test.csv")],
      cwd=str(tmp_path), env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
  assert independent.returncode == 0, independent.stderr[-3000:]
  np.testing.assert_allclose(json.loads(independent.stdout.splitlines()[-1]),
                             [[float(v) for v in r[1:3]] for r in cli_rows], atol=1e-5)

  # Exporting again, without training, from a copy of the model: into --export_dir, or
  # else a new numbered version inside the output_dir.
  copy = jigsaw_model.copy_to(str(tmp_path / "copy"))
  chosen = str(tmp_path / "exported")
  assert run_flags("--output_dir=" + copy, "--do_export", "--export_dir=" + chosen).export == (
      chosen)
  assert find_export(chosen) == chosen
  again = run_flags("--output_dir=" + copy, "--do_export").export
  assert os.path.dirname(again) == os.path.join(copy, "export")
  assert find_export(copy) == again


@pytest.mark.slow
def test_an_export_is_checked_before_it_is_loaded(jigsaw_model, tmp_path):
  """An export lists its files with their sizes and sha256 (files.json); a copy cut short
  or changed is refused naming the file, before TensorFlow reads it (that ended in a
  traceback). An export without the list is refused (it cannot be checked), and a failed
  load is one line too."""
  import shutil
  export_dir = str(tmp_path / "export")
  shutil.copytree(jigsaw_model.result.export, export_dir)
  with open(os.path.join(export_dir, "files.json")) as f:
    listed = json.load(f)["files"]
  data = "variables/variables.data-00000-of-00001"
  hf = ["hf/" + name for name in ("config.json", "model.safetensors", "special_tokens_map.json",
                                   "tokenizer.json", "tokenizer_config.json", "vocab.txt")]
  onnx = [] if IS_TF1 else ["onnx/" + name for name in (  # (the ONNX folder's own list too)
      "files.json", "int8_quality.json", "model.int8.onnx", "model.onnx", "model_card.json",
      "tokenizer.json", "vocab.txt")]
  assert sorted(listed) == ["assets/model_card.json", "assets/vocab.txt"] + hf + onnx + [
      "saved_model.pb", data, "variables/variables.index"]
  size = os.path.getsize(os.path.join(export_dir, data))
  assert listed[data]["bytes"] == size
  with open(os.path.join(export_dir, data), "r+b") as f:
    f.truncate(size // 2)
  fix = ("export the model again: run_classifier.py --do_export --output_dir=<its "
         "output_dir>")
  with pytest.raises(ExportNotFound) as error:
    Predictor(export_dir)
  assert str(error.value) == ("%s is damaged: %s has %d bytes, and %d were written. Copy the "
                              "whole export again, or %s" % (export_dir, data, size // 2, size,
                                                             fix))
  with pytest.raises(FlagError) as error:
    run_flags("--do_predict", "--saved_model=" + export_dir, "--output_dir=" + str(
        tmp_path / "scores"), "--predict_file=" + os.path.join(JIGSAW, "test.csv"))
  assert str(error.value).startswith("--saved_model=%s: %s is damaged: " % (export_dir,
                                                                            export_dir))
  # Without files.json nothing can be checked: refused by both, with one message.
  os.remove(os.path.join(export_dir, "files.json"))
  unlisted = ("%s has no files.json, the list of its files and their sha256 that is checked "
              "before an export is loaded: copy the whole export again, or, if an earlier "
              "version exported it, %s" % (export_dir, fix))
  with pytest.raises(ExportNotFound) as error:
    Predictor(export_dir)
  assert str(error.value) == unlisted
  with pytest.raises(FlagError) as error:
    run_flags("--do_predict", "--saved_model=" + export_dir, "--output_dir=" + str(
        tmp_path / "scores"), "--predict_file=" + os.path.join(JIGSAW, "test.csv"))
  assert str(error.value) == "--saved_model=%s: %s" % (export_dir, unlisted)
  # Files as listed that TensorFlow still cannot load: one line too.
  os.remove(os.path.join(export_dir, data))
  write_manifest(export_dir)
  with pytest.raises(ExportNotFound) as error:
    Predictor(export_dir)
  assert str(error.value).startswith("%s cannot be loaded (" % export_dir)
  assert str(error.value).endswith("): " + fix)


def test_export_and_saved_model_flag_errors(tmp_path, tiny_checkpoint):
  flags = common_flags(tiny_checkpoint, str(tmp_path / "fresh"))
  with pytest.raises(FlagError, match="refusing to export with an untrained classifier head"):
    run_flags(*flags + ["--do_export"])
  with pytest.raises(FlagError, match="refusing to export"):
    run_flags(*flags + ["--do_export", "--allow_untrained_head"])
  existing = str(tmp_path)
  with pytest.raises(FlagError, match="--export_dir=%s already exists" % existing):
    run_flags(*flags + ["--do_train", "--do_export", "--export_dir=" + existing])
  with pytest.raises(FlagError, match="add --do_export"):
    run_flags(*flags + ["--do_predict", "--export_dir=" + str(tmp_path / "new")])
  saved = ["--saved_model=" + str(tmp_path), "--output_dir=" + str(tmp_path / "scores")]
  with pytest.raises(FlagError, match="pass --do_predict alone"):
    run_flags(*saved + ["--do_predict", "--do_train"])
  with pytest.raises(FlagError, match="--init_checkpoint has no use with --saved_model"):
    run_flags(*saved + ["--do_predict", "--init_checkpoint=" + tiny_checkpoint])
  with pytest.raises(FlagError, match="holds no SavedModel .* --do_export"):
    run_flags(*saved + ["--do_predict"])
  with pytest.raises(FlagError) as error:  # (before any TPU check)
    run_flags(*saved + ["--do_predict", "--use_tpu"])
  assert str(error.value) == "--saved_model predicts on this machine's CPU/GPU: drop --use_tpu"
  assert not (tmp_path / "fresh").exists() and not (tmp_path / "scores").exists()
