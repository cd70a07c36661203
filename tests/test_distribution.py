"""Several devices through TensorFlow's MirroredStrategy: two replicas (two virtual CPU
devices here, GPUs in use) make the same update as one device with the same global batch,
with fixed and with dynamically padded batches."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import (BINARY, checkpoint_variables, common_flags, small_config,
                      tiny_vocab_records)
from data.features import InputExample
from data.input_fn import input_fn_builder
from modeling.estimator import BatchSplitError, build_estimator
from modeling.model_fn import TRAIN_LOSS_NAME, ModelSettings, model_fn_builder
from pipeline import machine
from pipeline.checks import check_run
from pipeline.progress import ProgressHook
from run_classifier import parse_flags
from spec.options import DeviceOptions, TrainingOptions
from spec.run_errors import FlagError

MAX_SEQ = 20
GLOBAL_BATCH = 8
# Dropout off: replicas draw other random numbers than one device does.
CONFIG = small_config(vocab_size=30522, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0)


def _records(tmp_path, name, n):
  """Texts of 2 to 14 words: with dynamic padding, each replica's half of a step's batch
  (one device's batch, of examples of similar length) is trimmed to its own longest text."""
  examples = [InputExample(str(i), " ".join(["word", "text", "the"][i % 3:] * 5)[:6 * (
      2 + i * 5 % 13)], label=str(i * 7 % 3 % 2)) for i in range(n)]
  return tiny_vocab_records(examples, str(tmp_path / (name + ".tf_record")), MAX_SEQ,
                            pad_to_multiple=GLOBAL_BATCH)


def _estimator(output_dir, replicas, init_checkpoint=None):
  model_fn = model_fn_builder(CONFIG, BINARY, ModelSettings(
      init_checkpoint=init_checkpoint, learning_rate=1e-3, num_train_steps=10))
  session_config = tf.ConfigProto(device_count={"CPU": replicas})
  return build_estimator(model_fn, output_dir, DeviceOptions(num_gpus=replicas),
                         TrainingOptions(train_batch_size=GLOBAL_BATCH,
                                         eval_batch_size=GLOBAL_BATCH,
                                         predict_batch_size=GLOBAL_BATCH,
                                         save_checkpoints_steps=100, seed=1),
                         session_config=session_config, replica_device_type="CPU")


def _logged_losses(estimator, input_fn):
  """Trains two steps; the (step, loss) pairs the progress hook read."""
  progress = ProgressHook(2, GLOBAL_BATCH, every_steps=1, loss_tensor_name=TRAIN_LOSS_NAME,
                          report=lambda *args: None)
  estimator.train(input_fn, max_steps=2, hooks=[progress])
  return progress.losses


@pytest.mark.slow
# Dynamic padding's batches over replicas on TF 2.15 alone, the runtime of today's GPUs.
@pytest.mark.parametrize("dynamic_padding", [
    False, pytest.param(True, marks=pytest.mark.one_runtime("tf2"))])
def test_two_replicas_update_as_one_device_with_the_global_batch(tmp_path, dynamic_padding):
  train_files = _records(tmp_path, "train", 24)
  eval_files = _records(tmp_path, "eval", 12)  # 4 padding rows: 2 whole global batches

  def train_input(seed):
    return input_fn_builder(train_files, MAX_SEQ, is_training=True, label_spec=BINARY,
                            seed=seed, dynamic_padding=dynamic_padding)

  eval_input = input_fn_builder(eval_files, MAX_SEQ, is_training=False, label_spec=BINARY,
                                dynamic_padding=dynamic_padding)
  one_dir, two_dir = str(tmp_path / "one"), str(tmp_path / "two")
  one = _estimator(one_dir, 1)
  one_losses = _logged_losses(one, train_input(5))
  # The replicated run starts from the one-device run's initial weights (its step-0
  # checkpoint): the same head, which a new graph would initialise otherwise.
  two = _estimator(two_dir, 2, init_checkpoint=one_dir + "/model.ckpt-0")
  assert two.num_replicas == 2
  two_losses = _logged_losses(two, train_input(5))
  # The loss that progress lines and hooks read is the global batch's.
  assert [step for step, _ in two_losses] == [1, 2]
  np.testing.assert_allclose([loss for _, loss in two_losses],
                             [loss for _, loss in one_losses], rtol=1e-5)

  before, after_one, after_two = (checkpoint_variables(one_dir + "/model.ckpt-0"),
                                  checkpoint_variables(one_dir + "/model.ckpt-2"),
                                  checkpoint_variables(two_dir + "/model.ckpt-2"))
  assert sorted(after_two) == sorted(after_one)
  assert after_two["global_step"] == 2
  for name, value in after_one.items():
    np.testing.assert_allclose(after_two[name], value, rtol=1e-5, atol=1e-5, err_msg=name)
    # Two updates of every weight, moment and the step (a no-op would pass the above).
    assert not np.array_equal(value, before[name]), name

  if dynamic_padding:
    return  # evaluation reads no per-replica batch: one case checks it
  # Evaluation (on one device, see ReplicatedEstimator) gives TPUEstimator's metrics.
  checkpoint = two_dir + "/model.ckpt-2"
  results_one = one.evaluate(eval_input, steps=2, checkpoint_path=checkpoint)
  results_two = two.evaluate(eval_input, steps=2, checkpoint_path=checkpoint)
  assert sorted(results_two) == sorted(results_one) and "auc" in results_one
  for name, value in results_one.items():
    assert results_two[name] == pytest.approx(value, rel=1e-6), name


@pytest.mark.parametrize("flags,message", [
    (["--num_gpus=3"], "--train_batch_size=8 is the global batch: it must split evenly over "
                       "--num_gpus=3 (each GPU takes an equal share)"),
    (["--num_gpus=2", "--use_fp16"], "--use_fp16 cannot be combined with --num_gpus=2 yet (its "
                                     "loss-scale update is not written for replicas): drop one "
                                     "of them"),
    (["--num_gpus=2", "--gradient_accumulation_steps=2"],
     "--gradient_accumulation_steps cannot be combined with --num_gpus=2 yet (its accumulators "
     "are not written for replicas): drop one of them"),
    (["--num_gpus=2", "--use_tpu", "--tpu_name=t"],
     "--num_gpus is for the GPUs of this machine; a TPU spreads each batch over "
     "--num_tpu_cores. Drop --num_gpus"),
    (["--num_gpus=-1"], "--num_gpus=-1 must be 0 or more"),
    # This machine has no GPU (a GPU machine would accept this one).
    (["--num_gpus=2"], "--num_gpus=2, but TensorFlow sees 0 GPUs on this machine (check "
                       "CUDA_VISIBLE_DEVICES and that TensorFlow's GPU build is installed)"),
])
def test_num_gpus_flags_that_cannot_work_are_refused(tmp_path, tiny_checkpoint, flags, message):
  if "sees 0 GPUs" in message and tf.config.experimental.list_physical_devices("GPU"):
    pytest.skip("this machine has a GPU")
  config = parse_flags(["run_classifier.py"] + common_flags(tiny_checkpoint, str(tmp_path)) +
                       ["--do_train", "--train_batch_size=8"] + flags)
  with pytest.raises(FlagError) as error:
    check_run(config)
  assert str(error.value) == message


def test_a_batch_that_does_not_split_over_the_replicas_is_refused(tmp_path):
  """(run_classifier turns this into a flag error; on a cluster the replica count is
  known only once the strategy exists.)"""
  model_fn = model_fn_builder(CONFIG, BINARY, ModelSettings(
      learning_rate=1e-3, num_train_steps=10))
  with pytest.raises(BatchSplitError) as error:
    build_estimator(model_fn, str(tmp_path), DeviceOptions(num_gpus=3),
                    TrainingOptions(train_batch_size=8), replica_device_type="CPU")
  assert str(error.value) == "the train batch size 8 does not split over 3 replicas"


def test_the_device_described_counts_the_gpus_a_run_trains_on(monkeypatch):
  """What run_summary.json and the benchmark's rows say. This machine has no GPU, so
  TensorFlow's two device queries answer as on a machine with four."""
  from tensorflow.python.client import device_lib

  class FourthGpu(object):
    device_type = "GPU"
    physical_device_desc = "device: 3, name: Tesla V100-SXM2-16GB, pci bus id: 0000:00:07.0"

  monkeypatch.setattr(tf.config.experimental, "list_physical_devices",
                      lambda kind=None: [object()] * 4 if kind == "GPU" else [])
  monkeypatch.setattr(device_lib, "list_local_devices", lambda: [FourthGpu()] * 4)
  assert machine.describe_device(False, num_gpus=2) == {
      "kind": "GPU", "count": 2, "description": "2 x Tesla V100-SXM2-16GB"}
  # No --num_gpus: TensorFlow places the graph on the first GPU alone.
  assert machine.describe_device(False, num_gpus=0)["description"] == (
      "1 x Tesla V100-SXM2-16GB")
  # A task of a cluster trains on every GPU its machine has.
  assert machine.describe_device(False)["count"] == 4
  # The benchmark's peak row counts them all (it adds a row per GPU count up to it); a
  # measured row those it trained on.
  from tools import bench_worker
  assert bench_worker.runtime_info()["device"]["count"] == 4
  measured = bench_worker.parse_args(["--impl", "ours", "--num_gpus", "2"])
  assert bench_worker.runtime_info(measured)["device"]["count"] == 2
