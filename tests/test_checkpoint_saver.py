"""modeling/estimator.py's CheckpointSaver: a training saves its checkpoints every
save_checkpoints_steps steps and at its end, as the Estimator's own saver does, but none
when its session starts (the state then is the checkpoint just restored, or the start a
run from nothing makes again), and writes the graph files once per folder."""

import os

import numpy as np
import tensorflow.compat.v1 as tf

from modeling.estimator import CheckpointSaver, build_estimator, checkpoint_hooks
from spec.options import DeviceOptions, TrainingOptions


def _model_fn(features, labels, mode, params):
  """One weight pulled towards 1: a step changes it, so each checkpoint holds its step."""
  del labels, params  # (TPUEstimator passes params: its batch size)
  weight = tf.get_variable("weight", [], initializer=tf.zeros_initializer())
  loss = tf.reduce_mean(tf.square(weight * features["x"] - 1.0))
  step = tf.train.get_or_create_global_step()
  train_op = tf.group(tf.train.GradientDescentOptimizer(0.1).minimize(loss),
                      step.assign_add(1))
  return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def _input_fn(params):
  return tf.data.Dataset.from_tensors({"x": np.ones([4], np.float32)}).repeat().batch(
      params["batch_size"], drop_remainder=True).map(lambda f: (f, tf.zeros([1])))


def _train(output_dir, to_step):
  training = TrainingOptions(train_batch_size=2, eval_batch_size=2, predict_batch_size=2,
                             save_checkpoints_steps=2, log_every_steps=100)
  estimator = build_estimator(_model_fn, output_dir, DeviceOptions(), training)
  estimator.train(_input_fn, max_steps=to_step,
                  hooks=checkpoint_hooks(output_dir, DeviceOptions(), training))


def _checkpoint_steps(folder):
  return sorted(int(name[len("model.ckpt-"):-len(".index")]) for name in os.listdir(folder)
                if name.startswith("model.ckpt-") and name.endswith(".index"))


def _written(folder, names):
  """{name: (size, modification time in ns)} of the files."""
  return {name: (os.stat(os.path.join(folder, name)).st_size,
                 os.stat(os.path.join(folder, name)).st_mtime_ns) for name in names}


def test_no_checkpoint_when_a_session_starts_and_the_graph_once(tmp_path):
  folder = str(tmp_path / "out")
  _train(folder, 3)
  # Every save_checkpoints_steps steps and at the end, none at step 0.
  assert _checkpoint_steps(folder) == [2, 3]
  assert tf.train.latest_checkpoint(folder) == os.path.join(folder, "model.ckpt-3")
  first = _written(folder, ["graph.pbtxt", "model.ckpt-3.index", "model.ckpt-3.meta"])
  events = [n for n in os.listdir(folder) if n.startswith("events.out.tfevents.")]
  assert any(e.graph_def for name in events  # (TensorBoard's graph)
             for e in tf.train.summary_iterator(os.path.join(folder, name)))
  # A second training in the folder (a resume, or the next stretch between evaluations)
  # restores step 3 and rewrites neither its checkpoint nor the graph; it saves 2 steps
  # after it, and at its end, as TensorFlow's own saver would.
  _train(folder, 6)
  assert _checkpoint_steps(folder) == [2, 3, 5, 6]
  assert _written(folder, first) == first
  reader = tf.train.load_checkpoint(os.path.join(folder, "model.ckpt-6"))
  assert reader.get_tensor("global_step") == 6
  assert 0 < reader.get_tensor("weight") < 1  # (six steps from 0 towards 1)


def test_the_saver_replaces_the_estimators_only_on_one_machine():
  training = TrainingOptions(save_checkpoints_steps=7)
  (hook,) = checkpoint_hooks("/tmp/out", DeviceOptions(), training)
  assert isinstance(hook, CheckpointSaver) and hook._timer._every_steps == 7
  assert len(checkpoint_hooks("/tmp/out", DeviceOptions(num_gpus=2), training)) == 1
  # A TPU (TPUEstimator puts its own saver in its step's hooks), a cluster (only the chief
  # saves) and a run without checkpoints keep TensorFlow's own behaviour.
  assert checkpoint_hooks("/tmp/out", DeviceOptions(use_tpu=True, tpu_name="t"),
                          training) == []
  assert checkpoint_hooks("/tmp/out", DeviceOptions(), training, cluster=object()) == []
  assert checkpoint_hooks("/tmp/out", DeviceOptions(),
                          TrainingOptions(save_checkpoints_steps=0)) == []
