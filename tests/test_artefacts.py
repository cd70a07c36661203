"""What a run reads back is checked before it is used: checkpoints (their files, and what
they hold against the BERT config) and model cards of every version this project has
written. (The record cache's own checks are in test_features.py.)"""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import TEST_DATA, TINY, common_flags, run_flags, small_config
from modeling.checkpoint import CheckpointError, encoder_problem, files_problem
from spec import model_card
from spec.run_errors import FlagError


def _copy_checkpoint(prefix, folder):
  os.makedirs(folder, exist_ok=True)
  for path in tf.io.gfile.glob(prefix + ".*"):
    shutil.copy(path, folder)
  return os.path.join(folder, os.path.basename(prefix))


def _refused(tmp_path, *flags):
  output_dir = tmp_path / "never"
  with pytest.raises(FlagError) as error:
    run_flags(*list(flags) + ["--output_dir=%s" % output_dir])
  assert not output_dir.exists(), "work started before the check"
  return str(error.value)


def test_a_checkpoint_without_its_data_or_cut_short_is_refused_before_any_work(
    tmp_path, tiny_checkpoint):
  gone = _copy_checkpoint(tiny_checkpoint, str(tmp_path / "gone"))
  os.remove(gone + ".data-00000-of-00001")
  flags = common_flags(gone, "unused") + ["--do_train"]
  assert _refused(tmp_path, *flags) == (
      "--init_checkpoint=%s cannot be read: its data file (%s.data-00000-of-00001) is missing: "
      "the .index alone names the variables, not their values. Copy the whole checkpoint (its "
      ".index and every .data-* file), or give another" % (gone, gone))
  cut = _copy_checkpoint(tiny_checkpoint, str(tmp_path / "cut"))
  data = cut + ".data-00000-of-00001"
  size = os.path.getsize(data)
  with open(data, "r+b") as f:
    f.truncate(size // 2)
  assert files_problem(cut) == (
      "its data files hold %d bytes, and the 39 variables its index lists need %d: the copy "
      "was cut short" % (size // 2, size))
  assert files_problem(tiny_checkpoint) is None


def test_a_config_that_is_not_the_checkpoints_is_refused_naming_the_variables(
    tmp_path, tiny_checkpoint):
  """A bert_config.json without num_hidden_layers reads as 12 layers over BERT-Tiny's 2:
  layers 2 to 11 would start from random values, with an INFO line their only trace."""
  with open(os.path.join(TINY, "bert_config.json")) as f:
    official = json.load(f)
  for change, problem in (
      ({"num_hidden_layers": None}, "it lacks 160 of the encoder's variables: "
                                    "bert/encoder/layer_N (160)"),
      ({"num_hidden_layers": 1}, "it holds encoder layers up to layer_1, which a config of 1 "
                                 "layers leaves out"),
      ({"intermediate_size": 256}, "6 variables have other shapes: "
                                   "bert/encoder/layer_0/intermediate/dense/bias is [512], "
                                   "not [256]")):
    config = {k: v for k, v in dict(official, **change).items() if v is not None}
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(config))
    flags = common_flags(tiny_checkpoint, "unused") + ["--do_train",
                                                       "--bert_config_file=%s" % path]
    message = _refused(tmp_path, *flags)
    assert message.startswith("--init_checkpoint=%s does not match the BERT config %s: %s"
                              % (tiny_checkpoint, path, problem)), message
    assert message.endswith("Pass the bert_config.json that came with the checkpoint")


def test_only_the_new_head_may_start_from_random_values_in_the_graph(tiny_checkpoint):
  """The model_fn's own check, for callers that build it without the pipeline."""
  from conftest import THREE_CLASSES, model_features
  from modeling.bert import BertConfig
  from modeling.model_fn import ModelSettings, model_fn_builder
  tiny = BertConfig.from_json_file(os.path.join(TINY, "bert_config.json"))
  assert encoder_problem(tiny_checkpoint, tiny) is None
  for config, pooling, refused in ((tiny, "cls", False), (small_config(vocab_size=30522,
                                   hidden_size=128, num_attention_heads=2,
                                   intermediate_size=512, num_hidden_layers=3,
                                   max_position_embeddings=512), "cls", True)):
    model_fn = model_fn_builder(config, THREE_CLASSES, ModelSettings(
        init_checkpoint=tiny_checkpoint, learning_rate=1e-3, num_train_steps=10,
        num_warmup_steps=1, pooling=pooling))
    with tf.Graph().as_default():
      tf.train.get_or_create_global_step()
      features = model_features(config)
      if not refused:
        model_fn(features, None, tf.estimator.ModeKeys.TRAIN, {})
        continue
      with pytest.raises(CheckpointError) as error:
        model_fn(features, None, tf.estimator.ModeKeys.TRAIN, {})
      assert str(error.value).startswith(
          "%s lacks 16 variables of the graph besides its new head: bert/encoder/layer_N (16)"
          % tiny_checkpoint)


@pytest.mark.slow
def test_a_folders_checkpoint_that_cannot_be_read_is_named_before_any_work(jigsaw_model,
                                                                           tmp_path):
  copy = jigsaw_model.copy_to(str(tmp_path / "model"))
  os.remove(os.path.join(copy, "model.ckpt-6.data-00000-of-00001"))
  from conftest import JIGSAW
  with pytest.raises(FlagError) as error:
    run_flags("--output_dir=" + copy, "--do_predict", "--data_dir=" + JIGSAW)
  assert str(error.value).startswith(
      "refusing to predict with %s/model.ckpt-6: it cannot be read: its data file "
      "(%s/model.ckpt-6.data-00000-of-00001) is missing" % (copy, copy))
  with pytest.raises(FlagError) as error:
    run_flags("--output_dir=" + copy, "--do_train", "--num_train_steps=8",
              "--data_dir=" + JIGSAW)
  assert str(error.value).startswith(
      "--output_dir=%s: training would resume from its newest checkpoint, model.ckpt-6, which "
      "cannot be read: its data file" % copy)
  assert not [n for n in os.listdir(copy) if n.startswith("model.ckpt-8")]


# --- model cards of every version ---------------------------------------------------------

# Cards written by this project's own earlier versions (tests/data/README.md says how):
# version 1, version 2 before pooling and truncation, version 2 with them, versions 3, 4 and
# 5 (this one of a training with dynamic padding).
CARDS = {name: os.path.join(TEST_DATA, "model_cards", name + ".json")
         for name in ("version1_19bacd4", "version2_e3e8d77", "version2_8f004ca",
                      "version3_32e18f1", "version4_f2677be", "version5_3ce29ca")}


@pytest.mark.parametrize("name", sorted(CARDS))
def test_every_card_this_project_wrote_reads_in_the_current_version(name):
  with open(CARDS[name]) as f:
    written = json.load(f)
  card = model_card.from_json(json.dumps(written), CARDS[name])
  assert card["version"] == model_card.CARD_VERSION == 6
  assert set(card) >= set(model_card.FIELDS)
  assert (card["task"], card["labels"], card["head"], card["max_seq_length"]) == (
      "jigsaw_toxic", ["0", "1"], "classification", 32)
  # What later versions added, as the model was: BERT's pooled [CLS], the first tokens,
  # single texts, and no record of its training data before version 3, nor of how its
  # records were read before version 4, nor of the class weights before version 5 (unknown);
  # before version 6, dynamic padding grouped the examples into length buckets of 16 tokens.
  assert (card["pooling"], card["truncation"], card["text_pair"]) == ("cls", {"mode": "head"},
                                                                      False)
  if written["version"] < 3:
    assert card["training"] is None
  elif written["version"] == 3:
    assert card["training"] == dict(written["training"], input=None, data=[
        dict(entry, rows=None, class_weights=None) for entry in written["training"]["data"]])
  else:
    stream = written["training"]["input"]
    grouping = "length buckets of 16 tokens" if stream["dynamic_padding"] else "none"
    assert card["training"] == dict(written["training"], input=dict(
        stream, length_grouping=grouping), data=[
            dict(entry, class_weights=entry.get("class_weights"))
            for entry in written["training"]["data"]])
    assert stream["dynamic_padding"] == (written["version"] == 5)
    assert card["training"]["input"]["train_batch_size"] == 8
    assert (card["training"]["per_update"], card["training"]["data"][0]["examples"]) == (8, 267)
  assert card["label_spec"]["kind"] == "classification"
  assert card["label_columns"] == (None if written["version"] == 1 else ["toxic"])


def test_a_version_1_card_takes_its_label_column_where_it_was_read():
  """Version 1 recorded the label column only as the flag, which only csv and
  jigsaw_toxic read: an SST-2 model's ignored --label_column must not become its column."""
  with open(CARDS["version1_19bacd4"]) as f:
    written = json.load(f)
  written["flags"]["label_column"] = "insult"
  card = model_card.from_json(json.dumps(written), "x")
  assert card["label_columns"] == ["insult"] and card["label_spec"]["columns"] == ["insult"]
  glue = dict(written, task="sst-2")
  assert model_card.from_json(json.dumps(glue), "x")["label_columns"] is None


def test_a_card_that_is_not_a_whole_card_of_a_known_version_is_named():
  with open(CARDS["version2_8f004ca"]) as f:
    written = json.load(f)
  for broken, message in (
      (dict(written, version=7), "x has card version 7; this program reads versions 1 to 6"),
      (dict(written, version="3"), "x: its version is '3', not a whole number: the file was "
                                   "edited"),
      (dict(written, version=True), "x: its version is True, not a whole number"),
      (dict(written, max_seq_length=-1), "x: max_seq_length is -1, which no model of this "
                                         "project has (at least 3): the file was edited"),
      (dict(written, labels=["1", "0"]), 'x contradicts itself: labels is ["1", "0"], and '
                                         'label_spec says ["0", "1"] (the file was edited)'),
      (dict(written, labels=None, label_spec=dict(written["label_spec"], classes=None)),
       "x: a classification head's card lists no classes (labels is null)"),
      ({k: v for k, v in written.items() if k != "max_seq_length"},
       "x has no entry max_seq_length (its version, 2, has one)"),
      (dict(written, max_seq_length="32"), "x: max_seq_length is '32', which is not int"),
      (dict(written, do_lower_case=1), "x: do_lower_case is 1, which is not bool")):
    with pytest.raises(model_card.CardError) as error:
      model_card.from_json(json.dumps(broken), "x")
    assert str(error.value).startswith(message), str(error.value)
  current = dict(model_card.from_json(json.dumps(written), "x"),
                 training={"per_update": 8, "num_train_steps": 6, "seed": 1, "data": [{}],
                           "input": None})
  with pytest.raises(model_card.CardError,
                     match=r"x has no entry training.data\[0\].class_weights"):
    model_card.from_json(json.dumps(current), "x")
  current["training"]["data"] = []
  with pytest.raises(model_card.CardError, match=r"x: training.data is \[\], which no model "
                                                 r"of this project has \(a train file at least\)"):
    model_card.from_json(json.dumps(current), "x")
  current["training"]["data"] = [{"file": "t.csv", "sha256": "ab", "examples": 1,
                                  "train_fraction": 1.0, "from_step": 0, "rows": None,
                                  "class_weights": None}]
  current["training"]["input"] = {"record_shards": 1, "input_pipelines": 1}
  with pytest.raises(model_card.CardError,
                     match=r"x has no entry training.input.dynamic_padding"):
    model_card.from_json(json.dumps(current), "x")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CARDS))
def test_a_model_with_a_card_of_every_version_predicts(name, jigsaw_model, tmp_path):
  """The issue this closes: a card written before pooling and truncation ended in
  KeyError: 'pooling'. Each old card, beside a model of its shape, predicts."""
  folder = jigsaw_model.copy_to(str(tmp_path / "model"))
  shutil.copy(CARDS[name], os.path.join(folder, "model_card.json"))
  from conftest import JIGSAW, TINY_VOCAB
  with pytest.raises(FlagError, match="names the vocabulary .*, which no longer exists"):
    run_flags("--output_dir=" + folder, "--do_predict", "--data_dir=" + JIGSAW)
  result = run_flags("--output_dir=" + folder, "--do_predict", "--data_dir=" + JIGSAW,
                     "--vocab_file=" + TINY_VOCAB)
  # The same model, the same predictions, but for the calibration and threshold the model's
  # own card has and an old card has not: the probabilities at the logits themselves (the
  # calibrated ones' logs times the temperature, through a softmax), decided at 0.5.
  with open(os.path.join(jigsaw_model.output_dir, "model_card.json")) as f:
    temperature = json.load(f)["label_spec"]["temperature"]
  got, calibrated = _rows(result.predictions), _rows(jigsaw_model.result.predictions)
  assert [row[0] for row in got] == [row[0] for row in calibrated]
  expected = np.exp(temperature * np.log(np.array([row[1:3] for row in calibrated], float)))
  expected /= expected.sum(axis=1, keepdims=True)
  np.testing.assert_allclose([row[1:3] for row in got], expected, atol=2e-6)
  assert [row[3] for row in got] == ["1" if p >= 0.5 else "0" for p in expected[:, 1]]


def _rows(path):
  """test_results.tsv's rows after the header: [id, probability_0, probability_1, label]."""
  with open(path) as f:
    rows = [line.rstrip("\n").split("\t") for line in f][1:]
  return [[r[0], float(r[1]), float(r[2]), r[3]] for r in rows]


@pytest.mark.slow
def test_a_head_of_another_size_is_named_as_the_head(jigsaw_model):
  """It was blamed on the bert_config.json."""
  from modeling.checkpoint import assignment_map
  checkpoint = os.path.join(jigsaw_model.output_dir, "model.ckpt-6")
  with tf.Graph().as_default():
    head = tf.get_variable("output_weights", [3, 128])
    with pytest.raises(CheckpointError) as error:
      assignment_map([head], checkpoint)
  assert str(error.value) == (
      "the classifier head in %s has 2 outputs, and this run's has 3: the checkpoint was "
      "fine-tuned for other labels. Use the labels it was trained with, or start from a "
      "pre-trained checkpoint" % checkpoint)
