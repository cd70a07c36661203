"""The benchmark runs end to end on a fresh clone's data and writes a table, a CSV and a plot
whose figures agree with each other and with the FLOP count of the model (no timing is
asserted)."""

import csv
import glob
import os
import struct
import subprocess
import sys

import pytest

from conftest import IS_TF1, ROOT, TINY_VOCAB

SAMPLE_ROWS = 400  # tests/data/datasets/jigsaw_toxic_balanced/comments.csv
PEAK_SIZE = 256  # (the matmul peak's matrices: quicker than the default 2048 measures)


def bert_tiny_train_gflops(seq):
  """Forward + backward (3x forward) multiply-add FLOPs of BERT-Tiny (2 layers, hidden 128,
  feed-forward 512) with a 2-way head, every layer over all seq tokens: Google's path."""
  h, i, layers = 128, 512, 2
  per_layer = seq * (4 * h * h + 2 * h * i) + 2 * seq * seq * h
  macs = layers * per_layer + h * h + 2 * h
  return 3 * 2 * macs / 1e9


def png_size(path):
  with open(path, "rb") as f:
    head = f.read(24)
  assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
  return struct.unpack(">II", head[16:24])


def _benchmark_command(work_dir, *extra):
  """The benchmark on this runtime, BERT-Tiny at 32, on the committed sample (no --data)."""
  runtime = "tf1" if IS_TF1 else "tf2"
  return [sys.executable, "-m", "tools.benchmark", "--vocab", TINY_VOCAB, "--models", "tiny",
          "--seq_lengths", "32", "--steps", "2", "--warmup_steps", "1", "--batch_size", "8",
          "--runtimes", runtime, "--work_dir", work_dir, "--featurise_repeats", "1",
          "--peak_size", str(PEAK_SIZE)] + list(extra)


def _run(command):
  return subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        universal_newlines=True, timeout=900)


@pytest.fixture(scope="module")
def benchmarked(tmp_path_factory):
  """(the benchmark's output folder, its work folder, its stdout): Google's code path and
  ours on this runtime (ours alone on TF 2.15, where Google's modeling cannot run)."""
  root = tmp_path_factory.mktemp("benchmark")
  out_dir, work_dir = str(root / "bench"), str(root / "work")
  result = _run(_benchmark_command(work_dir, "--variants", "google,ours", "--out_dir", out_dir))
  assert result.returncode == 0, result.stdout[-3000:]
  return out_dir, work_dir, result.stdout


@pytest.mark.slow
@pytest.mark.one_runtime("tf1")  # (Google's path and ours; TF 2.15's path is test_cli's)
def test_benchmark_on_the_committed_sample(benchmarked):
  runtime = "tf1" if IS_TF1 else "tf2"
  out_dir, work_dir, stdout = benchmarked
  with open(os.path.join(out_dir, "results.csv")) as f:
    table = list(csv.DictReader(f))
  from pipeline.machine import bf16_instructions
  # (On a CPU with bfloat16 units `ours` trains in bfloat16 where the runtime computes in
  # it, and the same run in float32 is beside it.)
  fp32_row = ["ours_fp32"] if bf16_instructions() else []
  assert [r["variant"] for r in table] == (["google", "ours"] if IS_TF1 else ["ours"]) + fp32_row
  # The measured runs' checkpoints are gone (MiniLM's would be half a gigabyte a run).
  assert glob.glob(os.path.join(work_dir, "**", "model.ckpt-*"), recursive=True) == []
  # The host's peak is of the matrices the command asked for, and says so.
  environment = table[0]["environment"].split(" / CPU")[0]
  assert "matmul peak on %s / CPU (256x256, best of 5): float32 " % environment in stdout
  # This machine has no GPU and the command names no TPU: one line each says so.
  assert ("GPU rows (float16, XLA, one row per GPU count) skipped: TensorFlow sees no GPU "
          "here (%s)" % runtime) in stdout
  assert ("TPU row (fixed padding, bfloat16) skipped: no --tpu_name given (pass --tpu_name "
          "NAME --tpu_work_dir gs://bucket/folder)") in stdout
  for row in table:
    assert (row["model"], row["seq"], row["batch"], row["steps"]) == ("tiny", "32", "8", "2")
    assert row["device"].endswith(", %d cores" % os.cpu_count())  # the CPU it ran on
    assert row["environment"].endswith(" / CPU") and row["scaling_efficiency"] == ""
    rate, seconds = float(row["examples_per_sec"]), float(row["wall_seconds"])
    assert rate == pytest.approx(2 * 8 / seconds, rel=1e-6)
    assert float(row["ms_per_step"]) == pytest.approx(1000 * seconds / 2, rel=1e-6)
    gflops = float(row["train_gflops_per_example"])
    assert float(row["gflops_per_sec"]) == pytest.approx(gflops * rate, rel=1e-6)
    peak = row["bf16_matmul_peak_gflops" if row["precision"] == "bfloat16" else
               "matmul_peak_gflops"]  # (a row's fraction is of its own precision's peak)
    assert row["peak_precision"] == row["precision"]
    assert row["matmul_peak_size"] == str(PEAK_SIZE)  # (tools/host_ratios compares 2048s)
    assert float(row["fraction_of_peak"]) == pytest.approx(
        float(row["gflops_per_sec"]) / float(peak), rel=1e-6)
    # The floor: the same steps' matrix multiplies alone, timed after training.
    floor = float(row["matmul_floor_seconds"])
    assert 0 < floor and float(row["step_over_matmul_floor"]) == pytest.approx(
        seconds / floor, rel=1e-6)
    if row["variant"] == "google":  # fixed padding: every step computes all 32 positions
      assert float(row["mean_seq_length"]) == float(row["epoch_mean_seq_length"]) == 32
      assert gflops == pytest.approx(bert_tiny_train_gflops(32), rel=1e-9)
    else:  # dynamic padding and the [CLS]-only last layer: fewer FLOPs than the full model
      assert 3 <= float(row["mean_seq_length"]) <= 32
      assert 3 <= float(row["epoch_mean_seq_length"]) <= 32  # (its window's pool)
      assert gflops < bert_tiny_train_gflops(float(row["mean_seq_length"]))
  if IS_TF1:
    assert float(table[1]["speedup_vs_google"]) == pytest.approx(
        float(table[1]["examples_per_sec"]) / float(table[0]["examples_per_sec"]), rel=1e-6)
    assert "%.2fx Google's" % float(table[1]["speedup_vs_google"]) in stdout

  with open(os.path.join(out_dir, "results.md")) as f:
    markdown = f.read()
  assert "Data: `comments.csv`, %d rows. Batch 8; 2 measured steps after 1 warm-up" % (
      SAMPLE_ROWS) in markdown
  for row in table:
    assert "| 8 | %.1f | %.1f |" % (float(row["wall_seconds"]), float(row["examples_per_sec"])
                                    ) in markdown
  # (GPU, TPU, and on a CPU without bfloat16 units the bfloat16 rows)
  assert markdown.count("skipped") == 2 + (not bf16_instructions())
  assert ("bfloat16 rows skipped: this CPU has no bfloat16 matmul instructions" in markdown
          ) == (not bf16_instructions())
  ours = next(r for r in table if r["variant"] == "ours")
  assert ("this project, dynamic padding%s (%s) tiny 32: %.1f (epoch %.1f)" % (
      ", bfloat16" if ours["precision"] == "bfloat16" else "",
      ours["environment"].split(" / ")[0], float(ours["mean_seq_length"]),
      float(ours["epoch_mean_seq_length"]))) in markdown
  assert "Featurisation of all %d rows" % SAMPLE_ROWS in markdown
  assert "Matrix-multiply peak (float32, 256x256, best of 5): %s / CPU " % environment in markdown
  featurisation = [line for line in markdown.splitlines() if "--tokenizer=" in line]
  assert len(featurisation) == 3  # python, auto, auto with 2 processes
  if IS_TF1:  # every row's features were compared with Google's records, and are equal
    assert all(line.endswith("| %d of %d |" % (SAMPLE_ROWS, SAMPLE_ROWS))
               for line in featurisation), featurisation
  # One model's panel: 4.6 x 4.6 inches at 110 dpi.
  assert png_size(os.path.join(out_dir, "results.png")) == (505, 505)


@pytest.mark.slow
@pytest.mark.one_runtime("tf1")  # (the worker's handling of its folder is the same on both)
def test_a_second_measurement_in_one_work_folder_starts_afresh(tmp_path):
  """The benchmark gives each run of a code path the same work folder: a second
  measurement there neither reuses the first one's records nor stops at once on its
  final checkpoint."""
  import json
  from tools import bench_worker
  from tools.benchmark import DEFAULT_DATA
  work, out = tmp_path / "work", tmp_path / "result.json"
  args = ["--impl", "ours", "--model", "tiny", "--seq", "32", "--batch", "8", "--steps", "2",
          "--warmup", "1", "--dynamic_padding", "--floor_repeats", "0", "--data", DEFAULT_DATA,
          "--vocab", TINY_VOCAB, "--workdir", str(work), "--out", str(out)]
  for attempt in range(2):
    if attempt:
      (work / "left_by_the_first_run").write_text(u"")
    bench_worker.main(args)  # (its own assertion: every step of 1 + 2 ran)
    result = json.loads(out.read_text())
    assert (result["steps"], result["warmup_steps"], result["featurise_rows"]) == (2, 1, 400)
    assert sorted(os.listdir(str(work))) == ["train.tf_record", "train.tf_record.lock",
                                             "train.tf_record.meta.json"]


@pytest.mark.parametrize("tool", ["benchmark", "time_to_quality"])
def test_the_peaks_matrix_size_is_a_whole_number_the_sentence_names(tool, capsys):
  """--peak_size (default 2048) is the side of the peak's matrices; the host's sentence
  names it, and a peak measured before the option existed was measured at 2048."""
  import importlib
  from pipeline.machine import PEAK_SIZE as default
  from tools.benchmark import peaks_sentence
  module = importlib.import_module("tools." + tool)
  extra = [] if tool == "benchmark" else ["--data", "x.csv"]
  assert default == 2048 and module.parse_args(extra).peak_size == 2048
  assert module.parse_args(extra + ["--peak_size", "512"]).peak_size == 512
  for wrong in ("0", "-3", "1.5", "big"):
    with pytest.raises(SystemExit):
      module.parse_args(extra + ["--peak_size", wrong])
    assert "argument --peak_size: %r is not a whole number of at least 1" % wrong in (
        capsys.readouterr().err)
  peak = {"tensorflow": "2.15.1", "python": "3.11.7", "device": {"kind": "CPU"},
          "matmul_peak_gflops": 100.0, "bf16_note": "no bfloat16 matmul instructions"}
  for size, stated in ((None, 2048), (512, 512)):
    if size:
      peak["peak_size"] = size
    assert "(%dx%d, best of 5): float32 100.0 GFLOP/s" % (stated, stated) in peaks_sentence(peak)


@pytest.mark.parametrize("gpus,tpu,rows,notes", [
    ({"tf1": 0, "tf2": 0}, None, [], ["GPU", "TPU"]),
    ({"tf1": 1, "tf2": 1}, None, ["ours_fp16", "ours_xla"], ["TPU"]),
    ({"tf1": 0, "tf2": 4}, "my-tpu",
     ["ours_fp16", "ours_xla", "ours_2gpus", "ours_4gpus", "ours_tpu"], []),
    ({"tf2": 6}, None, ["ours_fp16", "ours_xla", "ours_2gpus", "ours_4gpus"], ["TPU"]),
])
def test_the_devices_found_choose_the_extra_rows(gpus, tpu, rows, notes):
  from tools.benchmark import device_variants, gpu_count_of, label_of
  variants, skipped = device_variants(gpus, tpu)
  assert variants == rows
  assert [note.split(" ")[0] for note in skipped] == notes
  assert (gpu_count_of("ours_4gpus"), gpu_count_of("ours_fp16")) == (4, None)
  assert label_of("ours_4gpus") == "this project, dynamic padding, 4 GPUs"


def test_hf_names_every_hugging_face_path_and_unknown_variants_are_refused(capsys):
  from tools.benchmark import HF_VARIANTS, requested_variants
  assert requested_variants("google,hf,ours") == [
      "google", "hf_random", "hf_grouped", "hf_loop", "hf_grouped_bf16", "hf_loop_bf16", "ours"]
  assert requested_variants("hf_grouped,hf") == ["hf_grouped", "hf_random", "hf_loop",
                                                 "hf_grouped_bf16", "hf_loop_bf16"]
  assert requested_variants("ours,ours_2gpus") == ["ours", "ours_2gpus"]
  # A CPU without bfloat16 instructions: "hf" leaves the bfloat16 rows out, and says so;
  # named, one still runs. With them (or unknown), "hf" names all five.
  assert requested_variants("google,hf", bf16_units=[]) == [
      "google", "hf_random", "hf_grouped", "hf_loop"]
  assert "Hugging Face's bfloat16 rows skipped: this CPU has no bfloat16 matmul " \
      "instructions" in capsys.readouterr().out
  assert requested_variants("hf_loop_bf16,hf", bf16_units=[]) == [
      "hf_loop_bf16", "hf_random", "hf_grouped", "hf_loop"]
  assert requested_variants("hf", bf16_units=["avx512_bf16"]) == list(HF_VARIANTS)
  assert capsys.readouterr().out == "Hugging Face's bfloat16 rows skipped: this CPU has no " \
      "bfloat16 matmul instructions (AVX512_BF16, AMX_BF16), where PyTorch emulates them far " \
      "slower than float32; name hf_grouped_bf16 or hf_loop_bf16 in --variants to run them\n"
  with pytest.raises(SystemExit) as error:
    requested_variants("ours,fast")
  assert str(error.value).startswith("benchmark: unknown variant 'fast'; known: hf, google, ")


def measured_row(variant, rate, environment="TF 2.15.1 / Python 3.11.7 / CPU", device="CPU"):
  return dict(variant=variant, examples_per_sec=rate, environment=environment,
              device={"kind": device})


def test_speedups_are_over_google_and_the_best_hugging_face_path():
  from tools.benchmark import add_ratios
  rows = [measured_row("google", 10.0), measured_row("hf_random", 12.0),
          measured_row("hf_grouped", 20.0), measured_row("hf_loop", 25.0),
          measured_row("ours", 50.0), measured_row("ours_fixed", 30.0),
          measured_row("ours_2gpus", 80.0)]
  add_ratios(rows)
  by_variant = {r["variant"]: r for r in rows}
  assert by_variant["ours"]["speedup_vs_hf"] == pytest.approx(2.0)  # over the loop, the fastest
  # Hugging Face's best in either precision: its bfloat16 loop, where that is faster.
  with_bf16 = [measured_row("hf_loop", 25.0), measured_row("hf_loop_bf16", 40.0),
               measured_row("ours", 50.0)]
  add_ratios(with_bf16)
  assert with_bf16[2]["speedup_vs_hf"] == pytest.approx(1.25)
  assert by_variant["ours_fixed"]["speedup_vs_google"] == pytest.approx(3.0)
  assert by_variant["ours_2gpus"]["scaling_efficiency"] == pytest.approx(0.8)
  # A GPU row is not compared with Hugging Face on the CPU.
  gpu_rows = [measured_row("hf_grouped", 20.0), measured_row("ours", 500.0, device="GPU")]
  add_ratios(gpu_rows)
  assert gpu_rows[1]["speedup_vs_hf"] is None
  for other in ("google", "hf_random", "hf_grouped", "hf_loop"):  # this project's only
    assert by_variant[other]["speedup_vs_hf"] is None
    assert by_variant[other]["speedup_vs_google"] is None


def test_a_cpu_with_bfloat16_units_adds_the_float32_row_beside_this_projects():
  """There TF 2.15's `ours` trains in bfloat16 as a run does: `ours_fp32` is the same run
  in float32, and `ours` is held to it; elsewhere one note says why there is no such row."""
  from tools.benchmark import add_ratios, precision_variants, row_label, summarise_runs
  assert precision_variants(["google", "ours"], ["amx_bf16"], ["tf1", "tf2"]) == (
      ["ours_fp32"], [])
  assert precision_variants(["google"], ["amx_bf16"], ["tf1", "tf2"]) == ([], [])
  assert precision_variants(["ours"], ["amx_bf16"], ["tf1"]) == (["ours_fp32"], [])
  assert precision_variants(["ours"], ["amx_bf16"], ["hf"]) == ([], [])
  assert precision_variants(["ours"], [], ["tf2"]) == ([], [
      "bfloat16 rows skipped: this CPU has no bfloat16 matmul instructions (AVX512_BF16, "
      "AMX_BF16), so this project trains in float32 here"])
  tf1 = "TF 1.15.5 / Python 3.7.16 / CPU"
  rows = [dict(measured_row("ours", 132.0), precision="bfloat16"),
          dict(measured_row("ours_fp32", 60.0), precision="float32"),
          dict(measured_row("ours", 50.0, tf1), precision="float32")]
  add_ratios(rows)
  assert rows[0]["speedup_vs_fp32"] == pytest.approx(2.2)
  assert rows[1]["speedup_vs_fp32"] is None and rows[2]["speedup_vs_fp32"] is None
  assert row_label(rows[0]) == "this project, dynamic padding, bfloat16"
  assert row_label(rows[1]) == "this project, dynamic padding, float32"
  assert row_label(rows[2]) == "this project, dynamic padding"
  # A row's fraction of the peak is of its own precision's peak.
  env = rows[0]["environment"]
  versions = dict(tensorflow="2.15.1", python="3.11.7")  # (what a worker reports)
  rows[0].update(versions)
  rows[1].update(versions)
  run = dict(rows[0], measured_seconds=2.0, train_flops_per_example=1e9, gflops_per_sec=800.0)
  r = summarise_runs([run], "ours", {env: 400.0}, {env: 1600.0})
  assert (r["fraction_of_peak"], r["peak_precision"]) == (pytest.approx(0.5), "bfloat16")
  run = dict(rows[1], measured_seconds=2.0, train_flops_per_example=1e9, gflops_per_sec=200.0)
  r = summarise_runs([run], "ours_fp32", {env: 400.0}, {env: 1600.0})
  assert (r["fraction_of_peak"], r["peak_precision"]) == (pytest.approx(0.5), "float32")
  r = summarise_runs([dict(run, precision="bfloat16")], "ours", {env: 400.0}, {env: None})
  assert (r["fraction_of_peak"], r["peak_precision"]) == (None, None)  # (no bfloat16 peak)


def test_the_dynamic_rows_lengths_are_shown_beside_their_epochs():
  from tools.benchmark import lengths_note
  torch = "PyTorch 2.5.1 / transformers 4.46.3 / Python 3.11.7 / CPU"
  rows = [dict(measured_row("hf_grouped", 20.0, torch), model="tiny", seq=128,
               mean_seq_length=86.2, epoch_mean_seq_length=54.31, dynamic_padding=True),
          dict(measured_row("hf_loop", 25.0, torch), model="tiny", seq=128,
               mean_seq_length=55.0, epoch_mean_seq_length=54.3, dynamic_padding=True),
          dict(measured_row("ours", 50.0), model="tiny", seq=128, mean_seq_length=59.8,
               epoch_mean_seq_length=59.14, dynamic_padding=True),
          dict(measured_row("ours_fixed", 30.0), model="tiny", seq=128, mean_seq_length=128,
               epoch_mean_seq_length=128, dynamic_padding=False),
          dict(measured_row("hf_random", 12.0, torch), model="tiny", seq=128,
               mean_seq_length=110.5, dynamic_padding=True)]
  assert lengths_note(rows) == (
      "Dynamic padding, mean padded length of the measured steps against whole epochs of "
      "the same input pipeline or sampler: Hugging Face Trainer, group_by_length "
      "(PyTorch 2.5.1) tiny 128: 86.2 (epoch 54.3); Hugging Face, plain PyTorch loop, "
      "length-grouped (PyTorch 2.5.1) tiny 128: 55.0 (epoch 54.3); this project, dynamic "
      "padding (TF 2.15.1) tiny 128: 59.8 (epoch 59.1).")
  # Fixed padding (both --seq) is left out, as are rows of an older worker without the
  # epoch's figure:
  assert lengths_note(rows[3:]).endswith("or sampler: not reported.")


def worker_args(**values):
  import argparse
  defaults = dict(impl="ours", dynamic_padding=True, tpu_name=None, seq=32, batch=2,
                  warmup=1, steps=2, threads=None)
  return argparse.Namespace(**dict(defaults, **values))


def test_only_our_dynamic_padding_off_a_tpu_trains_on_a_window():
  from tools.bench_worker import measured_input, windowed
  assert windowed(worker_args())
  assert not windowed(worker_args(dynamic_padding=False))
  assert not windowed(worker_args(impl="google"))  # (Google's path always pads to --seq)
  assert not windowed(worker_args(tpu_name="my-tpu"))
  stream = object()  # the run's own input_fn: kept, with --seq as its every batch's length
  for args, epoch_mean in [(worker_args(dynamic_padding=False), 32),
                           (worker_args(impl="google"), 32),
                           (worker_args(tpu_name="my-tpu"), None)]:
    assert measured_input(args, stream, 400, 1) == (
        stream, None, dict(epoch_mean_seq_length=epoch_mean))


def test_the_measured_lengths_are_the_windows_measured_batches():
  from tools.bench_worker import measured_lengths
  args = worker_args(warmup=1, steps=2, batch=8)
  # No window: the lengths the steps computed, of a global batch each; --seq unread.
  assert measured_lengths(args, [20, 31, 17]) == ([31, 17], 8)
  assert measured_lengths(args, [20, 31, 17], replicas=2) == ([31, 17], 16)
  assert measured_lengths(args, []) == ([32, 32], 8)
  # A window on one device: its batches, which the steps must have computed.
  assert measured_lengths(args, [20, 31, 17], [20, 31, 17]) == ([31, 17], 8)
  with pytest.raises(AssertionError, match=r"the steps computed lengths \[20, 17, 31\], "
                     r"not the window's \[20, 31, 17\]"):
    measured_lengths(args, [20, 17, 31], [20, 31, 17])
  # Two GPUs: every replica's batch of --batch rows (the hook sees one replica's).
  assert measured_lengths(args, [20, 17, 12], [20, 31, 17, 9, 12, 30], replicas=2) == (
      [17, 9, 12, 30], 8)


def shuffled_widths_input_fn(widths):
  """An input_fn of batches of params['batch_size'] rows, whose widths are these in a
  seeded shuffle (seed 1, as the project's training input_fn seeds its shuffle: the order
  depends on the graph's seed too), reshuffled at each repetition."""
  import tensorflow.compat.v1 as tf

  def input_fn(params):
    rows = params["batch_size"]
    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(widths)).shuffle(
        len(widths), seed=1).repeat()
    return dataset.map(lambda width: {"input_ids": tf.fill([rows, width], width),
                                      "label_ids": tf.zeros([rows], tf.int32)})

  return input_fn


def widths_trained_on(input_fn, model_dir, steps, batch=2):
  """The widths of the batches measured_estimator trains on, step by step, reading
  input_fn (a model of one weight, the length tensor our model_fn names)."""
  import tensorflow.compat.v1 as tf
  from modeling.model_fn import SEQ_LENGTH_NAME
  from tools.bench_worker import TimingHook, measured_estimator

  def model_fn(features, labels, mode, params):
    weight = tf.get_variable("weight", [], initializer=tf.zeros_initializer())
    tf.identity(tf.shape(features["input_ids"])[1], name=SEQ_LENGTH_NAME)
    loss = weight * tf.cast(tf.reduce_sum(features["input_ids"]), tf.float32)
    step = tf.assign_add(tf.train.get_or_create_global_step(), 1)
    return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=step)

  timing = TimingHook(SEQ_LENGTH_NAME)
  estimator = measured_estimator(model_fn, model_dir, batch)
  estimator.train(input_fn, max_steps=steps, hooks=[timing.as_session_run_hook()])
  return timing.seq_lengths


def test_the_pool_is_what_the_estimator_trains_on_and_the_window_is_fed_as_drawn(tmp_path):
  from tools import bench_worker
  input_fn = shuffled_widths_input_fn(list(range(1, 25)))
  pool, types, shapes = bench_worker.read_batches(input_fn, 2, 24)
  widths = [bench_worker.width_of(batch) for batch in pool]
  assert sorted(widths) == list(range(1, 25))
  assert all(batch["input_ids"].shape == (2, width) and batch["label_ids"].shape == (2,)
             for batch, width in zip(pool, widths))
  # The same batches as the Estimator's own graph draws (seeded by its RunConfig):
  assert widths_trained_on(input_fn, str(tmp_path / "stream"), 6) == widths[:6]
  # A window is trained on as given, and ends training when it runs out.
  window = [pool[k] for k in (5, 0, 17, 3)]
  fed = bench_worker.window_input_fn(window, types, shapes)
  assert widths_trained_on(fed, str(tmp_path / "window"), 10) == [widths[k]
                                                                 for k in (5, 0, 17, 3)]
  with pytest.raises(ValueError, match="the window's batches hold 2 rows; the Estimator "
                     "asks for 4"):
    widths_trained_on(fed, str(tmp_path / "wider"), 4, batch=4)


def test_the_window_is_drawn_from_whole_epochs_of_the_pipelines_batches():
  from tools import bench_worker
  from tools.windows import stratified_window
  args = worker_args(batch=2, warmup=1, steps=2)
  # 10 rows: 5 batches an epoch; 16 for 2 measured steps (8 each) take 4 epochs' worth.
  widths = [w % 7 + 1 for w in range(30)]
  pool, _, _ = bench_worker.read_batches(shuffled_widths_input_fn(widths), 2, 20)
  pool_widths = [bench_worker.width_of(batch) for batch in pool]
  window, _, _, figures = bench_worker.draw_window(shuffled_widths_input_fn(widths), 10, args)
  chosen = stratified_window(pool_widths, 1, 2, seed=1)
  assert [bench_worker.width_of(batch) for batch in window] == [pool_widths[k] for k in chosen]
  assert figures == dict(epoch_mean_seq_length=sum(pool_widths) / 20.0, epochs_sampled=4,
                         epoch_batches=5)
  # Two GPUs: a batch for each, every step.
  window, _, _, figures = bench_worker.draw_window(shuffled_widths_input_fn(widths), 10, args,
                                                   replicas=2)
  assert len(window) == 6 and figures["epochs_sampled"] == 7  # 32 needed: 7 epochs (35)


def test_a_hugging_face_row_gets_its_flops_from_the_lengths_it_computed():
  from tools.benchmark import add_flops, environment_label
  row = dict(model="tiny", batch=8, steps=2, seq_lengths=[32, 16], measured_seconds=0.5,
             python="3.11.7", torch="2.5.1", transformers="4.46.3", device={"kind": "CPU"})
  add_flops(row, pooled_only=False)  # every layer over every token, as its model computes
  per_example = (bert_tiny_train_gflops(32) + bert_tiny_train_gflops(16)) / 2
  assert row["train_flops_per_example"] / 1e9 == pytest.approx(per_example, rel=1e-9)
  assert row["gflops_per_sec"] == pytest.approx(per_example * 16 / 0.5, rel=1e-9)
  assert environment_label(row) == "PyTorch 2.5.1 / transformers 4.46.3 / Python 3.11.7 / CPU"


def test_the_benchmark_rows_must_be_text_and_label(tmp_path):
  from tools import bench_worker
  path = tmp_path / "rows.csv"
  path.write_text(u'"a text, with a comma",1\n\nb,0\n')
  assert bench_worker.read_rows(str(path), 0) == [("a text, with a comma", "1"), ("b", "0")]
  path.write_text(u'a,1\n\nc,0,2\n')  # (the blank line is csv row 2)
  with pytest.raises(ValueError) as error:
    bench_worker.read_rows(str(path), 0)
  assert str(error.value) == ("%s row 3 has 3 columns; the rows must be text,label (quote a "
                              "text that holds commas)" % path)


def command_of(tool):
  """The main() of a benchmark command that checks its inputs, and its messages' prefix."""
  from tools import benchmark, profile_step
  return {"benchmark": (benchmark.main, "benchmark"),
          "profile_step": (profile_step.main, "profile")}[tool]


@pytest.mark.parametrize("tool", ["benchmark", "profile_step"])
def test_a_bad_data_file_stops_the_command_with_one_line(tmp_path, tool):
  main, prefix = command_of(tool)
  path = tmp_path / "rows.csv"
  path.write_text(u"a,1\nb,0,x\n")
  common = ["--vocab", TINY_VOCAB, "--work_dir", str(tmp_path / "work")]
  with pytest.raises(SystemExit) as stopped:
    main(["--data", str(path)] + common)
  assert str(stopped.value) == ("%s: %s row 2 has 3 columns; the rows must be text,label "
                                "(quote a text that holds commas)" % (prefix, path))
  with pytest.raises(SystemExit) as stopped:
    main(["--data", str(tmp_path / "none.csv")] + common)
  assert str(stopped.value) == ("%s: no data file %s; pass --data=a CSV of text,label rows"
                                % (prefix, tmp_path / "none.csv"))
  assert not (tmp_path / "work").exists()  # stopped before any work


@pytest.mark.parametrize("tool", ["benchmark", "profile_step"])
def test_a_bad_vocabulary_stops_the_command_with_one_line(tmp_path, tool):
  from tools.bench_worker import VOCAB_SIZE
  main, prefix = command_of(tool)
  data = tmp_path / "rows.csv"
  data.write_text(u"a,1\nb,0\n")
  fix = "pass the vocab.txt that belongs to the checkpoint"
  not_utf8 = tmp_path / "latin1.txt"
  not_utf8.write_bytes(b"[PAD]\n[UNK]\n[CLS]\n[SEP]\ncaf\xe9\n")
  words = tmp_path / "words.txt"
  words.write_text(u"the\nof\nand\n")
  large = tmp_path / "large.txt"
  large.write_text(u"\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + [
      "w%d" % i for i in range(VOCAB_SIZE - 3)]) + u"\n")
  cases = [
      (tmp_path / "none.txt", "%s: the file does not exist. Fix: %s" % (
          tmp_path / "none.txt", fix)),
      (not_utf8, "%s, line 5: the vocabulary is not UTF-8 text (byte 0xe9). Fix: %s" % (
          not_utf8, fix)),
      (words, "%s: the vocabulary has no [CLS] or [SEP] or [UNK] token, which every example "
       "needs (its 3 lines are not a BERT vocabulary). Fix: %s" % (words, fix)),
      (large, "%s: its ids reach %d, and the benchmark's models embed %d (an uncased BERT "
       "vocabulary's). Fix: pass an uncased BERT vocab.txt, or leave --vocab out for "
       "MiniLM's" % (large, VOCAB_SIZE, VOCAB_SIZE)),
  ]
  for vocab, message in cases:
    with pytest.raises(SystemExit) as stopped:
      main(["--data", str(data), "--vocab", str(vocab), "--work_dir", str(tmp_path / "work")])
    assert str(stopped.value) == "%s: --vocab %s" % (prefix, message)
  assert not (tmp_path / "work").exists()  # stopped before any work


def test_the_serve_benchmark_takes_nearest_rank_percentiles_and_tables_its_runs():
  from tools.bench_serve import percentile, results_markdown
  latencies = [0.010 * k for k in range(1, 101)]  # 10 ms .. 1000 ms
  assert percentile(latencies, 0.5) == pytest.approx(0.50)
  assert percentile(latencies, 0.99) == pytest.approx(0.99)
  assert percentile([0.3, 0.1, 0.2], 0.5) == 0.2 and percentile([0.3], 0.99) == 0.3
  run = {"clients": 8, "requests": 400, "requests_per_s": 41.25, "p50_ms": 180.04,
         "p99_ms": 390.96}
  figures = {"tensorflow": "2.15.1", "python": "3.11.7", "machine": "x, 2 cores",
             "max_seq_length": 128, "int8_quality": {"fp32": 0.93, "int8": 0.9291,
                                                     "rows": 500},
             "backends": {"tf": {"runs": [run], "workers": 1},
                          "onnx_int8": {"runs": [run], "workers": 2}}}
  table = results_markdown(figures).splitlines()
  assert table[0].endswith("(max_seq_length 128, Python 3.11.7, TF 2.15.1; x, 2 cores; the "
                           "clients share the machine; every answer is the backend's "
                           "predictor's result for its text, within 1e-05):")
  assert table[4:6] == ["| tf | 8 | 400 | 41.2 | 180.0 | 391.0 |",
                        "| onnx_int8 | 8 | 400 | 41.2 | 180.0 | 391.0 |"]
  assert table[7:] == [
      "- `tf`: the SavedModel in TensorFlow.",
      "- `onnx_int8`: the int8 ONNX model in onnxruntime, 2 batches at once (one a core), "
      "served because its held-out ROC-AUC (0.9291) is at most 0.002 below the fp32 model's "
      "(0.9300) on the 500 comments the export scored."]
  figures["backends"]["onnx_int8"] = {"refused": "--int8: 0.92 against 0.93 (drop --int8)."}
  assert results_markdown(figures).splitlines()[5:] == [
      "", "- `tf`: the SavedModel in TensorFlow.",
      "- `onnx_int8`: not served: --int8: 0.92 against 0.93 (drop --int8)."]


def test_the_serve_benchmark_checks_each_answer_against_the_predictors_result():
  """An answer passes when it has the predictor's labels and its numbers within the
  tolerance; another label, a number further off, a missing or extra key, or a number
  that is not one, is named."""
  from tools.bench_serve import answer_problem
  wanted = {"label": "1", "probabilities": {"0": 0.25, "1": 0.75}}
  assert answer_problem({"label": "1", "probabilities": {"0": 0.250004, "1": 0.749996}},
                        wanted) is None
  probabilities = wanted["probabilities"]
  for got, said in (
      ({"label": "0", "probabilities": probabilities}, "'0', where the predictor gives '1'"),
      ({"label": "1", "probabilities": {"0": 0.2502, "1": 0.7498}},
       "0.2502, where the predictor gives 0.25"),
      ({"label": "1", "probabilities": {"0": float("nan"), "1": 0.75}},
       "nan, where the predictor gives 0.25"),
      ({"label": "1", "probabilities": {"0": "0.25", "1": 0.75}},
       "'0.25', where the predictor gives 0.25"),
      ({"label": "1", "probabilities": {"1": 0.75}},
       "{'1': 0.75}, where the predictor gives %r" % probabilities),
      ([wanted], "%r, where the predictor gives %r" % ([wanted], wanted))):
    assert answer_problem(got, wanted) == said


def test_the_serve_benchmark_takes_its_backends_by_name():
  from tools.bench_serve import parse_args
  assert parse_args([]).backends == ["tf", "onnx", "onnx_int8"]
  assert parse_args(["--backends", "onnx"]).backends == ["onnx"]
  for wrong in ("tf,gpu", ""):
    with pytest.raises(SystemExit):
      parse_args(["--backends", wrong])

def test_the_serve_benchmark_refuses_onnx_backends_before_any_work(tmp_path, monkeypatch):
  """Where this runtime cannot export an ONNX model (tf2onnx is on TF 2.15 only), asking
  for an ONNX backend stops before the fine-tuning, naming why; tf alone exports none."""
  from tools import bench_predictor, bench_serve
  monkeypatch.setattr(bench_predictor, "onnx_unavailable", lambda: "no tf2onnx here")
  for backends in ("tf,onnx", "onnx_int8"):
    with pytest.raises(SystemExit) as stopped:
      bench_serve.main(["--backends", backends, "--work_dir", str(tmp_path / "work")])
    assert str(stopped.value) == ("bench_serve: --backends=%s: no tf2onnx here (or measure "
                                  "--backends=tf alone)" % backends)
  assert not (tmp_path / "work").exists()


def test_the_serve_benchmark_holds_out_rows_it_does_not_fine_tune_on(tmp_path):
  """The test sample's 400 rows: a third held out, the rest fine-tuned on, no row in both;
  a larger file gives 1,000 and --eval_rows."""
  from tools.bench_predictor import SAMPLE_COMMENTS, write_rows
  from tools.bench_serve import split_rows
  train, held_out = split_rows(SAMPLE_COMMENTS, 500)
  assert (len(train), len(held_out)) == (267, 133)
  with open(SAMPLE_COMMENTS, encoding="utf-8", newline="") as f:
    rows = [tuple(row) for row in csv.reader(f)]
  assert sorted(map(tuple, train + held_out)) == sorted(rows)
  assert sorted(label for _, label in held_out) != ["0"] * 133  # (both labels: a seeded order)
  larger = str(tmp_path / "rows.csv")
  write_rows(larger, [("comment %d" % k, str(k % 2)) for k in range(2000)])
  train, held_out = split_rows(larger, 300)
  assert (len(train), len(held_out)) == (1000, 300)
  assert not set(map(tuple, train)) & set(map(tuple, held_out))


def test_the_workers_precision_is_a_runs_choice_or_the_one_it_is_given(monkeypatch):
  """(A CPU said to have AMX, and on TF 1.15 the fused kernels' matmul said to run on it.)"""
  import argparse
  from pipeline import build, machine
  from tools.bench_worker import precision_and_kernels_of
  monkeypatch.setattr(machine, "bf16_instructions", lambda cpuinfo=None: ["amx_bf16"])
  monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
  monkeypatch.setattr(build, "own_matmul_problem", lambda *args: None)

  def chosen(precision, fused_kernels="auto"):
    args = argparse.Namespace(precision=precision, fused_kernels=fused_kernels, tpu_name=None,
                              fp16=False, xla=False, num_gpus=0)
    got, fused, _, said = precision_and_kernels_of(args)
    return got, fused, said.split(" (")[0].split(",")[0]

  assert chosen("auto") == ("bfloat16", True, "encoder precision: bfloat16 in training")
  assert chosen("float32") == ("float32", True, "encoder precision: float32")
  assert chosen("bfloat16", "off") == ("bfloat16", False,
                                       "encoder precision: bfloat16 in training")
