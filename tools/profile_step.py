"""Where a training step's time goes: an op-level profile, and the step's matmul floor.

  ./run.sh benchmark profile [--model minilm --seq 128 --batch 32 --steps 10 ...]

In each runtime's environment (one process each) it fine-tunes this project's pipeline
(--dynamic_padding, random weights) on the benchmark's data, and:
  - times --steps steps after --warmup_steps;
  - traces --traced_steps more with TensorFlow's step statistics (RunOptions FULL_TRACE)
    and sums every op's time into categories: matrix multiplies, attention softmax and
    masking, layer norm, GELU, dropout, the embedding gather and its gradient, the
    optimizer update, the input pipeline (the step's wait for its batch), and the rest
    by op type;
  - times the step's own matrix multiplies alone (tools.flops: the same shapes,
    forward and backward, at each measured step's length), the "matmul floor";
  - times the step again with the encoder's dropout, its GELU, its layer norm, and all
    three, left out (--without, "none" to skip), then the full step once more (its timed
    steps are the mean of its two runs): how much faster the step would be if each part
    cost nothing, the most that fusing it into other kernels could give. Those models
    train differently; only their speed is measured.
Writes profile.md and profile.json to --out_dir (default docs/benchmark).
"""

import argparse
import collections
import contextlib
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tools import bench_worker  # noqa: E402 (after the path)
from modeling.optimization import UPDATE_SCOPE  # noqa: E402
from tools.benchmark import DEFAULT_DATA, machine_description, python_of  # noqa: E402

# (category, rule) in order: the first rule an op meets names its category.
MATMUL_TYPES = ("MatMul", "BatchMatMul", "Einsum")
CATEGORIES = [
    ("matrix multiplies", lambda name, kind: any(t in kind for t in MATMUL_TYPES)),
    ("input pipeline", lambda name, kind: kind.startswith("IteratorGetNext") or
     "IteratorGetNext" in name),
    ("optimizer update", lambda name, kind: name.startswith(UPDATE_SCOPE) or "Adam" in kind),
    ("dropout", lambda name, kind: "dropout" in name),
    ("layer norm", lambda name, kind: any(part in name for part in (
        "LayerNorm", "/batchnorm/", "/moments/"))),
    ("embedding gather and its gradient", lambda name, kind: "embeddings" in name),
    ("GELU", lambda name, kind: "/intermediate/" in name),
    ("attention softmax and masking", lambda name, kind: "/attention/self/" in name),
]
OTHER = "other"


def category_of(name, kind):
  for category, rule in CATEGORIES:
    if rule(name, kind):
      return category
  return OTHER


REMOVABLE = ("dropout", "gelu", "layer_norm")
WITHOUT_DEFAULT = ("dropout", "gelu", "layer_norm", "dropout+gelu+layer_norm")


def parse_without(value):
  """"dropout,layer_norm+gelu" -> [("dropout",), ("gelu", "layer_norm")]; "none" -> [].
  An argparse type: a wrong value is an argparse error that names the parts."""
  if value.strip() == "none":
    return []
  runs = []
  for run in value.split(","):
    parts = tuple(sorted(part.strip() for part in run.split("+")))
    unknown = [part for part in parts if part not in REMOVABLE]
    if unknown:
      raise argparse.ArgumentTypeError(
          "unknown part %r in %r; the parts are %s, joined by '+' within a run, runs "
          "separated by ',' (or 'none')" % (unknown[0], value, ", ".join(REMOVABLE)))
    if parts in runs or len(set(parts)) < len(parts):
      raise argparse.ArgumentTypeError("%r names the run %r twice" % (value, "+".join(parts)))
    runs.append(parts)
  return runs


@contextlib.contextmanager
def encoder_without(parts):
  """Builds modeling.bert's encoder with `parts` left out while the context lasts: dropout
  and layer norm become the identity (layer norm still makes its variables, so the
  checkpoint layout is unchanged) and GELU (either form; the profiled shapes use the tanh
  one) becomes linear. For speed measurements only."""
  from modeling import bert
  saved = (bert.dropout, bert.layer_norm, dict(bert.ACTIVATIONS))

  def layer_norm_variables_only(x, name="LayerNorm", epsilon=1e-12):
    import tensorflow.compat.v1 as tf
    units = bert.static_shape(x)[-1]
    with tf.variable_scope(name):
      tf.get_variable("beta", [units], initializer=tf.zeros_initializer())
      tf.get_variable("gamma", [units], initializer=tf.ones_initializer())
    return x

  try:
    if "dropout" in parts:
      bert.dropout = lambda x, rate: x
    if "layer_norm" in parts:
      bert.layer_norm = layer_norm_variables_only
    if "gelu" in parts:
      bert.ACTIVATIONS.update({"gelu": None, "gelu_exact": None})
    yield
  finally:
    bert.dropout, bert.layer_norm = saved[0], saved[1]
    bert.ACTIVATIONS.clear()
    bert.ACTIVATIONS.update(saved[2])


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model", default="minilm", choices=sorted(bench_worker.MODELS))
  parser.add_argument("--seq", type=int, default=128)
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--warmup_steps", type=int, default=3)
  parser.add_argument("--steps", type=int, default=10, help="timed steps, untraced")
  parser.add_argument("--traced_steps", type=int, default=5)
  parser.add_argument("--floor_repeats", type=int, default=5)
  parser.add_argument("--without", type=parse_without, default=",".join(WITHOUT_DEFAULT),
                      help="comma-separated runs of the step with parts left out, each a "
                      "'+'-joined set of %s; 'none' for no such runs" % ", ".join(REMOVABLE))
  parser.add_argument("--data", default=DEFAULT_DATA)
  parser.add_argument("--vocab")
  parser.add_argument("--runtimes", default="tf1,tf2")
  parser.add_argument("--out_dir", default=os.path.join(ROOT, "docs", "benchmark"))
  parser.add_argument("--work_dir", default=os.path.join(ROOT, ".cache", "profile_work"))
  parser.add_argument("--worker_out", help=argparse.SUPPRESS)  # one runtime's run
  return parser.parse_args(argv)


# --- One runtime (a process of its own) -----------------------------------------------

def kind_of(node_stats):
  """The op type of a traced node, from its timeline label "name = Type(inputs)"."""
  label = node_stats.timeline_label
  if " = " in label:
    return label.split(" = ", 1)[1].split("(", 1)[0]
  return node_stats.node_name


class ProfileHook(object):
  """Times every step; traces the last `traced` steps of `total`."""

  def __init__(self, total, traced, seq_length_tensor_name):
    self.total, self.traced, self.seq_name = total, traced, seq_length_tensor_name
    self.seconds, self.lengths, self.traces = [], [], []

  def as_session_run_hook(self):
    import tensorflow.compat.v1 as tf
    outer = self

    class Hook(tf.train.SessionRunHook):
      def begin(self):
        self._length = tf.get_default_graph().get_tensor_by_name(outer.seq_name + ":0")

      def before_run(self, run_context):
        traced = len(outer.seconds) >= outer.total - outer.traced
        options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE) if traced else None
        self._started = time.time()
        return tf.train.SessionRunArgs(self._length, options=options)

      def after_run(self, run_context, run_values):
        outer.seconds.append(time.time() - self._started)
        outer.lengths.append(int(run_values.results))
        if run_values.run_metadata is not None and run_values.run_metadata.step_stats.dev_stats:
          outer.traces.append(run_values.run_metadata.step_stats)

    return Hook()


def op_times(step_stats_list):
  """({(category, op type): microseconds}, {node name: microseconds} of the ops in no
  category), summed over the traced steps."""
  totals, others = collections.Counter(), collections.Counter()
  for step_stats in step_stats_list:
    for device in step_stats.dev_stats:
      if device.device.startswith("/host:"):
        continue  # TF 1.15's host tracer: the same ops again, and tf.data's own threads
      for node in device.node_stats:
        if node.node_name in ("_SOURCE", "_SINK"):
          continue
        kind = kind_of(node)
        category = category_of(node.node_name, kind)
        totals[(category, kind)] += node.all_end_rel_micros
        if category == OTHER:
          others[node.node_name] += node.all_end_rel_micros
  return totals, others


def profile_one_runtime(args):
  import tensorflow.compat.v1 as tf
  from modeling.bert import BertConfig
  from tools.flops import train_flops_of_steps
  tf.get_logger().setLevel("ERROR")
  workdir = os.path.join(args.work_dir, "tf1" if tf.__version__.startswith("1.") else "tf2")
  if tf.io.gfile.isdir(workdir):
    tf.io.gfile.rmtree(workdir)  # measure from nothing: no cached records or checkpoint
  tf.io.gfile.makedirs(workdir)
  worker_args = argparse.Namespace(
      model=args.model, seq=args.seq, batch=args.batch, dynamic_padding=True, xla=False,
      fp16=False, tpu_name=None, num_gpus=0, workdir=workdir, warmup=args.warmup_steps,
      workers=1, vocab=args.vocab, data=args.data)
  rows = bench_worker.read_rows(args.data, 0)
  record_path = os.path.join(workdir, "train.tf_record")
  bench_worker.featurise_ours(rows, worker_args, record_path)
  total = args.warmup_steps + args.steps + args.traced_steps
  hook = train_steps(worker_args, record_path, os.path.join(workdir, "model"), total,
                     args.traced_steps)
  timed = slice(args.warmup_steps, args.warmup_steps + args.steps)
  step_seconds, lengths = hook.seconds[timed], hook.lengths[timed]
  without = {}
  for parts in args.without:
    with encoder_without(parts):
      name = "+".join(parts)
      without[name] = timed_seconds(worker_args, record_path, workdir, "without_" + name,
                                    timed, lengths)
  if without:
    # The runs above start on a warm process (threads, the allocator's kept memory), so the
    # full step is timed again last, and the report takes the mean of its two timings.
    again = timed_seconds(worker_args, record_path, workdir, "full_again", timed, lengths)
    step_seconds = [(a + b) / 2 for a, b in zip(step_seconds, again)]
  config = BertConfig(**bench_worker.bert_shape(args.model))
  floors = bench_worker.floor_seconds_by_length(config, lengths, args.batch,
                                                args.floor_repeats)
  totals, others = op_times(hook.traces)
  return dict(
      bench_worker.runtime_info(worker_args), model=args.model, seq=args.seq, batch=args.batch,
      steps=args.steps, traced_steps=len(hook.traces), lengths=lengths,
      traced_lengths=hook.lengths[-args.traced_steps:],
      step_seconds=step_seconds, traced_step_seconds=hook.seconds[-args.traced_steps:],
      floor_seconds_by_length={str(n): s for n, s in floors.items()},
      floor_seconds=sum(floors[n] for n in lengths),
      step_seconds_without=without,
      train_gflops=train_flops_of_steps(config, lengths, args.batch, pooled_only=True) / 1e9,
      op_micros=[[category, kind, micros] for (category, kind), micros in
                 sorted(totals.items(), key=lambda item: -item[1])],
      largest_other_ops=others.most_common(20))


def timed_seconds(worker_args, record_path, workdir, name, timed, lengths):
  """The `timed` steps' seconds of a fresh run in workdir/name, which must see the same
  batches (the same lengths) as the first run."""
  run = train_steps(worker_args, record_path, os.path.join(workdir, name), timed.stop, 0)
  if run.lengths[timed] != lengths:
    raise RuntimeError("the run %s had other batches (lengths %s, not %s)" % (
        name, run.lengths[timed], lengths))
  return run.seconds[timed]


def train_steps(worker_args, record_path, model_dir, total, traced):
  """Trains `total` steps from random weights; the ProfileHook that timed (and traced the
  last `traced` of) them. The same seed gives every run the same batches."""
  model_fn, input_fn, seq_name = bench_worker.our_model_and_input(worker_args, record_path,
                                                                   total)
  estimator = bench_worker.measured_estimator(model_fn, model_dir, worker_args.batch)
  hook = ProfileHook(total, traced, seq_name)
  estimator.train(input_fn, max_steps=total, hooks=[hook.as_session_run_hook()])
  bench_worker.drop_checkpoints(model_dir)
  return hook


# --- The report ---------------------------------------------------------------------

def categories_of(result):
  """[(category, ms per traced step, share of the traced op time)], largest first; op
  types of "other" over 2% are their own rows."""
  steps = max(result["traced_steps"], 1)
  total = sum(micros for _, _, micros in result["op_micros"]) or 1
  sums = collections.Counter()
  for category, kind, micros in result["op_micros"]:
    if category == OTHER and micros / float(total) > 0.02:
      category = "other: %s" % kind
    sums[category] += micros
  return [(category, micros / 1000.0 / steps, micros / float(total))
          for category, micros in sums.most_common()]


def report(results, args, machine):
  lines = ["# Where a training step's time goes", "",
           "Machine: %s. This project's pipeline, %s-shaped BERT, max_seq_length %d, batch "
           "%d, `--dynamic_padding`, random weights, on the benchmark's data (`%s`). "
           "Written by `./run.sh benchmark profile` (tools/profile_step.py)." % (
               machine, args.model, args.seq, args.batch, os.path.basename(args.data)), ""]
  for r in results:
    step = sum(r["step_seconds"])
    lines += [
        "## TF %s (Python %s)" % (r["tensorflow"], r["python"]), "",
        "- %d timed steps (untraced), mean length %.1f tokens: %.0f ms per step, %.1f "
        "GFLOP/s of matrix multiplies." % (
            r["steps"], sum(r["lengths"]) / float(len(r["lengths"])),
            1000 * step / r["steps"], r["train_gflops"] / step),
        "- **Matmul floor**: the same steps' matrix multiplies alone (forward and "
        "backward, the same shapes, this runtime) take %.0f ms per step: the step takes "
        "**%.2fx its matmul floor**." % (1000 * r["floor_seconds"] / r["steps"],
                                         step / r["floor_seconds"]),
        "- %d traced steps, mean length %.1f tokens (%.0f ms per step with tracing on). "
        "Each op's time, summed by category; ops run on two threads at once, so the sum "
        "can exceed the wall time, and each share is of the summed op time:" % (
            r["traced_steps"], sum(r["traced_lengths"]) / float(max(len(r["traced_lengths"]), 1)),
            1000 * sum(r["traced_step_seconds"]) / max(len(r["traced_step_seconds"]), 1)), "",
        "| category | ms per step (summed op time) | share |", "|---|---|---|"]
    lines += ["| %s | %.1f | %.1f%% |" % (c, ms, 100 * share)
              for c, ms, share in categories_of(r)]
    lines += [""] + without_lines(r)
  return "\n".join(lines)


def without_lines(r):
  """The report's table of the step with parts left out (none without such runs)."""
  if not r.get("step_seconds_without"):
    return []
  step, floor = sum(r["step_seconds"]), r["floor_seconds"]
  lines = ["The same timed steps (the same batches) with parts of the encoder left out: "
           "how much faster each would be if it cost nothing. This bounds what fusing it "
           "into other kernels could give. Parts left out together can gain more or less "
           "than the sum of their own gains (they share threads and memory traffic). "
           "The full step's time here and above is the mean of a run before these and a "
           "run after them.",
           "", "| left out | ms per step | step ÷ matmul floor | faster by |", "|---|---|---|---|",
           "| nothing | %.0f | %.2fx | - |" % (1000 * step / r["steps"], step / floor)]
  for name, seconds in r["step_seconds_without"].items():
    lines.append("| %s | %.0f | %.2fx | %.0f%% |" % (
        name.replace("+", ", ").replace("_", " ").replace("gelu", "GELU"),
        1000 * sum(seconds) / r["steps"], sum(seconds) / floor,
        100 * (step / sum(seconds) - 1)))
  return lines + [""]


def main(argv=None):
  args = parse_args(argv)
  if not args.vocab:
    from tools import assets
    args.vocab = os.path.join(assets.minilm_hf_dir(), "vocab.txt")
  if args.worker_out:
    with open(args.worker_out, "w") as f:
      json.dump(profile_one_runtime(args), f)
    return
  bench_worker.rows_or_exit(args.data, "profile")
  os.makedirs(args.work_dir, exist_ok=True)
  results = []
  for runtime in args.runtimes.split(","):
    if not os.path.exists(python_of(runtime)):
      print("profile: no %s environment (./run.sh setup): skipped" % runtime)
      continue
    out = os.path.join(args.work_dir, "profile_%s.json" % runtime)
    print("profiling on %s ..." % runtime)
    sys.stdout.flush()
    command = [python_of(runtime), "-m", "tools.profile_step", "--worker_out", out,
               "--vocab", args.vocab] + (argv if argv is not None else sys.argv[1:])
    result = subprocess.run(command, cwd=ROOT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True)
    if result.returncode:
      sys.exit("profile: the %s run failed:\n%s" % (runtime, result.stdout[-3000:]))
    with open(out) as f:
      results.append(json.load(f))
  os.makedirs(args.out_dir, exist_ok=True)
  text = report(results, args, machine_description())
  with open(os.path.join(args.out_dir, "profile.md"), "w") as f:
    f.write(text + "\n")
  with open(os.path.join(args.out_dir, "profile.json"), "w") as f:
    json.dump(results, f, indent=1)
  print(text)
  print("wrote profile.md and profile.json to %s" % args.out_dir)


if __name__ == "__main__":
  main()
