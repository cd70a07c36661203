"""The time-to-quality benchmark: one seeded split for every code path, clear refusals, and
a held-out ROC-AUC computed from each path's own predictions (no timing is asserted)."""

import csv
import glob
import io
import json
import os
import random
import subprocess
import sys

import pytest

from conftest import IS_TF1, ROOT, pairwise_auc, sample_path, tiny_google_dir
from tools import time_to_quality as ttq

SAMPLE = sample_path("jigsaw_toxic_balanced", "comments.csv")  # 400 rows, sorted by label


def labelled_rows(count):
  return [("text %d" % i, str(i % 2)) for i in range(count)]


def test_split_is_a_seeded_shuffle_of_disjoint_rows():
  rows = labelled_rows(50)
  train, held_out = ttq.split_rows(rows, 30, 12, "rows.csv")
  expected = list(rows)
  random.Random(ttq.SPLIT_SEED).shuffle(expected)
  assert train == expected[:30] and held_out == expected[30:42]
  assert not set(train) & set(held_out)
  assert ttq.split_rows(rows, 30, 12, "rows.csv") == (train, held_out)  # the same every time


def test_a_label_sorted_file_still_gives_both_labels_to_each_part():
  rows = [("t%d" % i, "0") for i in range(200)] + [("u%d" % i, "1") for i in range(200)]
  train, held_out = ttq.split_rows(rows, 100, 100, "sorted.csv")
  for part in (train, held_out):
    counts = [sum(1 for _, label in part if label == c) for c in "01"]
    assert min(counts) >= 30, counts


@pytest.mark.parametrize("rows,train,held,message", [
    (labelled_rows(10), 8, 3, "rows.csv has 10 rows, fewer than --train_rows 8 + "
                              "--eval_rows 3; pass a larger file or smaller counts"),
    (labelled_rows(4) + [("x", "toxic")], 2, 2,
     "rows.csv row 5: label 'toxic'; the labels must be 0 or 1"),
    ([("t%d" % i, "1") for i in range(10)], 5, 5,
     "the train rows of rows.csv hold one label only"),
])
def test_unusable_data_is_refused_with_the_file_and_the_fix(rows, train, held, message):
  with pytest.raises(ttq.QualityError) as error:
    ttq.split_rows(rows, train, held, "rows.csv")
  assert str(error.value) == message


def test_a_missing_data_file_is_one_line_not_a_traceback(tmp_path):
  result = subprocess.run(
      [sys.executable, "-m", "tools.time_to_quality", "--data", str(tmp_path / "none.csv")],
      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
  assert result.returncode == 1
  assert result.stderr.strip() == ("time to quality: pass --data=a CSV of text,label rows "
                                   "(0/1, no header); no file %s" % (tmp_path / "none.csv"))


def test_fewer_training_rows_than_a_batch_are_refused_before_any_path_runs(tmp_path):
  data = str(tmp_path / "rows.csv")
  ttq.write_rows(labelled_rows(20), data)
  result = subprocess.run(
      [sys.executable, "-m", "tools.time_to_quality", "--data", data, "--train_rows", "10",
       "--eval_rows", "10", "--work_dir", str(tmp_path / "work")],
      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
  assert result.returncode == 1
  assert result.stderr.strip() == ("time to quality: 10 training rows make no whole batch "
                                   "of 32")
  assert not os.path.exists(str(tmp_path / "work"))


def test_probabilities_are_read_from_the_predictions_file(tmp_path):
  path = str(tmp_path / "test_results.tsv")
  with open(path, "w") as f:
    f.write("id\tprobability_0\tprobability_1\tprediction\n"
            "0\t0.25\t0.75\t1\n1\t0.875\t0.125\t0\n")
  assert ttq.probabilities_of("ours_tf2", path) == [0.75, 0.125]
  with open(str(tmp_path / "google.json"), "w") as f:
    json.dump({"probabilities": [0.5, 0.25]}, f)
  assert ttq.probabilities_of("google", str(tmp_path / "google.json")) == [0.5, 0.25]


def test_the_report_compares_every_path_with_googles(tmp_path):
  results = [dict(path="google", label="G", environment="TF 1", wall_seconds=300.0, auc=0.9),
             dict(path="ours_tf2", label="O", environment="TF 2", wall_seconds=100.0,
                  auc=0.903)]
  args = ttq.parse_args(["--data", "x.csv"])
  text = ttq.report(results, args, "a machine", "x.csv")
  assert results[1]["speedup_vs_google"] == pytest.approx(3.0)
  assert results[1]["auc_minus_google"] == pytest.approx(0.003)
  assert "| O | TF 2 | 100 | 3.00x | 0.9030 | +0.0030 |" in text
  assert "| G | TF 1 | 300 | 1.00x | 0.9000 | +0.0000 |" in text


@pytest.mark.slow
@pytest.mark.one_runtime("tf1")  # (where Google's path runs too: the comparison's reference)
def test_each_path_is_timed_and_scored_on_the_same_held_out_rows(tmp_path, tiny_checkpoint):
  paths = ["google", "ours_tf1"] if IS_TF1 else ["ours_tf2"]
  out_dir, work = str(tmp_path / "out"), str(tmp_path / "work")
  result = subprocess.run(
      [sys.executable, "-m", "tools.time_to_quality", "--data", SAMPLE, "--train_rows", "64",
       "--eval_rows", "48", "--seq", "32", "--batch", "16", "--learning_rate", "1e-3",
       "--paths", ",".join(paths), "--model_dir", tiny_google_dir(tmp_path, tiny_checkpoint),
       "--out_dir", out_dir, "--work_dir", work, "--peak_size", "256"],
      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
      timeout=900)
  assert result.returncode == 0, result.stdout[-3000:]
  assert "CPU (256x256, best of 5): float32 " in result.stdout  # (the host's peak, as asked)
  with io.open(os.path.join(work, "held_out.csv"), encoding="utf-8", newline="") as f:
    held_out = list(csv.reader(f))
  assert len(held_out) == 48
  positive = [label == "1" for _, label in held_out]
  with open(os.path.join(out_dir, "quality.csv")) as f:
    table = list(csv.DictReader(f))
  assert [r["path"] for r in table] == paths
  # Each path's checkpoints are gone once its predictions are read; the predictions stay.
  assert glob.glob(os.path.join(work, "**", "model.ckpt-*"), recursive=True) == []
  for row in table:
    outputs = os.path.join(work, "runs", "google.json" if row["path"] == "google" else
                           os.path.join(row["path"], "test_results.tsv"))
    scores = ttq.probabilities_of(row["path"], outputs)
    assert len(scores) == 48
    assert float(row["auc"]) == pytest.approx(pairwise_auc(scores, positive), abs=1e-12)
    assert float(row["wall_seconds"]) > 0
    assert "%s: %.0f s from start to predictions, held-out ROC-AUC %.4f" % (
        row["path"], float(row["wall_seconds"]), float(row["auc"])) in result.stdout
  if IS_TF1:  # Google's path is the reference of the comparison columns
    assert float(table[1]["speedup_vs_google"]) == pytest.approx(
        float(table[0]["wall_seconds"]) / float(table[1]["wall_seconds"]), rel=1e-9)
    assert float(table[1]["auc_minus_google"]) == pytest.approx(
        float(table[1]["auc"]) - float(table[0]["auc"]), abs=1e-12)
  with open(os.path.join(out_dir, "quality.md")) as f:
    assert "fine-tuned for 1 epoch(s) on 64 rows of `comments.csv`" in f.read()
