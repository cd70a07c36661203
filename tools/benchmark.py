"""Fine-tuning speed: this project against Google's original run_classifier, side by side.

  ./run.sh benchmark [--models tiny,minilm --seq_lengths 128,220 --steps 20 ...]

For every model shape and sequence length it fine-tunes for a fixed number of
examples of a real Jigsaw CSV (default: the 400 real Jigsaw comments committed in
tests/data/datasets/jigsaw_toxic_balanced/comments.csv; --data takes any `text,label`
CSV without a header, e.g. all 12,180 comments of that set) with:
  google         Google's bert-tensorflow code path (modeling, optimization,
                 run_classifier's model_fn_builder and input pipeline), padded to
                 --seq as Google does, under TPUEstimator(use_tpu=False), on TF 1.15;
  ours           this project, same model shape and batch size, on each runtime,
                 with --dynamic_padding (and, with --variants, also without), its
                 measured batches as long as its input pipeline's whole epochs';
  hf             (with --variants) Hugging Face transformers on PyTorch: its Trainer in
                 random order and with group_by_length, and a plain PyTorch loop on the
                 length-grouped sampler's batches (tools/bench_hf.py).
Each run is a separate process. Per run it reports the wall time of the measured
steps, examples/sec and ms/step (start-up and warm-up steps are excluded and
reported apart), training FLOPs per example, achieved GFLOP/s, and that as a
fraction of the float32 matrix-multiply peak measured on the same machine and
runtime; and featurisation rows/sec of each path. It writes results.md, results.csv
and results.png to --out_dir and prints the speed-up over Google's path.
"""

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pipeline.machine import PEAK_SIZE  # noqa: E402 (plain Python)

DEFAULT_DATA = os.path.join(ROOT, "tests", "data", "datasets", "jigsaw_toxic_balanced",
                            "comments.csv")
MODEL_ORDER = ("tiny", "minilm", "base")
VARIANTS = {  # name -> (impl, worker flags, runtimes it runs on)
    "google": ("google", [], ("tf1",)),
    "ours_fixed": ("ours", [], ("tf1", "tf2")),
    "ours": ("ours", ["--dynamic_padding"], ("tf1", "tf2")),
    "ours_xla": ("ours", ["--xla"], ("tf1", "tf2")),
    # Where a run would train in bfloat16 (a CPU with bfloat16 units: TF 2.15's oneDNN,
    # or TF 1.15's fused kernels on AMX or AVX512_BF16), `ours` does, and this row is the
    # same run in float32 beside it (added by itself there).
    "ours_fp32": ("ours", ["--dynamic_padding", "--precision", "float32"], ("tf1", "tf2")),
    # bfloat16 on TensorFlow's own ops: what the fused kernels add in bfloat16 (by name).
    "ours_bf16_tf_ops": ("ours", ["--dynamic_padding", "--precision", "bfloat16",
                                  "--fused_kernels", "off"], ("tf2",)),
    # The device rows (device_variants): added where their device is found.
    "ours_fp16": ("ours", ["--dynamic_padding", "--fp16"], ("tf1", "tf2")),
    "ours_tpu": ("ours", [], ("tf1", "tf2")),  # with --tpu_name and its cores
    # Hugging Face transformers on PyTorch, in the optional .venvs/hf
    # (tools/requirements-hf.txt): the Trainer in both orders, and a plain loop; "hf" in
    # --variants names them all, the bfloat16 ones below too.
    "hf_random": ("hf", ["--order", "random"], ("hf",)),
    "hf_grouped": ("hf", ["--order", "grouped"], ("hf",)),
    "hf_loop": ("hf", ["--order", "loop"], ("hf",)),
    # The same under torch.autocast("cpu", bfloat16): Hugging Face's fastest CPU path on a
    # CPU with bfloat16 instructions, so that its best is its best in either precision.
    "hf_grouped_bf16": ("hf", ["--order", "grouped", "--bf16"], ("hf",)),
    "hf_loop_bf16": ("hf", ["--order", "loop", "--bf16"], ("hf",)),
}
HF_VARIANTS = ("hf_random", "hf_grouped", "hf_loop", "hf_grouped_bf16", "hf_loop_bf16")
LABELS = {"google": "Google run_classifier", "ours_fixed": "this project, fixed padding",
          "ours": "this project, dynamic padding", "ours_xla": "this project, fixed padding, XLA",
          "ours_fp32": "this project, dynamic padding, float32",
          "ours_bf16_tf_ops": "this project, dynamic padding, bfloat16, TensorFlow's ops",
          "ours_fp16": "this project, dynamic padding, float16",
          "ours_tpu": "this project, fixed padding, bfloat16, TPU",
          "hf_random": "Hugging Face Trainer, random order",
          "hf_grouped": "Hugging Face Trainer, group_by_length",
          "hf_loop": "Hugging Face, plain PyTorch loop, length-grouped",
          "hf_grouped_bf16": "Hugging Face Trainer, group_by_length, bfloat16 autocast",
          "hf_loop_bf16": "Hugging Face, plain PyTorch loop, length-grouped, bfloat16 autocast"}
GPU_VARIANT = "ours_%dgpus"  # MirroredStrategy over that many GPUs, --batch_size rows on each


def gpu_count_of(variant):
  """N of GPU_VARIANT's ours_<N>gpus, else None."""
  if variant.startswith("ours_") and variant.endswith("gpus"):
    return int(variant[len("ours_"):-len("gpus")])
  return None


def variant_spec(variant, args):
  """(impl, worker flags, runtimes) of a variant."""
  gpus = gpu_count_of(variant)
  if gpus:
    return "ours", ["--dynamic_padding", "--num_gpus", str(gpus)], ("tf1", "tf2")
  impl, flags, runtimes = VARIANTS[variant]
  if variant == "ours_tpu":
    flags = flags + ["--tpu_name", args.tpu_name, "--num_tpu_cores", str(args.num_tpu_cores)]
  return impl, flags, runtimes


def label_of(variant):
  gpus = gpu_count_of(variant)
  if gpus:
    return "this project, dynamic padding, %d GPUs" % gpus
  return LABELS[variant]


def row_label(r):
  """A row's code, with its precision where a run chose bfloat16 (`ours` on a CPU with
  bfloat16 units) and its variant's name does not say so."""
  label = label_of(r["variant"])
  if r.get("precision") == "bfloat16" and "bfloat16" not in label:
    label += ", bfloat16"
  return label


def precision_variants(variants, bf16_units, runtimes):
  """The rows a CPU with bfloat16 units adds: (variants, notes). There `ours` trains in
  bfloat16 as a run does (TF 2.15; TF 1.15 where the fused kernels multiply on them), so
  `ours_fp32` measures the same run in float32 beside it; elsewhere one note says why
  there is no such row."""
  if "ours" not in variants or not {"tf1", "tf2"} & set(runtimes):
    return [], []
  if bf16_units:
    return ["ours_fp32"], []
  return [], ["bfloat16 rows skipped: this CPU has no bfloat16 matmul instructions "
              "(AVX512_BF16, AMX_BF16), so this project trains in float32 here"]


def device_variants(gpu_counts, tpu_name):
  """The rows the devices found add: (variants, notes). gpu_counts maps each runtime to
  the GPUs TensorFlow sees there. With a GPU: float16 and XLA rows; with several, a row per
  GPU count (2, 4, 8, ...). With --tpu_name: the TPU row. Each device that is absent gives
  one note instead."""
  variants, notes = [], []
  most = max(gpu_counts.values()) if gpu_counts else 0
  if most:
    variants += ["ours_fp16", "ours_xla"]
    count = 2
    while count <= most:
      variants.append(GPU_VARIANT % count)
      count *= 2
  else:
    notes.append("GPU rows (float16, XLA, one row per GPU count) skipped: TensorFlow sees no "
                 "GPU here (%s)" % ", ".join(sorted(gpu_counts)))
  if tpu_name:
    variants.append("ours_tpu")
  else:
    notes.append("TPU row (fixed padding, bfloat16) skipped: no --tpu_name given (pass "
                 "--tpu_name NAME --tpu_work_dir gs://bucket/folder)")
  return variants, notes
FEATURISERS = [  # (path, processes, runtimes)
    ("google", 1, ("tf1",)), ("python", 1, ("tf1", "tf2")), ("fast", 1, ("tf1", "tf2")),
    ("fast", 2, ("tf1", "tf2"))]
FEATURISER_LABELS = {"google": "Google: bert.tokenization.FullTokenizer + "
                               "file_based_convert_examples_to_features",
                     "python": "this project, --tokenizer=python",
                     "fast": "this project, --tokenizer=auto (the default)"}


def positive_int(text):
  """An argparse type: a whole number of at least 1."""
  try:
    value = int(text)
  except ValueError:
    value = 0
  if value < 1:
    raise argparse.ArgumentTypeError("%r is not a whole number of at least 1" % text)
  return value


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--data", default=DEFAULT_DATA, help="CSV rows text,label, no header")
  parser.add_argument("--vocab", help="uncased BERT vocab.txt (default: all-MiniLM-L6-v2's)")
  parser.add_argument("--models", default="tiny,minilm", help="from tiny, minilm, base")
  parser.add_argument("--seq_lengths", default="128,220")
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--steps", type=int, default=20, help="measured steps per run")
  parser.add_argument("--warmup_steps", type=int, default=3)
  parser.add_argument("--variants", default="google,ours", help="from %s" % ",".join(VARIANTS))
  parser.add_argument("--runtimes", default="tf1,tf2")
  parser.add_argument("--tpu_name", help="also train on this Cloud TPU (its bfloat16, fixed "
                                         "padding row)")
  parser.add_argument("--tpu_work_dir", help="with --tpu_name: a gs:// folder for the TPU "
                                             "run's records and checkpoints")
  parser.add_argument("--num_tpu_cores", type=int, default=8)
  parser.add_argument("--skip_featurisation", action="store_true")
  parser.add_argument("--rounds", type=int, default=1,
                      help="train every configuration this many times, round-robin, and "
                           "report each one's median run")
  parser.add_argument("--featurise_repeats", type=int, default=3,
                      help="runs of each featurisation path; the median is reported")
  parser.add_argument("--peak_size", type=positive_int, default=PEAK_SIZE,
                      help="the side of the square matrices that measure each runtime's "
                           "matmul peak (smaller: a quicker, lower peak)")
  parser.add_argument("--replot", metavar="RESULTS_CSV", help="only redraw the plot of a run")
  parser.add_argument("--out_dir", default=os.path.join(ROOT, "output", "benchmark"))
  parser.add_argument("--work_dir", default=os.path.join(ROOT, ".cache", "benchmark_work"),
                      help="records and checkpoints of the runs (each run clears its own)")
  return parser.parse_args(argv)


def python_of(runtime):
  return os.path.join(ROOT, ".venvs", runtime, "bin", "python")


def requested_variants(text, bf16_units=None):
  """--variants as a list, with "hf" standing for every Hugging Face path; without the
  bfloat16 ones where bf16_units (the CPU's bfloat16 matmul instructions) is empty: there
  PyTorch emulates bfloat16 far slower than float32 (a 1024x1024 matmul at 0.8 against
  113 GFLOP/s on an AVX2 host), so they cannot be Hugging Face's fastest (named one by one, they still run)."""
  variants = []
  skip_bf16 = bf16_units is not None and not bf16_units
  if skip_bf16 and "hf" in text.split(","):
    print("Hugging Face's bfloat16 rows skipped: this CPU has no bfloat16 matmul "
          "instructions (AVX512_BF16, AMX_BF16), where PyTorch emulates them far "
          "slower than float32; name hf_grouped_bf16 or hf_loop_bf16 in --variants to run them")
  for name in text.split(","):
    for variant in ([v for v in HF_VARIANTS if not (skip_bf16 and v.endswith("_bf16"))]
                    if name == "hf" else [name]):
      if variant not in VARIANTS and not gpu_count_of(variant):
        sys.exit("benchmark: unknown variant %r; known: hf, %s" % (variant, ", ".join(VARIANTS)))
      if variant not in variants:
        variants.append(variant)
  return variants


# The host's matmul peaks in words, measured once in a process (machine_description):
# every table that names its host names them.
_HOST_PEAKS = []


def peaks_sentence(peak):
  """A --measure_peak worker's result (tools/bench_worker.peaks) in words."""
  bf16 = peak.get("bf16_matmul_peak_gflops")
  size = peak.get("peak_size", PEAK_SIZE)
  return "matmul peak on %s (%dx%d, best of 5): float32 %.1f GFLOP/s, %s" % (
      environment_label(peak), size, size, peak["matmul_peak_gflops"],
      "bfloat16 %.1f GFLOP/s (%s)" % (bf16, peak["bf16_note"]) if bf16 else
      "bfloat16 not measured: %s" % peak.get("bf16_note", "not asked"))


def peak_flags(size):
  """A worker's flags to measure the matmul peaks of size x size matrices."""
  return ["--measure_peak", "--peak_size", str(size)]


def machine_description(runtime="tf2", peak_size=PEAK_SIZE):
  """The host in words: system, CPU and cores, and its matmul peaks (measured by a worker
  on runtime the first time a process asks, of peak_size x peak_size matrices): the
  figures that say how fast the host is, beside figures that depend on it."""
  if not _HOST_PEAKS:
    if os.path.exists(python_of(runtime)):
      with tempfile.TemporaryDirectory() as work:
        _HOST_PEAKS.append(peaks_sentence(run_worker(
            runtime, peak_flags(peak_size), os.path.join(work, "peak.json"))))
    else:
      _HOST_PEAKS.append("matmul peak not measured (no .venvs/%s: ./run.sh setup)" % runtime)
    print(_HOST_PEAKS[0])
  return "%s; %s" % (_machine(), _HOST_PEAKS[0])


def _machine():
  cpu = platform.processor() or "unknown CPU"
  try:
    with open("/proc/cpuinfo") as f:
      names = [l.split(":", 1)[1].strip() for l in f if l.startswith("model name")]
    cpu = "%s x%d" % (names[0], len(names)) if names else cpu
  except OSError:
    pass
  return "%s, %s, %d cores" % (platform.system(), cpu, os.cpu_count() or 0)


def child_environment(**extra):
  """The environment of a worker process: this one's, without what a TensorFlow 2 import
  here would have added (TF2_BEHAVIOR=1 turns TF 1.15 into TF 2 behaviour)."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env.update(extra)
  env.pop("TF2_BEHAVIOR", None)
  return env


def run_worker(runtime, args, out_path):
  module = "tools.bench_hf" if runtime == "hf" else "tools.bench_worker"
  command = [python_of(runtime), "-m", module, "--out", out_path] + args
  env = child_environment()
  result = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True)
  if result.returncode != 0:
    raise RuntimeError("benchmark run failed: %s\n%s" % (" ".join(command),
                                                         result.stdout[-3000:]))
  with open(out_path) as f:
    return json.load(f)


def run_training(args, work, variant, runtime, model, seq, round_index):
  impl, flags, _ = variant_spec(variant, args)
  tag = "%s_%s_%s_%d" % (variant, runtime, model, seq)
  workdir = os.path.join(args.tpu_work_dir if variant == "ours_tpu" else work, tag)
  worker_args = ["--model", model, "--seq", str(seq), "--batch", str(args.batch_size),
                 "--steps", str(args.steps), "--warmup", str(args.warmup_steps), "--data",
                 args.data, "--vocab", args.vocab] + flags
  if impl != "hf":  # (the Hugging Face worker keeps its Trainer's folder temporary)
    worker_args += ["--impl", impl, "--workdir", workdir]
  print("running %s (round %d of %d) ..." % (tag, round_index + 1, args.rounds))
  sys.stdout.flush()
  return run_worker(runtime, worker_args, os.path.join(work, "%s_%d.json" % (tag, round_index)))


def median_run(runs, key):
  """The run with the median value of key (the upper middle one of an even count)."""
  return sorted(runs, key=lambda r: r[key])[len(runs) // 2]


def environment_label(row):
  if "torch" in row:
    return "PyTorch %s / transformers %s / Python %s / %s" % (
        row["torch"], row["transformers"], row["python"], row["device"]["kind"])
  return "TF %s / Python %s / %s" % (row["tensorflow"], row["python"], row["device"]["kind"])


def write_outputs(rows, peaks, featurisation, args, machine, device_notes=()):
  os.makedirs(args.out_dir, exist_ok=True)
  fields = ["variant", "environment", "device", "model", "seq", "batch", "steps", "wall_seconds",
            "examples_per_sec", "ms_per_step", "startup_seconds", "warmup_seconds",
            "mean_seq_length", "train_gflops_per_example", "gflops_per_sec",
            "matmul_peak_gflops", "bf16_matmul_peak_gflops", "matmul_peak_size",
            "precision", "peak_precision",
            "fraction_of_peak", "matmul_floor_seconds",
            "step_over_matmul_floor", "speedup_vs_google", "speedup_vs_hf", "speedup_vs_fp32",
            "scaling_efficiency",
            "epoch_mean_seq_length",
            "featurise_rows_per_sec", "tokenizer", "load_before", "load_after",
            "rounds", "examples_per_sec_of_rounds"]
  with open(os.path.join(args.out_dir, "results.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(dict(r, device=r["device"]["description"], matmul_peak_size=(
        args.peak_size if r.get("matmul_peak_gflops") else None)) for r in rows)

  lines = ["# Fine-tuning speed", "",
           "Machine: %s. Data: `%s`, %d rows. Batch %d; %d measured steps after %d warm-up "
           "steps, from random weights.%s" % (
               machine, os.path.basename(args.data), rows[0]["featurise_rows"],
               args.batch_size, args.steps, args.warmup_steps,
               " Every configuration was trained %d times, round-robin; each row is its "
               "median run (all runs' examples/sec are in results.csv)." % args.rounds
               if args.rounds > 1 else ""), "",
           "| environment / device | code | model | seq | batch | wall time (s) | examples/sec | "
           "ms/step | start-up (s) | mean length | GFLOP/s | % of matmul peak | "
           "step ÷ matmul floor | vs Google | vs HF (best Hugging Face path) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    lines.append("| %s | %s | %s | %d | %d | %.1f | %.1f | %.0f | %.1f | %.1f | %.1f | %s | %s "
                 "| %s | %s |" % (
        "%s (%s)" % (r["environment"], r["device"]["description"]), row_label(r),
        r["model"], r["seq"], r["batch"], r["wall_seconds"], r["examples_per_sec"],
        r["ms_per_step"], r["startup_seconds"], r["mean_seq_length"], r["gflops_per_sec"],
        "%.1f%%" % (100 * r["fraction_of_peak"]) if r["fraction_of_peak"] else "-",
        "%.2fx" % r["step_over_matmul_floor"] if r.get("step_over_matmul_floor") else "-",
        "%.2fx" % r["speedup_vs_google"] if r["speedup_vs_google"] else "-",
        "%.2fx" % r["speedup_vs_hf"] if r.get("speedup_vs_hf") else "-"))
  if any(r.get("scaling_efficiency") for r in rows):
    lines += ["", "Several GPUs: each takes the batch size, so the global batch grows with "
              "them; scaling efficiency is examples/sec over (GPUs x one GPU's): " +
              ", ".join("%s %s %d: %.0f%%" % (label_of(r["variant"]), r["model"], r["seq"],
                                               100 * r["scaling_efficiency"])
                        for r in rows if r.get("scaling_efficiency"))]
  if any(r.get("speedup_vs_fp32") for r in rows):
    lines += ["", "bfloat16 over float32 (this project's run as it chooses on this CPU, "
              "against the same run in float32 beside it): " + ", ".join(
                  "%s %s %d: %.2fx" % (r["environment"].split(" / ")[0], r["model"], r["seq"],
                                       r["speedup_vs_fp32"])
                  for r in rows if r.get("speedup_vs_fp32"))]
  for note in device_notes:
    lines += ["", note]
  if any(r.get("dynamic_padding") for r in rows):
    lines += ["", lengths_note(rows)]
  lines += ["", "Wall time covers the measured steps only; start-up (graph build, session, "
            "initialisation) and warm-up steps are excluded and start-up is shown apart. "
            "FLOPs count matrix multiplies (forward + backward = 3x forward) at the sequence "
            "lengths actually computed, so dynamic padding does fewer FLOPs per example. "
            "The FLOPs are those each code path really computes: this project's classifier "
            "runs its last layer for the [CLS] token only (keys and values still for every "
            "token), which gives the same outputs and gradients with fewer FLOPs.", "",
            "Step ÷ matmul floor: the measured steps' time over the time of the same steps' "
            "matrix multiplies alone (the same shapes at each step's length, forward and "
            "backward, in the step's own precision, on the same runtime, timed in the same "
            "process right after training; tools/bench_worker.py matmul_floor_seconds). 1.0 "
            "would be a step that spends all its time in matrix multiplies; unlike a "
            "fraction of the peak, this does not move with the machine's square-matrix "
            "speed. A row's % of matmul peak is of its own precision's peak on its own "
            "framework (PyTorch's, measured alike, for the Hugging Face rows).", "",
            "This project's rows run the encoder's fused CPU kernels (modeling/fused.py, "
            "--fused_kernels=auto, as a run does on a CPU, in float32 or bfloat16; the "
            "profile times them against TensorFlow's own ops).", "",
            "Dynamic padding: this project's rows train on a window of their input "
            "pipeline's batches (tools/bench_worker.py draw_window), drawn as the Hugging "
            "Face loop's are (tools/windows.py): from whole epochs' worth of the pipeline's "
            "batches, one measured batch from each of as many length strata as steps, so "
            "that their lengths spread as the epochs' do.", "",
            "vs HF: examples/sec over the best Hugging Face path at the same model and "
            "length (the fastest of its rows: the Trainer in either order, or the plain "
            "loop). The Hugging Face rows train BertForSequenceClassification on PyTorch "
            "(tools/bench_hf.py: AdamW, the same learning rate, warm-up and clipping, each "
            "batch padded to its longest text by DataCollatorWithPadding, the tanh GELU as "
            "the TensorFlow paths compute it, PyTorch's threads = the machine's cores), with "
            "transformers' Trainer or, in the plain loop, without it: the same step in a "
            "loop of its own, on batches of the Trainer's length-grouped sampler, its measured "
            "steps drawn from whole epochs to spread in length as the epochs' batches do "
            "(the Trainer's group_by_length starts an epoch with its longest batches, which "
            "a few dozen steps from the start over-represent). "
            "Their start-up counts from the process's start, imports and tokenisation "
            "included.", "",
            "Matrix-multiply peak (float32, %dx%d, best of 5): " % (args.peak_size,
                                                                    args.peak_size) +
            ", ".join("%s %.1f GFLOP/s" % (k, v) for k, v in sorted(peaks.items())), "",
            ]
  if featurisation:
    lines += ["Featurisation of all %d rows to TFRecords at seq %d (tokenize, truncate, "
              "serialise, write), median of %d runs, each a fresh process:" % (
                  featurisation[0]["rows"], featurisation[0]["seq"],
                  featurisation[0]["repeats"]), "",
              "| featurisation path | environment | rows/sec | vs Google | rows with Google's "
              "ids, mask, segments and label |", "|---|---|---|---|---|"]
  google = [f for f in featurisation if f["path"] == "google"]
  for f in featurisation:
    lines.append("| %s%s | %s | %.0f | %s | %s |" % (
        FEATURISER_LABELS[f["path"]],
        ", %d processes" % f["workers"] if f["workers"] > 1 else "", environment_label(f),
        f["rows_per_sec"], "%.1fx" % (f["rows_per_sec"] / google[0]["rows_per_sec"])
        if google and f["path"] != "google" else "-",
        "%d of %d" % (f["rows_equal_to_google"], f["rows"]) if "rows_equal_to_google" in f
        else "-"))
  with open(os.path.join(args.out_dir, "results.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  plot(rows, os.path.join(args.out_dir, "results.png"), machine.split("; ")[0])
  return "\n".join(lines)


def lengths_note(rows):
  """A line on the batch lengths of the rows that pad each batch to its longest text
  (this project's dynamic padding, Hugging Face's): their measured steps' mean padded
  length against whole epochs' of the same input (our input pipeline, Hugging Face's
  sampler), which shows how far the measured steps stand from the epochs' lengths."""
  shown = ["%s (%s) %s %d: %.1f (epoch %.1f)" % (
      row_label(r), r["environment"].split(" / ")[0], r["model"], r["seq"],
      r["mean_seq_length"], r["epoch_mean_seq_length"])
      for r in rows if r.get("dynamic_padding") and r.get("epoch_mean_seq_length")]
  return ("Dynamic padding, mean padded length of the measured steps against whole epochs "
          "of the same input pipeline or sampler: " +
          ("; ".join(shown) if shown else "not reported") + ".")


def plot(rows, path, machine):
  """One panel per model shape: examples/sec of each code path and runtime, per length."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  models = sorted(set(r["model"] for r in rows), key=list(MODEL_ORDER).index)
  order = list(VARIANTS)
  series = sorted(set((r["variant"], r["environment"]) for r in rows),
                  key=lambda s: (order.index(s[0]) if s[0] in order else len(order) +
                                 gpu_count_of(s[0]), s[1]))
  fig, axes = plt.subplots(1, len(models), figsize=(4.6 * len(models), 4.6), squeeze=False)
  width = 0.8 / max(len(series), 1)
  for ax, model in zip(axes[0], models):
    lengths = sorted(set(int(r["seq"]) for r in rows if r["model"] == model))
    for k, (variant, environment) in enumerate(series):
      values = []
      for seq in lengths:
        match = [r for r in rows if (r["variant"], r["environment"], r["model"], int(r["seq"]))
                 == (variant, environment, model, seq)]
        values.append(float(match[0]["examples_per_sec"]) if match else 0.0)
      one = next(r for r in rows if (r["variant"], r["environment"]) == (variant, environment))
      ax.bar([i + k * width for i in range(len(lengths))], values, width,
             label="%s (%s)" % (row_label(one), environment.split(" / ")[0]))
    ax.set_xticks([i + width * (len(series) - 1) / 2 for i in range(len(lengths))])
    ax.set_xticklabels(["max_seq_length %d" % n for n in lengths])
    ax.set_title("%s-shaped BERT" % model)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.45)  # room for the legend above the bars
    ax.set_ylabel("training examples / sec")
  axes[0][0].legend(fontsize=7)
  fig.suptitle("Fine-tuning on Jigsaw comments, batch 32 (%s)" % machine, fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=110)


def replot(csv_path):
  with open(csv_path) as f:
    rows = list(csv.DictReader(f))
  path = os.path.join(os.path.dirname(csv_path), "results.png")
  plot(rows, path, _machine())
  print("wrote %s" % path)


def measure_featurisation(args, runtimes, work):
  """The median featurisation run of each path on each runtime."""
  featurisation = []
  seq = int(args.seq_lengths.split(",")[0])
  for path, processes, allowed in FEATURISERS:
    for runtime in [r for r in runtimes if r in allowed]:
      tag = "featurise_%s_%d_%s" % (path, processes, runtime)
      print("running %s ..." % tag)
      sys.stdout.flush()
      # Each repeat is a fresh process from an empty work directory; the median
      # damps the noise of a shared machine.
      repeats = [run_worker(runtime, [
          "--featurise_only", path, "--workers", str(processes), "--seq", str(seq), "--data",
          args.data, "--vocab", args.vocab, "--workdir", os.path.join(work, tag)],
          os.path.join(work, tag + ".json")) for _ in range(args.featurise_repeats)]
      f = median_run(repeats, "rows_per_sec")
      f["repeats"] = len(repeats)
      f["workdir"] = os.path.join(work, tag)
      featurisation.append(f)
      print("  %.0f rows/sec (median of %d: %s)" % (f["rows_per_sec"], len(repeats), ", ".join(
          "%.0f" % r["rows_per_sec"] for r in repeats)))
  check_features_equal_googles(featurisation, work)
  return featurisation


def check_features_equal_googles(featurisation, work):
  """Counts, for each of our paths, the rows whose features equal Google's records' (one
  TF 1.15 worker for all of them)."""
  google = [f for f in featurisation if f["path"] == "google"]
  ours = [f for f in featurisation if f["path"] != "google"]
  if not google or not ours:
    return
  result = run_worker("tf1", ["--compare_records", google[0]["workdir"]] +
                      [f["workdir"] for f in ours], os.path.join(work, "compare.json"))
  for f, compared in zip(ours, result["compared"]):
    assert compared["workdir"] == f["workdir"]
    f["rows_equal_to_google"] = compared["equal_rows"]
    print("  %s, %d process(es), Python %s: %d of %d rows equal to Google's (%d rows)" % (
        f["path"], f["workers"], f["python"], compared["equal_rows"], compared["our_rows"],
        compared["google_rows"]))


def measure_training(args, runtimes, work, peaks, variants, gpu_counts=None, bf16_peaks=None):
  """The median training run of each configuration (variants, on each runtime that has
  what it needs), with its speed-ups over Google's path and the best Hugging Face path."""
  rows = []
  gpu_counts = gpu_counts or {}
  for model in args.models.split(","):
    for seq in [int(s) for s in args.seq_lengths.split(",")]:
      configs = [(variant, runtime) for variant in variants for runtime in runtimes
                 if runtime in variant_spec(variant, args)[2] and
                 gpu_counts.get(runtime, 0) >= (gpu_count_of(variant) or 0)]
      runs = {config: [] for config in configs}
      for round_index in range(args.rounds):  # round-robin, so drifts hit every config alike
        for variant, runtime in configs:
          runs[(variant, runtime)].append(
              run_training(args, work, variant, runtime, model, seq, round_index))
      measured = [summarise_runs(runs[config], config[0], peaks, bf16_peaks)
                  for config in configs]
      add_ratios(measured)
      for r in measured:
        print_row(r)
      rows += measured
  return rows


def summarise_runs(measured, variant, peaks, bf16_peaks=None):
  """One configuration's row: its median run, with the derived figures. Its fraction of
  the matmul peak is of its own precision's peak (bf16_peaks for a bfloat16 row)."""
  r = median_run(measured, "examples_per_sec")
  r["rounds"] = len(measured)
  r["examples_per_sec_of_rounds"] = " ".join("%.1f" % m["examples_per_sec"] for m in measured)
  r["variant"] = variant
  r["environment"] = environment_label(r)
  r["wall_seconds"] = r["measured_seconds"]
  if "train_flops_per_example" not in r:  # (a Hugging Face run: all tokens, every layer)
    add_flops(r, pooled_only=False)
  r["train_gflops_per_example"] = r["train_flops_per_example"] / 1e9
  r["matmul_peak_gflops"] = peaks.get(r["environment"])  # (none on a TPU or in PyTorch)
  r["bf16_matmul_peak_gflops"] = (bf16_peaks or {}).get(r["environment"])
  r.setdefault("precision", "float32")  # (Google's path; "bfloat16 (torch.autocast)")
  in_bf16 = str(r["precision"]).startswith("bfloat16")
  peak = r["bf16_matmul_peak_gflops"] if in_bf16 else r["matmul_peak_gflops"]
  r["peak_precision"] = ("bfloat16" if in_bf16 else "float32") if peak else None
  r["fraction_of_peak"] = r["gflops_per_sec"] / peak if peak else None
  return r


def add_flops(r, pooled_only):
  """FLOPs of a run that reports only the lengths its measured steps computed."""
  import types
  from tools.flops import train_flops_of_steps
  from tools.bench_worker import bert_shape
  # The shape alone: modeling.bert would import TensorFlow into this process, and TF 2
  # then sets TF2_BEHAVIOR=1 in the environment that TF 1.15 workers inherit.
  config = types.SimpleNamespace(**bert_shape(r["model"]))
  flops = train_flops_of_steps(config, r["seq_lengths"], r["batch"], pooled_only)
  r["train_flops_per_example"] = flops / float(r["steps"] * r["batch"])
  r["gflops_per_sec"] = flops / r["measured_seconds"] / 1e9


def add_ratios(rows):
  """Within one model and length: speed-ups over Google's path and over the best Hugging
  Face path (the fastest of its rows), and the several-GPU rows' scaling efficiency."""
  google = [r["examples_per_sec"] for r in rows if r["variant"] == "google"]
  hf = {}  # device kind -> the Hugging Face rows' rates (they run on the CPU)
  for r in rows:
    if r["variant"] in HF_VARIANTS:
      hf.setdefault(r["device"]["kind"], []).append(r["examples_per_sec"])
  one_device = {r["environment"]: r["examples_per_sec"] for r in rows if r["variant"] == "ours"}
  float32 = {r["environment"]: r["examples_per_sec"] for r in rows
             if r["variant"] == "ours_fp32"}
  for r in rows:
    r["speedup_vs_fp32"] = (r["examples_per_sec"] / float32[r["environment"]]
                            if r["variant"] == "ours" and r.get("precision") == "bfloat16"
                            and r["environment"] in float32 else None)
    ours = VARIANTS.get(r["variant"], ("ours",))[0] == "ours"
    r["speedup_vs_google"] = r["examples_per_sec"] / google[0] if google and ours else None
    same_device = hf.get(r["device"]["kind"])
    r["speedup_vs_hf"] = r["examples_per_sec"] / max(same_device) if same_device and ours else None
    gpus = gpu_count_of(r["variant"])
    single = one_device.get(r["environment"])
    r["scaling_efficiency"] = r["examples_per_sec"] / (gpus * single) if gpus and single else None


def print_row(r):
  print("%s %s %d on %s (%s): %.1f examples/sec, %.0f ms/step, %.1f GFLOP/s%s%s%s%s%s" % (
      r["variant"], r["model"], r["seq"], r["environment"], r["device"]["description"],
      r["examples_per_sec"], r["ms_per_step"], r["gflops_per_sec"],
      " (%.1f%% of peak)" % (100 * r["fraction_of_peak"]) if r["fraction_of_peak"] else "",
      ", %.2fx its matmul floor" % r["step_over_matmul_floor"]
      if r.get("step_over_matmul_floor") else "",
      ", %.2fx Google's" % r["speedup_vs_google"] if r["speedup_vs_google"] else "",
      ", %.2fx the best Hugging Face path" % r["speedup_vs_hf"] if r["speedup_vs_hf"] else "",
      " (median of %s)" % r["examples_per_sec_of_rounds"] if r["rounds"] > 1 else ""))


def main(argv=None):
  args = parse_args(argv)
  if args.replot:
    return replot(args.replot)
  from tools.bench_worker import rows_or_exit, vocab_or_exit
  rows_or_exit(args.data, "benchmark")
  if not args.vocab:
    from tools import assets
    args.vocab = os.path.join(assets.minilm_hf_dir(), "vocab.txt")
  vocab_or_exit(args.vocab, "benchmark")
  runtimes = [r for r in args.runtimes.split(",") if os.path.exists(python_of(r))]
  if not runtimes:
    sys.exit("benchmark: no environment in .venvs; run ./run.sh setup first")
  from pipeline.machine import bf16_instructions
  bf16_units = bf16_instructions()
  variants = requested_variants(args.variants, bf16_units)
  if any(v in HF_VARIANTS for v in variants):
    if not os.path.exists(python_of("hf")):
      sys.exit("benchmark: the Hugging Face rows need the optional environment .venvs/hf; "
               "./run.sh benchmark --variants hf creates it (from tools/requirements-hf.txt)")
    runtimes += [] if "hf" in runtimes else ["hf"]
  machine = _machine()  # (and each runtime's peaks, measured below)
  work = args.work_dir  # records and checkpoints stay out of --out_dir
  os.makedirs(work, exist_ok=True)
  if "ours_tpu" in variants and not args.tpu_name:
    sys.exit("benchmark: --variants ours_tpu needs --tpu_name (and --tpu_work_dir=gs://...); "
             "with --tpu_name the TPU row is added by itself")
  if args.tpu_name and not (args.tpu_work_dir or "").startswith("gs://"):
    sys.exit("benchmark: --tpu_name needs --tpu_work_dir=gs://bucket/folder (a TPU reads and "
             "writes Cloud Storage only)")
  peaks, bf16_peaks, gpu_counts, sentences = {}, {}, {}, []
  for runtime in runtimes:  # (PyTorch's too, where Hugging Face's rows run)
    peak = run_worker(runtime, peak_flags(args.peak_size),
                      os.path.join(work, "peak_%s.json" % runtime))
    peaks[environment_label(peak)] = peak["matmul_peak_gflops"]
    bf16_peaks[environment_label(peak)] = peak.get("bf16_matmul_peak_gflops")
    if runtime != "hf":  # (the GPUs TensorFlow sees)
      gpu_counts[runtime] = peak["device"]["count"] if peak["device"]["kind"] == "GPU" else 0
    sentences.append(peaks_sentence(peak))
    print(sentences[-1])
  machine += "".join("; " + sentence for sentence in sentences)
  extra, device_notes = device_variants(gpu_counts, args.tpu_name)
  more, precision_notes = precision_variants(variants, bf16_units, runtimes)
  extra, device_notes = extra + more, device_notes + precision_notes
  for note in device_notes:
    print(note)
  variants += [v for v in extra if v not in variants]

  featurisation = [] if args.skip_featurisation else measure_featurisation(args, runtimes, work)
  rows = measure_training(args, runtimes, work, peaks, variants, gpu_counts, bf16_peaks)
  print()
  print(write_outputs(rows, peaks, featurisation, args, machine, device_notes))
  print("\nwrote results.md, results.csv, results.png to %s" % args.out_dir)


if __name__ == "__main__":
  main()
