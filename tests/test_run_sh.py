"""./run.sh's own checks, made before any environment is built or any test runs."""

import os
import re
import subprocess

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
