"""A run's state checked before step 1: what its --output_dir holds (a model, its card, its
steps, what it was trained on) against what the run asks. Each case runs on a copy of
conftest's jigsaw_model: BERT-Tiny trained 6 steps of 8 on the Jigsaw sample."""

import csv
import io
import json
import os
import shutil

import pytest
import tensorflow.compat.v1 as tf

from conftest import JIGSAW, TEST_DATA, run_flags, sample_path
from spec.run_errors import FlagError

pytestmark = pytest.mark.slow

TRAIN = os.path.join(JIGSAW, "train.csv")


def _card(folder):
  with open(os.path.join(folder, "model_card.json")) as f:
    return json.load(f)


def _steps(folder):
  """The steps of the folder's checkpoints (none at step 0: a training saves no checkpoint
  when its session starts)."""
  return sorted(int(n.split("-")[1].split(".")[0]) for n in os.listdir(folder)
                if n.startswith("model.ckpt-") and n.endswith(".index"))


def _command(folder, tiny_checkpoint, *extra):
  """jigsaw_model's training command (conftest), into folder."""
  from conftest import common_flags
  return common_flags(tiny_checkpoint, folder) + ["--do_train", "--num_train_steps=6",
                                                  "--log_every_steps=1"] + list(extra)


def _other_train_file(tmp_path):
  """The Jigsaw sample's train rows but the last: another file, of the same layout."""
  with io.open(TRAIN, encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f))
  path = str(tmp_path / "other_train.csv")
  with io.open(path, "w", encoding="utf-8", newline="") as f:
    csv.writer(f).writerows(rows[:-1])
  return path


def test_the_card_records_what_the_model_was_trained_on(jigsaw_model):
  training = _card(jigsaw_model.output_dir)["training"]
  assert (training["per_update"], training["num_train_steps"], training["seed"]) == (8, 6, 12345)
  import tensorflow as tf
  assert training["input"] == {"record_shards": 1, "input_pipelines": 1,
                               "dynamic_padding": False, "length_grouping": "none",
                               "train_batch_size": 8,
                               "tensorflow": ".".join(tf.__version__.split(".")[:2])}
  (data,) = training["data"]
  assert (data["file"], data["examples"], data["train_fraction"], data["from_step"]) == (
      TRAIN, 267, 1.0, 0)
  assert len(data["rows"]) == 16
  from data.files import file_sha256
  assert data["sha256"] == file_sha256(TRAIN)


@pytest.mark.one_runtime("tf1")  # (the run's state is plain Python)
def test_training_on_a_new_file_into_a_trained_folder_is_refused_or_continued(
    jigsaw_model, tiny_checkpoint, tmp_path, caplog):
  """The old behaviour: 0 steps trained, exit 0, and a card saying the model was trained on
  the new file."""
  folder = jigsaw_model.copy_to(str(tmp_path / "model"))
  card_before = _card(folder)
  other = _other_train_file(tmp_path)
  with pytest.raises(FlagError) as error:
    run_flags(*_command(folder, tiny_checkpoint, "--train_file=" + other))
  sha = card_before["training"]["data"][0]["sha256"]
  from data.files import file_sha256
  assert str(error.value) == (
      "%s: its model was trained to step 6 on %s (sha256 %s..., 267 rows, --seed=12345), and "
      "this run's train file is %s (sha256 %s..., 266 rows, --seed=12345): it would go on "
      "training that model on other data. Pass --continue_on_new_data to do so (the card then "
      "lists both files), or train a new model into another --output_dir" % (
          os.path.join(folder, "model_card.json"), TRAIN, sha[:12], other,
          file_sha256(other)[:12]))
  assert _card(folder) == card_before and _steps(folder) == [6]
  # Asked for, the model goes on from its last checkpoint on the new file, whose input
  # starts at its beginning.
  caplog.set_level("INFO")
  run_flags(*_command(folder, tiny_checkpoint, "--train_file=" + other,
                      "--continue_on_new_data", "--num_train_steps=8"))
  assert _steps(folder) == [6, 8]
  data = _card(folder)["training"]["data"]
  assert [(d["file"], d["examples"], d["from_step"]) for d in data] == [
      (TRAIN, 267, 0), (other, 266, 6)]
  assert ("resuming from the checkpoint at step 6 of 8: the input continues after the 0 "
          "examples those steps trained on (epoch 0.00) of this train file, which it began at "
          "step 6") in caplog.text


def test_resuming_with_another_batch_is_refused(jigsaw_model, tiny_checkpoint, tmp_path):
  folder = jigsaw_model.copy_to(str(tmp_path / "model"))
  with pytest.raises(FlagError) as error:
    run_flags(*_command(folder, tiny_checkpoint, "--num_train_steps=8",
                        "--train_batch_size=16"))
  assert str(error.value) == (
      "%s: its model was trained to step 6 on batches of 8 examples (train_batch_size x "
      "gradient_accumulation_steps), and this run has 16: the resumed input would skip 96 "
      "examples where those steps trained on 48. Pass --train_batch_size (and "
      "--gradient_accumulation_steps) as before, or train a new model into another "
      "--output_dir" % os.path.join(folder, "model_card.json"))
  assert _steps(folder) == [6]


@pytest.mark.parametrize("changed, setting, before, after", [
    ("--num_record_shards=2", "--num_record_shards", "1", "2"),
    ("--dynamic_padding", "--dynamic_padding", "false", "true")])
def test_resuming_reads_the_records_as_the_steps_before_did(
    jigsaw_model, tiny_checkpoint, tmp_path, changed, setting, before, after):
  """Two shards are interleaved, and dynamic padding draws batches from length buckets:
  the resumed input skipped 48 examples of another stream (rows trained twice, others
  never), exit 0."""
  folder = jigsaw_model.copy_to(str(tmp_path / "model"))
  with pytest.raises(FlagError) as error:
    run_flags(*_command(folder, tiny_checkpoint, "--num_train_steps=8", changed))
  assert str(error.value) == (
      "%s: its model was trained to step 6 reading its records with %s=%s, and this run has "
      "%s: the resumed input would not continue where those steps stopped (some rows would "
      "be trained on twice, others never). Pass %s as before, or train a new model into "
      "another --output_dir" % (os.path.join(folder, "model_card.json"), setting, before,
                                after, setting))
  assert _steps(folder) == [6]


def test_a_resume_on_the_other_runtime_or_an_unknown_stream_is_told():
  """TensorFlow 1.15's seeded shuffle is not 2.15's: a resume on the other runtime trained
  4 of 32 rows twice. A card that does not say how its records were read resumes with a
  warning, and records that it is not known."""
  from pipeline import state
  stream = {"record_shards": 1, "input_pipelines": 1, "dynamic_padding": False,
            "length_grouping": "none", "train_batch_size": 8, "tensorflow": "2.15"}
  data = {"file": "t.csv", "sha256": "ab" * 32, "examples": 40, "train_fraction": 1.0,
          "from_step": 0, "rows": "f" * 16}
  trained = {"per_update": 8, "num_train_steps": 4, "seed": 1, "input": stream, "data": [data]}
  asked = dict(trained, num_train_steps=8, input=dict(stream, tensorflow="1.15"))
  with pytest.raises(FlagError) as error:
    state.continued_state(asked, {"training": trained}, "card", 4, False)
  assert str(error.value) == (
      "card: its model was trained to step 4 reading its records with TensorFlow 2.15, and "
      "this run has 1.15: the resumed input would not continue where those steps stopped "
      "(some rows would be trained on twice, others never). Resume with the TensorFlow "
      "version of those steps (the seeded shuffle differs between versions), or train a new "
      "model into another --output_dir")
  recorded, _ = state.continued_state(asked, {"training": dict(trained, input=None)}, "card",
                                      4, False)
  assert recorded["input"] is None  # (those steps' stream stays unknown)


def test_a_resume_of_a_training_that_grouped_its_examples_otherwise_is_refused():
  """A card of version 5 or before, whose training with dynamic padding grouped its examples
  into length buckets of 16 tokens: today's length-sorted groups would skip other examples
  than those steps trained on."""
  from data.input_fn import LENGTH_GROUPING
  from pipeline import state
  from spec import model_card
  with open(os.path.join(TEST_DATA, "model_cards", "version5_3ce29ca.json")) as f:
    trained = model_card.from_json(f.read(), "card")["training"]
  assert trained["input"]["length_grouping"] == "length buckets of 16 tokens"
  asked = dict(trained, num_train_steps=4, input=dict(trained["input"],
                                                      length_grouping=LENGTH_GROUPING))
  with pytest.raises(FlagError) as error:
    state.continued_state(asked, {"training": trained}, "card", 1, False)
  assert str(error.value) == (
      "card: its model was trained to step 1 reading its records with length buckets of 16 "
      "tokens, and this run has length-sorted groups of 50 batches (at most 8192 examples): "
      "the resumed input would not continue where those steps stopped (some rows would be "
      "trained on twice, others never). Resume with the version of this project that "
      "trained those steps, or train a new model into another --output_dir")
  recorded, _ = state.continued_state(asked, {"training": dict(trained, input=asked[
      "input"])}, "card", 1, False)
  assert recorded["input"]["length_grouping"] == LENGTH_GROUPING


def test_the_same_file_with_other_class_weights_is_refused_naming_both():
  from pipeline import state
  data = {"file": "t.csv", "sha256": "ab" * 32, "examples": 40, "train_fraction": 1.0,
          "from_step": 0, "rows": "f" * 16, "class_weights": {"insult": 2.0, "toxic": 1.5}}
  trained = {"per_update": 8, "num_train_steps": 4, "seed": 1, "input": None, "data": [data]}
  for weights, shown in (({"insult": 2.0, "toxic": 3.0}, '{"insult": 2.0, "toxic": 3.0}'),
                         (None, "none")):
    asked = dict(trained, num_train_steps=8,
                 data=[dict(data, rows="e" * 16, class_weights=weights)])
    with pytest.raises(FlagError) as error:
      state.continued_state(asked, {"training": trained}, "card", 4, False)
    assert str(error.value) == (
        "card: its model was trained to step 4 on t.csv (sha256 abababababab..., 40 rows, "
        "--seed=1), and this run's train file is t.csv (sha256 abababababab..., 40 rows, "
        "--seed=1, read otherwise: its class weights were {\"insult\": 2.0, \"toxic\": 1.5}, "
        "this run's are %s): it would go on training that model on other data. Pass "
        "--continue_on_new_data to do so (the card then lists both files), or train a new "
        "model into another --output_dir" % shown)


@pytest.mark.one_runtime("tf2")  # (the run's state is plain Python)
def test_the_same_file_read_with_another_label_column_is_other_data(jigsaw_model, tmp_path):
  """The resume was accepted, and the card then said every step trained on the new column."""
  from conftest import common_flags
  folder = str(tmp_path / "model")
  flags = [f for f in common_flags(jigsaw_model.result.checkpoint, folder)
           if not f.startswith(("--task_name", "--data_dir"))] + [
      "--task_name=csv", "--train_file=" + TRAIN, "--text_column=comment_text", "--do_train"]
  run_flags(*flags + ["--label_column=toxic", "--num_train_steps=1"])
  with pytest.raises(FlagError) as error:
    run_flags(*flags + ["--label_column=obscene", "--num_train_steps=2"])
  assert "it would go on training that model on other data" in str(error.value)
  assert ", read otherwise: its columns, labels, weights or tokenisation)" in str(error.value)


def test_the_same_finished_command_again_trains_nothing_and_says_so(
    jigsaw_model, tiny_checkpoint, tmp_path, caplog):
  folder = jigsaw_model.copy_to(str(tmp_path / "model"))
  card_before = _card(folder)
  caplog.set_level("INFO")
  run_flags(*_command(folder, tiny_checkpoint))
  assert ("the model in the folder of %s has reached step 6 of 6: there is nothing left to "
          "train" % os.path.join(folder, "model_card.json")) in caplog.text
  assert _steps(folder) == [6]
  assert _card(folder)["training"] == card_before["training"]


def test_flags_that_contradict_the_card_or_cannot_work_are_refused(jigsaw_model, tmp_path):
  folder = jigsaw_model.copy_to(str(tmp_path / "model"))
  where = os.path.join(folder, "model_card.json")
  for flags, message in (
      (["--do_predict", "--max_seq_length=64"],
       "%s says max_seq_length=32, but this run has 64" % where),
      (["--do_train", "--num_train_steps=-3"],
       "--num_train_steps=-3 must be 0 or more (0: train --num_train_epochs over the train "
       "split)"),
      (["--do_predict", "--task_name=csv", "--predict_file=" + os.path.join(JIGSAW, "test.csv"),
        "--text_column=comment_text", "--text_b_column=id"],
       "%s says the model reads single texts (task jigsaw_toxic), but this run reads pairs of "
       "texts: drop --text_b_column, or train a model on pairs into another --output_dir"
       % where),
      (["--do_predict", "--continue_on_new_data"],
       "--continue_on_new_data goes on training a folder's model on a new train file; it does "
       "nothing without --do_train")):
    with pytest.raises(FlagError) as error:
      run_flags(*["--output_dir=" + folder, "--data_dir=" + JIGSAW] + flags)
    assert str(error.value).startswith(message), str(error.value)


def test_a_fine_tuned_init_checkpoint_brings_its_card(jigsaw_model, tmp_path):
  """Predicting through --init_checkpoint with the classes in another order inverted every
  prediction (ROC-AUC 0.03 on held-out rows): the card was read from --output_dir only."""
  checkpoint = os.path.join(jigsaw_model.output_dir, "model.ckpt-6")
  scores = str(tmp_path / "scores")
  with pytest.raises(FlagError) as error:
    run_flags("--task_name=csv", "--predict_file=" + os.path.join(JIGSAW, "test.csv"),
              "--text_column=comment_text", "--labels=1,0", "--do_predict",
              "--init_checkpoint=" + checkpoint, "--output_dir=" + scores)
  assert str(error.value).startswith(
      "%s says labels=0,1, but this run has 1,0" % os.path.join(jigsaw_model.output_dir,
                                                               "model_card.json"))
  # Without the contradiction, the card gives everything: the predictions are the model's.
  result = run_flags("--predict_file=" + os.path.join(JIGSAW, "test.csv"), "--do_predict",
                     "--init_checkpoint=" + checkpoint, "--output_dir=" + scores)
  with open(result.predictions) as f, open(jigsaw_model.result.predictions) as g:
    assert f.read() == g.read()


@pytest.mark.one_runtime("tf2")  # (the run's state is plain Python)
def test_a_csv_models_label_column_is_the_files_layout(jigsaw_model, tmp_path):
  """A model that read its labels from one CSV layout evaluates a file that keeps them in
  a column named otherwise; its classes are what must agree."""
  train = sample_path("jigsaw_toxic_sample", "train.csv")
  folder = str(tmp_path / "model")
  from conftest import common_flags
  from run_classifier import parse_flags, run
  flags = [f for f in common_flags(jigsaw_model.result.checkpoint, folder)
           if not f.startswith(("--task_name", "--data_dir", "--init_checkpoint"))]
  run(parse_flags(["run_classifier.py"] + flags + [
      "--task_name=csv", "--train_file=" + train, "--text_column=comment_text",
      "--label_column=toxic", "--do_train", "--num_train_steps=1",
      "--init_checkpoint=" + os.path.join(os.path.dirname(jigsaw_model.result.checkpoint),
                                          "model.ckpt-6")]))
  assert _card(folder)["label_columns"] == ["toxic"]
  renamed = str(tmp_path / "dev.csv")
  with io.open(os.path.join(JIGSAW, "valid.csv"), encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f))
  rows[0] = ["is_toxic" if name == "toxic" else name for name in rows[0]]
  with io.open(renamed, "w", encoding="utf-8", newline="") as f:
    csv.writer(f).writerows(rows)
  results = run_flags("--output_dir=" + folder, "--do_eval", "--eval_file=" + renamed,
                      "--text_column=comment_text", "--label_column=is_toxic").eval
  assert results["num_examples"] == 25
  # A label the model has no class for needs another model, and the error says so.
  rows[5][rows[0].index("is_toxic")] = "2"
  with io.open(renamed, "w", encoding="utf-8", newline="") as f:
    csv.writer(f).writerows(rows)
  from data.data_error import DataError
  line = 1 + sum(1 + "".join(row).count("\n") for row in rows[:5])  # (quoted newlines)
  with pytest.raises(DataError) as error:
    run_flags("--output_dir=" + folder, "--do_eval", "--eval_file=" + renamed,
              "--text_column=comment_text", "--label_column=is_toxic")
  assert str(error.value) == (
      "%s, line %d, column 'is_toxic': task csv: unknown label '2'; the labels are 0, 1, the "
      "classes of the model whose card is %s. Fix: a file read with this model may hold only "
      "its classes: correct the row, or train a model with these labels into another "
      "--output_dir" % (renamed, line, os.path.join(folder, "model_card.json")))


def _saved_at_step_0(checkpoint, folder):
  """checkpoint's variables saved as folder/model.ckpt-0, with global step 0: a checkpoint
  as TensorFlow's own saver writes when a training session starts (on a TPU, in a cluster,
  and in folders trained before this project's saver left it out)."""
  reader = tf.train.load_checkpoint(checkpoint)
  with tf.Graph().as_default():
    for name in reader.get_variable_to_shape_map():
      value = 0 if name == "global_step" else reader.get_tensor(name)
      tf.Variable(value, name=name, dtype=reader.get_variable_to_dtype_map()[name])
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      return tf.train.Saver().save(session, os.path.join(folder, "model.ckpt-0"))


def test_a_checkpoint_saved_at_step_0_is_no_fine_tuned_model(jigsaw_model, tmp_path):
  """Its head is as it was initialised: predicting through it wrote random predictions."""
  folder = str(tmp_path / "model")  # (beside the model's card, as in its own folder)
  os.makedirs(folder)
  shutil.copy(os.path.join(jigsaw_model.output_dir, "model_card.json"), folder)
  step_0 = _saved_at_step_0(os.path.join(jigsaw_model.output_dir, "model.ckpt-6"), folder)
  with pytest.raises(FlagError) as error:
    run_flags("--predict_file=" + os.path.join(JIGSAW, "test.csv"), "--do_predict",
              "--init_checkpoint=" + step_0, "--output_dir=" + str(tmp_path / "scores"))
  assert str(error.value).startswith(
      "refusing to predict with an untrained classifier head: %s was saved at step 0, before "
      "any training. Fine-tune first" % step_0)


def test_two_fine_tuned_models_named_at_once_are_refused(jigsaw_model, tmp_path):
  """The folder's model was used, and the --init_checkpoint the command named was ignored."""
  copy = jigsaw_model.copy_to(str(tmp_path / "model"))
  other = os.path.join(jigsaw_model.output_dir, "model.ckpt-6")
  with pytest.raises(FlagError) as error:
    run_flags("--output_dir=" + copy, "--do_predict", "--data_dir=" + JIGSAW,
              "--init_checkpoint=" + other)
  assert str(error.value) == (
      "--init_checkpoint=%s is a fine-tuned model, and --output_dir=%s holds one too, which "
      "this run would predict with (model.ckpt-6), ignoring the first. Drop --init_checkpoint "
      "to use the folder's model, or pass an --output_dir without a model to use the "
      "checkpoint's" % (other, copy))


def test_the_best_checkpoint_brings_its_models_card(jigsaw_model, tmp_path):
  """<output_dir>/best holds best_checkpoint.json and the checkpoint, not the card: the
  card beside the output folder is the model's (classes reversed were accepted)."""
  import shutil
  copy = jigsaw_model.copy_to(str(tmp_path / "model"))
  best = os.path.join(copy, "best")
  os.makedirs(best)
  for name in os.listdir(copy):
    if name.startswith("model.ckpt-6."):
      shutil.copy(os.path.join(copy, name), best)
  with open(os.path.join(best, "best_checkpoint.json"), "w") as f:
    json.dump({"checkpoint": os.path.join(best, "model.ckpt-6")}, f)
  with pytest.raises(FlagError) as error:
    run_flags("--task_name=csv", "--predict_file=" + os.path.join(JIGSAW, "test.csv"),
              "--text_column=comment_text", "--labels=1,0", "--do_predict",
              "--init_checkpoint=" + os.path.join(best, "model.ckpt-6"),
              "--output_dir=" + str(tmp_path / "scores"))
  assert str(error.value).startswith(
      "%s says labels=0,1, but this run has 1,0" % os.path.join(copy, "model_card.json"))


def test_a_newest_checkpoint_whose_files_are_gone_is_named(jigsaw_model, tmp_path):
  """The folder's `checkpoint` file names model.ckpt-6, deleted: predicting said the folder
  held no fine-tuned model, and training failed with a traceback."""
  copy = jigsaw_model.copy_to(str(tmp_path / "model"))
  for name in os.listdir(copy):
    if name.startswith("model.ckpt-6."):
      os.remove(os.path.join(copy, name))
  fix = ("to go back to an earlier checkpoint, name it in the folder's `checkpoint` file "
         "(model_checkpoint_path: \"model.ckpt-<step>\")")
  with pytest.raises(FlagError) as error:
    run_flags("--output_dir=" + copy, "--do_predict", "--data_dir=" + JIGSAW)
  assert str(error.value) == (
      "refusing to predict with %s/model.ckpt-6: it cannot be read: there is no file "
      "%s/model.ckpt-6.index. Restore its files, %s, or point --output_dir or "
      "--init_checkpoint at another model" % (copy, copy, fix))
  with pytest.raises(FlagError) as error:
    run_flags("--output_dir=" + copy, "--do_train", "--num_train_steps=8",
              "--data_dir=" + JIGSAW)
  assert str(error.value) == (
      "--output_dir=%s: training would resume from its newest checkpoint, model.ckpt-6, which "
      "cannot be read: there is no file %s/model.ckpt-6.index. Restore its files, or %s, or "
      "train into a new --output_dir" % (copy, copy, fix))


def test_a_training_that_diverges_is_one_line(tiny_checkpoint, tmp_path):
  """A NaN loss ended in TensorFlow's NanLossDuringTrainingError traceback."""
  folder = str(tmp_path / "out")
  with pytest.raises(FlagError) as error:
    run_flags(*_command(folder, tiny_checkpoint) + ["--learning_rate=1e12",
                                                    "--warmup_proportion=0"])
  assert str(error.value) == (
      "training diverged: the loss became NaN before step 6 (the checkpoints kept in %s are "
      "from before it). Lower --learning_rate (or raise --warmup_proportion), and check that "
      "the train file's targets and weights are of a sensible size" % folder)
