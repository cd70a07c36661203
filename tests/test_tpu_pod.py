"""TPU pod slices, as far as a CPU shows them: the pod's RunConfig, the flags a pod needs,
and the per-host input (each host reads its own record shards, and on resume skips its
own share of the examples the checkpoint's steps used)."""

import pytest
import tensorflow.compat.v1 as tf

from conftest import BINARY, common_flags, first_batches, small_config, tiny_vocab_records
from data.features import InputExample
from data.input_fn import files_of_pipeline, input_fn_builder, pipeline_of
from modeling.estimator import build_estimator
from modeling.model_fn import ModelSettings, model_fn_builder
from pipeline.checks import check_run
from pipeline.multi_device import check_every_pipeline_has_rows
from run_classifier import parse_flags
from spec.options import DeviceOptions, TrainingOptions
from spec.run_errors import FlagError

HOSTS = 2
CORES_PER_HOST = 2  # a real host has 8; the arithmetic is the same
PER_CORE_BATCH = 2
GLOBAL_BATCH = HOSTS * CORES_PER_HOST * PER_CORE_BATCH


class HostContext(object):
  """What TPUEstimator puts in params['context'] on host `host` of a pod with per-host
  input (PER_HOST_V2): its current_input_fn_deployment() is (the host's CPU device, this
  invocation's index, the number of invocations, the cores the invocation feeds). No
  TPUEstimator without a TPU makes one with more than one host."""

  def __init__(self, host):
    self.host = host

  def current_input_fn_deployment(self):
    return ("/job:worker/task:%d/device:CPU:0" % self.host, self.host, HOSTS, CORES_PER_HOST)


def _records(tmp_path, n=40, shards=4):
  examples = [InputExample(str(i), "word %d" % i, label=str(i % 2)) for i in range(n)]
  return tiny_vocab_records(examples, str(tmp_path / "train.tf_record"), 8, num_shards=shards)


def _host_params(host):
  return {"batch_size": PER_CORE_BATCH, "context": HostContext(host)}


def test_each_host_reads_its_own_shards_and_together_all_of_them(tmp_path):
  files = _records(tmp_path)
  assert [pipeline_of(_host_params(host)) for host in range(HOSTS)] == [(0, 2), (1, 2)]
  assert pipeline_of({"batch_size": 8}) == (0, 1)  # on CPU/GPU TPUEstimator passes no context
  assert files_of_pipeline(files, 1, 2) == [files[1], files[3]]
  input_fn = input_fn_builder(files, 8, is_training=True, label_spec=BINARY, seed=3)
  # 40 rows in 4 shards: each host's 20 rows are its first epoch (10 batches of 2).
  epochs = [sorted(sum(first_batches(input_fn, _host_params(host), 10), []))
            for host in range(HOSTS)]
  assert sorted(epochs[0] + epochs[1]) == list(range(40))
  assert len(set(epochs[0])) == 20 and len(set(epochs[1])) == 20


def test_a_resumed_host_continues_its_own_stream(tmp_path):
  """After k steps each host has fed its cores k * CORES_PER_HOST batches; a resume told
  the examples of k global batches skips exactly those on every host."""
  files = _records(tmp_path)

  def stream(host, skip_examples):
    return first_batches(input_fn_builder(files, 8, is_training=True, label_spec=BINARY,
                                          seed=3, skip_examples=skip_examples),
                         _host_params(host), 30)

  for host in range(HOSTS):
    whole = stream(host, 0)
    for steps in (1, 3, 7):
      skipped = steps * CORES_PER_HOST
      assert stream(host, steps * GLOBAL_BATCH)[:30 - skipped] == whole[skipped:], (host, steps)


def test_records_need_a_shard_per_host(tmp_path):
  files = _records(tmp_path, shards=1)
  with pytest.raises(ValueError) as error:
    files_of_pipeline(files, 0, 2)
  assert str(error.value) == (
      "2 input pipelines (one per worker or TPU host) each need a shard of their own, but the "
      "records are 1 file (%s): write them with --num_record_shards=2 or more" % files[0])


def test_the_pod_run_config_feeds_each_host(tmp_path):
  model_fn = model_fn_builder(small_config(), BINARY, ModelSettings(
      learning_rate=1e-3, num_train_steps=10, use_tpu=True))
  estimator = build_estimator(
      model_fn, str(tmp_path), DeviceOptions(num_tpu_cores=32, iterations_per_loop=100),
      TrainingOptions(train_batch_size=256, eval_batch_size=256, predict_batch_size=256))
  tpu_config = estimator.config.tpu_config
  assert tpu_config.num_shards == 32 and tpu_config.iterations_per_loop == 100
  assert (tpu_config.per_host_input_for_training ==
          tf.estimator.tpu.InputPipelineConfig.PER_HOST_V2)


POD = ["--use_tpu", "--tpu_name=pod", "--output_dir=gs://bucket/run", "--num_tpu_cores=32",
       "--train_batch_size=64", "--eval_batch_size=64", "--predict_batch_size=64"]


@pytest.mark.parametrize("flags,message", [
    (["--do_train", "--num_record_shards=6"],
     "--num_tpu_cores=32 is 4 hosts, and each host reads record shards of its own, as many as "
     "every other host: pass --num_record_shards=4 (or a multiple of it)"),
    (["--do_train", "--num_record_shards=8", "--num_folds=3"],
     "--num_folds on a pod slice would evaluate and predict each held-out fold on every "
     "host: cross-validate on one TPU host (--num_tpu_cores=8)"),
    (["--do_train", "--num_tpu_cores=12", "--train_batch_size=48", "--eval_batch_size=48",
      "--predict_batch_size=48"], "--num_tpu_cores=12: a pod slice has a multiple of 8 "
                                  "cores (v3-32 has 32)"),
    (["--do_train", "--num_record_shards=4", "--do_eval"],
     "--do_eval on a pod slice (--num_tpu_cores=32) would read the dev or test file on every "
     "host: train on the pod, then run --do_eval from the same --output_dir on one TPU host "
     "(--num_tpu_cores=8), a GPU or the CPU"),
    (["--do_train", "--num_record_shards=4", "--train_batch_size=48"],
     "--train_batch_size=48 must be a multiple of --num_tpu_cores=32 (each core gets an "
     "equal share)"),
])
def test_pod_flags_that_cannot_work_are_refused(tmp_path, tiny_checkpoint, flags, message):
  config = parse_flags(["run_classifier.py"] + common_flags(tiny_checkpoint, str(tmp_path)) +
                       POD + flags)
  with pytest.raises(FlagError) as error:
    check_run(config)
  assert str(error.value) == message


def test_a_pod_training_command_passes_the_checks(tmp_path, tiny_checkpoint):
  check_run(parse_flags(["run_classifier.py"] + common_flags(
      tiny_checkpoint, str(tmp_path)) + POD + ["--do_train", "--num_record_shards=4"]))


def test_a_pod_slice_gets_a_record_shard_for_each_host(tmp_path, tiny_checkpoint):
  from pipeline.multi_device import with_record_shards
  config = parse_flags(["run_classifier.py"] + common_flags(tiny_checkpoint, str(tmp_path)) +
                       POD + ["--do_train"])
  check_run(config)  # (not given: chosen, not refused)
  assert with_record_shards(config).device.num_record_shards == 4


def test_every_host_needs_rows(tmp_path, tiny_checkpoint):
  """9 rows in 4 shards are 3, 3, 3 and 0 rows: with 4 hosts, the last would read nothing
  while the others wait for it; with 2 hosts each has rows."""
  check_every_pipeline_has_rows(9, 4, 2)
  with pytest.raises(FlagError) as error:
    check_every_pipeline_has_rows(9, 4, 4)
  assert str(error.value) == (
      "9 training rows in --num_record_shards=4 shards leave the input pipeline of machine or "
      "TPU host 3 of 4 without a row: pass fewer shards")
