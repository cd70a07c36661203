"""TensorBoard summaries: the training scalars the Estimator writes and ours (learning
rate, the float16 loss scale), every eval metric, and the TPU host_call's writer."""

import collections
import glob
import os

import pytest
import tensorflow.compat.v1 as tf
import tensorflow.compat.v2 as tf2

from modeling.summaries import host_call_fn, scalar_events


def scalars_in(folder):
  """{tag: [(step, value), ...]} of the event files directly in folder."""
  tags = collections.defaultdict(list)
  for path in sorted(glob.glob(os.path.join(folder, "events.out.tfevents*"))):
    for event in tf.train.summary_iterator(path):
      for value in event.summary.value:
        if value.HasField("simple_value"):
          tags[value.tag].append((event.step, value.simple_value))
        elif value.tensor.dtype != tf.string.as_datatype_enum:  # the TF2 API writes tensors
          tags[value.tag].append((event.step, float(tf.make_ndarray(value.tensor))))
  return dict(tags)


@pytest.mark.slow
def test_training_and_eval_summaries(jigsaw_model):
  output_dir = jigsaw_model.output_dir  # 6 steps, summaries every 2
  train = scalars_in(output_dir)
  assert {"loss", "learning_rate", "examples/sec", "global_step/sec"} <= set(train)
  assert "fp16_loss_scale" not in train  # (float32)
  # Written every 2 steps; the learning rate of the update that ended at step s is
  # 1e-3 * (1 - (s - 1) / 6) (no warm-up: 10% of 6 steps rounds to none).
  assert [s for s, _ in train["learning_rate"]] == [1, 3, 5]
  for step, value in train["learning_rate"]:
    assert value == pytest.approx(1e-3 * (1 - (step - 1) / 6.0), rel=1e-5)
  assert all(v > 0 for _, v in train["examples/sec"])
  assert scalar_events(output_dir, "loss") == train["loss"]
  evaluated = scalars_in(os.path.join(output_dir, "eval"))
  assert {"accuracy", "auc", "f1", "precision", "recall", "mcc", "loss", "eval_loss",
          "num_examples"} <= set(evaluated)
  assert evaluated["num_examples"] == [(6, 25.0)]


def test_float16_training_records_its_loss_scale(tmp_path):
  """--use_fp16's model_fn adds the loss scale to the training scalars, which the
  Estimator's summary hook writes with the others."""
  from conftest import THREE_CLASSES, model_features, small_config
  from modeling.model_fn import ModelSettings, model_fn_builder
  for precision, expected in (("float16", {"fp16_loss_scale", "learning_rate"}),
                              ("float32", {"learning_rate"})):
    model_fn = model_fn_builder(small_config(), THREE_CLASSES, ModelSettings(
        learning_rate=1e-3, num_train_steps=10, precision=precision))
    with tf.Graph().as_default():
      tf.train.get_or_create_global_step()
      model_fn(model_features(small_config()), None, tf.estimator.ModeKeys.TRAIN, {})
      tags = {tf.make_ndarray(summary.op.inputs[0].op.get_attr("value")).item().decode()
              for summary in tf.get_collection(tf.GraphKeys.SUMMARIES)}
    assert tags == expected, precision


def test_tpu_host_call_writes_every_n_steps(tmp_path):
  """The host side of the TPU summaries, run here on the CPU: tags at the global step,
  only at multiples of every_steps."""
  host_call = host_call_fn(["learning_rate", "loss_scale"], str(tmp_path), 2)
  with tf.Graph().as_default():
    step = tf.placeholder(tf.int64, [1])
    values = [tf.placeholder(tf.float32, [1]) for _ in range(2)]
    ops = host_call(step, *values)
    from tensorflow.python.ops import summary_ops_v2  # what TPUEstimator runs on the host
    with tf.Session() as session:
      session.run(summary_ops_v2.summary_writer_initializer_op())
      for s in range(1, 6):
        session.run(ops, {step: [s], values[0]: [0.1 * s], values[1]: [8.0]})
      session.run(tf2.summary.flush())
  written = scalars_in(str(tmp_path))
  assert [s for s, _ in written["learning_rate"]] == [2, 4]
  assert [round(v, 6) for _, v in written["learning_rate"]] == [0.2, 0.4]
  assert written["loss_scale"] == [(2, 8.0), (4, 8.0)]
  # What evaluation during training reads on a TPU, where no hook sees the loss.
  assert [(s, round(v, 6)) for s, v in scalar_events(str(tmp_path), "learning_rate")] == [
      (2, 0.2), (4, 0.4)]
  assert scalar_events(str(tmp_path), "no_such_tag") == []
