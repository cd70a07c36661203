"""The peers of a multi-worker run, as its command meets them: a task whose peer never
starts, a port already taken, a stop while it waits. Each ends in one line naming the
address and the fix within --cluster_wait_seconds, its lock released (TensorFlow itself
would wait for ever, in C++, deaf to signals)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import JIGSAW, ROOT, TINY, TINY_VOCAB
from tools.bench_serve import free_port

pytestmark = [pytest.mark.slow, pytest.mark.one_runtime("tf1")]


def start(tmp_path, cluster, task_type="chief", *flags, **kwargs):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_CONFIG=json.dumps(
      {"cluster": cluster, "task": {"type": task_type, "index": 0}}))
  return subprocess.Popen(
      [sys.executable, os.path.join(ROOT, "run_classifier.py"), "--task_name=jigsaw_toxic",
       "--data_dir=" + JIGSAW, "--bert_config_file=" + os.path.join(TINY, "bert_config.json"),
       "--vocab_file=" + TINY_VOCAB, "--output_dir=" + str(tmp_path / "out"),
       "--max_seq_length=16", "--train_batch_size=8", "--do_train", "--num_train_steps=2",
       "--allow_untrained_head"] + list(flags),
      cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
      stderr=kwargs.get("stderr", subprocess.PIPE), universal_newlines=True)


def test_a_peer_that_never_starts_is_one_line_within_the_wait(tmp_path):
  chief, worker = free_port(), free_port()
  started = time.time()
  process = start(tmp_path, {"chief": ["127.0.0.1:%d" % chief],
                             "worker": ["127.0.0.1:%d" % worker]}, "chief",
                  "--cluster_wait_seconds=3")
  _, err = process.communicate(timeout=300)
  assert process.returncode == 1
  assert err.strip().splitlines()[-1] == (
      "run_classifier: process error: TF_CONFIG's worker 0 at 127.0.0.1:%d did not answer "
      "within 3 s (Connection refused): start it (the same command, with TF_CONFIG's task "
      "{\"type\": \"worker\", \"index\": 0}), check its address and that its port is open to "
      "this machine, or wait longer with --cluster_wait_seconds" % worker)
  assert "Traceback" not in err and time.time() - started < 120
  assert not os.path.exists(str(tmp_path / "out" / "training.lock"))


def test_a_taken_port_and_a_stop_while_waiting(tmp_path):
  with socket.socket() as taken:
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    process = start(tmp_path, {"chief": ["127.0.0.1:%d" % port],
                               "worker": ["127.0.0.1:%d" % free_port()]})
    _, err = process.communicate(timeout=300)
  assert process.returncode == 1
  assert err.strip().splitlines()[-1].startswith(
      "run_classifier: process error: TF_CONFIG's chief 0 listens on 127.0.0.1:%d, and port "
      "%d is taken on this machine (Address already in use): stop what uses it, or give this "
      "task another port in TF_CONFIG" % (port, port))

  os.rename(str(tmp_path / "out"), str(tmp_path / "first"))
  log = str(tmp_path / "stop.log")
  with open(log, "w") as err_file:
    process = start(tmp_path, {"chief": ["127.0.0.1:%d" % free_port()],
                               "worker": ["127.0.0.1:%d" % free_port()]}, stderr=err_file)
    deadline = time.time() + 240
    while "fused CPU kernels" not in open(log).read() and time.time() < deadline:
      time.sleep(0.5)  # (the estimator is built: now it waits for the worker)
    time.sleep(2)
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=60)
  err = open(log).read()
  assert process.returncode == 128 + signal.SIGTERM
  assert err.strip().splitlines()[-1] == (
      "run_classifier: stopped by SIGTERM during the wait for the cluster's other tasks. "
      "Fix: run the same command again (the checkpoints and cached records written so far "
      "are reused; nothing half-written was kept)")
  assert not os.path.exists(str(tmp_path / "out" / "training.lock"))
