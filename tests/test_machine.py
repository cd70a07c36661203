"""The C allocator's settings (pipeline/machine.py keep_freed_memory).

Each check runs in a fresh interpreter: glibc's settings last for the life of a
process, and this one has already made them (tests/conftest.py sets TensorFlow up).
"""

import ctypes
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT
from pipeline.machine import ALLOCATOR_SETTINGS, glibc_version, keep_freed_memory

# mallinfo2, which the checks read glibc's mapped bytes from, is in glibc 2.33 and later.
ON_GLIBC = bool(glibc_version()) and hasattr(ctypes.CDLL(None), "mallinfo2")
NEEDS_GLIBC = pytest.mark.skipif(not ON_GLIBC, reason="needs glibc 2.33 or later (mallinfo2)")
BLOCK = 8 << 20  # far above glibc's default mmap threshold (128 KB), below 32 MB


def allocation_in_fresh_process(set_allocator, **user_environment):
  """{"result": keep_freed_memory's answer or None, "mmapped": the bytes glibc maps anew
  for one 8 MB block}, from a fresh interpreter whose environment has none of glibc's
  allocator settings but `user_environment`."""
  script = textwrap.dedent("""
      import ctypes, json, sys
      sys.path.insert(0, %r)
      from pipeline.machine import keep_freed_memory
      result = keep_freed_memory() if %r else None
      libc = ctypes.CDLL(None)
      libc.malloc.argtypes, libc.malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
      libc.free.argtypes = [ctypes.c_void_p]

      class MallInfo(ctypes.Structure):  # glibc's struct mallinfo2
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]

      libc.mallinfo2.restype = MallInfo
      before = libc.mallinfo2().hblkhd  # (blocks the interpreter's start-up mapped)
      block = libc.malloc(%d)
      mmapped = libc.mallinfo2().hblkhd - before
      libc.free(block)
      print(json.dumps({"result": result, "mmapped": mmapped}))
  """) % (ROOT, set_allocator, BLOCK)
  # glibc's defaults, whatever the environment running the tests says
  env = {name: value for name, value in os.environ.items() if name not in
         [n for _, n, _ in ALLOCATOR_SETTINGS] + ["GLIBC_TUNABLES", "LD_PRELOAD"]}
  env.update(user_environment)
  out = subprocess.run([sys.executable, "-c", script], env=env, check=True,
                       stdout=subprocess.PIPE, universal_newlines=True).stdout
  return json.loads(out.strip().splitlines()[-1])


@NEEDS_GLIBC
def test_by_default_glibc_serves_a_large_block_with_mmap():
  # The behaviour keep_freed_memory changes: without it the 8 MB block is its own mapping.
  assert allocation_in_fresh_process(False)["mmapped"] >= BLOCK


@NEEDS_GLIBC
def test_keep_freed_memory_serves_large_blocks_from_the_heap():
  assert allocation_in_fresh_process(True) == {"result": "set", "mmapped": 0}


@NEEDS_GLIBC
def test_the_users_malloc_variables_are_left_alone():
  got = allocation_in_fresh_process(True, MALLOC_TOP_PAD_="0")
  assert got["result"] == "left as the environment sets it (MALLOC_TOP_PAD_)"
  assert got["mmapped"] >= BLOCK  # glibc's own threshold, untouched


def test_names_every_variable_the_user_set():
  environ = {"MALLOC_MMAP_THRESHOLD_": "1", "MALLOC_TRIM_THRESHOLD_": "2", "PATH": "/bin"}
  assert keep_freed_memory(environ) == (
      "left as the environment sets it (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_)")


def test_glibc_tunables_and_a_preloaded_malloc_are_left_alone():
  assert keep_freed_memory({"GLIBC_TUNABLES": "glibc.malloc.top_pad=0"}) == (
      "left as the environment sets it (GLIBC_TUNABLES)")
  assert keep_freed_memory({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}) == (
      "left alone: another malloc is preloaded (LD_PRELOAD)")
