"""What a run reads back is checked before it is used: checkpoints (their files, and what
they hold against the BERT config) and model cards of every version this project has
written. (The record cache's own checks are in test_features.py.)"""

import json
import os
import shutil

import pytest
import tensorflow.compat.v1 as tf

from conftest import TINY, common_flags, run_flags, small_config
from modeling.checkpoint import CheckpointError, encoder_problem, files_problem
from spec.errors import FlagError


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
  from modeling.model_fn import model_fn_builder
  tiny = BertConfig.from_json_file(os.path.join(TINY, "bert_config.json"))
  assert encoder_problem(tiny_checkpoint, tiny) is None
  for config, pooling, refused in ((tiny, "cls", False), (small_config(vocab_size=30522,
                                   hidden_size=128, num_attention_heads=2,
                                   intermediate_size=512, num_hidden_layers=3,
                                   max_position_embeddings=512), "cls", True)):
    model_fn = model_fn_builder(config, THREE_CLASSES, tiny_checkpoint, 1e-3, 10, 1,
                                use_tpu=False, pooling=pooling)
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
