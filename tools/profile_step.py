"""Where a training step's time goes: an op-level profile, and the step's matmul floor.

  ./run.sh benchmark profile [--model minilm --seq 128 --batch 32 --steps 10 ...]

In each runtime's environment (one process each) it fine-tunes this project's pipeline
(--dynamic_padding, random weights) on the benchmark's data, and:
  - times --steps steps after --warmup_steps, with the encoder's fused CPU kernels
    (modeling/fused.py, as a run uses them) and again with TensorFlow's own ops;
  - traces --traced_steps more with TensorFlow's step statistics (RunOptions FULL_TRACE)
    and sums every op's time into categories: matrix multiplies, attention softmax and
    masking, layer norm, GELU, dropout, the embedding gather and its gradient, the
    optimizer update, the input pipeline (the step's wait for its batch), and the rest
    by op type;
  - counts the fused ops in the graph TensorFlow's optimizer (grappler) hands the
    executor, for both encoders: which fusions fire on this runtime;
  - times the step's own matrix multiplies alone (tools.flops: the same shapes,
    forward and backward, at each measured step's length), the "matmul floor";
  - times TensorFlow's own ops again with the encoder's dropout, its GELU, its layer
    norm, and all three, left out (--without, "none" to skip), then the fused step once
    more (its timed steps are the mean of its two runs): how much faster the step would
    be if each part cost nothing, the most that fusing it could give, against what the
    fused kernels give. Those models train differently; only their speed is measured.
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
    ("dropout, residual and layer norm (fused)",
     lambda name, kind: kind.startswith("BertDropoutAddNorm")),
    ("dropout", lambda name, kind: "dropout" in name or kind == "BertDropout"),
    ("layer norm", lambda name, kind: any(part in name for part in (
        "LayerNorm", "/batchnorm/", "/moments/"))),
    ("embedding gather and its gradient", lambda name, kind: "embeddings" in name),
    ("GELU", lambda name, kind: "/intermediate/" in name),
    ("attention heads, softmax and masking", lambda name, kind: "/attention/self/" in name),
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

  def __init__(self, total, traced, seq_length_tensor_name, graph_at=None):
    self.total, self.traced, self.seq_name = total, traced, seq_length_tensor_name
    self.seconds, self.lengths, self.traces = [], [], []
    self.graph_at, self.fused_ops = graph_at, None  # (the step whose graph is counted)

  def as_session_run_hook(self):
    import tensorflow.compat.v1 as tf
    outer = self

    class Hook(tf.train.SessionRunHook):
      def begin(self):
        self._length = tf.get_default_graph().get_tensor_by_name(outer.seq_name + ":0")

      def before_run(self, run_context):
        traced = len(outer.seconds) >= outer.total - outer.traced
        options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE) if traced else None
        if len(outer.seconds) == outer.graph_at:
          options = options or tf.RunOptions()
          options.output_partition_graphs = True
        self._started = time.time()
        return tf.train.SessionRunArgs(self._length, options=options)

      def after_run(self, run_context, run_values):
        outer.seconds.append(time.time() - self._started)
        outer.lengths.append(int(run_values.results))
        metadata = run_values.run_metadata
        if metadata is not None and metadata.partition_graphs:
          outer.fused_ops = fused_op_counts(metadata.partition_graphs)
        if metadata is not None and metadata.step_stats.dev_stats:
          outer.traces.append(metadata.step_stats)

    return Hook()


FUSED_OP_MARKS = ("Fused", "Bert", "LayerNorm", "Gelu")


def fused_op_counts(partition_graphs):
  """{op type, with its fused_ops in brackets: count} of the fused ops in the graphs the
  executor ran (after grappler's rewrites): grappler's and oneDNN's fusions, and this
  project's kernels."""
  counts = collections.Counter()
  for graph in partition_graphs:
    for node in graph.node:
      if not any(mark in node.op for mark in FUSED_OP_MARKS):
        continue
      fused = [op.decode() for op in node.attr["fused_ops"].list.s] if (
          "fused_ops" in node.attr) else []
      counts[node.op + ("[%s]" % ", ".join(fused) if fused else "")] += 1
  return dict(counts)


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
      workers=1, vocab=args.vocab, data=args.data, fused_kernels="on")
  plain_ops = argparse.Namespace(**dict(vars(worker_args), fused_kernels="off"))
  rows = bench_worker.read_rows(args.data, 0)
  record_path = os.path.join(workdir, "train.tf_record")
  bench_worker.featurise_ours(rows, worker_args, record_path)
  total = args.warmup_steps + args.steps + args.traced_steps
  hook = train_steps(worker_args, record_path, os.path.join(workdir, "model"), total,
                     args.traced_steps, graph_at=total - 1)
  timed = slice(args.warmup_steps, args.warmup_steps + args.steps)
  step_seconds, lengths = hook.seconds[timed], hook.lengths[timed]
  plain_seconds, plain_fused_ops = timed_seconds(plain_ops, record_path, workdir,
                                                 "tensorflow_ops", timed, lengths, graph=True)
  without = {}
  for parts in args.without:
    with encoder_without(parts):
      name = "+".join(parts)
      without[name] = timed_seconds(plain_ops, record_path, workdir, "without_" + name,
                                    timed, lengths)[0]
  if without:
    # The runs above start on a warm process (threads, the allocator's kept memory), so the
    # full step is timed again last, and the report takes the mean of its two timings.
    again = timed_seconds(worker_args, record_path, workdir, "full_again", timed, lengths)[0]
    step_seconds = [(a + b) / 2 for a, b in zip(step_seconds, again)]
  config = BertConfig(**bench_worker.bert_shape(args.model))
  # (in the step's own precision: bfloat16 where a run on this CPU trains in it)
  precision = getattr(worker_args, "trained_precision", "float32")
  floors = bench_worker.floor_seconds_by_length(
      config, lengths, args.batch, args.floor_repeats, dtype=precision,
      own_matmul=getattr(worker_args, "own_matmul", False))
  totals, others = op_times(hook.traces)
  return dict(
      bench_worker.runtime_info(worker_args), model=args.model, seq=args.seq, batch=args.batch,
      precision=precision, steps=args.steps, traced_steps=len(hook.traces), lengths=lengths,
      traced_lengths=hook.lengths[-args.traced_steps:],
      step_seconds=step_seconds, traced_step_seconds=hook.seconds[-args.traced_steps:],
      floor_seconds_by_length={str(n): s for n, s in floors.items()},
      floor_seconds=sum(floors[n] for n in lengths),
      step_seconds_without=without, step_seconds_tensorflow_ops=plain_seconds,
      fused_ops=hook.fused_ops, fused_ops_tensorflow_ops=plain_fused_ops,
      train_gflops=train_flops_of_steps(config, lengths, args.batch, pooled_only=True) / 1e9,
      op_micros=[[category, kind, micros] for (category, kind), micros in
                 sorted(totals.items(), key=lambda item: -item[1])],
      largest_other_ops=others.most_common(20))


def timed_seconds(worker_args, record_path, workdir, name, timed, lengths, graph=False):
  """(the `timed` steps' seconds, None or with graph the fused op counts of one more
  step) of a fresh run in workdir/name, which must see the same batches (the same
  lengths) as the first run."""
  steps = timed.stop + (1 if graph else 0)
  run = train_steps(worker_args, record_path, os.path.join(workdir, name), steps, 0,
                    graph_at=timed.stop if graph else None)
  if run.lengths[timed] != lengths:
    raise RuntimeError("the run %s had other batches (lengths %s, not %s)" % (
        name, run.lengths[timed], lengths))
  return run.seconds[timed], run.fused_ops


def train_steps(worker_args, record_path, model_dir, total, traced, graph_at=None):
  """Trains `total` steps from random weights; the ProfileHook that timed (and traced the
  last `traced` of) them, and counted the fused ops of step graph_at. The same seed gives
  every run the same batches."""
  model_fn, input_fn, seq_name = bench_worker.our_model_and_input(worker_args, record_path,
                                                                   total)
  estimator = bench_worker.measured_estimator(model_fn, model_dir, worker_args.batch)
  hook = ProfileHook(total, traced, seq_name, graph_at)
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
           "%d, `--dynamic_padding`, the encoder's fused CPU kernels (TensorFlow's own ops "
           "where said), random weights, on the benchmark's data (`%s`). "
           "Written by `./run.sh benchmark profile` (tools/profile_step.py)." % (
               machine, args.model, args.seq, args.batch, os.path.basename(args.data)), ""]
  for r in results:
    step, precision = sum(r["step_seconds"]), r.get("precision", "float32")
    lines += [
        "## TF %s (Python %s)" % (r["tensorflow"], r["python"]), "",
        "- %d timed steps (untraced), the encoder in %s, mean length %.1f tokens: %.0f ms "
        "per step, %.1f GFLOP/s of matrix multiplies." % (
            r["steps"], precision, sum(r["lengths"]) / float(len(r["lengths"])),
            1000 * step / r["steps"], r["train_gflops"] / step),
        "- **Matmul floor**: the same steps' matrix multiplies alone (forward and "
        "backward, the same shapes, this runtime, in %s) take %.0f ms per step: the step "
        "takes **%.2fx its matmul floor**." % (precision, 1000 * r["floor_seconds"] / r["steps"],
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
  return "\n".join(lines + fusion_lines(results))


def without_lines(r):
  """The report's table of the step with the fused kernels, with TensorFlow's ops, and
  with TensorFlow's ops and parts left out (none without such runs)."""
  plain, without = r.get("step_seconds_tensorflow_ops"), r.get("step_seconds_without")
  if not plain and not without:
    return []
  step, floor = sum(r["step_seconds"]), r["floor_seconds"]
  base = sum(plain) if plain else step
  rows = [("fused kernels (a run's default on a CPU)", step)]
  rows += [("TensorFlow's ops", base)] if plain else []
  rows += [("TensorFlow's ops without %s" % name.replace("+", ", ").replace("_", " ").replace(
      "gelu", "GELU"), sum(seconds)) for name, seconds in (without or {}).items()]
  lines = ["The same timed steps (the same batches) with the encoder's fused kernels, with "
           "TensorFlow's own ops, and with TensorFlow's ops and parts of the encoder left "
           "out: how much faster each part would make the step if it cost nothing, against "
           "what fusing it gives. Parts left out together can gain more or less than the "
           "sum of their own gains (they share threads and memory traffic). The fused "
           "step's time here and above is the mean of a run before these and a run after "
           "them.", "",
           "| encoder | ms per step | step ÷ matmul floor | time against TensorFlow's ops |",
           "|---|---|---|---|"]
  for label, seconds in rows:
    lines.append("| %s | %.0f | %.2fx | %s |" % (
        label, 1000 * seconds / r["steps"], seconds / floor,
        "-" if seconds == base else "%+.0f%%" % (100 * (seconds / base - 1))))
  return lines + [""]


def fusion_of(op):
  """What an op of the optimised graph fuses, in words."""
  kind, _, fused = op.partition("[")
  parts = fused.rstrip("]").replace("BiasAdd", "bias").replace("Tanh", "tanh")
  if kind == "BertBf16MatMul":
    return ("this project's kernel: matrix multiply of bfloat16-rounded operands, summed "
            "in float32 (on AMX or AVX512_BF16)")
  if "MatMul" in kind:
    where = "oneDNN's rewrite" if "Mkl" in kind else "grappler's remapper"
    return "matrix multiply + %s (%s)" % (parts, where)
  own = {"BertBiasGelu": "bias + GELU", "BertDropoutAddNorm": "bias + dropout + residual + "
         "layer norm", "BertAttentionSoftmax": "scale + mask + softmax + dropout",
         "BertDropout": "dropout (the embeddings' and the head's; its own gradient)"}
  heads = {"BertSplitHeads": "[B, S, H] + bias to [B, heads, S, d]",
           "BertMergeHeads": "[B, heads, S, d] to [B, S, H]"}
  if kind in heads:  # (each is the other's gradient)
    return "this project's kernel: %s, one copy (forward, and the other's gradient)" % (
        heads[kind])
  if kind == "BertSplitHeadsGrad":
    return ("this project's kernel: [B, heads, S, d] to [B, S, H] and the bias's "
            "gradient, backward")
  if kind == "BertAdamWeightDecay":
    return ("this project's kernel: clipping factor + weight decay + Adam, the optimizer's "
            "update of one variable")
  name = kind[:-len("Grad")] if kind.endswith("Grad") else kind
  if name in own:
    return "this project's kernel: %s, %s" % (own[name], "backward" if name != kind
                                              else "forward")
  return op


def fusion_lines(results):
  """The table of fused ops in each runtime's optimised training graph, for the fused
  encoder and for TensorFlow's ops."""
  columns = [(r, key) for r in results for key in ("fused_ops", "fused_ops_tensorflow_ops")
             if r.get(key) is not None]
  if not columns:
    return []
  ops = sorted(set(op for r, key in columns for op in r[key]))
  lines = ["## Fusions that fire", "",
           "Fused ops in the training step's graph as the executor runs it (after "
           "grappler's rewrites, from the partition graphs of one step), per runtime, with "
           "the encoder's fused kernels and with TensorFlow's own ops. An op the table "
           "does not list is in neither graph.", "",
           "| op | fuses | " + " | ".join(
               "TF %s, %s" % (r["tensorflow"], "fused kernels" if key == "fused_ops"
                               else "TensorFlow's ops") for r, key in columns) + " |",
           "|---|---|" + "---|" * len(columns)]
  for op in ops:
    lines.append("| `%s` | %s | %s |" % (op, fusion_of(op), " | ".join(
        str(r[key].get(op, 0)) for r, key in columns)))
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
  bench_worker.vocab_or_exit(args.vocab, "profile")
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
