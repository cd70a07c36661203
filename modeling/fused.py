"""The encoder's fused CPU kernels (modeling/kernels/*.cc): built, loaded, differentiated.

The kernels do the elementwise work around the encoder's matrix multiplies in one pass
each way: bias + GELU, dropout + bias + residual + layer norm, and the attention's scale +
mask + softmax + dropout; and the optimizer's update of each variable (clipped gradient,
weight decay and Adam) in one pass (fused_ops.cc). bf16_matmul.cc is a bfloat16 matrix
multiply on the CPU's AMX tiles or AVX512_BF16's dot products, for a runtime whose own
kernels emulate bfloat16 (TF 1.15). The C++ files are compiled for the running
TensorFlow the first time they are needed (a few seconds; `./run.sh setup` does it
ahead), into .cache/kernels under the project, named by TensorFlow's version and the
sources' hash so that a changed source or another runtime never loads a stale library.
They run on the CPU, on activations in float32 or bfloat16, computing in float32 either
way (in bfloat16 only the matrix multiplies between them run in bfloat16, and the
parameters stay float32); modeling/bert.py uses them only when its caller asks
(model_fn, while training).

Dropout masks come from a hash of (seed, step, site, element), not from TensorFlow's
random ops: the backward pass recomputes them, and a resumed run draws what an
uninterrupted one would have drawn.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading

import tensorflow.compat.v1 as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = tuple(os.path.join(ROOT, "modeling", "kernels", name)
                for name in ("fused_ops.cc", "bf16_matmul.cc"))
BUILD_DIR = os.path.join(ROOT, ".cache", "kernels")
COMPILER = os.environ.get("CXX", "g++")
COMPILE_SECONDS = 600
LAYER_NORM_EPSILON = 1e-12
# Dropout sites outside the encoder's layers (layer i has 3i, 3i + 1, 3i + 2).
EMBEDDINGS_SITE = 1 << 30
HEAD_SITE = EMBEDDINGS_SITE + 1

_LOCK = threading.Lock()
_LOADED = {}  # "library" -> the loaded module, or "error" -> why it cannot be


class KernelsUnavailable(RuntimeError):
  """The fused kernels cannot be built or loaded here; the message says why."""


def library_path(build_dir=BUILD_DIR):
  """Where the build of the current source for this TensorFlow, compiler, compile command
  and CPU lives: a library built for another CPU (-march=native) could stop a run with
  an illegal instruction, and one from other flags would be stale."""
  digest = hashlib.sha256()
  for source in SOURCES:
    with open(source, "rb") as f:
      digest.update(f.read())
  for part in [compiler_version(), cpu_features()] + compile_command("OUTPUT"):
    digest.update(part.encode("utf-8") + b"\0")
  return os.path.join(build_dir, "fused_ops-tf%s-%s.so" % (tf.version.VERSION,
                                                           digest.hexdigest()[:12]))


def compiler_version():
  try:
    done = subprocess.run([COMPILER, "--version"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, universal_newlines=True, timeout=60)
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
  except (OSError, subprocess.SubprocessError):
    return ""  # (no compiler: build() says so)


def cpu_features():
  """The CPU's feature flags (Linux), or its name elsewhere."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith(("flags", "Features")):
          return " ".join(sorted(line.split(":", 1)[1].split()))
  except OSError:
    pass
  import platform
  return platform.machine() + " " + platform.processor()


def compile_command(output):
  """g++ for this TensorFlow: its headers, ABI and framework library. -march=native
  because the library is built on the machine that runs it (.cache is not shipped)."""
  standard = ["-std=c++14"] if tf.version.VERSION.startswith("1.") else []
  return ([COMPILER] + standard + ["-shared", "-fPIC", "-O3", "-march=native"] +
          list(SOURCES) + ["-o", output] +
          tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags())


def build(build_dir=BUILD_DIR):
  """Compiles the kernels for this TensorFlow unless already built; returns the path.
  Written under a temporary name and renamed, so a concurrent or interrupted build
  never leaves a partial library under the final name."""
  path = library_path(build_dir)
  if os.path.exists(path):
    return path
  if shutil.which(COMPILER) is None:
    raise KernelsUnavailable("no C++ compiler (%s) to build %s; install g++ or set CXX"
                             % (COMPILER, " and ".join(SOURCES)))
  try:
    os.makedirs(build_dir, exist_ok=True)
    handle, staging = tempfile.mkstemp(suffix=".so", dir=build_dir)
    os.close(handle)
  except OSError as error:
    raise KernelsUnavailable("cannot write the fused kernels into %s: %s"
                             % (build_dir, error.strerror or error))
  try:
    try:
      done = subprocess.run(compile_command(staging), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, universal_newlines=True,
                            timeout=COMPILE_SECONDS)
    except subprocess.TimeoutExpired:
      raise KernelsUnavailable("compiling %s took over %d s; stopped" % (
          " and ".join(SOURCES), COMPILE_SECONDS))
    if done.returncode:
      raise KernelsUnavailable("compiling %s failed: %s" % (" and ".join(SOURCES),
                                                            first_error(done.stdout)))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o755 & ~umask)  # (mkstemp made it 0600: other users could not load it)
    os.replace(staging, path)
  finally:
    if os.path.exists(staging):
      os.remove(staging)
  return path


def first_error(output):
  """The compiler's first error line (its last lines are the source and a caret)."""
  lines = output.strip().splitlines() or ["no output"]
  return next((line.strip() for line in lines if "error" in line), lines[-1].strip())


def library():
  """The loaded kernels (built first if need be); KernelsUnavailable says why not.
  A library that exists but does not load (cut short, foreign) is built again once."""
  with _LOCK:
    if "library" in _LOADED:
      return _LOADED["library"]
    if "error" in _LOADED:
      raise KernelsUnavailable(_LOADED["error"])
    try:
      path = build()
      try:
        module = tf.load_op_library(path)
      except tf.errors.NotFoundError:
        os.remove(path)
        module = tf.load_op_library(build())
    except OSError as error:  # (a folder this user may not change)
      _LOADED["error"] = "cannot replace the fused kernels in %s: %s" % (
          BUILD_DIR, error.strerror or error)
      raise KernelsUnavailable(_LOADED["error"])
    except (KernelsUnavailable, tf.errors.NotFoundError) as error:
      _LOADED["error"] = str(error).strip().splitlines()[-1]
      raise KernelsUnavailable(_LOADED["error"])
    _LOADED["library"] = module
    return module


def unavailable_reason():
  """None when the kernels load here, else one line saying why they do not."""
  try:
    library()
    return None
  except KernelsUnavailable as error:
    return str(error)


class FusedKernels(object):
  """The fused ops of one training graph, sharing its dropout seed.

  seed: int64 [2], the run's seed and the global step, so that every step draws new
  masks. Each dropout names its own `site` (unique within the step).
  own_bf16_matmul: the encoder's matrix multiplies (its dense layers' and the attention's
  batched ones) run in bfloat16 on the kernels' own matmul (BertBf16MatMul: on AMX or
  AVX512_BF16), for a runtime whose own kernels would emulate bfloat16 (TF 1.15). It
  takes and gives float32 as well: the operands are rounded to bfloat16, their products
  summed in float32, and the activations around it stay float32."""

  EMBEDDINGS_SITE, HEAD_SITE = EMBEDDINGS_SITE, HEAD_SITE

  def __init__(self, seed, own_bf16_matmul=False):
    self.ops = library()
    self.seed = seed
    self.own_bf16_matmul = own_bf16_matmul

  def matmul(self, a, b, transpose_b=False):
    """a [..., M, K] x b [..., K, N] (b [..., N, K] with transpose_b), as tf.matmul of
    two matrices or two batches of them of one shape (with own_bf16_matmul, of a and b
    rounded to bfloat16, in a's dtype)."""
    if self.own_bf16_matmul:
      return self.ops.bert_bf16_mat_mul(a, b, transpose_b=transpose_b)
    return tf.matmul(a, b, transpose_b=transpose_b)

  def bias_gelu(self, x, bias):
    """tanh-GELU(x + bias), x [rows, C], bias [C]."""
    return self.ops.bert_bias_gelu(x, bias)

  def dropout_add_norm(self, x, bias, residual, gamma, beta, rate, site):
    """LayerNorm(dropout(x + bias) + residual), all [rows, C] but bias, gamma, beta [C]."""
    y, _, _, _ = self.ops.bert_dropout_add_norm(
        x, bias, residual, gamma, beta, self.seed, rate=rate, site=site,
        epsilon=LAYER_NORM_EPSILON)
    return y

  def attention_softmax(self, scores, bias, scale, rate, site):
    """dropout(softmax(scores * scale + bias)) over the last axis; scores [B, heads, Q, S],
    bias [B, S] (0 for a token, -10000 for padding)."""
    dropped, _ = self.ops.bert_attention_softmax(scores, bias, self.seed, scale=scale,
                                                 rate=rate, site=site)
    return dropped

  def split_heads(self, x, bias, heads):
    """x [B, S, heads * d] + bias [heads * d] -> [B, heads, S, d]."""
    return self.ops.bert_split_heads(x, bias, heads=heads)

  def merge_heads(self, y):
    """[B, heads, S, d] -> [B, S, heads * d]."""
    return self.ops.bert_merge_heads(y)

  def dropout(self, x, rate, site):
    """x * (1 / (1 - rate) or 0), element by element, by the seed's mask at site."""
    return self.ops.bert_dropout(x, self.seed, rate=rate, site=site) if rate else x

  def adam_weight_decay(self, param, m, v, grad, grad_scale, lr, decay, beta1, beta2,
                        epsilon):
    """AdamWeightDecay's update of the float32 resource variable param and its slots m and
    v in one pass (an op with no outputs): grad * grad_scale is the clipped gradient, and
    param is multiplied by decay (1 - lr * the weight-decay rate, or 1) before Adam's step
    of lr (no bias correction)."""
    return self.ops.bert_adam_weight_decay(
        param.handle, m.handle, v.handle, grad, grad_scale, lr, decay, beta1=beta1,
        beta2=beta2, epsilon=epsilon)

  def dropout_multipliers(self, rate, site, size):
    """What the kernels multiply elements 0 .. size - 1 by: 1 / (1 - rate) or 0."""
    return self.ops.bert_dropout_multipliers(self.seed, rate=rate, site=site, size=size)


@tf.RegisterGradient("BertBiasGelu")
def _bias_gelu_gradient(op, dy):
  dx, dbias = library().bert_bias_gelu_grad(dy, op.inputs[0], op.inputs[1])
  return dx, dbias


@tf.RegisterGradient("BertBf16MatMul")
def _bf16_matmul_gradient(op, dz):
  a, b = op.inputs
  ta, tb = op.get_attr("transpose_a"), op.get_attr("transpose_b")
  mm = library().bert_bf16_mat_mul
  if not ta and not tb:
    return mm(dz, b, transpose_b=True), mm(a, dz, transpose_a=True)
  if not ta:
    return mm(dz, b), mm(dz, a, transpose_a=True)
  if not tb:
    return mm(b, dz, transpose_b=True), mm(a, dz)
  return (mm(b, dz, transpose_a=True, transpose_b=True),
          mm(dz, a, transpose_a=True, transpose_b=True))


def bf16_matmul_units():
  """"AMX_BF16" where BertBf16MatMul multiplies on the CPU's AMX tiles, "AVX512_BF16"
  where on AVX512_BF16's dot products instead, else why it computes in float32 (neither in
  the build, or AMX alone and the kernel refused the tile state)."""
  with tf.Graph().as_default(), tf.Session() as session:
    units = session.run(library().bert_bf16_mat_mul_units())
  return units.decode("utf-8") if isinstance(units, bytes) else units


@tf.RegisterGradient("BertSplitHeads")
def _split_heads_gradient(op, dy):
  dx, dbias = library().bert_split_heads_grad(dy)
  return dx, dbias


@tf.RegisterGradient("BertMergeHeads")
def _merge_heads_gradient(op, dx):
  return library().bert_split_heads(dx, tf.zeros(tf.shape(dx)[-1:]),
                                    heads=op.inputs[0].shape.as_list()[1])


@tf.RegisterGradient("BertDropout")
def _dropout_gradient(op, dy):
  return library().bert_dropout(dy, op.inputs[1], rate=op.get_attr("rate"),
                                site=op.get_attr("site")), None


@tf.RegisterGradient("BertDropoutAddNorm")
def _dropout_add_norm_gradient(op, dy, *internal):
  # (The other outputs are what the backward kernel reads; nothing else consumes them,
  # and TensorFlow passes zeros for them.)
  dx, dresidual, dbias, dgamma, dbeta = library().bert_dropout_add_norm_grad(
      dy, op.outputs[1], op.outputs[2], op.outputs[3], op.inputs[3], op.inputs[5],
      rate=op.get_attr("rate"), site=op.get_attr("site"))
  return dx, dbias, dresidual, dgamma, dbeta, None


@tf.RegisterGradient("BertAttentionSoftmax")
def _attention_softmax_gradient(op, ddropped, unused_dprobs):
  dscores = library().bert_attention_softmax_grad(
      ddropped, op.outputs[1], op.inputs[2], scale=op.get_attr("scale"),
      rate=op.get_attr("rate"), site=op.get_attr("site"))
  return dscores, None, None


def step_seed():
  """The dropout seed of a training graph: [the graph's seed (a random one if unset), the
  global step], int64. Every step draws new masks, and a resumed run the same ones as a
  run that was never stopped."""
  import random
  seed = tf.get_default_graph().seed
  if seed is None:
    seed = random.SystemRandom().randrange(2 ** 62)
  step = tf.cast(tf.train.get_or_create_global_step(), tf.int64)
  return tf.stack([tf.constant(seed, tf.int64), step])


def main(argv=None):
  """`python -m modeling.fused`: build the kernels now (./run.sh setup calls it)."""
  try:
    print("fused kernels: %s" % build())
  except KernelsUnavailable as error:
    print("fused kernels not built (training uses TensorFlow's own ops): %s" % error)
  return 0


if __name__ == "__main__":
  sys.exit(main())
