"""The pure parts of the benchmark's Hugging Face path (tools/bench_hf.py): its label
checks and schedule, which padded batches the steps consumed, the timing arithmetic and
the plain loop's weight decay (its window of batches is tools/windows.py's, tested in
test_windows.py). They run here without torch or transformers, which live in the
optional .venvs/hf environment that no test needs (but the hf tier's, at the end)."""

import os

import numpy as np
import pytest

from conftest import ROOT, modules_loaded_by
from tools import bench_hf


def test_a_part_of_the_split_with_one_label_is_refused():
  bench_hf.check_both_labels([0, 1, 1], "training", "f.csv")
  # The Jigsaw files here hold every 0 before every 1: their first rows are all 0.
  with pytest.raises(bench_hf.InputError) as error:
    bench_hf.check_both_labels([0, 0, 0], "training", "f.csv")
  assert str(error.value) == ("the training rows of f.csv all have label 0: shuffle the "
                              "file first (is it sorted by label?)")


def test_labels_other_than_0_and_1_are_refused():
  assert bench_hf.label_ids([("a", "1"), ("b", "0")], "f.csv") == [1, 0]
  with pytest.raises(bench_hf.InputError, match="f.csv: label 'toxic'"):
    bench_hf.label_ids([("a", "1"), ("b", "toxic")], "f.csv")


def test_schedule_trains_whole_batches_and_warms_up_a_tenth():
  assert bench_hf.schedule(4000, 32, 1) == (125, 12)
  assert bench_hf.schedule(200, 32, 1) == (6, 0)  # the partial batch of 8 is dropped
  assert bench_hf.schedule(200, 32, 2) == (12, 1)  # 12.5 steps
  assert bench_hf.schedule(250, 32, 2.0) == (15, 1)  # 15.6: into a third pass, as Google's
  with pytest.raises(bench_hf.InputError, match="no whole batch"):
    bench_hf.schedule(20, 32, 1)


def test_the_recorder_keeps_each_padded_batch_shape_in_order():
  recorder = bench_hf.PaddedBatchRecorder(
      lambda features: {"input_ids": np.zeros((len(features), max(features)))})
  assert recorder([3, 5])["input_ids"].shape == (2, 5)
  recorder([9, 1, 2])
  assert (recorder.rows, recorder.widths) == ([2, 3], [5, 9])


def test_consumed_batches_are_the_first_ones_collated():
  # The loader collated one batch ahead of the last step: it is not one the steps used.
  assert bench_hf.consumed([128, 51, 22, 97], 3) == [128, 51, 22]
  with pytest.raises(AssertionError, match="padded 2 batches for 3 steps"):
    bench_hf.consumed([128, 51], 3)


def a_clock(train_begin, first_step_begin, step_ends):
  clock = bench_hf.StepClock(len(step_ends))
  clock.train_begin, clock.first_step_begin, clock.step_ends = (
      train_begin, first_step_begin, list(step_ends))
  return clock


def test_speed_figures_measure_from_the_end_of_the_warm_up():
  clock = a_clock(100.0, 101.0, [102.0, 103.5, 104.0, 106.0, 107.0])
  widths = [10, 20, 30, 40, 50, 60]  # the last one collated ahead, never trained on
  figures = bench_hf.speed_figures(clock, widths, warmup=2, steps=3, batch=4)
  assert figures["measured_seconds"] == pytest.approx(3.5)  # 107 - 103.5
  assert figures["ms_per_step"] == pytest.approx(3500.0 / 3)
  assert figures["examples_per_sec"] == pytest.approx(3 * 4 / 3.5)
  assert figures["warmup_seconds"] == pytest.approx(3.5)  # 103.5 - 100
  assert figures["seq_lengths"] == [30, 40, 50]
  assert figures["mean_seq_length"] == pytest.approx(40.0)


def test_speed_figures_without_warm_up_measure_from_the_first_step():
  clock = a_clock(100.0, 101.0, [102.0, 104.0])
  figures = bench_hf.speed_figures(clock, [16, 32], warmup=0, steps=2, batch=8)
  assert figures["measured_seconds"] == pytest.approx(3.0)  # 104 - 101
  assert figures["warmup_seconds"] == 0.0
  assert figures["seq_lengths"] == [16, 32]


def test_speed_figures_refuse_a_run_of_the_wrong_length():
  clock = a_clock(100.0, 101.0, [102.0, 104.0])
  with pytest.raises(AssertionError, match="ran 2 steps, expected 3"):
    bench_hf.speed_figures(clock, [16, 32, 48], warmup=1, steps=2, batch=8)


def test_the_clock_reports_progress_every_so_many_steps_and_at_the_end(capsys):
  clock = bench_hf.StepClock(5, progress_every=2, label="time_to_quality")
  clock.began_training()
  for _ in range(5):
    clock.began_step()
    clock.ended_step()
  lines = capsys.readouterr().out.splitlines()
  assert [line.split(",")[0] for line in lines] == [
      "time_to_quality: step 2/5", "time_to_quality: step 4/5", "time_to_quality: step 5/5"]
  assert clock.first_step_begin <= clock.step_ends[0]  # only the first step's start is kept


def test_weight_decay_spares_biases_and_layer_norms_as_the_trainer_does():
  names = ["bert.embeddings.word_embeddings.weight", "bert.embeddings.LayerNorm.weight",
           "bert.embeddings.LayerNorm.bias", "bert.encoder.layer.0.attention.self.query.weight",
           "bert.encoder.layer.0.attention.self.query.bias", "bert.pooler.dense.weight",
           "classifier.weight", "classifier.bias", "head.scale"]
  layer_norms = {"bert.embeddings.LayerNorm.weight", "bert.embeddings.LayerNorm.bias",
                 "head.scale"}  # (by their module's type, whatever their name)
  decayed, exempt = bench_hf.split_for_weight_decay(names, layer_norms)
  assert decayed == ["bert.embeddings.word_embeddings.weight",
                     "bert.encoder.layer.0.attention.self.query.weight",
                     "bert.pooler.dense.weight", "classifier.weight"]
  assert exempt == ["bert.embeddings.LayerNorm.weight", "bert.embeddings.LayerNorm.bias",
                    "bert.encoder.layer.0.attention.self.query.bias", "classifier.bias",
                    "head.scale"]


def test_speed_mode_takes_the_plain_loop_as_a_third_order():
  common = ["--data", "d.csv", "--vocab", "v.txt"]
  assert bench_hf.parse_args(common).order == "random"
  assert bench_hf.parse_args(common + ["--order", "loop"]).order == "loop"
  with pytest.raises(SystemExit):
    bench_hf.parse_args(common + ["--order", "sorted"])


def test_the_device_is_named_as_the_tensorflow_paths_name_a_cpu():
  from pipeline.machine import describe_device
  ours = describe_device(False)
  if ours["kind"] != "CPU":
    pytest.skip("TensorFlow computes on a %s here" % ours["kind"])
  assert bench_hf.describe_cpu() == ours


def test_time_to_quality_reads_the_two_files_the_benchmark_wrote():
  files = bench_hf.parse_args(["--time_to_quality", "--model_dir", "m", "--train_file",
                               "t.csv", "--eval_file", "e.csv"])
  assert (files.train_file, files.eval_file, files.predict_batch) == ("t.csv", "e.csv", 64)
  for wrong in (["--time_to_quality", "--model_dir", "m", "--train_file", "t.csv"],
                ["--time_to_quality", "--train_file", "t.csv", "--eval_file", "e.csv"],
                ["--data", "d.csv"]):  # speed mode needs --vocab
    with pytest.raises(SystemExit):
      bench_hf.parse_args(wrong)


def test_importing_it_loads_neither_tensorflow_nor_torch():
  # The .venvs/hf environment has no TensorFlow; the TensorFlow ones have no torch.
  assert modules_loaded_by("tools.bench_hf", ("tensorflow", "torch", "transformers")) == "[]"


def test_the_optional_requirements_pin_exact_versions():
  with open(os.path.join(ROOT, "tools", "requirements-hf.txt")) as f:
    pins = [line.strip() for line in f if line.strip() and not line.startswith("#")]
  assert {pin.split("==")[0] for pin in pins} >= {"torch", "transformers", "accelerate",
                                                   "numpy", "safetensors"}
  assert all(pin.count("==") == 1 for pin in pins), pins


@pytest.mark.slow
@pytest.mark.hf
@pytest.mark.one_runtime("tf2")  # (its subject is PyTorch, in its own environment)
def test_pytorchs_matmul_peaks_are_measured_as_tensorflows(tmp_path):
  """In the Hugging Face environment: PyTorch's float32 peak, and its bfloat16 one exactly
  where this CPU has bfloat16 units, named as the benchmark's machine line names
  TensorFlow's (so that the Hugging Face rows' fraction of peak is of their own
  framework's)."""
  import json
  import subprocess
  from pipeline.machine import bf16_instructions
  from test_hf_export import hf_environment
  from tools.benchmark import environment_label, peaks_sentence
  out = tmp_path / "peak.json"
  done = subprocess.run([hf_environment(), "-m", "tools.bench_hf", "--measure_peak", "--out",
                         str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        universal_newlines=True, timeout=600)
  assert done.returncode == 0, done.stdout[-3000:]
  peak = json.loads(out.read_text())
  assert peak["matmul_peak_gflops"] > 1
  units = bf16_instructions()
  assert (peak["bf16_matmul_peak_gflops"] is not None) == bool(units)
  assert environment_label(peak).startswith("PyTorch %s / transformers " % peak["torch"])
  sentence = peaks_sentence(peak)
  assert sentence.startswith("matmul peak on PyTorch ")
  assert ("bfloat16 %.1f GFLOP/s" % peak["bf16_matmul_peak_gflops"] if units else
          "bfloat16 not measured: no bfloat16 matmul instructions") in sentence
