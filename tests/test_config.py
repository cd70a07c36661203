"""The typed configuration (spec/config.py): the flags build it, Python builds it without
absl, and its values are checked once."""

import dataclasses
import os

import pytest

from conftest import JIGSAW
from data.files import file_sha256
from run_classifier import define_flags, parse_flags, run
from spec import option_index
from spec.config import ConfigError, RunConfig
from spec.run_errors import FlagError


def test_every_option_is_one_flag_with_its_definition():
  """The flags are made from spec/config.py: one per option, with its default, help and
  choices, and the option's type decides the flag's."""
  from absl import flags
  values = flags.FlagValues()
  define_flags(values)
  assert sorted(values) == sorted(option_index.option_names())
  kinds = {"bool": "BooleanParser", "int": "IntegerParser", "float": "FloatParser",
           "str": "ArgumentParser", "tuple": "ListParser"}
  for group, field in option_index.option_fields():
    flag = values[field.name]
    default = tuple(flag.default) if isinstance(flag.default, list) else flag.default
    assert default == field.default == option_index.default(field.name), field.name
    help_text = option_index.help_of(field.name)
    if option_index.choices(field.name):  # (absl shows an enum's choices first)
      assert flag.parser.enum_values == list(option_index.choices(field.name)), field.name
      help_text = "<%s>: %s" % ("|".join(option_index.choices(field.name)), help_text)
    else:
      assert type(flag.parser).__name__ == kinds[option_index.base_type(field).__name__], field.name
    assert flag.help == help_text, field.name
    assert field.name in [f.name for f in dataclasses.fields(getattr(RunConfig(), group))]
  # Groups hold each option once: spec/options.py's 88, and those the heads declare.
  names = option_index.option_names()
  assert len(names) == len(set(names))
  assert len([n for n in names if option_index.group_of(n) != "heads"]) == 88


def test_given_names_the_flags_on_the_command_line():
  c = parse_flags(["run_classifier.py", "--task_name=sst-2", "--max_seq_length=128",
                   "--labels=0,1", "--nodo_lower_case"])
  assert c.given == {"task_name", "max_seq_length", "labels", "do_lower_case"}
  assert (c.model.max_seq_length, c.data.labels, c.model.do_lower_case) == (128, ("0", "1"),
                                                                          False)
  # Built directly, a field counts as given when it differs from its default.
  assert RunConfig(max_seq_length=64, do_train=True).given == {"max_seq_length", "do_train"}


def test_values_are_checked_for_type_and_choice():
  for bad, message in ((dict(max_seq_length="64"), "max_seq_length must be int, not '64'"),
                       (dict(window_aggregation="median"), "window_aggregation='median' is "
                                                            "not one of mean, max, first"),
                       (dict(head="softmax"), "--head='softmax' is no head; the heads: auto, "
                                              "classification, "),
                       (dict(do_train=1), "do_train must be bool, not 1"),
                       (dict(labels=["0", "1"]), "labels must be a tuple of strings"),
                       (dict(learning_rate=True), "learning_rate must be float, not True"),
                       (dict(given=frozenset(["speed"])), "given names unknown options: speed"),
                       (dict(labels=("0", "", "1")), "--labels=0,,1 has an empty item: list "
                                                     "the values between commas, each once"),
                       (dict(delimiter=";;"), "--delimiter=';;' is not one character"),
                       (dict(delimiter="\n"), "--delimiter='\\n' cannot separate fields: it "
                                              "ends lines or quotes text"),
                       (dict(delimiter='"'), "--delimiter='\"' cannot separate fields")):
    with pytest.raises(ConfigError) as error:
      RunConfig(**bad)
    assert message in str(error.value)
  with pytest.raises(FlagError, match="nothing to do"):
    run(RunConfig(output_dir="/tmp/never"))
  for usable in ("\\t", "tab", ";", "|"):
    assert RunConfig(delimiter=usable).data.delimiter == usable


@pytest.mark.slow
def test_run_takes_a_config_built_in_python(jigsaw_model, tmp_path):
  """No absl at all: a RunConfig trained, evaluated, predicted, exported and wrote its card
  (conftest's jigsaw_model), and run() says what it produced."""
  result, output_dir = jigsaw_model.result, jigsaw_model.output_dir
  assert [step for step, _, _ in result.train_progress] == [2, 3, 4, 5, 6]  # after step 1
  assert [step for step, _ in result.train_losses] == [1, 2, 3, 4, 5, 6]
  assert result.predictions == os.path.join(output_dir, "test_results.tsv")
  with open(result.predictions) as f:
    assert len(f.read().splitlines()) == 1 + 33
  assert result.eval["num_examples"] == 25 and result.eval["global_step"] == 6
  assert result.checkpoint == os.path.join(output_dir, "model.ckpt-6")
  assert os.path.dirname(result.export) == os.path.join(output_dir, "export")
  assert result.summary == os.path.join(output_dir, "run_summary.json")
  assert len(result.test_outputs) == 33 and result.oof is None
  assert result.test_sha256 == file_sha256(os.path.join(JIGSAW, "test.csv"))
  # A later config gives only what differs; the card gives the rest, and a contradiction
  # is refused.
  copy = jigsaw_model.copy_to(str(tmp_path / "copy"))
  again = run(RunConfig(output_dir=copy, data_dir=JIGSAW, do_predict=True))
  with open(again.predictions) as f, open(result.predictions) as g:
    assert f.read() == g.read()
  with pytest.raises(FlagError, match="says do_lower_case=True, but this run has False"):
    run(RunConfig(output_dir=copy, data_dir=JIGSAW, do_predict=True, do_lower_case=False))


def test_a_folder_given_for_a_file_or_a_checkpoint_is_named(tiny_checkpoint, tmp_path):
  """--bert_config_file=<folder> ended in FailedPreconditionError, --vocab_file=<folder> in
  IsADirectoryError, and --init_checkpoint=<folder> said there was no <folder>.index."""
  from conftest import TINY, common_flags
  checkpoint_folder = os.path.dirname(tiny_checkpoint)
  cases = (
      ("--bert_config_file=" + TINY, "--bert_config_file=%s is a folder: pass the file itself, "
                                     "%s/bert_config.json" % (TINY, TINY)),
      ("--vocab_file=" + str(tmp_path), "--vocab_file=%s is a folder: pass the file itself"
                                        % tmp_path),
      ("--init_checkpoint=" + checkpoint_folder,
       "--init_checkpoint=%s is a folder: pass a checkpoint's prefix (its newest is %s)"
       % (checkpoint_folder, tiny_checkpoint)),
      ("--text_column=toxic", "--text_column=toxic is also a label column (--label_column="
                              "toxic): the model would read each row's label in its text. Pass "
                              "the column of the texts"))
  cases += (("--text_column=comment_text --text_b_column=comment_text",
             "--text_b_column=comment_text is also --text_column: each text would be paired "
             "with itself. Pass the column of the second texts, or drop --text_b_column"),)
  for flag, message in cases:
    with pytest.raises(FlagError) as error:
      run(parse_flags(["run_classifier.py"] + common_flags(tiny_checkpoint, str(
          tmp_path / "out")) + ["--do_train", "--task_name=csv", "--label_column=toxic",
                                "--train_file=" + os.path.join(JIGSAW, "train.csv")] +
                      flag.split()))
    assert str(error.value) == message
  assert not os.path.exists(str(tmp_path / "out"))
