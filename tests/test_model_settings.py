"""modeling.model_fn.ModelSettings: what model_fn_builder builds besides the encoder and the
head, one frozen object whose values are checked when it is made."""

import dataclasses

import pytest

from modeling.model_fn import ModelSettings
from pipeline.build import model_fn_of
from run_classifier import parse_flags


def test_a_setting_outside_its_values_is_refused_when_made():
  for kwargs, message in (
      ({"pooling": "max"}, "pooling 'max' is not one of cls, mean"),
      ({"precision": "float64"}, "precision 'float64' is not one of float32, float16, bfloat16"),
      ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps is 0, not at least 1"),
      # (the fused kernels, the optimizer's update among them, run on one CPU device, in a
      # step of one batch, on float32 or bfloat16 activations of this project's encoder)
      ({"fused_kernels": True, "gradient_accumulation_steps": 2},
       "fused_kernels cannot be combined with gradient_accumulation_steps > 1"),
      ({"fused_kernels": True, "precision": "float16", "use_tpu": True},
       "fused_kernels cannot be combined with use_tpu, precision float16"),
      ({"fused_kernels": True, "hub_module_handle": "/a/hub/model"},
       "fused_kernels cannot be combined with hub_module_handle")):
    with pytest.raises(ValueError) as error:
      ModelSettings(**kwargs)
    assert str(error.value) == message
  with pytest.raises(dataclasses.FrozenInstanceError):
    ModelSettings().learning_rate = 1.0


def test_the_builder_takes_settings_alone_and_a_training_graph_needs_steps():
  import tensorflow.compat.v1 as tf
  from conftest import THREE_CLASSES, model_features, small_config
  from modeling.model_fn import model_fn_builder
  with pytest.raises(TypeError) as error:
    model_fn_builder(small_config(), THREE_CLASSES, "/ckpt/bert_model.ckpt")
  assert str(error.value) == ("model_fn_builder's settings are a ModelSettings, not "
                              "'/ckpt/bert_model.ckpt'")
  model_fn = model_fn_builder(small_config(), THREE_CLASSES, ModelSettings(learning_rate=1e-3))
  with tf.Graph().as_default():
    with pytest.raises(ValueError) as error:
      model_fn(model_features(small_config()), None, tf.estimator.ModeKeys.TRAIN, {})
  assert str(error.value) == "a training graph needs num_train_steps >= 1, not 0"


def test_one_hot_embeddings_follow_the_tpu_unless_given():
  assert (ModelSettings().one_hot_embeddings, ModelSettings(use_tpu=True).one_hot_embeddings,
          ModelSettings(use_tpu=True, use_one_hot_embeddings=False).one_hot_embeddings) == (
              False, True, False)


def test_a_run_s_settings_come_from_its_option_groups(monkeypatch):
  """pipeline.build.model_fn_of makes a run's settings from its options: the schedule from
  the train steps, a serving graph's without training, TPU or reduced precision."""
  made = []
  monkeypatch.setattr("pipeline.build.model_fn_builder",
                      lambda config, spec, settings: made.append(settings))
  c = parse_flags(["run_classifier.py", "--learning_rate=3e-5", "--warmup_proportion=0.25",
                   "--init_checkpoint=/ckpt/bert_model.ckpt", "--pooling=mean", "--use_tpu",
                   "--use_bf16", "--classifier_dropout=0.4", "--save_summary_steps=7"])
  for serving in (False, True):
    model_fn_of(c.model, c.training, c.device, "/summaries", None, None, num_train_steps=100,
                serving=serving)
  assert made[0] == ModelSettings(
      init_checkpoint="/ckpt/bert_model.ckpt", learning_rate=3e-5, num_train_steps=100,
      num_warmup_steps=25, use_tpu=True, pooling="mean", precision="bfloat16",
      summary_dir="/summaries", save_summary_steps=7, classifier_dropout=0.4)
  assert made[1] == dataclasses.replace(made[0], init_checkpoint=None, learning_rate=0.0,
                                        use_tpu=False, precision="float32")
