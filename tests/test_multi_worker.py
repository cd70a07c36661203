"""Several machines through TF_CONFIG and TensorFlow's MultiWorkerMirroredStrategy: real
run_classifier processes on 127.0.0.1 (a chief, a worker and an evaluator) train as one
process does on the global batch of the same records, and only the chief writes."""

import json
import logging
import os
import socket
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import ROOT, checkpoint_variables, common_flags, tiny_config_without_dropout
from data.input_fn import input_fn_builder
from modeling.bert import BertConfig
from modeling.estimator import build_estimator
from modeling.model_fn import ModelSettings, model_fn_builder
from modeling.summaries import scalar_events
from pipeline.build import make_processor
from pipeline.multi_device import check_cluster
from run_classifier import parse_flags
from spec.cluster import ClusterError, parse_tf_config
from spec.options import DeviceOptions, TrainingOptions
from spec.run_errors import FlagError

STEPS = 3
GLOBAL_BATCH = 8
TIMEOUT_SECONDS = 240


def _free_ports(count):
  sockets = [socket.socket() for _ in range(count)]
  for s in sockets:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def _tf_config(cluster, task_type, index=0):
  return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def _start(args, tf_config, log_path):
  env = dict(os.environ, TF_CONFIG=tf_config, TF_CPP_MIN_LOG_LEVEL="2")
  log = open(log_path, "w")
  return subprocess.Popen([sys.executable, os.path.join(ROOT, "run_classifier.py")] + args,
                          cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                          start_new_session=True), log


def _finish(tasks):
  """Waits for every task (name -> (process, log)) to exit; when one fails or the time is
  up, kills them all (a task whose peer died waits for it for ever). Returns the exit
  codes, None for a task killed."""
  deadline = time.time() + TIMEOUT_SECONDS
  try:
    while time.time() < deadline:
      codes = [process.poll() for process, _ in tasks.values()]
      if None not in codes or any(codes):
        break
      time.sleep(0.5)
  finally:
    codes = {name: process.poll() for name, (process, _) in tasks.items()}
    for process, log in tasks.values():
      if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
      log.close()
  return codes


def _train_on_one_process(config, bert_config_file, record_files, init_checkpoint,
                          output_dir):
  """The reference: one process, one device, each step's batch the chief's half-batch
  followed by the worker's (the input pipelines of the two machines, zipped)."""
  label_spec = make_processor(config.data).label_spec
  training = config.training
  settings = ModelSettings(init_checkpoint=init_checkpoint, learning_rate=training.learning_rate,
                           num_train_steps=STEPS,
                           num_warmup_steps=int(STEPS * training.warmup_proportion))
  model_fn = model_fn_builder(BertConfig.from_json_file(bert_config_file), label_spec, settings)
  pipeline = input_fn_builder(record_files, config.model.max_seq_length, is_training=True,
                              label_spec=label_spec, seed=training.seed)

  def global_batches(params):
    halves = [pipeline({"batch_size": GLOBAL_BATCH // 2, "input_pipeline_id": i,
                        "num_input_pipelines": 2}) for i in (0, 1)]
    return tf.data.Dataset.zip(tuple(halves)).map(
        lambda a, b: {k: tf.concat([a[k], b[k]], 0) for k in a})

  estimator = build_estimator(  # (the graph's seed is the shuffle's too)
      model_fn, output_dir, DeviceOptions(), TrainingOptions(
          train_batch_size=GLOBAL_BATCH, eval_batch_size=GLOBAL_BATCH,
          predict_batch_size=GLOBAL_BATCH, save_checkpoints_steps=1, save_summary_steps=1,
          seed=training.seed))
  estimator.train(global_batches, max_steps=STEPS)


@pytest.mark.slow
def test_chief_worker_and_evaluator_train_as_one_process_on_the_global_batch(
    tmp_path, tiny_checkpoint):
  output_dir = str(tmp_path / "cluster")
  bert_config_file = tiny_config_without_dropout(tmp_path)
  args = common_flags(tiny_checkpoint, output_dir) + [
      "--bert_config_file=" + bert_config_file, "--do_train", "--do_eval",
      "--num_train_steps=%d" % STEPS, "--train_batch_size=%d" % GLOBAL_BATCH,
      "--num_record_shards=2", "--save_checkpoints_steps=1", "--save_summary_steps=1"]
  chief_port, worker_port = _free_ports(2)
  cluster = {"chief": ["127.0.0.1:%d" % chief_port], "worker": ["127.0.0.1:%d" % worker_port]}
  tasks = {role: _start(args, _tf_config(cluster, role), str(tmp_path / (role + ".log")))
           for role in ("chief", "worker", "evaluator")}
  codes = _finish(tasks)
  logs = {role: open(str(tmp_path / (role + ".log"))).read() for role in tasks}
  for role, code in codes.items():
    assert code == 0, "%s exited %s:\n%s" % (role, code, logs[role][-3000:])

  # One checkpoint series, the chief's; a worker keeps no scratch copy.
  assert sorted(name for name in os.listdir(output_dir) if name.endswith(".index")) == [
      "model.ckpt-%d.index" % step for step in range(STEPS + 1)]
  assert not [name for name in os.listdir(output_dir) if name.startswith("tmp_")]
  # The chief alone evaluated and wrote the results and the card; its records are its own.
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    assert json.load(f)["global_step"] == STEPS
  assert os.path.exists(os.path.join(output_dir, "model_card.json"))
  features = os.path.join(output_dir, "features")
  assert os.path.exists(os.path.join(features, "train.tf_record.meta.json"))
  assert os.path.exists(os.path.join(features, "worker_0", "train.tf_record.meta.json"))
  assert not os.path.exists(os.path.join(features, "worker_0", "dev.tf_record.meta.json"))
  assert os.path.exists(os.path.join(features, "evaluator_0", "dev.tf_record.meta.json"))
  # The evaluator evaluated the last checkpoint (and maybe earlier ones) for TensorBoard.
  evaluated = [step for step, _ in scalar_events(os.path.join(output_dir, "eval_evaluator"),
                                                 "loss")]
  assert evaluated and evaluated[-1] == STEPS

  # One process with the global batch of the same records, from the same initial weights.
  config = parse_flags(["run_classifier.py"] + args)
  # Each training task wrote the one shard it reads: the chief shard 0, the worker shard 1.
  chief_files, worker_files = (
      _written_record_files(os.path.join(output_dir, "features", folder))
      for folder in ("", "worker_0"))
  assert [os.path.basename(p) for p in chief_files + worker_files] == [
      "train.tf_record-00000-of-00002", "train.tf_record-00001-of-00002"]
  record_files = chief_files + worker_files
  reference_dir = str(tmp_path / "one_process")
  _train_on_one_process(config, bert_config_file, record_files,
                        os.path.join(output_dir, "model.ckpt-0"), reference_dir)
  before = checkpoint_variables(os.path.join(output_dir, "model.ckpt-0"))
  cluster_after = checkpoint_variables(os.path.join(output_dir, "model.ckpt-%d" % STEPS))
  one_after = checkpoint_variables(os.path.join(reference_dir, "model.ckpt-%d" % STEPS))
  assert sorted(cluster_after) == sorted(one_after)
  for name, value in one_after.items():
    np.testing.assert_allclose(cluster_after[name], value, rtol=1e-5, atol=1e-5, err_msg=name)
    assert not np.array_equal(value, before[name]), name
  # The loss the chief logged is the global batch's, step by step.
  cluster_losses = scalar_events(output_dir, "loss")
  one_losses = scalar_events(reference_dir, "loss")
  assert [step for step, _ in cluster_losses] == [step for step, _ in one_losses]
  np.testing.assert_allclose([v for _, v in cluster_losses], [v for _, v in one_losses],
                             rtol=1e-5)


def _written_record_files(features):
  """The train record files a task's metadata lists that it wrote (its own shards)."""
  with open(os.path.join(features, "train.tf_record.meta.json")) as f:
    metadata = json.load(f)
  return [path for path, check in zip(metadata["files"], metadata["file_checks"]) if check]


@pytest.mark.parametrize("workers", [1, 2])
def test_each_task_featurises_the_rows_of_its_own_shards_alone(tmp_path, monkeypatch,
                                                                caplog, workers):
  """Each training task of a cluster featurises only the rows its input pipeline reads,
  into records equal to those shards of the whole file's featurisation; the evaluator
  only counts the rows. The file is read twice (logged once), and a task's records are
  found again by a restarted task."""
  from data import featurise, tfrecord
  from pipeline.multi_device import own_record_shards
  from test_streaming import BIAS, _config, _train_split
  flags = ("--task_name=jigsaw_bias", "--data_dir=" + BIAS, "--identity_weights",
           "--train_fraction=0.7", "--num_record_shards=6",
           "--featurise_workers=%d" % workers)
  whole = _train_split(_config(tmp_path / "whole", *flags))[0]
  featurised = []
  bodies = featurise.Featurisation.bodies
  monkeypatch.setattr(featurise.Featurisation, "bodies",  # (counted in this process)
                      lambda job, rows: (featurised.append(len(rows)), bodies(job, rows))[1])
  seen = {}
  for role, index in (("chief", 0), ("worker", 0), ("worker", 1), ("evaluator", 0)):
    own = own_record_shards(parse_tf_config(_tf_config(CHIEF_AND_TWO_WORKERS, role, index)),
                            6)
    del featurised[:]
    c = _config(tmp_path / ("%s_%d" % (role, index)), *flags)
    caplog.clear()
    with caplog.at_level(logging.INFO):
      split = _train_split(c, own_shards=own)[0]
    assert len([r for r in caplog.records if "train examples" in r.getMessage()]) == 1
    reads = []
    with monkeypatch.context() as patch:
      patch.setattr(tfrecord, "_write_records", lambda *args: reads.append(args))
      assert _train_split(c, own_shards=own)[0].metadata == split.metadata
    assert reads == []  # (the records were found, not written again)
    assert split.num_examples == whole.num_examples
    assert split.metadata["weights_sha256"] == whole.metadata["weights_sha256"]
    for shard, (path, expected) in enumerate(zip(split.record_files, whole.record_files)):
      assert os.path.basename(path) == os.path.basename(expected)
      if shard in own:
        assert (list(tf.io.tf_record_iterator(path)) ==
                list(tf.io.tf_record_iterator(expected))), (role, index, shard)
        seen[shard] = role
      else:
        assert not os.path.exists(path)
    rows = sum(sum(1 for _ in tf.io.tf_record_iterator(whole.record_files[s])) for s in own)
    if workers == 1:
      assert sum(featurised) == rows
  assert sorted(seen) == list(range(6))  # (every shard once: the owns do not overlap)
  assert own == [] and rows == 0


CHIEF_AND_TWO_WORKERS = {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"]}


@pytest.mark.parametrize("task_type,index,chief", [
    ("chief", 0, True), ("worker", 0, False), ("worker", 1, False)])
def test_each_task_knows_its_role(task_type, index, chief):
  cluster = parse_tf_config(_tf_config(CHIEF_AND_TWO_WORKERS, task_type, index))
  assert (cluster.task_type, cluster.task_index, cluster.num_workers, cluster.is_chief,
          cluster.is_evaluator) == (task_type, index, 3, chief, False)
  assert cluster.describe() == "%s %d of a cluster of 3 training tasks (a chief and 2 " \
                               "workers)" % (task_type, index)


def test_the_evaluator_and_an_empty_tf_config():
  evaluator = parse_tf_config(_tf_config(CHIEF_AND_TWO_WORKERS, "evaluator"))
  assert evaluator.is_evaluator and not evaluator.is_chief and evaluator.num_workers == 3
  assert parse_tf_config(None) is None and parse_tf_config("  ") is None
  assert parse_tf_config('{"task": {"type": "chief"}}') is None  # no cluster: one process
  # A chief alone (as services set on one machine) is one process too.
  assert parse_tf_config(_tf_config({"chief": ["host0:2222"]}, "chief")) is None
  assert parse_tf_config(_tf_config({"chief": ["host0:2222"], "worker": []}, "chief")) is None


@pytest.mark.parametrize("tf_config,message", [
    ("{chief}", "TF_CONFIG is not JSON (Expecting property name enclosed in double quotes: "
                "line 1 column 2 (char 1)): it must look like"),
    (_tf_config(dict(CHIEF_AND_TWO_WORKERS, ps=["host3:2222"]), "chief"),
     "TF_CONFIG lists parameter servers (\"ps\"): with Estimators they train "
     "asynchronously, which this project does not support. Use \"chief\" and \"worker\" "
     "tasks only (synchronous all-reduce)"),
    (_tf_config({"worker": ["host1:2222"]}, "worker"),
     "TF_CONFIG's cluster needs exactly one \"chief\" (it writes the checkpoints and "
     "results); it has 0"),
    (_tf_config(CHIEF_AND_TWO_WORKERS, "worker", 2),
     "TF_CONFIG's task is worker 2, but its cluster has 2 worker tasks"),
    (_tf_config(CHIEF_AND_TWO_WORKERS, "master"),
     "TF_CONFIG's task type is 'master': it must be \"chief\", \"worker\" or \"evaluator\""),
    ('{"cluster": ["host0:2222"], "task": {"type": "chief"}}',
     "TF_CONFIG's \"cluster\" and \"task\" must be JSON objects"),
    (_tf_config({"chief": ["a:1"], "trainer": ["b:1"]}, "chief"),
     "TF_CONFIG's cluster has task types trainer; it takes \"chief\" (one) and \"worker\" "
     "(any number)"),
    (_tf_config({"chief": ["host0"], "worker": ["host1:2222"]}, "chief"),
     "TF_CONFIG's chief 0 is 'host0': it has no port. Write it as \"host:port\", e.g. "
     "\"host0:2222\""),
    (_tf_config({"chief": ["host0:2222"], "worker": ["host1:http"]}, "chief"),
     "TF_CONFIG's worker 0 is 'host1:http': its port 'http' is not a TCP port. Give one from "
     "1 to 65535, e.g. \"host1:2222\""),
    (_tf_config({"chief": ["host0:2222"], "worker": ["host1:99999"]}, "chief"),
     "TF_CONFIG's worker 0 is 'host1:99999': its port '99999' is not a TCP port"),
    (_tf_config({"chief": ["host0:2222"], "worker": [2222]}, "chief"),
     "TF_CONFIG's worker 0 is 2222: not a \"host:port\" text"),
    (_tf_config({"chief": ["host0:2222"], "worker": "host1:2222"}, "chief"),
     "TF_CONFIG's cluster lists its worker tasks as 'host1:2222': give a list"),
    (_tf_config({"chief": ["host0:2222"], "worker": ["host0:2222"]}, "chief"),
     "TF_CONFIG gives chief 0 and worker 0 the same address host0:2222: each task listens "
     "on a port of its own"),
    ('{"cluster": {"chief": "host0:2222", "worker": ["host1:2222"]}, "task": {"type": '
     '"chief", "index": 0}}', "TF_CONFIG's cluster lists its chief tasks as 'host0:2222': "
     "give a list"),
    ('{"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222"]}, "task": {"type": '
     '"worker"}}', "TF_CONFIG's task has no \"index\": give its place in the cluster's worker "
     "list"),
])
def test_a_tf_config_that_cannot_train_is_refused(tf_config, message):
  with pytest.raises(ClusterError) as error:
    parse_tf_config(tf_config)
  assert str(error.value).startswith(message)


@pytest.mark.parametrize("task_type,flags,message", [
    ("chief", ["--do_eval"], "TF_CONFIG sets up a cluster for training: add --do_train, or "
                             "unset TF_CONFIG to evaluate or predict on this machine alone"),
    ("chief", ["--do_train", "--train_batch_size=8"],
     "--train_batch_size=8 is the global batch: it must split evenly over TF_CONFIG's 3 "
     "training tasks"),
    ("chief", ["--do_train", "--train_batch_size=6", "--num_record_shards=4"],
     "--num_record_shards=4: each of TF_CONFIG's 3 training tasks reads shards of its own, "
     "as many as every other task; pass --num_record_shards=3 (or a multiple of it)"),
    ("evaluator", ["--do_train", "--train_batch_size=6", "--num_record_shards=3"],
     "TF_CONFIG makes this task the evaluator, which evaluates the dev split: add "
     "--do_eval"),
    ("worker", ["--do_train", "--do_eval", "--eval_every_steps=10"],
     "--eval_every_steps cannot be used with TF_CONFIG's cluster (add an \"evaluator\" task "
     "to TF_CONFIG: it evaluates every checkpoint the chief saves): drop it"),
    ("chief", ["--do_train", "--num_gpus=2"],
     "--num_gpus cannot be used with TF_CONFIG's cluster (each machine of the cluster trains "
     "on all the GPUs it sees (choose them with CUDA_VISIBLE_DEVICES)): drop it"),
    ("chief", ["--do_train", "--use_fp16"],
     "--use_fp16 cannot be used with TF_CONFIG's cluster (its loss-scale update is not "
     "written for replicas): drop it"),
])
def test_flags_a_cluster_cannot_run_are_refused(tmp_path, tiny_checkpoint, task_type, flags,
                                                message):
  cluster = parse_tf_config(_tf_config(CHIEF_AND_TWO_WORKERS, task_type))
  config = parse_flags(["run_classifier.py"] + common_flags(tiny_checkpoint, str(tmp_path)) +
                       flags)
  with pytest.raises(FlagError) as error:
    check_cluster(config.modes, config.device, config.training, cluster, config.given)
  assert str(error.value) == message


def test_the_command_line_names_a_bad_tf_config(tmp_path):
  env = dict(os.environ, TF_CONFIG=_tf_config({"chief": ["a:1"], "ps": ["b:1"]}, "chief"))
  result = subprocess.run([sys.executable, os.path.join(ROOT, "run_classifier.py"),
                           "--do_train", "--output_dir=" + str(tmp_path)], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)
  assert result.returncode == 2
  assert result.stderr.endswith(
      "run_classifier: TF_CONFIG error: TF_CONFIG lists parameter servers (\"ps\"): with "
      "Estimators they train asynchronously, which this project does not support. Use "
      "\"chief\" and \"worker\" tasks only (synchronous all-reduce)\n")
  assert "Traceback" not in result.stderr


def test_a_cluster_gets_a_record_shard_for_each_training_task(tmp_path, tiny_checkpoint,
                                                              caplog):
  """The command that trains on one machine runs on a cluster as it is: the shards are
  chosen (and logged); a number given that does not split over the tasks is refused."""
  from pipeline.multi_device import with_record_shards
  caplog.set_level("INFO")
  cluster = parse_tf_config(_tf_config(CHIEF_AND_TWO_WORKERS, "worker", 1))
  config = parse_flags(["run_classifier.py"] + common_flags(tiny_checkpoint, str(tmp_path)) +
                       ["--do_train", "--train_batch_size=6"])
  check_cluster(config.modes, config.device, config.training, cluster, config.given)
  assert with_record_shards(config, cluster).device.num_record_shards == 3
  assert ("3 input pipelines feed each step (TF_CONFIG's training tasks), each reading record "
          "shards of its own: writing 3 shards (--num_record_shards=3)") in caplog.text
  six = parse_flags(["run_classifier.py"] + common_flags(tiny_checkpoint, str(tmp_path)) +
                    ["--do_train", "--train_batch_size=6", "--num_record_shards=6"])
  assert with_record_shards(six, cluster).device.num_record_shards == 6  # as given
  assert with_record_shards(config, None).device.num_record_shards == 1  # one machine
