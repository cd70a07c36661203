"""The CPU a run computes on, as the run records name it. Plain Python (no TensorFlow), so
that the benchmark's Hugging Face path names its CPU the same way."""

import os
import platform


def cpu_model():
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def describe_cpu():
  """{"kind": "CPU", "count": cores, "description": "<model>, <cores> cores"}."""
  return {"kind": "CPU", "count": os.cpu_count(),
          "description": "%s, %d cores" % (cpu_model(), os.cpu_count())}
