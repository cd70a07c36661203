"""--bert_hub_module_handle: our encoder exported as a TF1 hub module gives the same logits."""

import os
import sys
import types

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import THREE_CLASSES, small_config, write_small_vocab
from modeling.bert import BertModel
from modeling.head import head_logits
from modeling.model_fn import ModelSettings, model_fn_builder



def _save_random_classifier(config, path, num_labels):
  with tf.Graph().as_default():
    ids = tf.zeros([1, 8], tf.int32)
    head_logits(BertModel(config, False, ids).get_pooled_output(), num_labels, False)
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      tf.train.Saver().save(session, path)


def _features(vocab_size):
  """Four rows of 12 random ids (one padded from its 8th token), two segments each."""
  rng = np.random.RandomState(0)
  ids = rng.randint(0, vocab_size, (4, 12)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[2, 7:] = 0
  return {"input_ids": ids, "input_mask": mask,
          "segment_ids": np.tile([0] * 6 + [1] * 6, (4, 1)).astype(np.int32),
          "label_ids": np.zeros(4, np.int32), "is_real_example": np.ones(4, np.int32),
          "example_id": np.arange(4, dtype=np.int32)}


def _predict(config, checkpoint, hub_handle, features, pooling="cls"):
  with tf.Graph().as_default():
    model_fn = model_fn_builder(config, THREE_CLASSES, ModelSettings(
        init_checkpoint=checkpoint, learning_rate=1e-4, hub_module_handle=hub_handle,
        pooling=pooling))
    spec = model_fn({k: tf.constant(v) for k, v in features.items()}, None,
                    tf.estimator.ModeKeys.PREDICT, {})
    with tf.Session() as session:
      session.run([tf.global_variables_initializer(), tf.tables_initializer()])
      return session.run(spec.predictions["outputs"])


def test_exported_hub_module_gives_the_same_logits(tmp_path):
  from modeling.hub_module import export_hub_module, tokenization_info
  config = small_config()
  checkpoint = str(tmp_path / "model.ckpt")
  _save_random_classifier(config, checkpoint, 3)
  vocab = write_small_vocab(str(tmp_path / "vocab.txt"), ["w%d" % i for i in range(94)])
  module_dir = export_hub_module(config, checkpoint, vocab, True, str(tmp_path / "module"))

  features = _features(config.vocab_size)
  from_checkpoint = _predict(config, checkpoint, None, features)
  from_hub = _predict(config, checkpoint, module_dir, features)
  np.testing.assert_allclose(from_hub, from_checkpoint, atol=1e-6)
  assert np.abs(from_checkpoint - 1.0 / 3).max() > 1e-4  # not a degenerate uniform output

  vocab_file, do_lower_case = tokenization_info(module_dir)
  assert do_lower_case is True
  assert open(vocab_file).read() == open(vocab).read()


def test_clear_error_when_hub_cannot_load_tf1_modules(monkeypatch, tmp_path):
  from modeling import hub_module
  (tmp_path / "tfhub_module.pb").write_bytes(b"")  # (a TF1-format module's folder)
  monkeypatch.setitem(sys.modules, "tensorflow_hub", types.SimpleNamespace(
      __version__="0.16.1", KerasLayer=object, resolve=lambda handle: handle))
  with pytest.raises(RuntimeError) as error:
    hub_module.hub_pooled_output(str(tmp_path), {}, False)
  message = str(error.value)
  assert "tensorflow_hub 0.16.1 cannot load TF1-format hub modules" in message
  assert "tensorflow-hub<=0.15" in message and "--init_checkpoint" in message


# Builds a TF2 BERT SavedModel (the interface of the encoders published for TF2) from a TF1
# checkpoint of this project's BertModel, eagerly, in a process of its own: argv are the
# bert_config.json, the checkpoint, the vocabulary, do_lower_case (0/1) and the folder.
BUILD_TF2_ENCODER = """
import sys
import tensorflow as tf
from modeling.bert import BertConfig, BertModel
config_file, checkpoint, vocab, lower, folder = sys.argv[1:6]
config = BertConfig.from_json_file(config_file)

class Encoder(tf.Module):
  @tf.compat.v1.keras.utils.track_tf1_style_variables
  def encode(self, ids, mask, segments, training):
    model = BertModel(config, training, ids, mask, segments)
    return model.get_pooled_output(), model.get_sequence_output()

encoder = Encoder()
zeros = tf.zeros([1, 4], tf.int32)
encoder.encode(zeros, tf.ones([1, 4], tf.int32), zeros, False)
reader = tf.train.load_checkpoint(checkpoint)
for variable in encoder.variables:
  variable.assign(reader.get_tensor(variable.name.split(":")[0]))
root = tf.train.Checkpoint()
root.encoder = encoder
root.variables = list(encoder.variables)
root.trainable_variables = list(encoder.trainable_variables)
root.regularization_losses = []
root.vocab_file = tf.saved_model.Asset(vocab)
root.do_lower_case = tf.Variable(lower == "1", trainable=False)

@tf.function
def call(inputs, training=False):
  pooled, sequence = encoder.encode(inputs["input_word_ids"], inputs["input_mask"],
                                    inputs["input_type_ids"], training)
  return {"pooled_output": pooled, "sequence_output": sequence}
spec = tf.TensorSpec([None, None], tf.int32)
for training in (False, True):
  call.get_concrete_function({"input_word_ids": spec, "input_mask": spec,
                              "input_type_ids": spec}, training=training)
root.__call__ = call
tf.saved_model.save(root, folder)
"""


def build_tf2_encoder(config_file, checkpoint, vocab, do_lower_case, folder):
  """A TF2 SavedModel of checkpoint's encoder, built by TF 2.15 (this runtime's, or
  .venvs/tf2's from TF 1.15's suite)."""
  import os
  import subprocess
  from conftest import IS_TF1, ROOT
  python = os.path.join(ROOT, ".venvs", "tf2", "bin", "python") if IS_TF1 else sys.executable
  if not os.path.exists(python):  # (a machine with Python 3.7 alone; CI has both)
    pytest.skip("no TF 2.15 environment .venvs/tf2 to build a TF2 SavedModel with: "
                "./run.sh setup builds it where Python 3.9-3.11 is found")
  done = subprocess.run([python, "-c", BUILD_TF2_ENCODER, config_file, checkpoint, vocab,
                         "1" if do_lower_case else "0", folder], cwd=ROOT,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        universal_newlines=True, timeout=300,
                        env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2"))
  assert done.returncode == 0, done.stderr[-3000:]
  return folder


@pytest.fixture(scope="module")
def tf2_encoder(tmp_path_factory):
  """A random classifier's checkpoint of the shipped BERT-Tiny config (three classes), and a
  TF2 SavedModel of its encoder with BERT-Tiny's (uncased) vocabulary."""
  from conftest import TINY, TINY_VOCAB
  from modeling.bert import BertConfig
  folder = tmp_path_factory.mktemp("tf2_encoder")
  config_file = os.path.join(TINY, "bert_config.json")
  config = BertConfig.from_json_file(config_file)
  checkpoint = str(folder / "model.ckpt")
  _save_random_classifier(config, checkpoint, 3)
  saved = build_tf2_encoder(config_file, checkpoint, TINY_VOCAB, True, str(folder / "saved"))
  return config, checkpoint, TINY_VOCAB, saved


@pytest.mark.tf2_only
@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_a_tf2_saved_model_encoder_gives_the_checkpoints_outputs(tf2_encoder, pooling):
  """The TF2 SavedModel of an encoder, through the same model_fn, gives the checkpoint's
  outputs within 1e-5 (the head from init_checkpoint, the encoder from the SavedModel
  only); its variables are trained; its vocabulary and casing come from its files."""
  from modeling.hub_module import tokenization_info
  config, checkpoint, vocab, saved = tf2_encoder
  features = _features(config.vocab_size)
  from_checkpoint = _predict(config, checkpoint, None, features, pooling)
  from_saved_model = _predict(config, checkpoint, saved, features, pooling)
  np.testing.assert_allclose(from_saved_model, from_checkpoint, atol=1e-5)
  assert np.abs(from_checkpoint - 1.0 / 3).max() > 1e-4  # not a degenerate uniform output
  with tf.Graph().as_default():
    model_fn = model_fn_builder(config, THREE_CLASSES, ModelSettings(
        init_checkpoint=checkpoint, learning_rate=1e-4, num_train_steps=10,
        hub_module_handle=saved, pooling=pooling))
    model_fn({k: tf.constant(v) for k, v in features.items()}, None,
             tf.estimator.ModeKeys.TRAIN, {})
    trained = [v.op.name for v in tf.trainable_variables()]
  assert "hub_encoder/bert/encoder/layer_1/output/dense/kernel" in trained
  assert "output_weights" in trained
  assert tokenization_info(saved) == (os.path.join(saved, "assets", "vocab.txt"), True)
  with open(vocab) as f, open(tokenization_info(saved)[0]) as g:
    assert f.read() == g.read()


def test_tf1_refuses_a_tf2_saved_model_and_names_the_way(tf2_encoder, tmp_path):
  """TF 1.15 cannot load the TF2 SavedModels TF 2.15 writes: refused in one line, before any
  graph is built; TF 2.15 takes it. A folder that is neither format is refused on both."""
  from conftest import IS_TF1
  from modeling.hub_module import tf2_saved_model
  from spec.run_errors import FlagError
  saved = tf2_encoder[3]
  if IS_TF1:
    with pytest.raises(FlagError) as error:
      tf2_saved_model(saved)
    assert str(error.value) == (
        "--bert_hub_module_handle=%s is a TF2 SavedModel, which TF 1.15 cannot load (its "
        "functions use ops TF 1.15 lacks): run on TF 2.15 (./run.sh shell tf2 -- python "
        "run_classifier.py ...), or use a TF1-format hub module or --init_checkpoint" % saved)
  else:
    assert tf2_saved_model(saved) == saved
  with pytest.raises(FlagError, match="holds neither a TF1 hub module"):
    tf2_saved_model(str(tmp_path))


@pytest.mark.slow
@pytest.mark.tf2_only
def test_a_run_fine_tunes_a_tf2_encoder_and_exports_it(tf2_encoder, tmp_path):
  """Train, predict and export with a TF2 SavedModel encoder: its variables are fine-tuned
  and checkpointed with the run, and the export predicts what the run predicted."""
  import csv
  from conftest import JIGSAW, run_flags
  from serving.predictor import Predictor
  saved = tf2_encoder[3]
  output_dir = str(tmp_path / "out")
  run_flags("--task_name=jigsaw_toxic", "--data_dir=" + JIGSAW, "--bert_hub_module_handle=" +
            saved, "--max_seq_length=16", "--train_batch_size=8", "--learning_rate=1e-2",
            "--num_train_steps=2", "--do_train", "--do_predict", "--do_export",
            "--output_dir=" + output_dir)
  # The encoder's weights moved from those it started from (the checkpoint the SavedModel
  # was built from), and the run's checkpoint holds them under the encoder's scope.
  kernel = "bert/encoder/layer_0/attention/self/query/kernel"
  trained = tf.train.load_variable(output_dir, "hub_encoder/" + kernel)
  original = tf.train.load_variable(tf2_encoder[1], kernel)
  assert trained.shape == original.shape and np.abs(trained - original).max() > 1e-4
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    expected = [[float(row["probability_0"]), float(row["probability_1"])]
                for row in csv.DictReader(f, delimiter="\t")]
  with open(os.path.join(JIGSAW, "test.csv"), encoding="utf-8", newline="") as f:
    texts = [row["comment_text"] for row in csv.DictReader(f)]
  with Predictor(output_dir) as predictor:
    got = predictor.predict_outputs([predictor.example(i, text)
                                     for i, text in enumerate(texts)])
  np.testing.assert_allclose(got, expected, atol=1e-5)
  # The run's checkpoint, as another run's --init_checkpoint, brings its fine-tuned encoder
  # too (not the hub model's weights): the same predictions.
  again = str(tmp_path / "again")
  run_flags("--task_name=jigsaw_toxic", "--data_dir=" + JIGSAW, "--bert_hub_module_handle=" +
            saved, "--max_seq_length=16", "--do_predict", "--output_dir=" + again,
            "--init_checkpoint=" + tf.train.latest_checkpoint(output_dir))
  with open(os.path.join(again, "test_results.tsv")) as f:
    np.testing.assert_allclose([[float(row["probability_0"]), float(row["probability_1"])]
                                for row in csv.DictReader(f, delimiter="\t")], expected,
                               atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("encoder", [
    "checkpoint", pytest.param("tf2_saved_model", marks=pytest.mark.tf2_only)])
def test_a_frozen_encoder_keeps_its_weights_and_the_head_learns(encoder, tf2_encoder,
                                                                  tiny_checkpoint, tmp_path):
  """--freeze_encoder: two training steps move the head and leave the encoder (a
  checkpoint's, or a TF2 SavedModel's) as it started."""
  from conftest import JIGSAW, TINY, TINY_VOCAB, run_flags
  output_dir = str(tmp_path / "out")
  common = ["--task_name=jigsaw_toxic", "--data_dir=" + JIGSAW, "--max_seq_length=16",
            "--train_batch_size=8", "--learning_rate=1e-2", "--num_train_steps=2",
            "--do_train", "--freeze_encoder", "--output_dir=" + output_dir]
  kernel = "bert/encoder/layer_0/attention/self/query/kernel"
  if encoder == "checkpoint":
    from spec.run_errors import FlagError
    with pytest.raises(FlagError, match="--freeze_encoder trains the head on the encoder as "
                       "it starts, and this run has no pre-trained one: give --init_checkpoint"):
      run_flags(*common + ["--bert_config_file=" + os.path.join(TINY, "bert_config.json"),
                           "--vocab_file=" + TINY_VOCAB])
    run_flags(*common + ["--bert_config_file=" + os.path.join(TINY, "bert_config.json"),
                         "--vocab_file=" + TINY_VOCAB, "--init_checkpoint=" + tiny_checkpoint])
    started, scope = tiny_checkpoint, ""
  else:
    run_flags(*common + ["--bert_hub_module_handle=" + tf2_encoder[3]])
    started, scope = tf2_encoder[1], "hub_encoder/"
  np.testing.assert_array_equal(tf.train.load_variable(output_dir, scope + kernel),
                                tf.train.load_variable(started, kernel))
  names = dict(tf.train.list_variables(output_dir))
  assert "output_weights" in names and not any("adam" in n and kernel in n for n in names)
  # (the head did learn: its Adam moments are there and not zero)
  assert np.abs(tf.train.load_variable(output_dir, "output_weights/adam_m")).max() > 0
