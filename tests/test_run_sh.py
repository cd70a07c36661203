"""./run.sh's own checks, made before any environment is built or any test runs."""

import json
import shutil
import os
import re
import subprocess
import tempfile

import pytest

from conftest import ROOT


def free_megabytes(folder):
  return int(subprocess.check_output(["df", "-Pm", folder],
                                     universal_newlines=True).splitlines()[1].split()[3])


def test_the_suite_refuses_to_start_without_space_for_its_checkpoints(tmp_path):
  env = dict(os.environ, TMPDIR=str(tmp_path), TEST_SPACE_MB=str(10 ** 12))
  result = subprocess.run(["bash", os.path.join(ROOT, "run.sh"), "test", "--fast"], cwd=ROOT,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=60)
  assert result.returncode == 1
  assert result.stdout == ""  # refused before building environments or running tests
  message = result.stderr.splitlines()[-1]
  found = re.match(r"run\.sh: the tests need 1000000000000 MB free in (.+) \(their checkpoints "
                   r"go there\), which has (\d+) MB: free some space, or set TMPDIR to a "
                   r"folder on a larger disk$", message)
  assert found, message
  assert found.group(1) == str(tmp_path)
  # (other work on the disk may have moved it a little since)
  assert abs(int(found.group(2)) - free_megabytes(str(tmp_path))) < 500


def test_fails_where_the_runner_test_asks():
  """Passes in every run but the runner's own test below, which asks it to fail on one
  runtime through RUN_SH_FAIL_ON (to see that failure reach run.sh's exit code)."""
  from conftest import IS_TF1
  assert os.environ.get("RUN_SH_FAIL_ON") != ("tf1" if IS_TF1 else "tf2")
  # (and, asked by that test, that each suite's TensorFlow got the threads it names)
  for name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
    expected = os.environ.get("RUN_SH_EXPECT_" + name)
    assert expected is None or os.environ.get(name) == expected, name


@pytest.mark.slow
@pytest.mark.one_runtime("tf1")  # (it runs the suites of every runtime itself)
def test_the_runtimes_suites_run_at_once_and_a_failure_fails_the_run():
  from conftest import TESTED_RUNTIMES
  failing = TESTED_RUNTIMES[0]
  env = dict(os.environ, RUN_SH_FAIL_ON=failing, TEST_SPACE_MB="1")
  # Run at once, each suite's TensorFlow gets its share of the cores, unless the caller
  # set the number (here the inter-op pool's).
  env.pop("TF_NUM_INTRAOP_THREADS", None)
  env["TF_NUM_INTEROP_THREADS"] = "3"
  if len(TESTED_RUNTIMES) == 2:
    env["RUN_SH_EXPECT_TF_NUM_INTRAOP_THREADS"] = str(max(1, os.cpu_count() // 2))
    env["RUN_SH_EXPECT_TF_NUM_INTEROP_THREADS"] = "3"
  # (only this file's neighbours are collected: the others' imports would be most of it)
  result = subprocess.run(["bash", os.path.join(ROOT, "run.sh"), "test", "-p",
                           "no:cacheprovider", "--ignore-glob=tests/test_[!r]*.py",
                           "--ignore-glob=tests/test_r[!u]*.py", "-k",
                           "test_fails_where_the_runner_test_asks"],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=600)
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1] == (
      "run.sh: tests failed on: %s (pytest exit 1)" % failing)
  out = result.stdout
  if len(TESTED_RUNTIMES) == 2:
    assert "tests on tf1 and tf2 at the same time" in out
    # Each suite's whole output in one piece: its header, its result, nothing between.
    pieces = {r: out[out.index("==> tests on %s: " % r):] for r in ("tf1", "tf2")}
    first, second = sorted(pieces, key=lambda r: out.index("==> tests on %s: " % r))
    pieces[first] = pieces[first][:pieces[first].index("==> tests on %s: " % second)]
    assert "1 failed" in pieces["tf1"] and "1 passed" not in pieces["tf1"]
    assert "1 passed" in pieces["tf2"] and "1 failed" not in pieces["tf2"]


@pytest.mark.slow
@pytest.mark.one_runtime("tf2")  # (a pip command in TF 2.15's environment, from either suite)
def test_the_cuda_option_installs_tf2s_cuda_extra():
  """./run.sh setup --cuda adds tools/requirements-cuda.txt to .venvs/tf2: the CUDA extra of
  the TensorFlow installed there, whose metadata pins the CUDA 12.2 and cuDNN 8.9 libraries
  TF 2.15.1 was built with, and nothing but NVIDIA's libraries. No GPU here: each pinned
  library is only looked up on the package index (a wheel for this machine at that version),
  not downloaded (about 2 GB)."""
  tf2_python = os.path.join(ROOT, ".venvs", "tf2", "bin", "python")
  if not os.path.exists(tf2_python):
    pytest.skip("no TF 2.15 environment .venvs/tf2: ./run.sh setup builds it")
  with open(os.path.join(ROOT, "tools", "requirements-cuda.txt")) as f:
    lines = [l.strip() for l in f if l.strip() and not l.startswith("#")]
  version = subprocess.run(
      [tf2_python, "-c", "import importlib.metadata as m; print(m.version('tensorflow'))"],
      stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout.strip()
  assert lines == ["tensorflow[and-cuda]==%s" % version]  # (the installed TensorFlow's extra)
  listed = subprocess.run(
      [tf2_python, "-c", "import importlib.metadata as m, json; print(json.dumps("
       "m.requires('tensorflow')))"],
      stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
  pins = {}
  for requirement in json.loads(listed):
    if "extra == 'and-cuda'" in requirement or 'extra == "and-cuda"' in requirement:
      found = re.match(r"([A-Za-z0-9_.-]+) ?\(?==([0-9.]+)\)?", requirement)
      assert found, requirement
      pins[found.group(1)] = found.group(2)
  assert pins["nvidia-cuda-runtime-cu12"].startswith("12.2.")
  assert pins["nvidia-cudnn-cu12"].startswith("8.9.")
  assert all(name.startswith("nvidia-") for name in pins), sorted(pins)
  lookups = {name: subprocess.Popen(
      [tf2_python, "-m", "pip", "index", "versions", "--disable-pip-version-check", name],
      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True)
      for name in pins}
  for name, lookup in lookups.items():
    out = lookup.communicate(timeout=300)[0]
    assert lookup.returncode == 0, (name, out)
    versions = re.search(r"Available versions: (.*)", out).group(1).split(", ")
    assert pins[name] in versions, (name, pins[name], out[:500])
  done = subprocess.run([os.path.join(ROOT, "run.sh"), "setup", "--gpu"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        universal_newlines=True, timeout=60)
  assert done.returncode == 1
  assert done.stderr.strip().splitlines()[-1] == (
      "run.sh: setup takes hf, onnx, --cuda or --no-cuda, not --gpu")


UV_STAND_IN = r"""#!/bin/bash
root="FETCHED"
case "$1 $2" in
  "python find") [ -x "$root/$3/python" ] && echo "$root/$3/python" || exit 2 ;;
  "python install") mkdir -p "$root/$3"; v=$3
    printf '#!/bin/bash\nif [ "$1" = --version ]; then echo "Python %s.0"; else echo "(%s, %s)"; fi\n' "$v" "${v%%.*}" "${v#*.}" > "$root/$3/python"
    chmod +x "$root/$3/python" ;;
esac
"""
PYTHON_3_12_STAND_IN = r"""#!/bin/bash
if [ "$1 $2 $3" = "-m pip install" ]; then
  PIP_FAILS
  for ((i = 1; i <= $#; i++)); do
    if [ "${!i}" = --target ]; then j=$((i + 1)); target=${!j}; fi
  done
  mkdir -p "$target/bin"; cp "UV_STAND_IN" "$target/bin/uv"; chmod +x "$target/bin/uv"
  exit 0
fi
if [ "$1" = --version ]; then echo "Python 3.12.1"; exit 0; fi
echo "(3, 12)"
"""


def _write(path, text):
  with open(path, "w") as f:
    f.write(text)
  os.chmod(path, 0o755)


def _machine_with_python_3_12_only(tmp_path, pip_works):
  """A PATH whose only Python is a stand-in 3.12 (the version it reports) whose pip can
  install uv, or not; uv's stand-in fetches an interpreter (a stand-in reporting the
  version asked for). Nothing is downloaded: the logic of ./run.sh alone is under test."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  uv = tmp_path / "uv_stand_in"
  _write(str(uv), UV_STAND_IN.replace("FETCHED", str(tmp_path / "uv_pythons")))
  _write(str(bin_dir / "python3"), PYTHON_3_12_STAND_IN.replace("UV_STAND_IN", str(uv)).replace(
      "PIP_FAILS", "" if pip_works else "echo 'no pip here' >&2; exit 1"))
  tools = tmp_path / "tools"  # (this machine's commands, its Pythons and uv left out)
  tools.mkdir()
  for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
    for name in os.listdir(folder):
      if not name.startswith(("python", "pip", "uv", "pyenv")) and not (
          tools / name).exists():
        os.symlink(os.path.join(folder, name), str(tools / name))
  env = dict(os.environ, HOME=str(tmp_path / "home"), PATH="%s:%s" % (bin_dir, tools))
  for name in ("PYTHON37", "PYTHON311", "PYTHON312", "CI"):
    env.pop(name, None)
  return env


def _project_copy(tmp_path):
  """The project's files without its environments, caches, tests and docs."""
  root = tmp_path / "project"
  shutil.copytree(ROOT, str(root), ignore=shutil.ignore_patterns(
      ".venvs", ".cache", ".git", "output", "tests", "docs"))
  return root


def _run_on_python_3_12_only(tmp_path, command, pip_works):
  """(the project's copy, ./run.sh COMMAND run there) on a machine with Python 3.12 alone."""
  root = _project_copy(tmp_path)
  env = _machine_with_python_3_12_only(tmp_path, pip_works=pip_works)
  return root, subprocess.run(["bash", str(root / "run.sh"), command], cwd=str(root),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=120)


@pytest.mark.one_runtime("tf2")  # (bash alone)
def test_on_a_machine_with_python_3_12_only_uv_fetches_the_pythons(tmp_path):
  root, done = _run_on_python_3_12_only(tmp_path, "pythons", pip_works=True)
  assert done.returncode == 0, done.stderr
  fetched = tmp_path / "uv_pythons"
  assert done.stdout.splitlines() == [
      "tf1: %s/3.7/python (Python 3.7.0)" % fetched,
      "tf2: %s/3.11/python (Python 3.11.0)" % fetched,
      "onnx: %s/3.12/python (Python 3.12.0)" % fetched,
      "hf: %s/3.11/python (Python 3.11.0)" % fetched]
  assert ("run.sh: installing uv from the package index into %s/.venvs/.uv, to fetch a "
          "Python" % root) in done.stderr
  assert ("run.sh: no Python 3.7 here for tf1: fetching one with uv (%s/.venvs/.uv/bin/uv "
          "python install 3.7)" % root) in done.stderr


@pytest.mark.one_runtime("tf2")
def test_without_a_way_to_fetch_python_it_ends_in_one_line_with_the_ways(tmp_path):
  _, done = _run_on_python_3_12_only(tmp_path, "setup", pip_works=False)
  assert done.returncode == 1
  assert done.stderr.strip().splitlines()[-1] == (
      "run.sh: neither Python 3.7 nor Python 3.9-3.11 could be found or fetched: install uv "
      "(python3 -m pip install uv) and run again, or pyenv, or your distribution's "
      "python3.11 (and python3.7 for TF 1.15); or name them with "
      "PYTHON311=/path/to/python3.11 and PYTHON37=/path/to/python3.7")
