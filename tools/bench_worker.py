"""One benchmark measurement in its own process (tools/benchmark.py runs these).

  python -m tools.bench_worker --impl=ours|google --model=tiny|minilm|base --seq=128 ...
  python -m tools.bench_worker --measure_peak

--impl=google is Google's original code path from bert-tensorflow (its modeling,
optimization and run_classifier's model_fn_builder, features and input_fn, with
fixed padding to --seq) under TPUEstimator(use_tpu=False); it needs TF 1.15.
--impl=ours is this project's pipeline. Both train the same model shape on the
same rows with the same batch size, from random weights (speed does not depend
on the weights). Results go to --out as JSON.

With --dynamic_padding (off a TPU), ours trains on a representative window of its own
input pipeline's batches rather than on the first ones the pipeline emits, as the
Hugging Face loop does (a few dozen steps are a sample of an epoch, and a sampler's first
need not be typical). The pipeline is read ahead for whole epochs' worth of batches, the
window drawn from them as tools/windows.py draws the Hugging Face loop's, and the run
trains on exactly those batches; the result reports the pool's mean padded length
(epoch_mean_seq_length) beside the measured steps' (mean_seq_length).
"""

import argparse
import json
import os
import platform
import sys
import time

from pipeline.machine import PEAK_SIZE, matmul_peaks, onednn_problem  # (plain Python)
from tools.windows import InputError, mean, pool_size, stratified_window  # (plain Python)

MODELS = {  # BERT shapes: layers, hidden, heads, intermediate
    "tiny": (2, 128, 2, 512),
    "minilm": (6, 384, 12, 1536),
    "base": (12, 768, 12, 3072),
}
VOCAB_SIZE = 30522
SEED = 1  # of the initial weights (the Estimator's graph), the input's shuffle and the window


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--impl", choices=["ours", "google"], default="ours")
  parser.add_argument("--model", choices=sorted(MODELS), default="tiny")
  parser.add_argument("--seq", type=int, default=128)
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--steps", type=int, default=20, help="measured steps")
  parser.add_argument("--warmup", type=int, default=3, help="steps before measuring")
  parser.add_argument("--dynamic_padding", action="store_true")
  parser.add_argument("--xla", action="store_true", help="ours: XLA JIT (as --use_xla)")
  parser.add_argument("--fused_kernels", choices=["auto", "on", "off"], default="auto",
                      help="ours: as run_classifier's --fused_kernels")
  parser.add_argument("--fp16", action="store_true",
                      help="ours: float16 with dynamic loss scaling (as --use_fp16; GPU)")
  parser.add_argument("--precision", choices=["auto", "float32", "bfloat16"], default="auto",
                      help="ours off a TPU: the encoder's precision in training; auto: as a "
                           "run chooses it on this machine (bfloat16 where the CPU computes "
                           "in it), else as --use_bf16=false or --use_bf16")
  parser.add_argument("--num_gpus", type=int, default=0,
                      help="ours: MirroredStrategy over this many GPUs (as --num_gpus); "
                           "--batch rows on each, so the global batch grows with them")
  parser.add_argument("--tpu_name", help="ours: on this Cloud TPU, fixed padding, bfloat16 "
                                         "(as --use_tpu --use_bf16); --workdir on gs://")
  parser.add_argument("--num_tpu_cores", type=int, default=8)
  parser.add_argument("--data", help="CSV of text,label rows without a header")
  parser.add_argument("--vocab")
  parser.add_argument("--workdir")
  parser.add_argument("--out")
  parser.add_argument("--threads", help="INTER,INTRA: TensorFlow's inter-op and intra-op "
                                         "thread pools (default: TensorFlow's choice)")
  parser.add_argument("--floor_repeats", type=int, default=3,
                      help="after training, time the measured steps' matrix multiplies alone "
                           "this many times per length (the matmul floor; 0: not measured)")
  parser.add_argument("--measure_peak", action="store_true",
                      help="only measure the matrix-multiply peaks: float32, and bfloat16 "
                           "where the CPU has instructions for it")
  parser.add_argument("--peak_size", type=int, default=PEAK_SIZE,
                      help="with --measure_peak: the square matrices' side")
  parser.add_argument("--featurise_only", choices=["google", "python", "fast"],
                      help="only measure featurisation (to TFRecords) with this tokenizer path")
  parser.add_argument("--workers", type=int, default=1, help="featurisation processes (ours)")
  parser.add_argument("--compare_records", nargs="+", metavar="WORKDIR",
                      help="only count, for each of our --featurise_only outputs after the "
                           "first (Google's), the rows whose features equal Google's")
  return parser.parse_args(argv)


def runtime_info(args=None):
  """The runtime's versions, and the device a run computes on (pipeline.machine's
  describe_device: kind, description, count)."""
  import tensorflow as tf
  from pipeline.machine import describe_device
  tpu_name = args.tpu_name if args is not None else None
  return {"python": platform.python_version(), "tensorflow": tf.__version__,
          "device": describe_device(bool(tpu_name), tpu_name, None,
                                    args.num_tpu_cores if tpu_name else 8,
                                    # (no args: the peak's row, which counts every GPU)
                                    args.num_gpus if args is not None else None)}


def peaks(size=None):
  """The float32 matmul peak (of size x size matrices, PEAK_SIZE by default), and the
  bfloat16 one where the CPU has instructions for it and the runtime computes in it (TF 2
  with oneDNN, or else the fused kernels' own matmul on AMX or AVX512_BF16, as a run
  trains), else None with why."""
  import tensorflow as tf
  from pipeline.machine import bf16_instructions
  problem, own = onednn_problem(tf.__version__), False
  if problem and bf16_instructions():
    from pipeline.build import with_own_matmul
    problem, own = with_own_matmul(problem, own_matmul_problem())
  size = size or PEAK_SIZE
  result = matmul_peaks(lambda dtype: matmul_peak_gflops(
      size, dtype=dtype, own_matmul=own and dtype == "bfloat16"), problem)
  result["peak_size"] = size
  if own and result.get("bf16_matmul_peak_gflops"):
    result["bf16_note"] += ", the fused kernels' own matmul"
  return result


def own_matmul_problem():
  """None where a run's fused kernels (--fused_kernels=auto) multiply bfloat16 on AMX or
  AVX512_BF16 here, else why not (pipeline.build.own_matmul_problem)."""
  from pipeline.build import training_own_matmul_problem
  return training_own_matmul_problem()


def matmul_peak_gflops(n=PEAK_SIZE, repeats=10, rounds=5, dtype="float32", own_matmul=False):
  """Best observed GFLOP/s of an n x n matmul chain in dtype, on this runtime and
  machine; own_matmul: by the fused kernels' bfloat16 matmul, of float32 operands (as a
  run that uses it trains: pipeline.build.own_bf16_matmul)."""
  import numpy as np
  import tensorflow.compat.v1 as tf
  matmul = own_matmul_op() if own_matmul else tf.matmul
  with tf.Graph().as_default():
    a = tf.Variable(np.random.RandomState(0).rand(n, n).astype(np.float32) / n)
    a = a if dtype == "float32" or own_matmul else tf.cast(a, dtype)
    product = a
    for _ in range(repeats):
      product = matmul(product, a)
    total = tf.reduce_sum(product)
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      session.run(total)
      best = float("inf")
      for _ in range(rounds):
        start = time.time()
        session.run(total)
        best = min(best, time.time() - start)
  return 2.0 * n ** 3 * repeats / best / 1e9


def own_matmul_op():
  """The fused kernels' bfloat16 matmul (modeling.fused: BertBf16MatMul)."""
  from modeling.fused import library
  return library().bert_bf16_mat_mul


def matmul_floor_seconds(config, seq_length, batch, repeats, pooled_only=True,
                         session_config=None, dtype="float32", own_matmul=False):
  """The median time of a training step's matrix multiplies alone, forward and backward,
  at seq_length tokens (tools.flops' shapes), in dtype (the step's own precision) on this
  runtime: the "matmul floor" that no implementation of the step can beat on this
  machine. own_matmul: as a step whose matrix multiplies (the dense layers' and the
  attention's batched ones) are the fused kernels' own bfloat16 matmul between float32
  activations."""
  import tensorflow.compat.v1 as tf
  from tools.flops import backward_matmuls, forward_matmuls
  forward = forward_matmuls(config, seq_length, pooled_only=pooled_only, batch=batch)
  products = forward + backward_matmuls(forward)
  with tf.Graph().as_default():
    tf.set_random_seed(0)
    products_run = []
    for count, m, k, n in products:  # (random initial values: no constants in the graph)
      shapes = ([m, k], [k, n]) if count == 1 else ([count, m, k], [count, k, n])
      kind = tf.float32 if own_matmul else dtype
      a, b = (tf.Variable(tf.random.uniform(shape, dtype=kind)) for shape in shapes)
      products_run.append(tf.reduce_sum(own_matmul_op()(a, b) if own_matmul else
                                        tf.matmul(a, b)))
    # Each product's every element is summed and fetched (m n adds to its m k n
    # multiply-adds): a product whose result is unused or partly used is not computed,
    # or not whole.
    step = products_run
    with tf.Session(config=session_config) as session:
      session.run(tf.global_variables_initializer())
      for _ in range(2):
        session.run(step)
      times = []
      for _ in range(repeats):
        started = time.time()
        session.run(step)
        times.append(time.time() - started)
  return sorted(times)[len(times) // 2]


class TimingHook(object):
  """Wall-clock times of training steps, and the sequence length each step computed."""

  def __init__(self, seq_length_tensor_name=None):
    import tensorflow.compat.v1 as tf
    self._tf = tf
    self.seq_length_tensor_name = seq_length_tensor_name
    self.session_ready = None
    self.step_ends = []
    self.seq_lengths = []

  def as_session_run_hook(self):
    hook = self
    tf = self._tf

    class _Hook(tf.train.SessionRunHook):
      def begin(self):
        self._length = None
        if hook.seq_length_tensor_name:
          self._length = tf.get_default_graph().get_tensor_by_name(
              hook.seq_length_tensor_name + ":0")

      def after_create_session(self, session, coord):
        hook.session_ready = time.time()

      def before_run(self, run_context):
        return tf.train.SessionRunArgs(self._length) if self._length is not None else None

      def after_run(self, run_context, run_values):
        hook.step_ends.append(time.time())
        if run_values.results is not None:
          hook.seq_lengths.append(int(run_values.results))

    return _Hook()


def read_rows(path, count):
  import csv
  import io
  csv.field_size_limit(2**31 - 1)
  rows = []
  with io.open(path, encoding="utf-8", newline="") as f:
    for number, row in enumerate(csv.reader(f), 1):
      if row and len(row) != 2:  # (a blank line is no row)
        raise ValueError("%s row %d has %d columns; the rows must be text,label (quote a "
                         "text that holds commas)" % (path, number, len(row)))
      if row:
        rows.append((row[0], row[1]))
  return rows[:count] if count else rows


def rows_or_exit(path, tool):
  """read_rows(path, 0), or an exit with one line (tool: its prefix) when a row is not
  text,label or the file is missing: in the command the user ran, not in a worker's
  traceback."""
  if not os.path.isfile(path):
    sys.exit("%s: no data file %s; pass --data=a CSV of text,label rows" % (tool, path))
  try:
    return read_rows(path, 0)
  except ValueError as e:
    sys.exit("%s: %s" % (tool, e))


def vocab_or_exit(path, tool):
  """The vocabulary at path ({token: id}), or an exit with one line (tool: its prefix) when
  it is missing, not a BERT vocabulary, or has more ids than the benchmark's models have
  embedding rows (VOCAB_SIZE): in the command the user ran, not in a worker's traceback."""
  from data.data_error import DataError
  from data.vocabulary import load_vocab, vocab_size
  try:
    vocab = load_vocab(path)
  except DataError as e:
    sys.exit("%s: --vocab %s" % (tool, e))
  if vocab_size(vocab) > VOCAB_SIZE:
    sys.exit("%s: --vocab %s: its ids reach %d, and the benchmark's models embed %d (an "
             "uncased BERT vocabulary's). Fix: pass an uncased BERT vocab.txt, or leave "
             "--vocab out for MiniLM's" % (tool, path, vocab_size(vocab) - 1, VOCAB_SIZE))
  return vocab


def bert_shape(model):
  layers, hidden, heads, intermediate = MODELS[model]
  return dict(vocab_size=VOCAB_SIZE, hidden_size=hidden, num_hidden_layers=layers,
              num_attention_heads=heads, intermediate_size=intermediate)


def featurise_google(rows, args, path):
  from absl import flags
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
  from bert import run_classifier, tokenization
  tokenizer = tokenization.FullTokenizer(args.vocab, do_lower_case=True)
  examples = [run_classifier.InputExample(str(i), text, None, label)
              for i, (text, label) in enumerate(rows)]
  start = time.time()
  run_classifier.file_based_convert_examples_to_features(examples, ["0", "1"], args.seq,
                                                         tokenizer, path)
  return time.time() - start, "bert.tokenization.FullTokenizer"


def binary_label_spec():
  from spec.heads.classification import SingleLabel
  return SingleLabel(["label"], ["0", "1"])


def featurise_ours(rows, args, path, tokenizer_kind="fast"):
  from data import fast_tokenization
  from data.features import InputExample
  from data.tfrecord import build_records
  from data.tokenization import FullTokenizer
  fast = tokenizer_kind == "fast" and fast_tokenization.available()
  tokenizer = (fast_tokenization.FastTokenizer if fast else FullTokenizer)(args.vocab, True)
  spec = binary_label_spec()
  examples = [InputExample(str(i), text, label=label)
              for i, (text, label) in enumerate(rows)]
  settings = {"label_spec": spec.to_card(), "max_seq_length": args.seq,
              "source": args.data, "benchmark": True, "tokenizer": tokenizer_kind}
  start = time.time()
  build_records(examples, path, settings, tokenizer, num_shards=args.workers,
                num_workers=args.workers)
  name = type(tokenizer).__module__ + "." + type(tokenizer).__name__
  return time.time() - start, name + (" x%d processes" % args.workers if args.workers > 1 else "")


def featurise_only(args):
  rows = read_rows(args.data, 0)
  os.makedirs(args.workdir, exist_ok=True)
  path = os.path.join(args.workdir, FEATURES_FILE)
  if args.featurise_only == "google":
    seconds, name = featurise_google(rows, args, path)
  else:
    seconds, name = featurise_ours(rows, args, path, args.featurise_only)
  return dict(runtime_info(), path=args.featurise_only, tokenizer=name, rows=len(rows),
              seq=args.seq, seconds=seconds, rows_per_sec=len(rows) / seconds,
              workers=args.workers)


FEATURES_FILE = "features.tf_record"
COMPARED_FIELDS = ("input_ids", "input_mask", "segment_ids", "label_ids")


def compare_records(google_workdir, *our_workdirs):
  """For each of our featurisations (in one process: TensorFlow's start-up once), how many
  rows of its records hold the ids, mask, segments and label of Google's: {"compared":
  [{"workdir", "google_rows", "our_rows", "equal_rows"}, ...]}."""
  import tensorflow.compat.v1 as tf

  def rows(paths):
    for path in paths:
      for record in tf.io.tf_record_iterator(path):
        feature = tf.train.Example.FromString(record).features.feature
        yield tuple(tuple(feature[name].int64_list.value) for name in COMPARED_FIELDS)

  google_rows = list(rows([os.path.join(google_workdir, FEATURES_FILE)]))
  compared = []
  for our_workdir in our_workdirs:
    with open(os.path.join(our_workdir, FEATURES_FILE + ".meta.json")) as f:
      our_rows = list(rows(json.load(f)["files"]))  # shards, in order
    compared.append(dict(workdir=our_workdir, google_rows=len(google_rows),
                         our_rows=len(our_rows),
                         equal_rows=sum(1 for a, b in zip(google_rows, our_rows) if a == b)))
  return dict(compared=compared)


def google_model_and_input(args, record_path, total_steps):
  from bert import modeling, run_classifier
  config = modeling.BertConfig(**bert_shape(args.model))
  model_fn = run_classifier.model_fn_builder(
      bert_config=config, num_labels=2, init_checkpoint=None, learning_rate=2e-5,
      num_train_steps=total_steps, num_warmup_steps=args.warmup, use_tpu=False,
      use_one_hot_embeddings=False)
  input_fn = run_classifier.file_based_input_fn_builder(record_path, args.seq, True, True)
  return model_fn, input_fn, None


def our_model_and_input(args, record_path, total_steps):
  from data.input_fn import input_fn_builder
  from modeling.bert import BertConfig
  from modeling.model_fn import SEQ_LENGTH_NAME, ModelSettings, model_fn_builder
  from pipeline.build import own_bf16_matmul
  from pipeline.machine import prepare
  prepare()  # (graph mode on either runtime; the C allocator as a run sets it)
  config = BertConfig(**bert_shape(args.model))
  on_tpu = bool(args.tpu_name)
  precision, args.fused, why_not, said = precision_and_kernels_of(args)
  args.trained_precision = precision
  args.own_matmul = own_bf16_matmul(args.fused, precision)
  print(said, flush=True)
  print("fused CPU kernels: %s" % ("on" if args.fused else "off (%s)" % why_not), flush=True)
  model_fn = model_fn_builder(config, binary_label_spec(), ModelSettings(
      learning_rate=2e-5, num_train_steps=total_steps, num_warmup_steps=args.warmup,
      use_tpu=on_tpu, xla_global_step_fix=args.xla,
      summary_dir=os.path.join(args.workdir, "model"), precision=precision,
      fused_kernels=args.fused, own_bf16_matmul=args.own_matmul))
  input_fn = input_fn_builder(record_path, args.seq, True, binary_label_spec(), seed=SEED,
                              dynamic_padding=args.dynamic_padding)
  # (On a TPU the length is inside the TPU computation, where no hook can read it.)
  return model_fn, input_fn, None if on_tpu else SEQ_LENGTH_NAME


def precision_and_kernels_of(args):
  """(the encoder's precision in training, whether ours runs the fused CPU kernels, why
  not, the precision's log line), as run_classifier decides for a training."""
  from pipeline.build import training_choices
  given = {"bfloat16": True, "float32": False}.get(getattr(args, "precision", "auto"))
  return training_choices(fused_kernels=args.fused_kernels, use_tpu=bool(args.tpu_name),
                          use_fp16=args.fp16,
                          use_bf16=bool(args.tpu_name) if given is None else given,
                          given_bf16=given is not None, use_xla=args.xla,
                          num_gpus=args.num_gpus)


def windowed(args):
  """Whether the run trains on a window of its pipeline's batches (see the module's doc):
  ours with dynamic padding, off a TPU (which pads to --seq, and reads its input on its
  own hosts)."""
  return args.impl == "ours" and args.dynamic_padding and not args.tpu_name


def read_batches(input_fn, batch_size, count, session_config=None):
  """(the first count batches of input_fn's training dataset, each a dict of numpy
  arrays; the dataset's output types; its output shapes). Read as the Estimator reads
  them: input_fn called with params' batch_size, in a graph seeded as
  measured_estimator's RunConfig seeds the Estimator's (the seeded shuffle's order
  depends on the graph's seed too)."""
  import tensorflow.compat.v1 as tf
  with tf.Graph().as_default():
    tf.set_random_seed(SEED)
    dataset = input_fn({"batch_size": batch_size})
    types, shapes = tf.data.get_output_types(dataset), tf.data.get_output_shapes(dataset)
    next_batch = tf.data.make_one_shot_iterator(dataset).get_next()
    with tf.Session(config=session_config) as session:
      batches = [session.run(next_batch) for _ in range(count)]
  return batches, types, shapes


def width_of(batch):
  """A batch's padded length: dynamic padding cuts it to its longest row."""
  return int(batch["input_ids"].shape[1])


MIN_POOL_EPOCHS = 2


def draw_window(input_fn, rows, args, replicas=1):
  """(the window's batches, in training order: args.warmup then args.steps steps of
  replicas batches each, one per GPU; the pipeline's output types and shapes; the pool's
  figures). The pool is the input pipeline's first whole epochs' worth of batches of
  --batch rows (tools/windows.pool_size), two at least, the window stratified_window's
  draw from it."""
  epochs, count = pool_size(rows, args.batch, args.warmup * replicas, args.steps * replicas)
  if epochs < MIN_POOL_EPOCHS:
    epochs, count = MIN_POOL_EPOCHS, MIN_POOL_EPOCHS * (rows // args.batch)
  pool, types, shapes = read_batches(input_fn, args.batch, count, threads_config(args))
  widths = [width_of(batch) for batch in pool]
  chosen = stratified_window(widths, args.warmup * replicas, args.steps * replicas, SEED)
  figures = dict(epoch_mean_seq_length=mean(widths), epochs_sampled=epochs,
                 epoch_batches=rows // args.batch)
  return [pool[k] for k in chosen], types, shapes, figures


def window_input_fn(batches, types, shapes):
  """input_fn(params) of a windowed run: exactly these batches (dicts of numpy arrays),
  once each and in this order, with the types and shapes of the dataset they were read
  from (a batch's sequences keep their own width). Too few for the steps asked would end
  training early, which run's step count refuses."""

  def input_fn(params):
    import tensorflow.compat.v1 as tf
    rows = len(batches[0]["input_ids"])
    if params["batch_size"] != rows:
      raise ValueError("the window's batches hold %d rows; the Estimator asks for %d"
                       % (rows, params["batch_size"]))
    dataset = tf.data.Dataset.from_generator(lambda: iter(batches), types, shapes)
    return dataset.prefetch(tf.data.experimental.AUTOTUNE)  # (as the pipeline's own end)

  return input_fn


def measured_lengths(args, step_lengths, window_widths=None, replicas=1):
  """(the padded length of each batch the measured steps trained on, the rows of each
  batch). With a window (window_widths: each of its batches' width, in order): its
  measured batches, every GPU's, of --batch rows; on one device they must be the lengths
  the steps computed (step_lengths, from the TimingHook), else the run trained on other
  batches. Without: the lengths the steps computed, --seq where no hook could read them
  (Google's path, a TPU), of the global batch each."""
  if window_widths is None:
    return step_lengths[args.warmup:] or [args.seq] * args.steps, args.batch * replicas
  # (Several GPUs: the hook reads one replica's length, and which batch each replica
  # takes is the strategy's business, so only the count is checked, by run.)
  if replicas == 1 and list(step_lengths) != list(window_widths):
    raise AssertionError("the steps computed lengths %s, not the window's %s"
                         % (list(step_lengths), list(window_widths)))
  return list(window_widths[args.warmup * replicas:]), args.batch


def measured_estimator(model_fn, model_dir, batch, args=None):
  """The (TPU)Estimator of a measured run: no checkpoints or step logs while it runs, seed
  SEED; with args, on their device (a TPU at one step per host round trip, so that every
  step is timed; GPUs) with their session config."""
  from modeling.estimator import build_estimator
  from spec.options import DeviceOptions, TrainingOptions
  training = TrainingOptions(train_batch_size=batch, eval_batch_size=batch,
                             predict_batch_size=batch, save_checkpoints_steps=10 ** 9,
                             log_every_steps=10 ** 8, seed=SEED)
  if args is None:
    return build_estimator(model_fn, model_dir, DeviceOptions(), training)
  device = DeviceOptions(use_tpu=bool(args.tpu_name), tpu_name=args.tpu_name,
                         num_tpu_cores=args.num_tpu_cores, iterations_per_loop=1,
                         num_gpus=max(1, args.num_gpus))
  return build_estimator(model_fn, model_dir, device, training,
                         session_config=session_config_of(args))


def session_config_of(args):
  """The session config of --xla and --threads (None: TensorFlow's defaults)."""
  from modeling.estimator import xla_session_config
  if not args.xla:
    return threads_config(args)
  return threads_config(args, xla_session_config())


def threads_config(args, config=None):
  """config (or a new one) with --threads' thread pools; None without either."""
  import tensorflow.compat.v1 as tf
  if not args.threads:
    return config
  config = config or tf.ConfigProto()
  inter, intra = (int(n) for n in args.threads.split(","))
  config.inter_op_parallelism_threads = inter
  config.intra_op_parallelism_threads = intra
  return config


def load_average():
  try:
    return os.getloadavg()[0]
  except OSError:
    return None


def run(args):
  import tensorflow.compat.v1 as tf
  from modeling.bert import BertConfig
  from tools.flops import train_flops_of_steps

  tf.get_logger().setLevel("ERROR")
  tf.io.gfile.makedirs(args.workdir)
  total_steps = args.warmup + args.steps
  rows = read_rows(args.data, 0)
  record_path = os.path.join(args.workdir, "train.tf_record")
  featurise = featurise_google if args.impl == "google" else featurise_ours
  featurise_seconds, tokenizer_name = featurise(rows, args, record_path)

  build = google_model_and_input if args.impl == "google" else our_model_and_input
  model_fn, input_fn, seq_tensor = build(args, record_path, total_steps)
  replicas = max(1, args.num_gpus)
  batch = args.batch * replicas  # global: --batch rows on each GPU
  # (The window is read before the clock starts: the Estimator's start-up is its own.)
  input_fn, window_widths, pool_figures = measured_input(args, input_fn, len(rows), replicas)
  model_dir = os.path.join(args.workdir, "model")
  estimator = measured_estimator(model_fn, model_dir, batch, args)
  timing = TimingHook(seq_tensor)
  load_before = load_average()
  called = time.time()
  estimator.train(input_fn=input_fn, max_steps=total_steps, hooks=[timing.as_session_run_hook()])
  load_after = load_average()  # (of training, before the floor's own runs)
  drop_checkpoints(model_dir)
  ends = timing.step_ends
  assert len(ends) == total_steps, "ran %d steps, expected %d" % (len(ends), total_steps)
  measured = ends[-1] - ends[args.warmup - 1] if args.warmup else ends[-1] - timing.session_ready
  lengths, rows_each = measured_lengths(args, timing.seq_lengths, window_widths, replicas)
  config = BertConfig(**bert_shape(args.model))
  pooled_only = args.impl == "ours"  # our classifier computes only [CLS] in the last layer
  flops = train_flops_of_steps(config, lengths, rows_each, pooled_only)
  examples = args.steps * batch
  # (Several devices, a TPU or float16: a floor of one CPU device would not compare. A
  # bfloat16 step's floor is its matrix multiplies in bfloat16.)
  one_device = not args.tpu_name and args.num_gpus <= 1 and not args.fp16
  precision = getattr(args, "trained_precision", "float32")  # (Google's: float32)
  floor = measured_floor_seconds(config, lengths, rows_each,
                                 args.floor_repeats if one_device else 0, pooled_only,
                                 threads_config(args), precision,
                                 getattr(args, "own_matmul", False))
  result = dict(
      runtime_info(args), impl=args.impl, model=args.model, seq=args.seq, batch=batch,
      steps=args.steps, warmup_steps=args.warmup, dynamic_padding=args.dynamic_padding,
      xla=args.xla, fp16=args.fp16, fused_kernels=getattr(args, "fused", False),
      precision=precision,
      num_gpus=args.num_gpus, tpu=bool(args.tpu_name),
      startup_seconds=timing.session_ready - called,
      warmup_seconds=(ends[args.warmup - 1] - timing.session_ready) if args.warmup else 0.0,
      measured_seconds=measured, ms_per_step=1000.0 * measured / args.steps,
      examples_per_sec=examples / measured, mean_seq_length=mean(lengths),
      seq_lengths=lengths, window=window_widths is not None,
      train_flops_per_example=flops / examples, gflops_per_sec=flops / measured / 1e9,
      featurise_rows=len(rows), featurise_rows_per_sec=len(rows) / featurise_seconds,
      tokenizer=tokenizer_name, load_before=load_before, load_after=load_after,
      matmul_floor_seconds=floor, step_over_matmul_floor=measured / floor if floor else None)
  result.update(pool_figures)
  return result


def measured_input(args, input_fn, rows, replicas):
  """(the input_fn of the measured run, its window's batch widths in training order, the
  figures of the batches it is drawn from). A windowed run (windowed) trains on its
  window (draw_window); any other on input_fn's stream, whose every batch is --seq long
  where it pads to --seq (Google's path, ours without dynamic padding; None for ours
  with dynamic padding on a TPU, which the benchmark does not run)."""
  if not windowed(args):
    fixed = args.impl == "google" or not args.dynamic_padding
    return input_fn, None, dict(epoch_mean_seq_length=args.seq if fixed else None)
  window, types, shapes, figures = draw_window(input_fn, rows, args, replicas)
  return window_input_fn(window, types, shapes), [width_of(b) for b in window], figures


def drop_checkpoints(model_dir):
  """Deletes a measured run's model folder: nothing reads its checkpoints again (the next
  measurement starts from nothing), and with MiniLM each run would leave half a gigabyte."""
  import tensorflow.compat.v1 as tf
  if tf.io.gfile.isdir(model_dir):
    tf.io.gfile.rmtree(model_dir)


def measured_floor_seconds(config, lengths, batch, repeats, pooled_only, session_config=None,
                           dtype="float32", own_matmul=False):
  """The matmul floor of the measured steps in dtype: each step's length timed once (per
  distinct length) and summed over the steps; None with no repeats."""
  if not repeats:
    return None
  floors = floor_seconds_by_length(config, lengths, batch, repeats, pooled_only,
                                   session_config, dtype, own_matmul)
  return sum(floors[n] for n in lengths)


def floor_seconds_by_length(config, lengths, batch, repeats, pooled_only=True,
                            session_config=None, dtype="float32", own_matmul=False):
  """{length: matmul floor seconds of one step at that length}, each distinct length once."""
  return {n: matmul_floor_seconds(config, n, batch, repeats, pooled_only, session_config,
                                  dtype, own_matmul)
          for n in sorted(set(lengths))}


def main(argv=None):
  args = parse_args(argv)
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  if args.workdir:
    # A measurement starts from nothing: cached records would skip featurisation,
    # and a checkpoint at the last step would skip training.
    import tensorflow.compat.v1 as tf
    if tf.io.gfile.isdir(args.workdir):  # (on a TPU, a gs:// folder)
      tf.io.gfile.rmtree(args.workdir)
  if args.measure_peak:
    result = dict(runtime_info(), **peaks(args.peak_size))
  elif args.featurise_only:
    result = featurise_only(args)
  elif args.compare_records:
    result = compare_records(*args.compare_records)
  else:
    try:
      result = run(args)
    except InputError as error:  # (too few rows for a whole batch)
      sys.exit("bench_worker: %s" % error)
  text = json.dumps(result, indent=2, sort_keys=True)
  if args.out:
    with open(args.out, "w") as f:
      f.write(text)
  print(text)


if __name__ == "__main__":
  main()
