"""run_classifier.py end to end through its flags, and flag validation before any work."""

import csv
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import ROOT, shared_path
from modeling.bert import BertConfig, BertModel


def run_cli(*args):
  return subprocess.run([sys.executable, os.path.join(ROOT, "run_classifier.py")] + list(args),
                        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        universal_newlines=True, timeout=900)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
  """A randomly initialised BERT-Tiny encoder checkpoint, to exercise --init_checkpoint."""
  folder = shared_path("checkpoint_fixtures", "bert_tiny")
  path = str(tmp_path_factory.mktemp("ckpt") / "bert_model.ckpt")
  with tf.Graph().as_default():
    tf.set_random_seed(0)
    BertModel(BertConfig.from_json_file(os.path.join(folder, "bert_config.json")), False,
              tf.zeros([1, 8], tf.int32))
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      tf.train.Saver().save(session, path)
  return folder, path


def common_flags(folder, checkpoint, output_dir):
  return ["--task_name=jigsaw_toxic",
          "--data_dir=" + shared_path("datasets", "jigsaw_toxic_sample"),
          "--bert_config_file=" + os.path.join(folder, "bert_config.json"),
          "--vocab_file=" + os.path.join(folder, "vocab.txt"),
          "--init_checkpoint=" + checkpoint, "--output_dir=" + output_dir,
          "--max_seq_length=32", "--train_batch_size=8", "--eval_batch_size=8",
          "--predict_batch_size=8", "--learning_rate=1e-3", "--log_every_steps=4"]


def test_train_eval_predict_end_to_end(tmp_path, tiny_checkpoint):
  folder, checkpoint = tiny_checkpoint
  output_dir = str(tmp_path / "out")
  flags = common_flags(folder, checkpoint, output_dir)
  result = run_cli(*flags + ["--do_train", "--do_eval", "--do_predict", "--train_fraction=0.5",
                             "--num_train_epochs=1"])
  log = result.stdout
  assert result.returncode == 0, log[-3000:]

  # Training: half of 267 rows, one epoch of batch 8 -> 17 steps, progress on CPU.
  assert "--train_fraction=0.5: training on 134 of 267 rows" in log
  assert "training: 134 examples, batch 8, 17 steps" in log
  assert "initialising 39 of 41 variables from %s" % checkpoint in log
  assert "from the checkpoint: bert/embeddings/word_embeddings (1)" in log
  assert "bert/encoder/layer_N (32)" in log and "bert/pooler/dense (2)" in log
  assert "output_weights, output_bias" in log  # the head starts from random values
  assert "step 17/17  loss" in log and "examples/sec  ETA" in log

  # Eval: 25 rows is not a multiple of 8, so 7 padding rows fill the last batch.
  assert "evaluating 25 examples (+7 padding) in 4 batches" in log
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    results = json.load(f)
  assert results["num_examples"] == 25 and results["global_step"] == 17
  for key in ("loss", "accuracy", "precision", "recall", "f1", "auc", "mcc"):
    assert np.isfinite(results[key]), key
  assert results["majority_baseline_accuracy"] == 22 / 25.0
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    assert "num_examples = 25\n" in f.read()

  # Predict: 33 rows (+7 padding) -> exactly 33 result rows, in input order.
  assert "predicting 33 examples (+7 padding)" in log
  with io.open(os.path.join(shared_path("datasets", "jigsaw_toxic_sample"), "test.csv"),
               encoding="utf-8", newline="") as f:
    input_ids = [row["id"] for row in csv.DictReader(f)]
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    lines = f.read().splitlines()
  assert lines[0] == "id\tprobability_0\tprobability_1\tprediction"
  rows = [line.split("\t") for line in lines[1:]]
  assert len(rows) == 33 == len(input_ids)
  assert [r[0] for r in rows] == input_ids
  for row in rows:
    p0, p1 = float(row[1]), float(row[2])
    assert abs(p0 + p1 - 1.0) < 1e-5 and row[3] == ("1" if p1 > p0 else "0")

  # A second run reuses the cached features and the trained checkpoint: same predictions.
  again = run_cli(*flags + ["--do_predict"])
  assert again.returncode == 0, again.stdout[-3000:]
  assert "reusing cached features" in again.stdout
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    assert f.read().splitlines() == lines


def _flag_error(tmp_path, tiny_checkpoint, *extra):
  folder, checkpoint = tiny_checkpoint
  result = run_cli(*common_flags(folder, checkpoint, str(tmp_path / "o")) + list(extra))
  assert result.returncode != 0
  assert not os.path.exists(str(tmp_path / "o" / "features")), "work started before validation"
  return result.stdout


def test_flag_errors_name_the_flag_and_the_fix(tmp_path, tiny_checkpoint):
  out = _flag_error(tmp_path, tiny_checkpoint, "--do_train", "--max_seq_length=600")
  assert ("--max_seq_length=600 exceeds max_position_embeddings=512 in %s. Pass "
          "--max_seq_length=512 or less" % os.path.join(tiny_checkpoint[0], "bert_config.json")
          ) in out
  out = _flag_error(tmp_path, tiny_checkpoint, "--do_train", "--train_fraction=0")
  assert "--train_fraction=0 must be in (0, 1]" in out
  out = _flag_error(tmp_path, tiny_checkpoint)
  assert "nothing to do: pass at least one of --do_train, --do_eval, --do_predict" in out
  out = _flag_error(tmp_path, tiny_checkpoint, "--do_train", "--use_tpu")
  assert "--use_tpu needs --tpu_name (or --master)" in out
  out = _flag_error(tmp_path, tiny_checkpoint, "--do_train", "--use_tpu", "--tpu_name=t1")
  assert "--use_tpu needs --output_dir on Cloud Storage (gs://bucket/path)" in out
  out = _flag_error(tmp_path, tiny_checkpoint, "--do_eval", "--init_checkpoint=/nope/model.ckpt")
  assert "no file /nope/model.ckpt.index" in out


def test_vocab_that_disagrees_with_config(tmp_path, tiny_checkpoint):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text(u"[PAD]\n[UNK]\n[CLS]\n[SEP]\n")
  out = _flag_error(tmp_path, tiny_checkpoint, "--do_train", "--vocab_file=%s" % vocab)
  assert "data error: %s: the vocabulary has 4 tokens but" % vocab in out
  assert "says vocab_size=30522" in out


def test_csv_task_needs_its_columns(tmp_path, tiny_checkpoint):
  out = _flag_error(tmp_path, tiny_checkpoint, "--do_train", "--task_name=csv",
                    "--label_column=1")
  assert "--task_name=csv needs --text_column" in out


def test_bad_data_stops_with_the_row(tmp_path, tiny_checkpoint):
  data = tmp_path / "data"
  data.mkdir()
  (data / "train.csv").write_text(u"id,comment_text,toxic\na,fine,0\nb,bad,7\n")
  out = _flag_error(tmp_path, tiny_checkpoint, "--do_train", "--data_dir=%s" % data)
  assert ("data error: %s, line 3, column 'toxic': unknown label '7'" % (data / "train.csv")
          ) in out


def test_speed_flags_end_to_end(tmp_path, tiny_checkpoint):
  """Dynamic padding, gradient accumulation and the Rust tokenizer lose no rows either."""
  folder, checkpoint = tiny_checkpoint
  output_dir = str(tmp_path / "fast")
  result = run_cli(*common_flags(folder, checkpoint, output_dir) + [
      "--do_train", "--do_eval", "--do_predict", "--num_train_steps=6", "--dynamic_padding",
      "--gradient_accumulation_steps=2", "--tokenizer=fast"])
  log = result.stdout
  assert result.returncode == 0, log[-3000:]
  assert "training: 267 examples, batch 16, 6 steps" in log  # 8 x 2 per update
  assert "step 6/6  loss" in log
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    results = json.load(f)
  assert results["num_examples"] == 25 and results["global_step"] == 6
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    assert len(f.read().splitlines()) == 1 + 33


def test_xla_training_terminates(tmp_path, tiny_checkpoint):
  folder, checkpoint = tiny_checkpoint
  output_dir = str(tmp_path / "xla")
  result = run_cli(*common_flags(folder, checkpoint, output_dir) + [
      "--do_train", "--num_train_steps=3", "--use_xla"])
  assert result.returncode == 0, result.stdout[-3000:]
  assert "step 3/3  loss" in result.stdout
  assert any(name.startswith("model.ckpt-3") for name in os.listdir(output_dir))


def test_speed_flag_conflicts(tmp_path, tiny_checkpoint):
  out = _flag_error(tmp_path, tiny_checkpoint, "--do_train", "--use_tpu", "--tpu_name=t",
                    "--output_dir=gs://b/o", "--dynamic_padding")
  assert "--dynamic_padding cannot be used with --use_tpu" in out
  out = _flag_error(tmp_path, tiny_checkpoint, "--do_train", "--use_tpu", "--tpu_name=t",
                    "--output_dir=gs://b/o", "--gradient_accumulation_steps=4")
  assert "--gradient_accumulation_steps cannot be used with --use_tpu" in out
  out = _flag_error(tmp_path, tiny_checkpoint, "--do_train", "--use_tpu", "--tpu_name=t",
                    "--output_dir=gs://b/o", "--use_fp16")
  assert "--use_fp16 is for GPUs; on a TPU pass --use_bf16" in out
  out = _flag_error(tmp_path, tiny_checkpoint, "--do_train", "--use_fp16", "--use_bf16")
  assert "pass one of --use_fp16 (GPU) and --use_bf16 (TPU), not both" in out
