"""README's Troubleshooting: every first line it quotes is one the CLI prints. Each row of
its table is produced here for real (in a folder laid out as the README's commands are:
my_data/, BERT_DIR/, out/), its path names as a user gives them; "…" in a quoted line
stands for text that differs from machine to machine."""

import os
import re
import shutil
import socket

import pytest

from conftest import ROOT, TINY

pytestmark = [pytest.mark.slow, pytest.mark.one_runtime("tf2")]

TRAIN = "comment_text,toxic\ngood movie,0\nyou are an idiot,1\nfine film,0\nawful person,1\n"


def readme_rows():
  """{symptom: (quoted first line, fix)} of README's Troubleshooting table."""
  with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    text = f.read()
  section = (text.split("## Troubleshooting", 1) + [""])[1].split("\n## ", 1)[0]
  rows = {}
  for line in section.splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
    if len(cells) == 3 and cells[1].startswith("`"):
      rows[cells[0]] = (cells[1].strip("`"), cells[2])
  return rows


@pytest.fixture
def user_folder(tmp_path, tiny_checkpoint, monkeypatch):
  """A folder as the README's commands have it: BERT_DIR (BERT-Tiny's shape) and my_data."""
  bert = tmp_path / "BERT_DIR"
  bert.mkdir()
  for name in os.listdir(os.path.dirname(tiny_checkpoint)):
    if name.startswith("bert_model.ckpt"):
      shutil.copy(os.path.join(os.path.dirname(tiny_checkpoint), name), str(bert))
  shutil.copy(os.path.join(TINY, "bert_config.json"), str(bert))
  shutil.copy(os.path.join(TINY, "vocab.txt"), str(bert))
  (tmp_path / "my_data").mkdir()
  (tmp_path / "my_data" / "train.csv").write_text(TRAIN)
  monkeypatch.chdir(str(tmp_path))
  return tmp_path


def cli_line(*flags):
  """The first line run_classifier prints for flags (run in this process), with its kind,
  as main() writes it."""
  from run_classifier import ERRORS, parse_flags, run
  from spec.cluster import parse_tf_config
  try:
    run(parse_flags(["run_classifier.py"] + list(flags)), parse_tf_config(None))
  except tuple(kind for kind, _, _ in ERRORS) as e:
    word = next(w for kind, w, _ in ERRORS if isinstance(e, kind))
    return "%s: %s" % (word, str(e).splitlines()[0])
  raise AssertionError("no error")


def model_flags(*more):
  return ["--bert_config_file=BERT_DIR/bert_config.json", "--vocab_file=BERT_DIR/vocab.txt",
          "--init_checkpoint=BERT_DIR/bert_model.ckpt", "--max_seq_length=16",
          "--output_dir=out/toxicity"] + list(more)


def case_headerless(folder):
  (folder / "my_data" / "train.csv").write_text(TRAIN.split("\n", 1)[1])
  return cli_line(*model_flags("--task_name=csv", "--train_file=my_data/train.csv",
                               "--text_column=0", "--label_column=1", "--do_train"))


def case_column(folder):
  return cli_line(*model_flags("--task_name=csv", "--train_file=my_data/train.csv",
                               "--text_column=comment_text", "--label_column=label",
                               "--do_train"))


def case_label(folder):
  (folder / "my_data" / "dev.csv").write_text(TRAIN + "you are great,2\n")
  return cli_line(*model_flags("--task_name=csv", "--train_file=my_data/train.csv",
                               "--eval_file=my_data/dev.csv", "--text_column=comment_text",
                               "--label_column=toxic", "--do_train", "--do_eval",
                               "--num_train_steps=1"))


def case_checkpoint(folder):
  flags = [f for f in model_flags() if not f.startswith("--init_checkpoint")]
  return cli_line(*flags + ["--task_name=csv", "--train_file=my_data/train.csv",
                            "--text_column=comment_text", "--label_column=toxic",
                            "--do_train", "--init_checkpoint=BERT_DIR"])


def case_casing(folder):
  return cli_line(*model_flags("--task_name=csv", "--train_file=my_data/train.csv",
                               "--text_column=comment_text", "--label_column=toxic",
                               "--do_train", "--do_lower_case=false"))


def case_memory(folder):
  import tensorflow.compat.v1 as tf
  from pipeline.workspace import memory_fault
  error = tf.errors.ResourceExhaustedError(
      None, None, "OOM when allocating tensor with shape[32,12,128,128] and type float on "
      "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc")
  return "memory error: %s" % memory_fault(error)


def case_tpu(folder):
  return cli_line(*model_flags("--task_name=csv", "--train_file=my_data/train.csv",
                               "--text_column=comment_text", "--label_column=toxic",
                               "--do_train", "--use_tpu", "--tpu_name=my-tpu"))


def case_peer(folder):
  from pipeline.multi_device import await_peers
  from spec.cluster import Cluster
  from spec.run_errors import ProcessFault
  with socket.socket() as own:
    own.bind(("127.0.0.1", 0))
    port = own.getsockname()[1]
  cluster = Cluster("chief", 0, 2, {("chief", 0): "127.0.0.1:%d" % port,
                                   ("worker", 0): "127.0.0.1:2"})
  times = [0.0, 0.0]  # (then 400 s later, at every look)
  with pytest.raises(ProcessFault) as error:
    await_peers(cluster, 300, clock=lambda: times.pop(0) if times else 400.0,
                sleep=lambda s: None)
  return "process error: %s" % error.value


def case_export(folder, jigsaw_model):
  export = folder / "out" / "toxicity" / "export" / "1"
  shutil.copytree(jigsaw_model.result.export, str(export))
  vocab = export / "assets" / "vocab.txt"
  vocab.write_bytes(vocab.read_bytes()[:1000])
  return cli_line("--saved_model=out/toxicity/export/1", "--do_predict",
                  "--predict_file=my_data/train.csv", "--output_dir=out/scores")


def case_lock(folder):
  """A lock of a run that is still going (this process stands in for it)."""
  import json
  from pipeline import workspace
  out = folder / "out" / "toxicity"
  out.mkdir(parents=True)
  holder = dict(workspace._this_process(), since="2026-11-27 09:00:00")
  (out / "training.lock").write_text(json.dumps(holder))
  return cli_line(*model_flags("--task_name=csv", "--train_file=my_data/train.csv",
                               "--text_column=comment_text", "--label_column=toxic",
                               "--do_train"))


CASES = {
    "A file without a header, its columns given by position": case_headerless,
    "A column the file does not have": case_column,
    "A label the model was not trained with": case_label,
    "A checkpoint given as its folder": case_checkpoint,
    "A casing that contradicts the vocabulary": case_casing,
    "Out of memory (a GPU's, most often)": case_memory,
    "A Cloud TPU node with a local output folder": case_tpu,
    "A worker of the cluster that never starts": case_peer,
    "An export copied in part": case_export,
    "Two trainings into one folder": case_lock,
}


def matches(quoted, actual):
  """Whether actual is quoted, "…" in quoted standing for any text."""
  pattern = ".*?".join(re.escape(part) for part in quoted.split("…"))
  return re.fullmatch(pattern, actual) is not None


def test_every_row_of_the_table_is_a_case():
  assert sorted(readme_rows()) == sorted(CASES)


@pytest.mark.parametrize("symptom", sorted(CASES))
def test_the_quoted_first_line_is_what_the_cli_prints(symptom, user_folder, jigsaw_model):
  make = CASES[symptom]
  actual = make(user_folder, jigsaw_model) if make is case_export else make(user_folder)
  quoted, _ = readme_rows().get(symptom, (None, None))
  assert quoted is not None, "README has no row %r; the CLI prints:\n%s" % (symptom, actual)
  assert matches(quoted, actual), "README quotes:\n%s\nThe CLI prints:\n%s" % (quoted, actual)
