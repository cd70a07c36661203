"""The cores this process may run on: what the featurisation's processes and the ONNX
server's workers are counted in."""

import os


def usable_cores():
  """The cores this process may run on (its affinity on Linux, else every core)."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # (not Linux)
    return os.cpu_count() or 1
