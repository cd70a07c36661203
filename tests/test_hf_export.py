"""Hugging Face both ways: a fine-tuned model exported as a transformers folder
(pipeline/hf_export.py) and a transformers sequence-classification checkpoint brought here
with its head (modeling/convert_hf.py, tools/convert_hf_checkpoint.py).

The folder's contents and the round trip run here. Loading with transformers runs in the
optional Hugging Face environment (.venvs/hf, tools/requirements-hf.txt), in a process
that imports nothing of the project; CI builds that environment, and a run without it
leaves those tests out with a line saying so."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import IN_CI, JIGSAW, ROOT, TINY, TINY_VOCAB, run_flags
from data.tokenization import FullTokenizer
from data.vocabulary import load_vocab
from modeling.convert_hf import ConversionError, convert, hf_head
from pipeline.hf_export import write_hf_folder
from serving.predictor import Predictor
from spec import model_card
from spec.heads.multi_label import MultiLabel
from test_export import SPECS, TEXTS, export_tiny

HF_PYTHON = os.path.join(ROOT, ".venvs", "hf", "bin", "python")
PROJECT_MODULES = ("data", "modeling", "spec", "serving", "pipeline", "run_classifier", "tools")
# A word of 150 characters: Google's tokenizer spells it, transformers' own BERT tokenizer
# (100 at most) would give [UNK]; the folder's tokenizer.json spells it.
HF_TEXTS = TEXTS + [u"x" * 150 + u" end"]
PAIRS = [(a, b) for a, b in zip(HF_TEXTS, HF_TEXTS[::-1])]


def hf_environment():
  """The Hugging Face environment's Python, which ./run.sh test hf builds (the tests that
  need it are that optional tier's: conftest leaves them out of the others); the test is
  left out, with its reason, when it has not been built, except in CI."""
  if not os.path.exists(HF_PYTHON) and not IN_CI:
    pytest.skip("no Hugging Face environment .venvs/hf: ./run.sh setup hf builds it (Python "
                "3.11, tools/requirements-hf.txt)")
  return HF_PYTHON


def run_in_hf(script, payload):
  """Runs script in the Hugging Face environment with payload (JSON) on its stdin; returns
  the JSON it prints last."""
  done = subprocess.run([hf_environment(), "-c", script], input=json.dumps(payload),
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/",
                        universal_newlines=True, timeout=600,
                        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
  assert done.returncode == 0, done.stderr[-3000:]
  return json.loads(done.stdout.splitlines()[-1])


# Loads each folder with transformers alone and gives its outputs (softmax, sigmoid or the
# values, by the config's problem_type) and the ids its tokenizer made.
HF_PREDICT = """
import json, sys
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
assert not any(m.split(".")[0] in %r for m in sys.modules)
torch.set_num_threads(2)
results = []
for job in json.loads(sys.stdin.read()):
  tokenizer = AutoTokenizer.from_pretrained(job["folder"])
  model = AutoModelForSequenceClassification.from_pretrained(job["folder"]).eval()
  texts = [job["texts"]] + ([job["texts_b"]] if job.get("texts_b") else [])
  encoded = tokenizer(*texts, truncation=True, padding=True, return_tensors="pt")
  with torch.no_grad():
    logits = model(**encoded).logits
  problem = model.config.problem_type
  outputs = (torch.softmax(logits, -1) if problem == "single_label_classification" else
             torch.sigmoid(logits) if problem == "multi_label_classification" else logits)
  ids = [[i for i, m in zip(row, mask) if m] for row, mask in zip(
      encoded["input_ids"].tolist(), encoded["attention_mask"].tolist())]
  results.append({"outputs": outputs.tolist(), "ids": ids, "problem_type": problem,
                  "id2label": {str(k): v for k, v in model.config.id2label.items()},
                  "label2id": model.config.label2id, "architectures": model.config.architectures,
                  "model_max_length": tokenizer.model_max_length})
print(json.dumps(results))
""" % (PROJECT_MODULES,)


def tiny_fine_tuned_card(kind, text_pair=False, truncation=None):
  with open(os.path.join(TINY, "bert_config.json")) as f:
    bert_config = json.load(f)
  return model_card.build_card(
      task="csv", label_spec=SPECS[kind], max_seq_length=24, do_lower_case=True,
      vocab_file=TINY_VOCAB, vocab_sha256="-", bert_config=bert_config, init_checkpoint=None,
      hub_module=None, flags={}, truncation=truncation, text_pair=text_pair)


def hf_folder_of(tmp_path, kind, text_pair=False, truncation=None):
  """An export of a random BERT-Tiny model of kind (test_export.export_tiny) and the
  transformers folder of the same checkpoint."""
  export_dir, checkpoint = export_tiny(tmp_path, kind, truncation, text_pair)
  with open(TINY_VOCAB, encoding="utf-8") as f:
    vocab_text = f.read()
  folder = str(tmp_path / kind / "hf")
  write_hf_folder(folder, checkpoint, tiny_fine_tuned_card(kind, text_pair, truncation),
                  vocab_text, load_vocab(TINY_VOCAB))
  return export_dir, checkpoint, folder


def test_the_folder_holds_what_transformers_reads_and_converts_back_exactly(tmp_path):
  """config.json names the head's outputs in order, and the weights come back here
  unchanged (the import of the export is the identity), with the flags its head needs."""
  _, checkpoint, folder = hf_folder_of(tmp_path, "multi_label")
  assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors",
                                        "special_tokens_map.json", "tokenizer.json",
                                        "tokenizer_config.json", "vocab.txt"]
  with open(os.path.join(folder, "config.json")) as f:
    config = json.load(f)
  assert config["architectures"] == ["BertForSequenceClassification"]
  assert config["id2label"] == {"0": "toxic", "1": "insult"}
  assert config["label2id"] == {"toxic": 0, "insult": 1}
  assert config["problem_type"] == "multi_label_classification"
  assert config["hidden_act"] == "gelu_new"  # Google's tanh GELU
  with open(os.path.join(folder, "tokenizer_config.json")) as f:
    tokenizer = json.load(f)
  assert (tokenizer["do_lower_case"], tokenizer["model_max_length"],
          tokenizer["truncation_side"]) == (True, 24, "right")
  assert hf_head(config) == ("multi_label", ["toxic", "insult"])
  _, prefix, head = convert(folder, str(tmp_path / "back"))
  assert head == ("multi_label", ["toxic", "insult"])
  original = tf.train.load_checkpoint(checkpoint)
  back = tf.train.load_checkpoint(prefix)
  names = sorted(n for n, _ in tf.train.list_variables(prefix))
  assert "output_weights" in names and "bert/pooler/dense/kernel" in names
  assert len(names) == 5 + 2 + 2 * 16 + 2  # embeddings, pooler, 2 layers, the head
  for name in names:
    np.testing.assert_array_equal(back.get_tensor(name), original.get_tensor(name), name)
  with open(str(tmp_path / "back" / "flags.txt")) as f:
    assert f.read().splitlines()[-3:] == ["--do_lower_case=True", "--head=multi_label",
                                          "--label_column=toxic,insult"]
  # A tuned card's thresholds go into config.json (an untuned one has none).
  assert "bert_text_classifier_thresholds" not in config
  tuned = MultiLabel(["toxic", "insult"])
  tuned.set_thresholds({"insult": 0.3125})
  card = dict(tiny_fine_tuned_card("multi_label"), label_spec=tuned.to_card())
  with open(TINY_VOCAB, encoding="utf-8") as f:
    write_hf_folder(str(tmp_path / "tuned"), checkpoint, card, f.read(),
                    load_vocab(TINY_VOCAB))
  with open(str(tmp_path / "tuned" / "config.json")) as f:
    assert json.load(f)["bert_text_classifier_thresholds"] == {"insult": 0.3125}


def test_heads_and_labels_of_a_transformers_config():
  assert hf_head({"architectures": ["BertModel"]}) is None
  assert hf_head({"architectures": ["BertForSequenceClassification"], "num_labels": 3}) == (
      "classification", ["LABEL_0", "LABEL_1", "LABEL_2"])
  assert hf_head({"architectures": ["BertForSequenceClassification"],
                  "id2label": {"1": "pos", "0": "neg"}}) == ("classification", ["neg", "pos"])
  assert hf_head({"architectures": ["BertForSequenceClassification"],
                  "id2label": {"0": "score"}}) == ("regression", ["score"])
  with pytest.raises(ConversionError, match="id2label numbers outputs"):
    hf_head({"architectures": ["BertForSequenceClassification"],
             "id2label": {"0": "a", "2": "b"}})


# (the refusals read JSON files in Python; writing the folder and converting it back,
# TensorFlow's part, the round-trip test above runs on both runtimes)
@pytest.mark.one_runtime("tf2")
def test_an_import_refuses_what_it_cannot_convert_exactly(tmp_path, monkeypatch):
  """Before anything is written: a tokenizer other than Google's (accents kept while
  lower-casing, CJK characters not split), two files with different vocabularies, a
  folder that is not new, an output name no comma-separated flag can carry. The flags
  name absolute paths, and a soft-target head comes back as one."""
  _, _, folder = hf_folder_of(tmp_path, "multi_label")

  def variant(name, edit):
    import shutil
    copy = str(tmp_path / name)
    shutil.copytree(folder, copy)
    edit(copy)
    return copy

  def edit_json(file_name, change):
    def edit(copy):
      path = os.path.join(copy, file_name)
      with open(path) as f:
        values = json.load(f)
      change(values)
      with open(path, "w") as f:
        json.dump(values, f)
    return edit

  cases = {
      "accents": (edit_json("tokenizer.json", lambda t: t["normalizer"].update(
          strip_accents=False)), "its tokenizer strips accents=False while lower-casing=True"),
      "cjk": (edit_json("tokenizer.json", lambda t: t["normalizer"].update(
          handle_chinese_chars=False)), "its tokenizer tokenize_chinese_chars=false"),
      "casing": (edit_json("tokenizer_config.json", lambda t: t.update(do_lower_case=False)),
                 "tokenizer_config.json says do_lower_case=False and tokenizer.json's "
                 "normalizer lowercase=True"),
      "vocab": (lambda copy: open(os.path.join(copy, "vocab.txt"), "a").write("extra\n"),
                "vocab.txt and tokenizer.json hold different vocabularies (30523 and 30522 "
                "tokens; id 30522 is 'extra' in one and None in the other)"),
      "comma": (edit_json("config.json", lambda c: c.update(
          id2label={"0": "a,b", "1": "c"}, label2id={"a,b": 0, "c": 1})),
                "the output name 'a,b' cannot be given in a comma-separated flag"),
  }
  for name, (edit, message) in sorted(cases.items()):
    with pytest.raises(ConversionError) as error:
      convert(variant(name, edit), str(tmp_path / ("out-" + name)))
    assert message in str(error.value), name
    assert not os.path.exists(str(tmp_path / ("out-" + name)))
  taken = tmp_path / "taken"
  taken.mkdir()
  (taken / "checkpoint").write_text(u'model_checkpoint_path: "model.ckpt-3"\n')
  with pytest.raises(ConversionError, match="is not a new or empty folder"):
    convert(folder, str(taken))
  with pytest.raises(ConversionError, match="is not a new or empty folder"):
    convert(folder, folder)
  soft = variant("soft", edit_json("config.json", lambda c: c.update(
      bert_text_classifier_head="soft_target")))
  monkeypatch.chdir(str(tmp_path))
  assert convert(soft, "relative")[2] == ("soft_target", ["toxic", "insult"])
  with open(str(tmp_path / "relative" / "flags.txt")) as f:
    flags = f.read().splitlines()
  assert flags[0] == "--bert_config_file=%s" % (tmp_path / "relative" / "bert_config.json")
  assert flags[-2] == "--head=soft_target"


def test_export_format_flags_are_checked_before_any_work(tmp_path, tiny_checkpoint):
  from conftest import common_flags
  flags = common_flags(tiny_checkpoint, str(tmp_path / "out")) + ["--do_train"]
  with pytest.raises(Exception) as error:
    run_flags(*flags + ["--do_export", "--export_format=saved_model,onnx2"])
  assert "--export_format=saved_model,onnx2 names onnx2: the formats are saved_model, hf" in (
      str(error.value))
  with pytest.raises(Exception, match="--export_format says what --do_export writes"):
    run_flags(*flags + ["--export_format=hf"])
  with pytest.raises(Exception, match=r"--export_format=hf: the model of this run cannot be "
                                      r"a transformers BertForSequenceClassification: its "
                                      r"head reads the encoder's mean over the tokens "
                                      r"\(--pooling=mean\)"):
    run_flags(*flags + ["--do_export", "--export_format=hf", "--pooling=mean"])
  assert not os.path.exists(str(tmp_path / "out" / "model_card.json"))


@pytest.mark.slow
@pytest.mark.hf
def test_transformers_loads_each_head_with_the_predictors_outputs(tmp_path):
  """Every head kind, and a model of pairs: AutoModelForSequenceClassification and
  AutoTokenizer from the folder alone give the export's outputs within 1e-4, from the
  same ids."""
  cases = [("classification", False), ("multi_label", False), ("regression", False),
           ("classification", True)]
  jobs, expected = [], []
  for index, (kind, text_pair) in enumerate(cases):
    export_dir, _, folder = hf_folder_of(tmp_path / str(index), kind, text_pair)
    items = PAIRS if text_pair else HF_TEXTS
    with Predictor(export_dir, tokenizer="python") as predictor:
      outputs = predictor.predict_outputs([predictor.example(i, item)
                                           for i, item in enumerate(items)])
    jobs.append({"folder": folder, "texts": [a for a, _ in PAIRS] if text_pair else HF_TEXTS,
                 "texts_b": [b for _, b in PAIRS] if text_pair else None})
    expected.append((kind, outputs))
  tokenizer = FullTokenizer(TINY_VOCAB, True)
  for (kind, outputs), got, job in zip(expected, run_in_hf(HF_PREDICT, jobs), jobs):
    names = SPECS[kind].classes or list(SPECS[kind].columns)
    assert got["id2label"] == {str(i): name for i, name in enumerate(names)}
    assert got["label2id"] == {name: i for i, name in enumerate(names)}
    np.testing.assert_allclose(got["outputs"], outputs, atol=1e-4, err_msg=kind)
    if not job["texts_b"]:  # the same ids as training's tokenizer
      assert got["ids"] == [[101] + tokenizer.encode(t)[:22] + [102] for t in HF_TEXTS]


# The CLI's export of a trained model, read by transformers alone: the predict file's
# comments (csv module) in, test_results.tsv's probabilities out.
HF_PREDICT_FILE = """
import csv, json, sys
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
assert not any(m.split(".")[0] in %r for m in sys.modules)
job = json.loads(sys.stdin.read())
with open(job["predict_file"], newline="", encoding="utf-8") as f:
  texts = [row["comment_text"] for row in csv.DictReader(f)]
tokenizer = AutoTokenizer.from_pretrained(job["folder"])
model = AutoModelForSequenceClassification.from_pretrained(job["folder"]).eval()
with torch.no_grad():
  logits = model(**tokenizer(texts, truncation=True, padding=True, return_tensors="pt")).logits
print(json.dumps(torch.softmax(logits, -1).tolist()))
""" % (PROJECT_MODULES,)


@pytest.mark.slow
@pytest.mark.hf
def test_the_clis_export_gives_its_predictions_in_transformers(jigsaw_model):
  """--export_format=hf beside the SavedModel: transformers alone, in a process that
  imports nothing of the project, gives test_results.tsv's probabilities within 1e-4."""
  folder = os.path.join(jigsaw_model.result.export, "hf")
  assert "with a transformers folder %s" % folder in jigsaw_model.log
  with open(os.path.join(jigsaw_model.output_dir, "test_results.tsv")) as f:
    lines = f.read().splitlines()
  assert lines[0] == "id\tprobability_0\tprobability_1\tprediction"
  expected = [[float(v) for v in line.split("\t")[1:3]] for line in lines[1:]]
  got = run_in_hf(HF_PREDICT_FILE, {"folder": folder,
                                    "predict_file": os.path.join(JIGSAW, "test.csv")})
  assert len(got) == len(expected) == 33
  np.testing.assert_allclose(got, expected, atol=1e-4)


# The transformers side of the import: a random BertForSequenceClassification of
# BERT-Tiny's shape with three named classes, saved, and its probabilities for texts.
HF_MAKE_CLASSIFIER = """
import json, os, shutil, sys
import torch
from transformers import BertConfig, BertForSequenceClassification, BertTokenizer
job = json.loads(sys.stdin.read())
with open(job["bert_config"]) as f:
  values = json.load(f)
values.update(hidden_act="gelu", id2label={0: "neg", 1: "neutral", 2: "pos"},
              label2id={"neg": 0, "neutral": 1, "pos": 2}, layer_norm_eps=1e-12,
              problem_type="single_label_classification")
torch.manual_seed(3)
model = BertForSequenceClassification(BertConfig(**values)).eval()
with torch.no_grad():
  for p in model.parameters():
    p.add_(torch.randn_like(p) * 0.05)
model.save_pretrained(job["folder"])
tokenizer = BertTokenizer(job["vocab"], do_lower_case=True)
tokenizer.save_pretrained(job["folder"])
encoded = tokenizer(job["texts"], truncation=True, max_length=32, padding=True,
                    return_tensors="pt")
with torch.no_grad():
  print(json.dumps(torch.softmax(model(**encoded).logits, -1).tolist()))
"""


@pytest.mark.slow
@pytest.mark.hf
def test_a_transformers_classifier_predicts_and_trains_here(tmp_path):
  """tools.convert_hf_checkpoint brings the head; its flags.txt is all a run needs; the
  CLI's test_results.tsv has transformers' probabilities within 1e-4; fine-tuning goes
  on from it with no variable starting at random."""
  import csv
  with open(os.path.join(JIGSAW, "test.csv"), newline="", encoding="utf-8") as f:
    rows = list(csv.DictReader(f))[:12]
  texts = [row["comment_text"] for row in rows]
  folder = str(tmp_path / "hf")
  expected = run_in_hf(HF_MAKE_CLASSIFIER, {
      "bert_config": os.path.join(TINY, "bert_config.json"), "vocab": TINY_VOCAB,
      "folder": folder, "texts": texts})
  converted = str(tmp_path / "converted")
  done = subprocess.run([sys.executable, "-m", "tools.convert_hf_checkpoint", folder, converted],
                        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        universal_newlines=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  assert "a classification head over neg, neutral, pos" in done.stdout
  with open(os.path.join(converted, "flags.txt")) as f:
    flags = f.read().splitlines()
  assert flags[-3:] == ["--do_lower_case=True", "--head=classification",
                        "--labels=neg,neutral,pos"]
  data = tmp_path / "data"
  data.mkdir()
  with open(str(data / "test.csv"), "w", newline="", encoding="utf-8") as f:
    writer = csv.writer(f)
    writer.writerow(["id", "text"])
    writer.writerows([[row["id"], row["comment_text"]] for row in rows])
  output_dir = str(tmp_path / "out")
  run_flags("--flagfile=" + os.path.join(converted, "flags.txt"), "--task_name=csv",
            "--predict_file=" + str(data / "test.csv"), "--text_column=text",
            "--id_column=id", "--max_seq_length=32", "--do_predict",
            "--output_dir=" + output_dir)
  with open(os.path.join(output_dir, "test_results.tsv")) as f:
    lines = f.read().splitlines()
  assert lines[0] == "id\tprobability_neg\tprobability_neutral\tprobability_pos\tprediction"
  got = [[float(v) for v in line.split("\t")[1:4]] for line in lines[1:]]
  np.testing.assert_allclose(got, expected, atol=1e-4)

  # Fine-tuned further: every variable of the graph, the head too, from the checkpoint.
  from conftest import run_with_log
  from run_classifier import parse_flags
  with open(str(data / "train.csv"), "w", newline="", encoding="utf-8") as f:
    writer = csv.writer(f)
    writer.writerow(["text", "label"])
    writer.writerows([[text, ("neg", "neutral", "pos")[i % 3]] for i, text in enumerate(texts)])
  _, log = run_with_log(parse_flags([
      "run_classifier.py", "--flagfile=" + os.path.join(converted, "flags.txt"),
      "--task_name=csv", "--train_file=" + str(data / "train.csv"), "--text_column=text",
      "--label_column=label", "--max_seq_length=32", "--train_batch_size=4",
      "--num_train_steps=1", "--do_train", "--output_dir=" + str(tmp_path / "further")]))
  import re
  assert re.search(r"initialising (\d+) of \1 variables from %s" % re.escape(
      os.path.join(converted, "bert_model.ckpt")), log), log
  assert "start from random values" not in log
