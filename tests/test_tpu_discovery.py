"""Where --use_tpu finds its TPU (pipeline/multi_device.py with_tpu_found): the flags, then
TPU_NAME, then COLAB_TPU_ADDR, then a TPU VM's own; what each platform's environment gives
the estimator's resolver (a recorder stands in for TPUClusterResolver: there is no TPU
here); the output folder each allows; and the command line's error when there is none."""

import logging
import os
import subprocess
import sys

import pytest

from conftest import IS_TF1, JIGSAW, ROOT, TINY, TINY_VOCAB, small_config
from modeling.estimator import build_estimator
from modeling.model_fn import ModelSettings, model_fn_builder
from pipeline import multi_device
from pipeline.checks import check_run
from run_classifier import parse_flags
from spec.heads.classification import SingleLabel
from spec.run_errors import FlagError

TPU_FLAGS = ["--task_name=jigsaw_toxic", "--data_dir=" + JIGSAW, "--do_train",
             "--bert_config_file=" + os.path.join(TINY, "bert_config.json"),
             "--vocab_file=" + TINY_VOCAB, "--use_tpu", "--tpu_zone=us-central1-b",
             "--gcp_project=my-project"]


class RecordingResolver(object):
  """Records how the estimator asks for its TPU, and answers as a resolver of one TPU."""
  calls = []

  def __init__(self, tpu, zone=None, project=None):
    RecordingResolver.calls.append((tpu, zone, project))
    self.tpu = tpu

  def master(self, *args, **kwargs):
    return "grpc://10.1.2.3:8470"

  def cluster_spec(self):
    import tensorflow.compat.v1 as tf
    return tf.train.ClusterSpec({"worker": ["10.1.2.3:8470"]})

  def get_master(self):
    return self.master()

  def get_job_name(self):
    return "worker"


# Each platform: its environment, whether it is a TPU VM, the TPU found, the log's source.
PLATFORMS = {
    "flags": ({"TPU_NAME": "other", "COLAB_TPU_ADDR": "10.0.0.9:8470"}, True, "my-tpu",
              "from the flags"),
    "cloud_tpu_node": ({"TPU_NAME": "node-1"}, False, "node-1", "from TPU_NAME"),
    "colab_tpu_node": ({"COLAB_TPU_ADDR": "10.0.0.2:8470"}, False, "grpc://10.0.0.2:8470",
                       "from COLAB_TPU_ADDR, a Colab TPU"),
    "tpu_vm": ({}, True, "local", "from this TPU VM's own TPU"),
    "tpu_name_before_colab": ({"TPU_NAME": "node-2", "COLAB_TPU_ADDR": "10.0.0.2:8470"}, True,
                              "node-2", "from TPU_NAME"),
}


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_each_platform_gives_the_resolver_its_tpu(platform, tmp_path, caplog):
  environ, tpu_vm, expected, source = PLATFORMS[platform]
  flags = TPU_FLAGS + ["--output_dir=gs://bucket/run"]
  if platform == "flags":
    flags.append("--tpu_name=my-tpu")
  c = parse_flags(["run_classifier.py"] + flags)
  with caplog.at_level(logging.INFO):
    found = multi_device.with_tpu_found(c, environ, tpu_vm)
  assert found.device.tpu_name == expected
  assert "TPU: %s (%s)" % (expected, source) in caplog.text
  if expected == "local" and IS_TF1:
    with pytest.raises(FlagError, match=r"--tpu_name=local \(a TPU VM's own TPU\) needs TF "
                       "2.15 with the TPU VM's TPU runtime: TF 1.15 reaches TPU nodes only"):
      check_run(found)
    return
  check_run(found)
  RecordingResolver.calls = []
  spec = SingleLabel(["label"], ["0", "1"])
  model_fn = model_fn_builder(small_config(), spec, ModelSettings(
      learning_rate=1e-3, num_train_steps=10, use_tpu=True))
  estimator = build_estimator(model_fn, str(tmp_path), found.device, found.training,
                              tpu_resolver=RecordingResolver)
  assert RecordingResolver.calls == [(expected, "us-central1-b", "my-project")]
  assert estimator.config.master == "grpc://10.1.2.3:8470"


def test_a_tpu_vm_may_write_to_its_own_disk_and_a_tpu_node_may_not(tmp_path):
  local = ["--output_dir=" + str(tmp_path / "out")]
  c = parse_flags(["run_classifier.py"] + TPU_FLAGS + local)
  if not IS_TF1:  # (TF 1.15 refuses a TPU VM's own TPU: the test above)
    check_run(multi_device.with_tpu_found(c, {}, on_tpu_vm=True))  # (no error)
    pod = parse_flags(["run_classifier.py"] + TPU_FLAGS + local + [
        "--num_tpu_cores=32", "--train_batch_size=64", "--eval_batch_size=64",
        "--predict_batch_size=64"])
    with pytest.raises(FlagError, match="--num_tpu_cores=32 is a pod slice of several TPU "
                       "VMs, each with a disk of its own: --output_dir must be on Cloud"):
      check_run(multi_device.with_tpu_found(pod, {}, on_tpu_vm=True))
  both = parse_flags(["run_classifier.py"] + TPU_FLAGS + [
      "--output_dir=gs://b/r", "--tpu_name=t1", "--master=grpc://10.0.0.1:8470"])
  with pytest.raises(FlagError) as error:
    check_run(both)
  assert str(error.value) == ("--tpu_name=t1 and --master=grpc://10.0.0.1:8470 both name the "
                              "TPU: pass one of them")
  with pytest.raises(FlagError) as error:
    check_run(multi_device.with_tpu_found(c, {"TPU_NAME": "node-1"}, on_tpu_vm=True))
  assert str(error.value) == (
      "--use_tpu needs --output_dir on Cloud Storage (gs://bucket/path): the TPU cannot write "
      "to this machine's disk (a TPU VM's own TPU, --tpu_name=local, can)")
  with pytest.raises(FlagError, match="needs --output_dir on Cloud Storage"):
    check_run(multi_device.with_tpu_found(c, {"COLAB_TPU_ADDR": "10.0.0.2:8470"}, False))


def test_without_use_tpu_nothing_is_looked_for():
  c = parse_flags(["run_classifier.py"] + [f for f in TPU_FLAGS if f != "--use_tpu"] + [
      "--output_dir=/tmp/x"])
  assert multi_device.with_tpu_found(c, {"TPU_NAME": "node-1"}, True) is c


def test_a_tpu_vm_is_told_by_its_devices(tmp_path):
  dev = tmp_path / "dev"
  dev.mkdir()
  assert not multi_device.on_tpu_vm(str(dev))
  (dev / "accelerometer").write_text("")  # (not a TPU chip)
  assert not multi_device.on_tpu_vm(str(dev))
  (dev / "accel0").write_text("")  # v2 to v4
  assert multi_device.on_tpu_vm(str(dev))
  (dev / "accel0").unlink()
  (dev / "vfio").mkdir()
  (dev / "vfio" / "vfio").write_text("")  # (the control device alone: no chip)
  assert not multi_device.on_tpu_vm(str(dev))
  (dev / "vfio" / "0").write_text("")  # a vfio group: a TPU chip from v5, or another device
  pci = tmp_path / "pci"
  (pci / "0000:00:04.0").mkdir(parents=True)
  (pci / "0000:00:04.0" / "vendor").write_text("0x10de\n")  # (a GPU passed through)
  assert not multi_device.on_tpu_vm(str(dev), str(pci))
  (pci / "0000:00:05.0").mkdir()
  (pci / "0000:00:05.0" / "vendor").write_text("0x1ae0\n")  # Google's: a TPU chip
  assert multi_device.on_tpu_vm(str(dev), str(pci))


@pytest.mark.slow
@pytest.mark.one_runtime("tf1")  # (the same entry point on both; the finding is tested on both)
def test_the_command_line_names_the_three_ways_when_there_is_no_tpu(tmp_path):
  environ = {k: v for k, v in os.environ.items() if k not in ("TPU_NAME", "COLAB_TPU_ADDR")}
  done = subprocess.run(
      [sys.executable, os.path.join(ROOT, "run_classifier.py")] + TPU_FLAGS + [
          "--output_dir=gs://bucket/run"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      universal_newlines=True, env=dict(environ, TF_CPP_MIN_LOG_LEVEL="2"), timeout=300)
  assert done.returncode == 2
  assert done.stderr.splitlines()[-1] == (
      "run_classifier: flag error: --use_tpu found no TPU: name one with --tpu_name (or "
      "--master), set TPU_NAME (or COLAB_TPU_ADDR, as a Colab TPU runtime does), or run on a "
      "TPU VM, whose own TPU is used (--tpu_name=local)")
  done = subprocess.run(
      [sys.executable, os.path.join(ROOT, "run_classifier.py")] + TPU_FLAGS + [
          "--output_dir=" + str(tmp_path / "out"), "--tpu_zone=", "--gcp_project="],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
      env=dict(environ, TF_CPP_MIN_LOG_LEVEL="2", COLAB_TPU_ADDR="10.0.0.2:8470"),
      timeout=300)
  assert done.returncode == 2
  assert "TPU: grpc://10.0.0.2:8470 (from COLAB_TPU_ADDR, a Colab TPU)" in done.stderr
  assert done.stderr.splitlines()[-1].startswith(
      "run_classifier: flag error: --use_tpu needs --output_dir on Cloud Storage")
