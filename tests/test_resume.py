"""Resume and determinism: the training stream continues after a checkpoint instead of
replaying its start, a killed training process resumes to the same global step and the
same weights, and one --seed gives the same losses twice."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import (BINARY, ROOT, TINY, common_flags, first_batches, run_flags,
                      tiny_vocab_records)
from data.input_fn import input_fn_builder
from data.features import InputExample


def _training_records(tmp_path, n=37, shards=2):
  # Lengths from 1 to 13 words, so that dynamic padding fills several buckets.
  examples = [InputExample(str(i), " ".join(["word"] * (1 + i * 7 % 13)) + " %d" % i,
                           label=str(i % 2)) for i in range(n)]
  return tiny_vocab_records(examples, str(tmp_path / "train.tf_record"), 20, num_shards=shards)


@pytest.mark.parametrize("dynamic_padding", [False, True])
def test_skipping_continues_the_seeded_stream(tmp_path, dynamic_padding):
  """A resumed input_fn yields exactly the batches an uninterrupted one yields after the
  skipped ones, across epoch boundaries (37 rows, batches of 4), with and without length
  buckets."""
  files = _training_records(tmp_path)

  def stream(skip_examples):
    return input_fn_builder(files, 20, is_training=True, label_spec=BINARY, seed=7,
                            dynamic_padding=dynamic_padding, skip_examples=skip_examples)

  whole = first_batches(stream(0), {"batch_size": 4}, 30)
  for done in (1, 5, 12):
    assert first_batches(stream(done * 4), {"batch_size": 4}, 30 - done) == whole[done:]
  # The stream is not the file order repeated, so a replay would have been visible.
  assert whole[0] != whole[10]
  with pytest.raises(ValueError, match="skip_examples is for resuming training"):
    input_fn_builder(files, 20, is_training=False, label_spec=BINARY, skip_examples=8)


def _weights(output_dir):
  checkpoint = tf.train.latest_checkpoint(output_dir)
  reader = tf.train.load_checkpoint(checkpoint)
  names = [n for n, _ in tf.train.list_variables(checkpoint)
           if n.startswith(("bert/", "output_")) and "adam" not in n]
  return {n: reader.get_tensor(n) for n in names}, reader.get_tensor("global_step")


def _read_if_present(path):
  try:
    with open(path) as f:
      return f.read()
  except OSError:
    return ""


def _resume_flags(checkpoint, output_dir, config_file, steps):
  flags = common_flags(checkpoint, output_dir)
  flags = [f for f in flags if not f.startswith("--bert_config_file=")]
  # A small learning rate keeps the float rounding of parallel CPU kernels (about 1e-7
  # per step) from growing through Adam's normalised updates into visible differences;
  # float32 keeps bfloat16's rounding (on a CPU where a run would choose it) from making
  # them about 1e-4 (a bfloat16 run resumes alike, to its rounding: the same-seed test).
  return flags + ["--bert_config_file=" + config_file, "--do_train",
                  "--num_train_steps=%d" % steps, "--save_checkpoints_steps=10",
                  "--max_seq_length=64", "--train_batch_size=16", "--log_every_steps=1",
                  "--learning_rate=1e-5", "--use_bf16=false"]


@pytest.mark.slow
# (TF 1.15's stop and resume: tests/test_signals.py's stopped training, which resumes there)
@pytest.mark.one_runtime("tf2")
def test_killed_training_resumes_to_the_same_step_and_weights(tmp_path, tiny_checkpoint):
  """kill -9 a real training process after its first checkpoints, run the same command
  again: it continues from the last checkpoint, skips the examples already trained on,
  and ends at the same global step with the weights of an uninterrupted run. Dropout is
  on: the fused CPU kernels key every mask on the seed and the global step, so the
  resumed steps draw the masks the uninterrupted run drew."""
  steps = 30  # (killed after step 20's checkpoint: the resumed run's steps 22 to 30 compared)
  config_file = os.path.join(TINY, "bert_config.json")  # (dropout 0.1)
  reference = str(tmp_path / "uninterrupted")
  outcome = run_flags(*_resume_flags(tiny_checkpoint, reference, config_file, steps))
  expected_losses = {step: loss for step, loss, _ in outcome.train_progress}
  expected, expected_step = _weights(reference)
  assert expected_step == steps

  output_dir = str(tmp_path / "killed")
  command = [sys.executable, os.path.join(ROOT, "run_classifier.py")] + _resume_flags(
      tiny_checkpoint, output_dir, config_file, steps)
  process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
  deadline = time.time() + 300
  try:
    # The checkpoint state file names step 20 only once that checkpoint is complete (its
    # index is written before the state moves on, and a kill between the two resumes
    # from step 10).
    while "model.ckpt-20\"" not in _read_if_present(os.path.join(output_dir, "checkpoint")):
      assert process.poll() is None, "training ended before it could be killed"
      assert time.time() < deadline, "no checkpoint at step 20 within 300 s"
      time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(60)
  finally:
    if process.poll() is None:
      process.kill()
  killed_at = _weights(output_dir)[1]
  assert 20 <= killed_at < steps, "the kill came after training had finished"

  resumed = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=600)
  assert resumed.returncode == 0, resumed.stdout[-3000:]
  assert "fused CPU kernels: on" in resumed.stdout
  assert ("resuming from the checkpoint at step %d of %d: the input continues after the %d "
          "examples those steps trained on" % (killed_at, steps, killed_at * 16)
          in resumed.stdout), resumed.stdout[-3000:]
  weights, step = _weights(output_dir)
  assert step == steps
  with open(os.path.join(output_dir, "run_summary.json")) as f:  # (this run's steps alone)
    assert json.load(f)["training"]["steps_trained"] == steps - killed_at
  # Every step after the resumed one trained on the batch the uninterrupted run had at that
  # step: the same loss (a replayed batch would give another).
  resumed_losses = {int(m.group(1)): float(m.group(2)) for m in re.finditer(
      r"step (\d+)/%d  loss ([0-9.]+)" % steps, resumed.stdout)}
  assert sorted(resumed_losses) == list(range(killed_at + 2, steps + 1))
  for s in resumed_losses:
    # (the log prints 4 decimals)
    assert resumed_losses[s] == pytest.approx(expected_losses[s], abs=6e-5), s
  for name, value in expected.items():
    np.testing.assert_allclose(weights[name], value, rtol=0, atol=1e-6, err_msg=name)


def _losses(tmp_path, tiny_checkpoint, name, seed):
  outcome = run_flags(*common_flags(tiny_checkpoint, str(tmp_path / name)) + [
      "--do_train", "--num_train_steps=6", "--log_every_steps=1", "--seed=%d" % seed,
      "--save_checkpoints_steps=100"])
  return [loss for _, loss, _ in outcome.train_progress]


def test_the_same_seed_gives_the_same_losses(tmp_path, tiny_checkpoint, jigsaw_model):
  """On CPU, with dropout on: two runs with one --seed give every step's loss again, to
  the float rounding of TensorFlow's parallel CPU kernels (a sum may be added in another
  order: about 1e-7 in float32; where the CPU trains in bfloat16, bfloat16's rounding
  makes that about 1e-4); another seed (another head, data order and dropout) changes
  them. The first run is conftest's jigsaw_model (the default seed, 12345, and the same
  data, model and schedule; its evaluation, prediction and export come after training)."""
  first = [loss for _, loss, _ in jigsaw_model.result.train_progress]
  assert len(first) == 5  # every step after the first
  with open(os.path.join(jigsaw_model.output_dir, "run_summary.json")) as f:
    in_bf16 = json.load(f)["flags"]["use_bf16"]
  np.testing.assert_allclose(_losses(tmp_path, tiny_checkpoint, "b", 12345), first,
                             rtol=1e-3 if in_bf16 else 1e-5)
  other = _losses(tmp_path, tiny_checkpoint, "c", 54321)
  assert max(abs(a - b) for a, b in zip(other, first)) > 0.01
