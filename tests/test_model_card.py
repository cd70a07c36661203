"""The fine-tuned model knows its own labels: training writes a model card, later runs read
it, contradicting flags and untrained heads are refused, every file is checked before
training, and results name the checkpoint they came from."""

import csv
import io
import json
import os

import pytest

from conftest import (JIGSAW, TINY, TINY_VOCAB, common_flags, copy_model, run_flags,
                      sample_path)
from data.data_error import DataError
from modeling.bert import BertConfig
from spec.run_errors import FlagError

SST2 = sample_path("glue", "SST-2")


def sst2_flags(checkpoint, output_dir, *extra):
  """The csv task on the SST-2 sample, with its labels in a chosen order."""
  return ["--task_name=csv", "--train_file=" + os.path.join(SST2, "train.tsv"),
          "--eval_file=" + os.path.join(SST2, "dev.tsv"),
          "--predict_file=" + os.path.join(SST2, "test.tsv"), "--text_column=sentence",
          "--label_column=label", "--bert_config_file=" + os.path.join(TINY, "bert_config.json"),
          "--vocab_file=" + TINY_VOCAB, "--init_checkpoint=" + checkpoint,
          "--output_dir=" + output_dir, "--max_seq_length=32", "--train_batch_size=16",
          "--eval_batch_size=16", "--predict_batch_size=16", "--learning_rate=1e-3"
          ] + list(extra)


# The tests of the trained model below run on TF 2.15 alone: the card, its checks and the
# refusals are Python, and what TensorFlow does in them (training, predicting and
# evaluating from a card, reading a head's shape) other tests run on both runtimes (this
# file's untrained-head test and test_another_task_is_refused on the shared Jigsaw model,
# tests/test_heads.py's multi-label run and its predict from the card).


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_checkpoint):
  """A model fine-tuned for 6 steps on the SST-2 sample with labels in the order 1,0."""
  output_dir = str(tmp_path_factory.mktemp("trained") / "model")
  run_flags(*sst2_flags(tiny_checkpoint, output_dir, "--do_train", "--do_predict",
                        "--num_train_steps=6", "--labels=1,0"))
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    return output_dir, f.read()


def card_of(output_dir):
  with open(os.path.join(output_dir, "model_card.json")) as f:
    return json.load(f)


@pytest.mark.slow
@pytest.mark.one_runtime("tf2")  # (Python on the card: see the note above trained)
def test_training_writes_the_model_card(trained, tiny_checkpoint):
  output_dir, _ = trained
  card = card_of(output_dir)
  assert (card["task"], card["labels"], card["head"], card["num_outputs"]) == (
      "csv", ["1", "0"], "classification", 2)
  assert (card["max_seq_length"], card["do_lower_case"]) == (32, True)
  assert card["vocab_file"] == TINY_VOCAB
  from data.vocabulary import vocab_fingerprint
  assert card["vocab_sha256"] == vocab_fingerprint(TINY_VOCAB)
  with open(os.path.join(TINY, "bert_config.json")) as f:
    official = json.load(f)
  assert card["bert_config"] == {k: official[k] for k in BertConfig.FIELDS}
  assert card["init_checkpoint"] == tiny_checkpoint
  assert card["flags"]["learning_rate"] == 1e-3 and card["flags"]["num_train_steps"] == 6
  assert "helpfull" not in card["flags"]  # this program's flags only


@pytest.mark.slow
@pytest.mark.one_runtime("tf2")  # (Python on the card: see the note above trained)
def test_predict_from_the_card_alone_needs_no_model_flags(trained, tmp_path, caplog):
  """--output_dir, the file and its layout are enough: labels, config and vocabulary come
  from the card (the file's columns from the run: tests/test_layouts.py), and the
  predictions are the training run's."""
  caplog.set_level("INFO")
  output_dir, expected = trained
  # A copy of the model folder (its checkpoint file lists relative paths).
  copy = copy_model(output_dir, str(tmp_path / "copy"))
  run_flags("--output_dir=" + copy, "--do_predict", "--predict_file=" +
            os.path.join(SST2, "test.tsv"), "--text_column=sentence",
            "--predict_batch_size=16")
  with open(os.path.join(copy, "test_results.tsv")) as f:
    assert f.read() == expected
  assert "model card %s: task csv, labels 1,0, max_seq_length 32" % os.path.join(
      copy, "model_card.json") in caplog.text
  step_line = "predicting 100 examples (+12 padding) with %s (global step 6)" % os.path.join(
      copy, "model.ckpt-6")
  assert step_line in caplog.text
  with open(os.path.join(copy, "test_results.json")) as f:
    record = json.load(f)
  assert (record["checkpoint"], record["global_step"], record["rows"], record["labels"]) == (
      os.path.join(copy, "model.ckpt-6"), 6, 100, ["1", "0"])


@pytest.mark.slow
@pytest.mark.one_runtime("tf2")  # (Python on the card: see the note above trained)
def test_labels_in_another_order_are_refused(trained, tiny_checkpoint):
  output_dir, _ = trained
  with pytest.raises(FlagError) as error:
    run_flags(*sst2_flags(tiny_checkpoint, output_dir, "--do_predict", "--labels=0,1"))
  assert str(error.value) == (
      "%s says labels=1,0, but this run has 0,1. The model was trained with 1,0: drop the flag "
      "to use the model's own, or train a new model into another --output_dir"
      % os.path.join(output_dir, "model_card.json"))


@pytest.mark.slow
@pytest.mark.one_runtime("tf2")  # (Python on the card: see the note above trained)
def test_another_vocabulary_or_casing_is_refused(trained, tiny_checkpoint, tmp_path):
  output_dir, _ = trained
  with pytest.raises(FlagError) as error:
    run_flags(*sst2_flags(tiny_checkpoint, output_dir, "--do_predict", "--nodo_lower_case"))
  assert "says do_lower_case=True, but this run has False" in str(error.value)
  vocab = tmp_path / "vocab.txt"
  with open(TINY_VOCAB) as f:
    vocab.write_text(f.read().replace("[unused0]", "[unused_zero]"))
  with pytest.raises(FlagError) as error:
    run_flags(*sst2_flags(tiny_checkpoint, output_dir, "--do_predict",
                          "--vocab_file=%s" % vocab))
  assert str(error.value).startswith(
      "--vocab_file=%s is not the vocabulary the model was trained with" % vocab)
  config = tmp_path / "bert_config.json"
  config.write_text(u'{"vocab_size": 30522,')
  with pytest.raises(FlagError) as error:
    run_flags(*sst2_flags(tiny_checkpoint, output_dir, "--do_predict",
                          "--bert_config_file=%s" % config))
  assert str(error.value).startswith("--bert_config_file=%s cannot be used: %s is not valid "
                                     "JSON" % (config, config))


@pytest.mark.slow
def test_an_untrained_head_is_refused_unless_allowed(tiny_checkpoint, tmp_path, caplog):
  """Predicting straight from a pre-trained checkpoint would give random predictions."""
  output_dir = str(tmp_path / "untrained")
  with pytest.raises(FlagError) as error:
    run_flags(*common_flags(tiny_checkpoint, output_dir) + ["--do_predict"])
  assert str(error.value) == (
      "refusing to predict with an untrained classifier head: %s holds no fine-tuned model, "
      "and --init_checkpoint=%s is a pre-trained encoder without a head. Fine-tune first (add "
      "--do_train, which saves the model in --output_dir), or point --output_dir at a "
      "fine-tuned model's folder or --init_checkpoint at a fine-tuned checkpoint. "
      "--allow_untrained_head runs anyway, with random predictions"
      % (output_dir, tiny_checkpoint))
  assert not os.path.exists(output_dir)
  caplog.set_level("INFO")
  # The features are cached elsewhere, so nothing else creates the output folder.
  run_flags(*common_flags(tiny_checkpoint, output_dir) + [
      "--do_predict", "--allow_untrained_head", "--cache_dir=%s" % (tmp_path / "cache")])
  assert "the classifier head starts from random values" in caplog.text
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    assert len(f.read().splitlines()) == 1 + 33


@pytest.mark.slow
@pytest.mark.one_runtime("tf2")  # (Python on the card: see the note above trained)
def test_a_head_for_another_number_of_labels_is_refused(trained, tiny_checkpoint, tmp_path):
  """A fine-tuned --init_checkpoint brings its card: other labels contradict it. Without a
  card (a checkpoint from elsewhere), the head's own shape tells."""
  output_dir, _ = trained
  fine_tuned = os.path.join(output_dir, "model.ckpt-6")
  with pytest.raises(FlagError) as error:
    run_flags(*sst2_flags(tiny_checkpoint, str(tmp_path / "three"), "--do_eval",
                          "--labels=0,1,2", "--init_checkpoint=" + fine_tuned))
  assert str(error.value).startswith(
      "%s says labels=1,0, but this run has 0,1,2" % os.path.join(output_dir, "model_card.json"))
  bare = tmp_path / "bare"
  bare.mkdir()
  for name in os.listdir(output_dir):
    if name.startswith("model.ckpt-6"):
      with open(os.path.join(output_dir, name), "rb") as src, open(str(bare / name), "wb") as dst:
        dst.write(src.read())
  with pytest.raises(FlagError) as error:
    run_flags(*sst2_flags(tiny_checkpoint, str(tmp_path / "three"), "--do_eval",
                          "--labels=0,1,2", "--init_checkpoint=%s" % (bare / "model.ckpt-6")))
  assert str(error.value).startswith(
      "the classifier head in %s has 2 outputs, but this run has 3 (labels 0,1,2)"
      % (bare / "model.ckpt-6"))


@pytest.mark.slow
def test_a_bad_predict_file_stops_the_run_before_training(tiny_checkpoint, tmp_path):
  predict = tmp_path / "test.csv"
  with io.open(os.path.join(JIGSAW, "test.csv"), encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f))
  rows[0][1] = "text"  # the column is not called comment_text
  with io.open(str(predict), "w", encoding="utf-8", newline="") as f:
    csv.writer(f).writerows(rows)
  output_dir = tmp_path / "out"
  with pytest.raises(DataError) as error:
    run_flags(*common_flags(tiny_checkpoint, str(output_dir)) + [
        "--do_train", "--do_predict", "--num_train_steps=3", "--predict_file=%s" % predict])
  assert str(error.value).startswith(
      "%s, line 1, column 'comment_text': there is no column 'comment_text'" % predict)
  written = os.listdir(str(output_dir)) if output_dir.exists() else []
  assert [name for name in written if name.startswith(("model.ckpt", "checkpoint",
                                                       "model_card"))] == []


@pytest.mark.slow
@pytest.mark.one_runtime("tf2")  # (Python on the card: see the note above trained)
def test_eval_results_name_their_checkpoint(trained, tiny_checkpoint):
  output_dir, _ = trained
  results = run_flags(*sst2_flags(tiny_checkpoint, output_dir, "--do_eval")).eval
  assert results["checkpoint"] == os.path.join(output_dir, "model.ckpt-6")
  assert results["global_step"] == 6 and results["num_examples"] == 100
  with open(os.path.join(output_dir, "eval_results.json")) as f:
    assert json.load(f)["checkpoint"] == results["checkpoint"]


@pytest.mark.slow
def test_another_task_is_refused(jigsaw_model, tmp_path):
  """A Jigsaw model may read other files through the csv task, but it is no SST-2 model."""
  output_dir = jigsaw_model.copy_to(str(tmp_path / "jigsaw"))
  with pytest.raises(FlagError) as error:
    run_flags("--output_dir=" + output_dir, "--do_eval", "--task_name=sst-2",
              "--data_dir=" + SST2)
  assert str(error.value) == (
      "%s says the model was trained for task jigsaw_toxic, but this run has "
      "--task_name=sst-2. Drop the flag (or use --task_name=csv to read another file layout "
      "with the model's labels), or train a new model into another --output_dir"
      % os.path.join(output_dir, "model_card.json"))
  # Through the csv task, with the model's labels, the same SST-2 file is fine.
  results = run_flags("--output_dir=" + output_dir, "--do_eval", "--task_name=csv",
                      "--eval_file=" + os.path.join(SST2, "dev.tsv"), "--text_column=sentence",
                      "--label_column=label").eval
  assert results["num_examples"] == 100 and results["global_step"] == 6


def test_header_and_quoting_flags_reach_the_reader():
  import csv as csv_module
  from data.processors import processor_for
  from run_classifier import parse_flags
  processor = processor_for(parse_flags([
      "run_classifier.py", "--task_name=csv", "--text_column=0", "--label_column=1",
      "--nohas_header", "--predict_has_header", "--quoting=none"]).data)
  assert [processor.has_header_for(s) for s in ("train", "dev", "test")] == [False, False, True]
  assert processor.quoting_of("a.csv") == csv_module.QUOTE_NONE
  default = processor_for(parse_flags(["run_classifier.py", "--task_name=csv",
                                       "--text_column=text", "--label_column=label"]).data)
  assert [default.has_header_for(s) for s in ("train", "dev", "test")] == [True, True, True]
  assert (default.quoting_of("a.csv"), default.quoting_of("a.tsv")) == (
      csv_module.QUOTE_MINIMAL, csv_module.QUOTE_NONE)
