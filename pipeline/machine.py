"""The machine a run computes on: its device as the run records name it, and the C
allocator's settings for it. Plain Python at import (TensorFlow only inside
describe_device), so that the benchmark's Hugging Face path names its CPU the same way."""

import ctypes
import os
import platform

# glibc's mallopt parameters (malloc.h) and the environment variables that set them.
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
ALLOCATOR_SETTINGS = (
    # Blocks up to 32 MB (glibc's largest threshold) come from the heap, not from mmap.
    (M_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_", 32 << 20),
    # Freed memory stays in the process up to 1 GB, rather than going back to the system.
    (M_TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_", 1 << 30),
    # The heap grows 256 MB at a time.
    (M_TOP_PAD, "MALLOC_TOP_PAD_", 256 << 20),
)


def cpu_model():
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo's flags of bfloat16 matmul units


def bf16_instructions(cpuinfo="/proc/cpuinfo"):
  """The CPU's bfloat16 matrix-multiply instructions (of BF16_FLAGS) that cpuinfo lists;
  none where it lists none (or there is no such file)."""
  try:
    with open(cpuinfo) as f:
      flags = next((line.split(":", 1)[1].split() for line in f
                    if line.startswith("flags")), [])
  except OSError:
    return []
  return [flag for flag in BF16_FLAGS if flag in flags]


def onednn_problem(tf_version, environ=None):
  """Why this runtime's CPU kernels do not compute bfloat16 matmuls in bfloat16, or None:
  TF 1.15's wheel has no oneDNN (its CPU kernels convert bfloat16 to float32 and back),
  and TF 2's oneDNN kernels are off where TF_ENABLE_ONEDNN_OPTS=0."""
  environ = os.environ if environ is None else environ
  if int(tf_version.split(".")[0]) < 2:
    return ("TF %s's CPU kernels have no oneDNN: they convert bfloat16 to float32 and back"
            % tf_version)
  if environ.get("TF_ENABLE_ONEDNN_OPTS", "").strip().lower() in ("0", "false"):
    return "TF_ENABLE_ONEDNN_OPTS=0 turns TensorFlow's oneDNN kernels off"
  return None


# The side of the square matrices whose product chain measures a framework's matmul peak
# (tools/bench_worker, tools/bench_hf): large enough to run at the units' full rate.
PEAK_SIZE = 2048


def matmul_peaks(measure, runtime_problem=None):
  """A framework's matrix-multiply peaks as the benchmark records them: measure(dtype)
  (GFLOP/s) in float32, and in bfloat16 where the CPU has bfloat16 matmul instructions and
  runtime_problem (why the framework does not compute in them) is None; bf16_note names
  the instructions, or why there is no bfloat16 peak."""
  result = dict(matmul_peak_gflops=measure("float32"), bf16_matmul_peak_gflops=None)
  units = bf16_instructions()
  if not units:
    result["bf16_note"] = "no bfloat16 matmul instructions (%s)" % ", ".join(
        flag.upper() for flag in BF16_FLAGS)
  elif runtime_problem:
    result["bf16_note"] = runtime_problem
  else:
    result["bf16_matmul_peak_gflops"] = measure("bfloat16")
    result["bf16_note"] = ", ".join(flag.upper() for flag in units)
  return result


def describe_cpu():
  """{"kind": "CPU", "count": cores, "description": "<model>, <cores> cores"}."""
  return {"kind": "CPU", "count": os.cpu_count(),
          "description": "%s, %d cores" % (cpu_model(), os.cpu_count())}


_PREPARED = []


def prepare():
  """Sets up this process for runs, once: TensorFlow's graph mode on either runtime
  (modeling.compat) and the C allocator's settings."""
  if _PREPARED:
    return
  import tensorflow.compat.v1 as tf
  from modeling.compat import setup_tensorflow
  setup_tensorflow()
  tf.logging.info("C allocator (malloc) keeps freed memory: %s", keep_freed_memory())
  _PREPARED.append(True)


def keep_freed_memory(environ=None):
  """Has glibc's malloc keep freed memory for the next tensors instead of handing it back.

  TensorFlow's CPU allocator takes every tensor from malloc. By default glibc serves
  large blocks with a fresh mmap and returns freed memory to the system, so a training
  step's activations and gradients page-fault in again at every step. Keeping that
  memory in the process made MiniLM's training step about 17% faster on TF 1.15 at the
  median of paired runs (no measurable change on TF 2.15), for about half a gigabyte
  more peak memory.

  Returns what happened, for the log: "set"; or, leaving malloc alone, why: the user
  set these parameters (glibc's MALLOC_* variables or its malloc tunables), another
  malloc is preloaded, or the C library is not glibc.
  """
  environ = os.environ if environ is None else environ
  user_set = [name for _, name, _ in ALLOCATOR_SETTINGS if name in environ]
  if "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
    user_set.append("GLIBC_TUNABLES")
  if user_set:
    return "left as the environment sets it (%s)" % ", ".join(user_set)
  if "malloc" in environ.get("LD_PRELOAD", ""):  # jemalloc, tcmalloc, mimalloc, ...
    return "left alone: another malloc is preloaded (LD_PRELOAD)"
  if not glibc_version():
    return "left alone: the C library is not glibc"
  mallopt = ctypes.CDLL(None).mallopt
  mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
  for parameter, name, value in ALLOCATOR_SETTINGS:
    if mallopt(parameter, value) != 1:
      return "glibc refused %s=%d" % (name, value)
  return "set"


def glibc_version():
  """glibc's version ("2.36"), or None for another C library or system."""
  try:
    name, _, version = os.confstr("CS_GNU_LIBC_VERSION").partition(" ")
  except (AttributeError, ValueError, OSError, TypeError):
    return None
  return version if name == "glibc" else None


def describe_device(use_tpu, tpu_name=None, master=None, num_tpu_cores=8, num_gpus=None):
  """{"kind": TPU, GPU or CPU, "description": what it is, "count": how many} of the
  device this run computes on, for the run's summary. num_gpus: the GPUs it trains on
  (0 or 1: one, the first, where TensorFlow places the graph); None: all it sees, as a
  task of a multi-worker cluster does."""
  if use_tpu:
    return {"kind": "TPU", "count": num_tpu_cores,
            "description": "Cloud TPU %s, %d cores" % (tpu_name or master, num_tpu_cores)}
  import tensorflow.compat.v1 as tf
  gpus = tf.config.experimental.list_physical_devices("GPU")
  if gpus:
    from tensorflow.python.client import device_lib  # the only GPU-model query on both TFs
    names = [d.physical_device_desc for d in device_lib.list_local_devices()
             if d.device_type == "GPU"]
    models = [part.split("name: ", 1)[1] for desc in names for part in desc.split(", ")
              if part.startswith("name: ")]
    count = len(gpus) if num_gpus is None else min(len(gpus), max(1, num_gpus))
    return {"kind": "GPU", "count": count,
            "description": "%d x %s" % (count, models[0] if models else "GPU")}
  return describe_cpu()
