"""run_classifier end to end through its flags: in-process through parse_flags and run(),
and the command line itself (exit codes, messages, --help) in a subprocess."""

import csv
import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import JIGSAW, ROOT, TINY, common_flags, run_flags
from run_classifier import parse_flags
from spec.run_errors import FlagError


def run_cli(*args):
  return subprocess.run([sys.executable, os.path.join(ROOT, "run_classifier.py")] + list(args),
                        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        universal_newlines=True, timeout=900)


def read_predictions(path):
  with open(path) as f:
    return f.read().splitlines()


def csv_column(path, column):
  with io.open(path, encoding="utf-8", newline="") as f:
    return [row[column] for row in csv.DictReader(f)]


def reference_binary_metrics(p1, labels):
  """Accuracy, precision, recall, F1, ROC-AUC (every positive-negative pair; ties count
  half), MCC and mean cross-entropy, computed here from the written probabilities."""
  p1, labels = np.asarray(p1, np.float64), np.asarray(labels)
  predicted = (p1 > 1 - p1).astype(int)
  tp = int(((predicted == 1) & (labels == 1)).sum())
  tn = int(((predicted == 0) & (labels == 0)).sum())
  fp = int(((predicted == 1) & (labels == 0)).sum())
  fn = int(((predicted == 0) & (labels == 1)).sum())
  precision = tp / float(tp + fp) if tp + fp else 0.0
  recall = tp / float(tp + fn) if tp + fn else 0.0
  pairs = [(a, b) for a in p1[labels == 1] for b in p1[labels == 0]]
  auc = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in pairs) / len(pairs)
  denominator = ((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)) ** 0.5
  return {
      "accuracy": (tp + tn) / float(len(labels)), "precision": precision, "recall": recall,
      "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
      "auc": auc, "mcc": (tp * tn - fp * fn) / denominator if denominator else 0.0,
      "loss": float(np.mean(-np.log(np.where(labels == 1, p1, 1 - p1)))),
  }


@pytest.mark.slow
def test_train_eval_predict_end_to_end(jigsaw_model, tiny_checkpoint, tmp_path, caplog):
  log, output_dir = jigsaw_model.log, jigsaw_model.output_dir

  # Training: 267 rows, batch 8, 6 steps, the encoder from the checkpoint, progress on CPU.
  assert "training: 267 examples, batch 8, 6 steps" in log
  assert "initialising 39 of 41 variables from %s" % tiny_checkpoint in log
  assert "from the checkpoint: bert/embeddings/word_embeddings (1)" in log
  assert "bert/encoder/layer_N (32)" in log and "bert/pooler/dense (2)" in log
  assert "output_weights, output_bias" in log  # the head starts from random values
  assert "step 6/6  loss" in log and "examples/sec  ETA" in log
  assert "fused CPU kernels: on" in log  # (the default on a CPU, in float32)
  assert sorted(n for n in os.listdir(output_dir) if n.startswith("model.ckpt-6")) == [
      "model.ckpt-6.data-00000-of-00001", "model.ckpt-6.index", "model.ckpt-6.meta"]

  # Eval: 25 rows is not a multiple of 8, so 7 padding rows fill the last batch.
  assert "evaluating 25 examples (+7 padding) in 4 batches" in log
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    results = json.load(f)
  assert results["num_examples"] == 25 and results["global_step"] == 6
  assert results["majority_baseline_accuracy"] == 22 / 25.0
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    assert "num_examples = 25\n" in f.read()

  # Predict: 33 rows (+7 padding) -> exactly 33 result rows, in input order.
  assert "predicting 33 examples (+7 padding)" in log
  lines = read_predictions(os.path.join(output_dir, "test_results.tsv"))
  assert lines[0] == "id\tprobability_0\tprobability_1\tprediction"
  rows = [line.split("\t") for line in lines[1:]]
  assert [r[0] for r in rows] == csv_column(os.path.join(JIGSAW, "test.csv"), "id")
  threshold = results["threshold"]  # (--tune_thresholds=f1: the label is decided there)
  for row in rows:
    p0, p1 = float(row[1]), float(row[2])
    assert abs(p0 + p1 - 1.0) < 1e-5 and row[3] == ("1" if p1 >= threshold else "0")

  # A second run (on a copy of the model) reuses the cached features and the trained
  # checkpoint: the same predictions.
  caplog.set_level("INFO")
  copy = jigsaw_model.copy_to(str(tmp_path / "copy"))
  run_flags(*common_flags(tiny_checkpoint, copy) + [
      "--do_predict", "--cache_dir=" + os.path.join(output_dir, "features")])
  assert "reusing cached features" in caplog.text
  assert read_predictions(os.path.join(copy, "test_results.tsv")) == lines

  # The eval metrics equal those computed independently from the same checkpoint's
  # predictions on the same 25 dev rows.
  # (the checkpoint without its card, whose temperature --calibrate fitted after the eval)
  dev_output, bare = str(tmp_path / "dev_predictions"), tmp_path / "bare"
  bare.mkdir()
  for name in os.listdir(output_dir):
    if name.startswith("model.ckpt-6."):
      shutil.copy(os.path.join(output_dir, name), str(bare))
  run_flags(*common_flags(tiny_checkpoint, dev_output) + [
      "--do_predict", "--predict_file=" + os.path.join(JIGSAW, "valid.csv"),
      "--init_checkpoint=" + str(bare / "model.ckpt-6")])
  dev_rows = [line.split("\t") for line in
              read_predictions(os.path.join(dev_output, "test_results.tsv"))[1:]]
  labels = [int(v) for v in csv_column(os.path.join(JIGSAW, "valid.csv"), "toxic")]
  expected = reference_binary_metrics([float(r[2]) for r in dev_rows], labels)
  for key, value in expected.items():
    assert results[key] == pytest.approx(value, abs=2e-5), key


def test_train_fraction_and_epochs_set_the_rows_and_steps(tmp_path, tiny_checkpoint, caplog):
  """Half of 267 rows, one epoch of batch 8: 134 rows, 17 steps (featurised, not trained)."""
  from pipeline.build import make_processor, make_tokenizer, num_train_steps_for
  from pipeline.splits import prepare_splits
  from pipeline.task_extras import task_of
  caplog.set_level("INFO")
  c = parse_flags(["run_classifier.py"] + common_flags(tiny_checkpoint, str(tmp_path)) + [
      "--do_train", "--train_fraction=0.5", "--num_train_epochs=1"])
  tokenizer, vocab_file = make_tokenizer(c.model)
  train = prepare_splits(c, task_of(make_processor(c.data)), tokenizer, vocab_file).train
  assert "--train_fraction=0.5: training on 134 of 267 rows" in caplog.text
  assert train.num_examples == train.metadata["num_examples"] == 134
  assert num_train_steps_for(train.num_examples, c.training) == 17  # ceil(134 / 8)


def _refused(tmp_path, checkpoint, *extra):
  """run() stops with a FlagError before any work: no output files at all."""
  output_dir = tmp_path / "refused"
  with pytest.raises(FlagError) as error:
    run_flags(*common_flags(checkpoint, str(output_dir)) + list(extra))
  assert not output_dir.exists(), "work started before validation"
  return str(error.value)


def test_flag_errors_name_the_flag_and_the_fix(tmp_path, tiny_checkpoint):
  message = _refused(tmp_path, tiny_checkpoint, "--do_train", "--max_seq_length=600")
  assert message == ("--max_seq_length=600 exceeds max_position_embeddings=512 in %s. Pass "
                     "--max_seq_length=512 or less" % os.path.join(TINY, "bert_config.json"))
  assert _refused(tmp_path, tiny_checkpoint, "--do_train", "--train_fraction=0") == (
      "--train_fraction=0 must be in (0, 1]; e.g. 0.1 trains on 10% of the rows")
  assert _refused(tmp_path, tiny_checkpoint) == (
      "nothing to do: pass at least one of --do_train, --do_eval, --do_predict, --do_export")
  assert _refused(tmp_path, tiny_checkpoint, "--do_train", "--use_tpu") == (
      "--use_tpu found no TPU: name one with --tpu_name (or --master), set TPU_NAME (or "
      "COLAB_TPU_ADDR, as a Colab TPU runtime does), or run on a TPU VM, whose own TPU is "
      "used (--tpu_name=local)")
  assert _refused(tmp_path, tiny_checkpoint, "--do_train", "--use_tpu", "--tpu_name=t1"
                  ).startswith("--use_tpu needs --output_dir on Cloud Storage (gs://bucket/path)")
  assert "no file /nope/model.ckpt.index" in _refused(
      tmp_path, tiny_checkpoint, "--do_eval", "--init_checkpoint=/nope/model.ckpt")
  assert _refused(tmp_path, tiny_checkpoint, "--do_train", "--train_batch_size=0") == (
      "--train_batch_size=0 must be a positive integer")
  assert _refused(tmp_path, tiny_checkpoint, "--do_train", "--task_name=sst3").startswith(
      "--task_name=sst3 is unknown; use one of: ax, cola, csv, jigsaw_bias, jigsaw_toxic, mnli,")


@pytest.mark.parametrize("alias,task", [("SST2", "sst-2"), ("stsb", "sts-b"),
                                        ("mnli_mm", "mnli-mm"), ("MRPC", "mrpc")])
def test_task_aliases_are_one_list(alias, task):
  from data.processors import get_processor
  from pipeline.build import bert_config_of
  from pipeline.checks import check_run, check_task
  from data.processors import canonical_task_name
  assert canonical_task_name(alias) == task and get_processor(alias).name == task
  values = parse_flags(["run_classifier.py", "--task_name=" + alias, "--output_dir=/tmp/x",
                        "--do_eval", "--bert_config_file=" + os.path.join(TINY, "bert_config.json"),
                        "--vocab_file=" + os.path.join(TINY, "vocab.txt")])
  check_run(values)
  check_task(values.data, values.given, needs_labels=True)
  assert bert_config_of(values.model).hidden_size == 128  # accepted, config read


def test_vocab_that_disagrees_with_config(tmp_path, tiny_checkpoint):
  from data.data_error import DataError
  vocab = tmp_path / "vocab.txt"
  vocab.write_text(u"[PAD]\n[UNK]\n[CLS]\n[SEP]\n")
  with pytest.raises(DataError) as error:
    run_flags(*common_flags(tiny_checkpoint, str(tmp_path / "o")) + [
        "--do_train", "--vocab_file=%s" % vocab])
  assert str(error.value).startswith(
      "%s: the vocabulary has 4 tokens but %s says vocab_size=30522. Fix: use the vocab.txt"
      % (vocab, os.path.join(TINY, "bert_config.json")))


def test_csv_task_needs_its_columns(tmp_path, tiny_checkpoint):
  assert _refused(tmp_path, tiny_checkpoint, "--do_train", "--task_name=csv",
                  "--label_column=1").startswith("--task_name=csv needs --text_column")


@pytest.mark.slow
def test_speed_flags_end_to_end(tmp_path, tiny_checkpoint, caplog):
  """Dynamic padding, gradient accumulation and the Rust tokenizer lose no rows either."""
  caplog.set_level("INFO")
  output_dir = str(tmp_path / "fast")
  run_flags(*common_flags(tiny_checkpoint, output_dir) + [
      "--do_train", "--do_eval", "--do_predict", "--num_train_steps=6", "--dynamic_padding",
      "--gradient_accumulation_steps=2", "--tokenizer=fast"])
  assert "training: 267 examples, batch 16, 6 steps" in caplog.text  # 8 x 2 per update
  assert "step 6/6  loss" in caplog.text
  # (Several batches share a step's dropout seed, so the fused kernels stand aside.)
  assert "fused CPU kernels: off (--gradient_accumulation_steps=2)" in caplog.text
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    results = json.load(f)
  assert results["num_examples"] == 25 and results["global_step"] == 6
  shortest_first = read_predictions(os.path.join(output_dir, "test_results.tsv"))
  ids = [line.split("\t")[0] for line in shortest_first[1:]]
  assert ids == csv_column(os.path.join(JIGSAW, "test.csv"), "id")
  # The predict records went shortest first, each with its row's place in the file.
  records = [tf.train.Example.FromString(r).features.feature for r in
             tf.io.tf_record_iterator(os.path.join(output_dir, "features", "test.tf_record"))]
  real = [f for f in records if f["is_real_example"].int64_list.value[0]]
  lengths = [sum(f["input_mask"].int64_list.value) for f in real]
  assert lengths == sorted(lengths) and lengths != [lengths[0]] * len(lengths)
  assert sorted(f["example_id"].int64_list.value[0] for f in real) == list(range(len(ids)))
  # Predicted in file order (no dynamic padding), the same model gives the same lines.
  run_flags(*common_flags(tiny_checkpoint, output_dir) + ["--do_predict"])
  in_file_order = read_predictions(os.path.join(output_dir, "test_results.tsv"))
  assert [line.split("\t")[0] for line in in_file_order] == [
      line.split("\t")[0] for line in shortest_first]
  for a, b in zip(in_file_order[1:], shortest_first[1:]):
    assert [float(x) for x in a.split("\t")[1:3]] == pytest.approx(
        [float(x) for x in b.split("\t")[1:3]], abs=1e-5)


def test_speed_flag_conflicts(tmp_path, tiny_checkpoint):
  tpu = ["--do_train", "--use_tpu", "--tpu_name=t", "--output_dir=gs://b/o"]
  assert _refused(tmp_path, tiny_checkpoint, *tpu + ["--dynamic_padding"]).startswith(
      "--dynamic_padding cannot be used with --use_tpu")
  assert _refused(tmp_path, tiny_checkpoint, *tpu + ["--gradient_accumulation_steps=4"]
                  ).startswith("--gradient_accumulation_steps cannot be used with --use_tpu")
  assert _refused(tmp_path, tiny_checkpoint, *tpu + ["--use_fp16"]) == (
      "--use_fp16 is for GPUs; on a TPU pass --use_bf16")
  assert _refused(tmp_path, tiny_checkpoint, "--do_train", "--use_fp16", "--use_bf16") == (
      "pass one of --use_fp16 (GPU) and --use_bf16 (TPU or CPU), not both")


@pytest.mark.slow
@pytest.mark.one_runtime  # (absl's and this project's exit codes, the same on both runtimes)
def test_command_line_exit_codes_and_messages(tmp_path, tiny_checkpoint):
  """The real command: a flag error exits 2, a data error exits 1, each with one line on
  stderr and no traceback; --help shows the usage example line by line."""
  flag_error = run_cli(*common_flags(tiny_checkpoint, str(tmp_path / "a")) + [
      "--do_train", "--train_fraction=2"])
  assert flag_error.returncode == 2
  assert flag_error.stderr.strip().splitlines()[-1] == (
      "run_classifier: flag error: --train_fraction=2 must be in (0, 1]; e.g. 0.1 trains on "
      "10% of the rows")
  data = tmp_path / "data"
  data.mkdir()
  (data / "train.csv").write_text(u"id,comment_text,toxic\na,fine,0\nb,bad,7\n")
  data_error = run_cli(*common_flags(tiny_checkpoint, str(tmp_path / "b")) + [
      "--do_train", "--data_dir=%s" % data])
  assert data_error.returncode == 1
  assert "Traceback" not in data_error.stdout + data_error.stderr
  assert data_error.stderr.strip().splitlines()[-1].startswith(
      "run_classifier: data error: %s, line 3, column 'toxic': task jigsaw_toxic: unknown label '7'"
      % (data / "train.csv"))
  usage = run_cli("--help")  # the options by group, as the reference page; no error
  assert usage.returncode == 0 and "Traceback" not in usage.stderr
  from spec.option_docs import help_text
  assert usage.stdout == help_text() + "\nTry --helpfull for absl's own flags too.\n"
  full = run_cli("--helpfull")  # every module's flags, absl's own too
  assert full.returncode == 0 and "\nabsl.app:\n" in full.stdout
  assert ("  python run_classifier.py --task_name=jigsaw_toxic --data_dir=... \\\n"
          "      --bert_config_file=.../bert_config.json --vocab_file=.../vocab.txt \\\n"
          in full.stdout)


@pytest.mark.slow
def test_xla_training_terminates(tmp_path, tiny_checkpoint):
  """In a subprocess: --use_xla sets TF_XLA_FLAGS, which must not leak into other tests."""
  output_dir = str(tmp_path / "xla")
  # One of BERT-Tiny's two layers: XLA's compilation, most of the time, is per layer.
  with open(os.path.join(TINY, "bert_config.json")) as f:
    config = dict(json.load(f), num_hidden_layers=1)
  config_file = tmp_path / "bert_config.json"
  config_file.write_text(json.dumps(config))
  flags = [f for f in common_flags(tiny_checkpoint, output_dir)  # (from random weights)
           if not f.startswith("--init_checkpoint=")]
  result = run_cli(*flags + ["--bert_config_file=%s" % config_file, "--do_train",
                             "--num_train_steps=3", "--use_xla"])
  assert result.returncode == 0, result.stderr[-3000:]
  assert "step 3/3  loss" in result.stderr
  assert "fused CPU kernels: off (--use_xla)" in result.stderr
  assert any(name.startswith("model.ckpt-3") for name in os.listdir(output_dir))


def test_a_broken_bert_config_is_a_flag_error(tmp_path, tiny_checkpoint):
  config = tmp_path / "bert_config.json"
  config.write_text(u'{"vocab_size": 30522, "hidden_size": 130, "num_attention_heads": 4}')
  assert _refused(tmp_path, tiny_checkpoint, "--do_train", "--bert_config_file=%s" % config) == (
      "--bert_config_file=%s cannot be used: %s: hidden_size 130 is not a multiple of "
      "num_attention_heads 4. Pass the bert_config.json that came with the checkpoint"
      % (config, config))


def test_a_bert_config_value_of_the_wrong_type_is_a_flag_error(tmp_path, tiny_checkpoint):
  config = tmp_path / "bert_config.json"
  for text, problem in ((u'{"vocab_size": 30522, "hidden_size": "128"}',
                         "hidden_size is '128', not a whole number"),
                        (u'{"vocab_size": 30522, "hidden_dropout_prob": "0.1"}',
                         "hidden_dropout_prob is '0.1', not a number"),
                        (u'[30522, 128]', "a bert config is a JSON object, not list")):
    config.write_text(text)
    assert _refused(tmp_path, tiny_checkpoint, "--do_train",
                    "--bert_config_file=%s" % config) == (
        "--bert_config_file=%s cannot be used: %s: %s. Pass the bert_config.json that came "
        "with the checkpoint" % (config, config, problem))


def test_a_flag_file_keeps_a_run_and_the_command_line_overrides_it(tmp_path):
  """--flagfile, as the README's first training example uses it: the file's flags, a flag
  after it on the command line overriding the file's and one before it overridden."""
  flag_file = tmp_path / "jigsaw.flags"
  flag_file.write_text("\n".join([
      "--task_name=jigsaw_toxic", "--label_column=toxic", "--data_dir=" + JIGSAW,
      "--bert_config_file=" + os.path.join(TINY, "bert_config.json"),
      "--vocab_file=" + os.path.join(TINY, "vocab.txt"), "--max_seq_length=64",
      "--learning_rate=2e-5", "--output_dir=" + str(tmp_path / "out")]) + "\n")
  c = parse_flags(["run_classifier.py", "--flagfile=" + str(flag_file), "--do_train",
                   "--learning_rate=3e-5"])
  assert c.training.learning_rate == 3e-5
  assert (c.data.task_name, c.data.label_column, c.model.max_seq_length) == (
      "jigsaw_toxic", "toxic", 64)
  assert c.outputs.output_dir == str(tmp_path / "out") and c.modes.do_train
  assert {"learning_rate", "max_seq_length", "task_name"} <= c.given
  c = parse_flags(["run_classifier.py", "--max_seq_length=32", "--flagfile=" + str(flag_file)])
  assert c.model.max_seq_length == 64  # (the file, read after it, wins)


@pytest.mark.slow
@pytest.mark.one_runtime("tf1")  # (absl reads the file, the same on both runtimes)
def test_a_missing_flag_file_is_one_line(tmp_path):
  done = subprocess.run([sys.executable, os.path.join(ROOT, "run_classifier.py"),
                         "--flagfile=" + str(tmp_path / "missing.flags"), "--do_train"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        universal_newlines=True, timeout=300,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert done.returncode == 1 and "Traceback" not in done.stderr
  assert done.stderr.strip().splitlines()[-2:] == [  # (absl's words for every flag error)
      "FATAL Flags parsing error: ERROR:: Unable to open flagfile: [Errno 2] No such file or "
      "directory: '%s'" % (tmp_path / "missing.flags"),
      "Pass --helpshort or --helpfull to see help on flags."]
