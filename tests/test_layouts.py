"""A file's layout is the file's: a model trained on one layout evaluates and predicts files
of any other layout of the same columns, with the same results, and its card records no
layout. Layouts: a header naming the columns in another order, no header with columns by
position, a TSV whose quoted texts hold newlines, and a semicolon-separated file."""

import csv
import io
import json
import os

import numpy as np
import pytest

from conftest import JIGSAW, TINY, TINY_VOCAB, copy_model, run_flags
from spec.model_card import LAYOUT_OPTIONS

# (reading a layout is the project's Python, the same on both runtimes: one runs it)
pytestmark = pytest.mark.one_runtime("tf1")

# (the Jigsaw sample's columns) -> how each layout writes them, and the flags that read it.
LAYOUTS = {
    "named": dict(suffix=".csv", delimiter=",", header=("rev_id", "toxic", "comment"),
                  flags=("--text_column=comment", "--label_column=toxic",
                         "--id_column=rev_id")),
    "positional": dict(suffix=".csv", delimiter=",", header=None,
                       flags=("--nohas_header", "--text_column=0", "--label_column=1")),
    "tsv": dict(suffix=".tsv", delimiter="\t", header=("comment", "id", "label"),
                flags=("--quoting=csv", "--text_column=comment", "--label_column=label",
                       "--id_column=id")),
    "semicolon": dict(suffix=".txt", delimiter=";", header=("id", "comment", "toxic"),
                      flags=("--delimiter=;", "--quoting=csv", "--text_column=comment",
                             "--label_column=toxic", "--id_column=id")),
}


def jigsaw_rows(name):
  """(id, text, toxic) of a Jigsaw sample file."""
  with io.open(os.path.join(JIGSAW, name), encoding="utf-8", newline="") as f:
    return [(row["id"], row["comment_text"], row.get("toxic", "0"))
            for row in csv.DictReader(f)]


def write_layout(folder, split, layout):
  """The Jigsaw sample's split in a layout; returns its path."""
  spec = LAYOUTS[layout]
  rows = jigsaw_rows({"train": "train.csv", "dev": "valid.csv", "test": "test.csv"}[split])
  order = ("text", "label", "id") if spec["header"] is None else tuple(
      {"rev_id": "id", "id": "id", "toxic": "label", "label": "label", "comment": "text"}[c]
      for c in spec["header"])
  path = os.path.join(folder, "%s_%s%s" % (layout, split, spec["suffix"]))
  with io.open(path, "w", encoding="utf-8", newline="") as f:
    writer = csv.writer(f, delimiter=spec["delimiter"])
    if spec["header"]:
      writer.writerow(spec["header"])
    for row_id, text, label in rows:
      writer.writerow([{"id": row_id, "text": text, "label": label}[c] for c in order])
  return path


def model_flags(checkpoint, output_dir):
  return ["--task_name=csv", "--bert_config_file=" + os.path.join(TINY, "bert_config.json"),
          "--vocab_file=" + TINY_VOCAB, "--init_checkpoint=" + checkpoint,
          "--output_dir=" + output_dir, "--max_seq_length=32", "--train_batch_size=8",
          "--eval_batch_size=8", "--predict_batch_size=8", "--learning_rate=1e-3"]


@pytest.fixture(scope="module")
def trained_on(tmp_path_factory, tiny_checkpoint):
  """{layout: the folder of a model trained 3 steps on the Jigsaw sample in that layout}
  for a headerless and a named layout; the headerless one is exported too."""
  data = str(tmp_path_factory.mktemp("layouts"))
  models = {}
  for layout in ("positional", "named"):
    folder = os.path.join(data, "model_" + layout)
    extra = ["--do_export"] if layout == "positional" else []
    run_flags(*(model_flags(tiny_checkpoint, folder) + list(LAYOUTS[layout]["flags"]) + [
        "--train_file=" + write_layout(data, "train", layout), "--do_train",
        "--num_train_steps=3", "--seed=1"] + extra))
    models[layout] = folder
  return data, models


def eval_and_predict(folder, data, layout, out):
  """Evaluates and predicts the Jigsaw sample in a layout with the model in folder, from its
  card alone (a copy of its checkpoints into out): (eval results, {id: probabilities})."""
  copy_model(folder, out)
  result = run_flags(*(["--output_dir=" + out, "--do_eval", "--do_predict",
                        "--eval_file=" + write_layout(data, "dev", layout),
                        "--predict_file=" + write_layout(data, "test", layout),
                        "--eval_batch_size=8", "--predict_batch_size=8"] +
                       list(LAYOUTS[layout]["flags"])))
  return result.eval, predictions_by_id(os.path.join(out, "test_results.tsv"))


def predictions_by_id(path):
  """{id: [probability_0, probability_1]} of a test_results.tsv (ids as the file's, or row
  numbers where it has none; both layouts' ids are mapped to the Jigsaw ids)."""
  with io.open(path, encoding="utf-8", newline="") as f:
    rows = list(csv.DictReader(f, delimiter="\t"))
  ids = [row_id for row_id, _, _ in jigsaw_rows("test.csv")]
  assert len(rows) == len(ids) == 33
  return {(row["id"] if row["id"] in ids else ids[int(row["id"])]):
          [float(row["probability_0"]), float(row["probability_1"])] for row in rows}


@pytest.mark.slow
@pytest.mark.parametrize("trained_layout, read", [
    ("positional", sorted(LAYOUTS)), ("named", ["positional", "named"])])
def test_a_model_reads_every_layout_of_its_columns(trained_on, trained_layout, read,
                                                    tmp_path):
  data, models = trained_on
  results = {layout: eval_and_predict(models[trained_layout], data, layout,
                                      str(tmp_path / layout))
             for layout in read}
  (base_eval, base_predictions) = results[trained_layout]
  assert base_eval["num_examples"] == 25
  for layout, (metrics, predictions) in results.items():
    assert metrics["num_examples"] == 25, layout
    for name in ("loss", "accuracy", "auc"):
      assert metrics[name] == pytest.approx(base_eval[name], abs=1e-6), (layout, name)
    assert sorted(predictions) == sorted(base_predictions), layout
    np.testing.assert_allclose([predictions[k] for k in sorted(predictions)],
                               [base_predictions[k] for k in sorted(predictions)], atol=1e-6)


@pytest.mark.slow
def test_the_card_records_no_layout(trained_on):
  _, models = trained_on
  for folder in models.values():
    with open(os.path.join(folder, "model_card.json")) as f:
      card = json.load(f)
    assert not set(LAYOUT_OPTIONS) & set(card["flags"]), folder
    assert card["label_columns"]  # (what the model's outputs are stays)


@pytest.mark.slow
def test_an_export_of_a_headerless_model_predicts_a_named_file(trained_on, tmp_path):
  data, models = trained_on
  export_root = os.path.join(models["positional"], "export")
  export = os.path.join(export_root, sorted(os.listdir(export_root))[-1])
  out = str(tmp_path / "scored")
  run_flags("--do_predict", "--saved_model=" + export, "--output_dir=" + out,
            "--predict_file=" + write_layout(data, "test", "named"),
            "--text_column=comment", "--id_column=rev_id")
  _, expected = eval_and_predict(models["positional"], data, "named", str(tmp_path / "cli"))
  scored = predictions_by_id(os.path.join(out, "test_results.tsv"))
  np.testing.assert_allclose([scored[k] for k in sorted(scored)],
                             [expected[k] for k in sorted(scored)], atol=1e-5)


@pytest.mark.slow
def test_a_run_that_reads_labels_names_its_own_files_label_column(trained_on):
  """A csv model's label column says where its training file kept the labels: an eval of
  another file must name its own (no card can know it)."""
  from spec.run_errors import FlagError
  data, models = trained_on
  with pytest.raises(FlagError) as error:
    run_flags("--output_dir=" + models["named"], "--do_eval", "--text_column=comment",
              "--eval_file=" + write_layout(data, "dev", "named"))
  assert str(error.value) == ("--task_name=csv needs --label_column (a column name, or a "
                              "0-based position with --nohas_header)")
