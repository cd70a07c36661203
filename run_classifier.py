r"""Fine-tune BERT for text classification, multi-label, soft-target or regression heads
with (TPU)Estimator.

The same graph runs on CPU, GPU and TPU: --use_tpu switches TPUEstimator between a
Cloud TPU and the local device. This file reads the flags, validates them once,
and wires data/ to modeling/. Nothing else reads flags.

  python run_classifier.py --task_name=jigsaw_toxic --data_dir=... \
      --bert_config_file=.../bert_config.json --vocab_file=.../vocab.txt \
      --init_checkpoint=.../bert_model.ckpt --do_train --do_eval --do_predict \
      --output_dir=/tmp/out
"""

import collections
import functools
import json
import logging
import math
import os
import random
import sys
import time

from absl import app
from absl import flags

import tensorflow.compat.v1 as tf

from data import fast_tokenization, tokenization
from data.errors import DataError
from data.features import Truncation
from data.input_fn import input_fn_builder
from data.processors import TASK_NAMES, canonical_task_name, get_processor
from data import folds as folds_lib
from data import weights as weights_lib
from data.tfrecord import build_records, file_sha256, shard_sizes
from modeling import bias_metrics
from modeling import eval_history
from modeling.bert import BertConfig
from modeling.checkpoint import checkpoint_global_step, head_shape
from modeling.compat import setup_tensorflow
from modeling import export
from modeling.estimator import (BatchSplitError, build_estimator, describe_device,
                                xla_session_config)
from modeling.metrics import metric_names
from modeling.model_fn import TRAIN_LOSS_NAME, model_fn_builder
from modeling.progress import ProgressHook, format_seconds
from modeling.summaries import scalar_events
from spec import config
from spec.cluster import ClusterError, parse_tf_config
from spec import labels as label_specs
from spec import model_card
from spec import signature
from serving.predictor import Predictor

log = logging.getLogger("run_classifier")

# --- Flags (names shared with Google's run_classifier mean the same thing) ------------
# Defined in a function, so that a call from Python (parse_flags) gets its own FlagValues
# and never touches absl's global FLAGS, which other libraries also define flags on.

def define_flags(flag_values):
  """Defines every flag of this program on flag_values."""
  string = functools.partial(flags.DEFINE_string, flag_values=flag_values)
  integer = functools.partial(flags.DEFINE_integer, flag_values=flag_values)
  float_ = functools.partial(flags.DEFINE_float, flag_values=flag_values)
  boolean = functools.partial(flags.DEFINE_bool, flag_values=flag_values)
  enum = functools.partial(flags.DEFINE_enum, flag_values=flag_values)
  list_ = functools.partial(flags.DEFINE_list, flag_values=flag_values)
  string("task_name", None, "One of: %s." % ", ".join(TASK_NAMES))
  string("data_dir", None, "Folder with the task's files (see the README per task).")
  string("train_file", None, "Train file; overrides the one found in --data_dir.")
  string("eval_file", None, "Eval file; overrides the one found in --data_dir.")
  string("predict_file", None, "Predict file; overrides the one found in --data_dir.")
  string("bert_config_file", None, "bert_config.json of the pre-trained model.")
  string("vocab_file", None, "vocab.txt of the pre-trained model.")
  string("init_checkpoint", None, "Checkpoint to start from (e.g. .../bert_model.ckpt).")
  string("bert_hub_module_handle", None,
         "A TF1-format BERT hub module (path or URL) to use instead of "
         "--bert_config_file/--init_checkpoint.")
  string("output_dir", None, "Where checkpoints, features and results go.")
  string("cache_dir", None, "Where featurised TFRecords are cached. "
         "Default: <output_dir>/features.")
  enum("tokenizer", "auto", config.CHOICES["tokenizer"],
       "Tokenizer for the rare texts the exact shortcut declines: 'fast' (Hugging "
       "Face tokenizers, Rust, all cores), 'python' (this project's), or 'auto' "
       "(fast when installed). All give Google's FullTokenizer ids.")
  integer("num_record_shards", 1, "Split each split's TFRecords into this many "
          "files (helps parallel reads on TPU hosts and parallel writing).")
  integer("featurise_workers", 1, "Processes that featurise in parallel (pieces "
          "of the examples, joined in order into the record files).")
  boolean("do_lower_case", True, "Lower-case the text (True for uncased models).")
  integer("max_seq_length", 128, "Tokens per example after WordPiece, with "
          "[CLS]/[SEP]. Longer texts are truncated, shorter ones padded.")
  boolean("do_train", False, "Fine-tune on the train split.")
  boolean("do_eval", False, "Evaluate on the dev split.")
  boolean("do_predict", False, "Predict the test split into test_results.tsv.")
  boolean("do_export", False, "Export the fine-tuned model as a SavedModel (a serving "
          "signature on input_ids/input_mask/segment_ids; the model card and vocabulary as "
          "assets) into --export_dir.")
  string("export_dir", None, "Where --do_export writes the SavedModel (must not exist). "
         "Default: <output_dir>/export/<unix seconds>, a version folder as TF Serving reads.")
  string("saved_model", None, "Predict with this export alone (a --do_export folder, or an "
         "output_dir whose export/ holds one; the newest is taken): with --do_predict, "
         "--predict_file and --output_dir, and no model or training flag.")
  integer("train_batch_size", 32, "Global training batch size.")
  integer("eval_batch_size", 8, "Global eval batch size.")
  integer("predict_batch_size", 8, "Global predict batch size.")
  float_("learning_rate", 5e-5, "Peak learning rate of AdamWeightDecay.")
  float_("num_train_epochs", 3.0, "Epochs over the (fraction of the) train split.")
  integer("num_train_steps", 0, "If > 0, train exactly this many steps instead of "
          "--num_train_epochs.")
  integer("gradient_accumulation_steps", 1, "Apply the mean gradient of this many "
          "batches per update: an effective batch of train_batch_size times this, in "
          "the memory of one batch. Not with --use_tpu.")
  float_("warmup_proportion", 0.1, "Fraction of the steps with linear warm-up.")
  float_("train_fraction", 1.0, "Train on this fraction (0, 1] of the train split, "
         "a seeded random subset.")
  integer("save_checkpoints_steps", 1000, "Steps between checkpoints.")
  integer("save_summary_steps", 100, "Steps between TensorBoard summaries of training (loss, "
          "learning rate, examples/sec, the loss scale with --use_fp16) in --output_dir.")
  integer("eval_every_steps", 0, "With --do_train and --do_eval: evaluate the dev split "
          "every this many steps during training (and at its end), each evaluation a row of "
          "eval_history.csv; the learning curve is drawn into learning_curve.png. On a TPU "
          "training and evaluation alternate.")
  string("best_metric", None, "With --eval_every_steps: keep the checkpoint with the best "
         "value of this eval metric (e.g. auc, accuracy, mean_auc, loss; losses and mse "
         "lower, others higher) in <output_dir>/best; eval, predict and export then use it.")
  integer("early_stopping_patience", 0, "With --best_metric: stop training when that many "
          "evaluations in a row have not improved on the best.")
  integer("iterations_per_loop", 1000, "Steps per TPU loop (host round trip).")
  integer("log_every_steps", 10, "Steps between progress lines in training.")
  integer("seed", 12345, "Seed for initialisation, dropout, shuffling and "
          "--train_fraction.")
  boolean("dynamic_padding", False, "CPU/GPU: compute each batch only as long as its "
          "longest example, and group training examples into length buckets. Faster "
          "when texts are shorter than --max_seq_length; not with --use_tpu.")
  boolean("use_fp16", False, "GPU: run the encoder in float16 (float32 master "
          "weights, dynamic loss scaling). Not with --use_tpu (use --use_bf16 there).")
  boolean("use_bf16", False, "TPU: run the encoder in bfloat16 (float32 master weights).")
  boolean("use_xla", False, "Compile the graph with XLA JIT (CPU/GPU). Measure it with "
          "./run.sh benchmark before relying on it: compilation takes seconds.")
  integer("num_gpus", 0, "Train data-parallel on this many GPUs of this machine with "
          "TensorFlow's MirroredStrategy; --train_batch_size stays the global batch, split "
          "evenly over the GPUs. 0 or 1: one device.")
  boolean("use_tpu", False, "Run on a Cloud TPU instead of the local CPU/GPU.")
  string("tpu_name", None, "Cloud TPU name or grpc:// address.")
  string("tpu_zone", None, "GCE zone of the TPU (found from metadata if unset).")
  string("gcp_project", None, "GCP project of the TPU (found from metadata if unset).")
  string("master", None, "TensorFlow master URL (alternative to --tpu_name).")
  integer("num_tpu_cores", 8, "TPU cores to use, with --use_tpu.")
  string("label_column", None, "Label column(s): a name or 0-based position, or several "
         "separated by commas for a multi-label, soft-target or regression head with one "
         "output each (jigsaw_toxic: default toxic, e.g. toxic,severe_toxic,obscene,threat,"
         "insult,identity_hate; jigsaw_bias: default target; csv: required).")
  list_("class_weights", None, "Training: weight each row's loss by its class, one "
        "positive number per class in the head's class order, or 'balanced' (n / (classes "
        "* rows of the class)). Classification heads only.")
  string("sample_weight_column", None, "Training: a train-file column (name or 0-based "
         "position) of per-row weights >= 0 that multiply each row's loss.")
  boolean("identity_weights", False, "jigsaw_bias training: weight rows as the top public "
          "solutions did (more weight for non-toxic rows that mention an identity and toxic "
          "rows that mention none; see the README), normalised to mean 1.")
  enum("truncation", "head", config.CHOICES["truncation"], "Which tokens of a text "
       "longer than --max_seq_length are kept: the first (head, Google's), the last (tail), "
       "or the first --truncation_head_tokens and the last that still fit (head_tail, as "
       "the Jigsaw winners kept the start and the end of long comments).")
  integer("truncation_head_tokens", None, "head_tail: how many of the kept tokens come "
          "from the start of the text (default: a quarter of the room, e.g. 127 of 510).")
  enum("pooling", "cls", config.CHOICES["pooling"], "What the head reads: 'cls' (BERT's "
       "pooled [CLS] output, as Google's classifier) or 'mean' (the last layer averaged over "
       "the real tokens).")
  integer("num_folds", 0, "k > 1: k-fold cross-validation on the train file (stratified by "
          "label, seeded by --seed): each fold trains on the other folds' rows and is "
          "evaluated and predicted on its own, into <output_dir>/fold_<i>; all folds give "
          "out-of-fold predictions for every train row and the mean and std of each metric; "
          "with --do_predict, test_results.tsv averages the folds' predictions.")
  integer("fold", -1, "With --num_folds: run only this fold (0-based), e.g. one per "
          "machine; -1 runs them all in one command.")
  boolean("auxiliary_targets", False, "jigsaw_bias: add soft-target outputs for the "
          "auxiliary toxicity columns (severe_toxicity, obscene, identity_attack, insult, "
          "threat, sexual_explicit) that the train file fills on every row.")
  enum("head", "auto", config.CHOICES["head"],
       "What the labels are: 'classification' (one column naming a class; softmax), "
       "'multi_label' (several 0/1 columns; sigmoid each), 'soft_target' (fractions in "
       "[0, 1]; sigmoid cross-entropy against the fraction), 'regression' (numbers; squared "
       "error), or 'auto': the task's own (csv and jigsaw_toxic: classification for one "
       "label column, multi_label for several; jigsaw_bias: soft_target; sts-b: regression).")
  string("text_column", None, "csv task: text column (name or 0-based position).")
  string("text_b_column", None, "csv task: optional second text for pairs.")
  string("id_column", None, "csv task: optional id column for the outputs.")
  boolean("has_header", True, "csv task: the first row of each file is a header.")
  for split in ("train", "eval", "predict"):
    boolean("%s_has_header" % split, None, "csv task: whether the %s file's first row is a "
            "header, where it differs from the other files (default: --has_header)" % split)
  enum("quoting", "auto", config.CHOICES["quoting"],
       "How double quotes are read: 'csv' (they enclose fields, which may then hold "
       "delimiters and newlines), 'none' (a quote is a plain character, as in Google's "
       "_read_tsv), or 'auto': csv for .csv files, none for .tsv/.txt files.")
  string("delimiter", None, "csv task: field delimiter (default: tab for .tsv/.txt, "
         "else comma).")
  list_("labels", None, "csv task: the label values in order (default: sorted "
        "distinct values of the train file).")
  enum("tf_log_level", "ERROR", config.CHOICES["tf_log_level"],
       "How much of TensorFlow's own logging to show. This program's progress "
       "lines are always shown.")
  boolean("allow_untrained_head", False, "Evaluate or predict even when the classifier "
                                         "head comes from no checkpoint (random predictions; "
                                         "refused without this flag).")
  boolean("skip_malformed_rows", False, "Skip rows with too few or too many fields or a "
          "missing label, count them by cause and report the counts, instead of stopping "
          "with an error.")


def parse_flags(argv):
  """The configuration of a command line (argv[0] is the program's name), without absl's
  global FLAGS: for running the pipeline from Python and from tests."""
  values = flags.FlagValues()
  define_flags(values)
  values(list(argv))
  return config_from_flags(values)


def config_from_flags(flag_values):
  """The typed configuration (spec/config.py) of parsed flags; `given` names the flags
  set on the command line. A value of the wrong type or choice is a FlagError."""
  values = {}
  for name in config.option_names():
    value = flag_values[name].value
    values[name] = tuple(value) if isinstance(value, list) else value
  given = frozenset(name for name in config.option_names() if flag_values[name].present)
  try:
    return config.RunConfig(given=given, **values)
  except config.ConfigError as e:
    raise FlagError(str(e))


class FlagError(ValueError):
  """A flag value that cannot work, with the fix."""


# --- Validation (once, before any work) -----------------------------------------------

def check_run_flags(c):
  """The checks that need no file: modes, sizes, rates, devices and their combinations."""
  if not (c.do_train or c.do_eval or c.do_predict or c.do_export):
    raise FlagError("nothing to do: pass at least one of --do_train, --do_eval, --do_predict, "
                    "--do_export")
  if not c.output_dir:
    raise FlagError("--output_dir is required")
  if c.saved_model:
    _check_saved_model_flags(c)
  if c.export_dir and not c.do_export:
    raise FlagError("--export_dir says where --do_export writes the SavedModel: add "
                    "--do_export, or drop --export_dir (to predict from an export, pass "
                    "--saved_model)")
  if c.export_dir and tf.io.gfile.exists(c.export_dir):
    raise FlagError("--export_dir=%s already exists: an export never overwrites another. "
                    "Pass a new folder, or leave --export_dir out for a new numbered version "
                    "under <output_dir>/export" % c.export_dir)
  _check_positive(c, ("train_batch_size", "eval_batch_size", "predict_batch_size",
                      "save_checkpoints_steps", "save_summary_steps", "iterations_per_loop",
                      "log_every_steps",
                      "gradient_accumulation_steps", "num_record_shards", "featurise_workers"))
  _check_periodic_eval_flags(c)
  if c.learning_rate <= 0:
    raise FlagError("--learning_rate=%g must be > 0 (BERT fine-tuning uses 2e-5 to 5e-5)" %
                    c.learning_rate)
  if not 0.0 < c.train_fraction <= 1.0:
    raise FlagError("--train_fraction=%g must be in (0, 1]; e.g. 0.1 trains on 10%% of the rows"
                    % c.train_fraction)
  if not 0.0 <= c.warmup_proportion < 1.0:
    raise FlagError("--warmup_proportion=%g must be in [0, 1)" % c.warmup_proportion)
  if c.do_train and c.num_train_steps <= 0 and c.num_train_epochs <= 0:
    raise FlagError("--num_train_epochs=%g must be > 0, or give --num_train_steps" %
                    c.num_train_epochs)
  if c.tokenizer == "fast" and not fast_tokenization.available():
    raise FlagError("--tokenizer=fast needs the `tokenizers` package: pip install -r "
                    "requirements.txt (or pass --tokenizer=python)")
  if c.use_fp16 and c.use_bf16:
    raise FlagError("pass one of --use_fp16 (GPU) and --use_bf16 (TPU), not both")
  if c.use_fp16 and c.gradient_accumulation_steps > 1:
    raise FlagError("--use_fp16 cannot be combined with --gradient_accumulation_steps yet: "
                    "drop one of them")
  if c.num_gpus > 1 or c.num_gpus < 0:
    _check_gpu_replica_flags(c)
  if c.use_tpu:
    _validate_tpu_flags(c)
    if c.use_fp16:
      raise FlagError("--use_fp16 is for GPUs; on a TPU pass --use_bf16")
    if c.use_xla:
      raise FlagError("--use_xla is implied on a TPU (everything there is XLA); drop it")
    if c.gradient_accumulation_steps > 1:
      raise FlagError("--gradient_accumulation_steps cannot be used with --use_tpu: use a "
                      "larger --train_batch_size spread over the TPU cores instead")
    if c.dynamic_padding:
      raise FlagError("--dynamic_padding cannot be used with --use_tpu: a TPU compiles one "
                      "static shape, so batches stay padded to --max_seq_length there")
  if not c.do_train:
    for name in ("class_weights", "sample_weight_column", "identity_weights"):
      if c.is_given(name):
        raise FlagError("--%s weighs the training loss; it does nothing without --do_train"
                        % name)
  if c.max_seq_length < 3:
    raise FlagError("--max_seq_length=%d is too short: [CLS] text [SEP] needs at least 3"
                    % c.max_seq_length)
  if c.init_checkpoint and not tf.io.gfile.exists(c.init_checkpoint + ".index"):
    raise FlagError("--init_checkpoint=%s: no file %s.index. Give the checkpoint prefix, e.g. "
                    ".../bert_model.ckpt (not the .index or .data file)" %
                    (c.init_checkpoint, c.init_checkpoint))


def _flags_not_written_for_replicas(c):
  """[(flag, what of it)] of the flags set whose updates replicas cannot run yet."""
  return [(name, what) for name, what, used in (
      ("use_fp16", "its loss-scale update is", c.use_fp16),
      ("gradient_accumulation_steps", "its accumulators are",
       c.gradient_accumulation_steps > 1)) if used]


def _check_gpu_replica_flags(c):
  """--num_gpus > 1: MirroredStrategy over the GPUs of this machine."""
  if c.num_gpus < 0:
    raise FlagError("--num_gpus=%d must be 0 or more" % c.num_gpus)
  if c.use_tpu:
    raise FlagError("--num_gpus is for the GPUs of this machine; a TPU spreads each batch "
                    "over --num_tpu_cores. Drop --num_gpus")
  for name, what in _flags_not_written_for_replicas(c):
    raise FlagError("--%s cannot be combined with --num_gpus=%d yet (%s not written for "
                    "replicas): drop one of them" % (name, c.num_gpus, what))
  if c.train_batch_size % c.num_gpus:
    raise FlagError("--train_batch_size=%d is the global batch: it must split evenly over "
                    "--num_gpus=%d (each GPU takes an equal share)"
                    % (c.train_batch_size, c.num_gpus))
  if c.do_train:
    gpus = len(tf.config.experimental.list_physical_devices("GPU"))
    if gpus < c.num_gpus:
      raise FlagError("--num_gpus=%d, but TensorFlow sees %d GPU%s on this machine (check "
                      "CUDA_VISIBLE_DEVICES and that TensorFlow's GPU build is installed)"
                      % (c.num_gpus, gpus, "" if gpus == 1 else "s"))


def check_task_and_model_flags(c, card=None):
  """The task and the pre-trained model. card is the model card of --output_dir
  (apply_model_card has taken its settings); the vocabulary and the BERT config then need
  no flags. Returns the BertConfig (None with a hub module without config)."""
  if not c.task_name:
    raise FlagError("--task_name is required (or a model card in --output_dir)")
  if canonical_task_name(c.task_name) is None:
    raise FlagError("--task_name=%s is unknown; use one of: %s" %
                    (c.task_name, ", ".join(TASK_NAMES)))
  task = canonical_task_name(c.task_name)
  if c.is_given("labels") and task != "csv":
    raise FlagError("--labels lists the classes of a csv task's label column; task %s has "
                    "its own labels. Drop --labels" % task)
  if c.is_given("label_column") and task not in ("csv", "jigsaw_toxic", "jigsaw_bias"):
    raise FlagError("--label_column picks label columns of the csv and Jigsaw tasks; task %s "
                    "reads its own. Drop --label_column" % task)
  if task == "csv":
    # Predicting needs no labels; training and evaluating do.
    needed = ["text_column"] + (["label_column"] if c.do_train or c.do_eval else [])
    for name in needed:
      if getattr(c, name) is None:
        raise FlagError("--task_name=csv needs --%s (a column name, or a 0-based position "
                        "with --nohas_header)" % name)
  if not c.bert_hub_module_handle:
    for name in ("bert_config_file", "vocab_file"):
      if not getattr(c, name) and not (card and card["bert_config"]):
        raise FlagError("--%s is required (or give --bert_hub_module_handle)" % name)
  config = None
  if card and card["bert_config"] and not c.bert_config_file:
    config = BertConfig.from_dict(card["bert_config"])
  if c.bert_config_file:
    if not tf.io.gfile.exists(c.bert_config_file):
      raise FlagError("--bert_config_file=%s does not exist" % c.bert_config_file)
    try:
      config = BertConfig.from_json_file(c.bert_config_file)
    except ValueError as e:
      raise FlagError("--bert_config_file=%s cannot be used: %s. Pass the bert_config.json "
                      "that came with the checkpoint" % (c.bert_config_file, e))
  if config is not None and c.max_seq_length > config.max_position_embeddings:
    raise FlagError("--max_seq_length=%d exceeds max_position_embeddings=%d in %s. Pass "
                    "--max_seq_length=%d or less" % (
                        c.max_seq_length, config.max_position_embeddings,
                        c.bert_config_file or model_card.card_path(c.output_dir),
                        config.max_position_embeddings))
  if c.vocab_file and config is not None:
    tokenization.check_vocab_matches_config(
        c.vocab_file, config.vocab_size,
        c.bert_config_file or model_card.card_path(c.output_dir))
  return config



def _check_periodic_eval_flags(c):
  if c.eval_every_steps < 0 or c.early_stopping_patience < 0:
    raise FlagError("--eval_every_steps and --early_stopping_patience must be >= 0 (0: off)")
  if c.eval_every_steps and not (c.do_train and c.do_eval):
    raise FlagError("--eval_every_steps=%d evaluates the dev split during training: add "
                    "--do_train and --do_eval" % c.eval_every_steps)
  if c.best_metric and not c.eval_every_steps:
    raise FlagError("--best_metric=%s picks the best of the evaluations during training: "
                    "add --eval_every_steps (e.g. --eval_every_steps=%d)" % (
                        c.best_metric, c.save_checkpoints_steps))
  if c.early_stopping_patience and not c.best_metric:
    raise FlagError("--early_stopping_patience=%d counts evaluations without improvement of "
                    "a metric: add --best_metric (e.g. --best_metric=loss)"
                    % c.early_stopping_patience)
  if c.eval_every_steps and c.num_folds:
    raise FlagError("--eval_every_steps cannot be combined with --num_folds: each fold's dev "
                    "split is its held-out rows, so choosing its checkpoint by them would make "
                    "the out-of-fold predictions optimistic. Drop one of them")


def _check_saved_model_flags(c):
  """--saved_model predicts, and the export brings its own model and vocabulary."""
  if not c.do_predict or c.do_train or c.do_eval or c.do_export:
    raise FlagError("--saved_model=%s predicts with an export: pass --do_predict alone (train, "
                    "evaluate and export from the model's --output_dir instead)" % c.saved_model)
  for name in ("bert_config_file", "init_checkpoint", "vocab_file", "bert_hub_module_handle",
               "num_folds"):
    if c.is_given(name):
      raise FlagError("--%s has no use with --saved_model: the export holds the model, its "
                      "vocabulary and its model card. Drop --%s" % (name, name))
  if c.use_tpu:
    raise FlagError("--saved_model predicts on this machine's CPU/GPU: drop --use_tpu")


def _check_positive(c, names):
  for name in names:
    if getattr(c, name) <= 0:
      raise FlagError("--%s=%d must be a positive integer" % (name, getattr(c, name)))


def _validate_tpu_flags(c):
  if not (c.tpu_name or c.master):
    raise FlagError("--use_tpu needs --tpu_name (or --master)")
  if not c.output_dir.startswith("gs://"):
    raise FlagError("--use_tpu needs --output_dir on Cloud Storage (gs://bucket/path): the TPU "
                    "cannot write to this machine's disk")
  for name in ("train_batch_size", "eval_batch_size", "predict_batch_size"):
    if getattr(c, name) % c.num_tpu_cores:
      raise FlagError("--%s=%d must be a multiple of --num_tpu_cores=%d (each core gets an "
                      "equal share)" % (name, getattr(c, name), c.num_tpu_cores))
  if c.num_tpu_cores > CORES_PER_TPU_HOST:
    _check_pod_flags(c)


# Cores a TPU host feeds (v2-8, v3-8, and each host of a v2 or v3 pod slice).
CORES_PER_TPU_HOST = 8


def tpu_hosts(c):
  """The TPU hosts that feed a run (1 off a TPU)."""
  return max(1, c.num_tpu_cores // CORES_PER_TPU_HOST) if c.use_tpu else 1


def check_every_pipeline_has_rows(c, num_examples, pipelines):
  """Each machine or TPU host reads every pipelines-th record shard; an input pipeline
  without a row would end while the others wait for it."""
  if pipelines == 1:
    return
  sizes = shard_sizes(num_examples, c.num_record_shards)
  for pipeline in range(pipelines):
    if not sum(sizes[pipeline::pipelines]):
      raise FlagError("%d training rows in --num_record_shards=%d shards leave the input "
                      "pipeline of machine or TPU host %d of %d without a row: pass fewer "
                      "shards" % (num_examples, c.num_record_shards, pipeline, pipelines))


def _check_pod_flags(c):
  """A pod slice (more cores than one host has): each host reads its own record shards."""
  hosts, remainder = divmod(c.num_tpu_cores, CORES_PER_TPU_HOST)
  if remainder:
    raise FlagError("--num_tpu_cores=%d: a pod slice has a multiple of %d cores (v3-32 has "
                    "32)" % (c.num_tpu_cores, CORES_PER_TPU_HOST))
  if c.do_train and c.num_record_shards % hosts:
    raise FlagError("--num_tpu_cores=%d is %d hosts, and each host reads record shards of "
                    "its own, as many as every other host: pass --num_record_shards=%d (or a "
                    "multiple of it)" % (c.num_tpu_cores, hosts, hosts))
  if c.num_folds:
    raise FlagError("--num_folds on a pod slice would evaluate and predict each held-out "
                    "fold on every host: cross-validate on one TPU host (--num_tpu_cores=8)")
  for mode in ("do_eval", "do_predict"):
    if getattr(c, mode):
      raise FlagError("--%s on a pod slice (--num_tpu_cores=%d) would read the dev or test "
                      "file on every host: train on the pod, then run --%s from the same "
                      "--output_dir on one TPU host (--num_tpu_cores=8), a GPU or the CPU"
                      % (mode, c.num_tpu_cores, mode))


# --- The model card ------------------------------------------------------------------

def read_model_card(output_dir):
  """The model card in output_dir, or None when there is none."""
  path = model_card.card_path(output_dir)
  try:
    if not tf.io.gfile.exists(path):
      return None
    with tf.io.gfile.GFile(path, "r") as f:
      text = f.read()
  except tf.errors.OpError as e:
    raise FlagError("--output_dir=%s cannot be read (%s): check the path and your access to it"
                    % (output_dir, e.message.splitlines()[0]))
  try:
    return model_card.from_json(text, path)
  except ValueError as e:
    raise FlagError(str(e))


def apply_model_card(c, card, where=None):
  """The configuration with the model's settings from its card where no flag gives them;
  a flag that contradicts the card is a FlagError naming both values. where: the card's
  file, for messages (default: the one in --output_dir)."""
  where = where or model_card.card_path(c.output_dir)
  if not c.is_given("task_name"):
    c = c.replace(task_name=card["task"])
  elif not _same_task_family(canonical_task_name(c.task_name) or c.task_name, card["task"]):
    raise FlagError("%s says the model was trained for task %s, but this run has --task_name=%s."
                    " Drop the flag (or use --task_name=csv to read another file layout with "
                    "the model's labels), or train a new model into another --output_dir"
                    % (where, card["task"], c.task_name))
  if not c.is_given("bert_hub_module_handle") and card["hub_module"]:
    c = c.replace(bert_hub_module_handle=card["hub_module"])
  if not c.is_given("max_seq_length"):
    c = c.replace(max_seq_length=card["max_seq_length"])
  # The head's outputs are the card's: its kind and, unless this run reads other files'
  # columns for them, its label columns.
  if not c.is_given("head"):
    c = c.replace(head=card["head"])
  if not c.is_given("pooling"):
    c = c.replace(pooling=card["pooling"])
  if not c.is_given("truncation"):
    c = c.replace(truncation=card["truncation"]["mode"])
  if not c.is_given("truncation_head_tokens"):
    c = c.replace(truncation_head_tokens=card["truncation"].get("head_tokens"))
  if c.auxiliary_targets and card["label_columns"]:
    log.info("--auxiliary_targets: the model card lists the label columns (%s)",
             ", ".join(card["label_columns"]))
    c = c.replace(auxiliary_targets=False)  # the card's columns already say which
  if not c.is_given("label_column") and card["label_columns"]:
    c = c.replace(label_column=",".join(card["label_columns"]))
  try:
    truncation_given = c.is_given("truncation") or c.is_given("truncation_head_tokens")
    model_card.check_agrees(card, where, labels=_if_given(c, "labels"),
                            pooling=_if_given(c, "pooling"),
                            truncation=truncation_of(c).as_dict() if truncation_given else None,
                            do_lower_case=_if_given(c, "do_lower_case"),
                            hub_module=_if_given(c, "bert_hub_module_handle"))
    if c.is_given("bert_config_file") and tf.io.gfile.exists(c.bert_config_file):
      model_card.check_agrees(card, where, bert_config=BertConfig.from_json_file(
          c.bert_config_file).to_dict())
  except model_card.CardMismatch as e:
    raise FlagError(str(e))
  except ValueError as e:  # a bert_config.json that cannot be read
    raise FlagError("--bert_config_file=%s cannot be used: %s" % (c.bert_config_file, e))
  if not c.is_given("labels") and card["labels"]:
    c = c.replace(labels=tuple(card["labels"]))
  if not c.is_given("do_lower_case"):
    c = c.replace(do_lower_case=card["do_lower_case"])
  if not c.is_given("vocab_file") and not card["hub_module"]:
    c = c.replace(vocab_file=card["vocab_file"])
    if not tf.io.gfile.exists(c.vocab_file):
      raise FlagError("%s names the vocabulary %s, which no longer exists: pass --vocab_file="
                      "<the same vocab.txt> (its sha256 must be %s)"
                      % (where, c.vocab_file, card["vocab_sha256"]))
  if c.vocab_file and not tf.io.gfile.exists(c.vocab_file):
    raise FlagError("--vocab_file=%s does not exist" % c.vocab_file)
  if c.vocab_file and tokenization.vocab_fingerprint(c.vocab_file) != card["vocab_sha256"]:
    raise FlagError("--vocab_file=%s is not the vocabulary the model was trained with (%s names "
                    "%s, sha256 %s): token ids would not mean what the model learnt. Pass the "
                    "model's own vocab.txt, or drop --vocab_file"
                    % (c.vocab_file, where, card["vocab_file"], card["vocab_sha256"]))
  if not c.is_given("bert_config_file") and not c.bert_hub_module_handle:
    c = c.replace(bert_config_file=None)  # check_task_and_model_flags takes the card's config
  # How the training files were read, for files of the same task (another task's
  # files have their own layout).
  if (canonical_task_name(c.task_name) or c.task_name) == card["task"]:
    for name in _LAYOUT_FLAGS:
      if not c.is_given(name) and name in card["flags"]:
        c = c.replace(**{name: card["flags"][name]})
  log.info("model card %s: task %s, %s, max_seq_length %d, do_lower_case=%s", where,
           card["task"], label_specs.from_card(card["label_spec"]).describe(),
           card["max_seq_length"], card["do_lower_case"])
  return c


def _if_given(c, name):
  """The option's value when it was given, else None (check_agrees skips None)."""
  return getattr(c, name) if c.is_given(name) else None


def _same_task_family(task, trained_task):
  """Whether a model trained for trained_task may serve task: the same task, MNLI's matched
  and mismatched sets, or any task through csv (labels are checked separately)."""
  mnli = ("mnli", "mnli-mm")
  return (task == trained_task or "csv" in (task, trained_task) or
          (task in mnli and trained_task in mnli))


def check_card_matches_task(card, processor, where):
  """The task's head and labels must be the model's: the same kind, the same classes in
  the same order, and as many label columns, with the same names for the same task (a
  csv run may read the model's labels from columns named otherwise). where: the card's
  file, for messages."""
  spec = processor.label_spec
  try:
    model_card.check_agrees(card, where, head=spec.kind, labels=spec.classes,
                            num_outputs=spec.num_outputs)
    same_names = card["label_columns"] and set(spec.columns) == set(card["label_columns"])
    if card["label_columns"] and (processor.name == card["task"] or same_names):
      model_card.check_agrees(card, where, label_columns=list(spec.columns))
  except model_card.CardMismatch as e:
    raise FlagError(str(e))


def write_model_card(c, processor, vocab_file, tokenizer, bert_config):
  """Writes the card into --output_dir (run() has created it)."""
  card = card_of_run(c, processor, vocab_file, tokenizer, bert_config)
  path = model_card.card_path(c.output_dir)
  with tf.io.gfile.GFile(path + ".tmp", "w") as out:  # whole, for workers reading it
    out.write(model_card.to_json(card))
  tf.io.gfile.rename(path + ".tmp", path, overwrite=True)
  log.info("wrote the model card %s", path)


def card_of_run(c, processor, vocab_file, tokenizer, bert_config):
  """The model card of the model this run trains (or, without a card, exports)."""
  return model_card.build_card(
      task=processor.name, label_spec=processor.label_spec, pooling=c.pooling,
      truncation=truncation_of(c).as_dict(),
      max_seq_length=c.max_seq_length, do_lower_case=tokenizer.do_lower_case,
      vocab_file=os.path.abspath(vocab_file) if "://" not in vocab_file else vocab_file,
      vocab_sha256=tokenization.vocab_fingerprint(vocab_file),
      bert_config=bert_config.to_dict() if bert_config else None,
      init_checkpoint=c.init_checkpoint, hub_module=c.bert_hub_module_handle,
      flags=c.as_dict())


_LAYOUT_FLAGS = ("text_column", "text_b_column", "id_column", "has_header", "delimiter",
                 "quoting")


# --- Wiring -----------------------------------------------------------------------------

def truncation_of(c):
  """The truncation strategy of --truncation and --truncation_head_tokens."""
  try:
    return Truncation(c.truncation, c.truncation_head_tokens)
  except ValueError as e:
    raise FlagError("--truncation=%s --truncation_head_tokens=%s: %s" % (
        c.truncation, c.truncation_head_tokens, e))


def label_columns_of(value):
  """--label_column's columns: one, or several separated by commas."""
  if value is None:
    return None
  columns = [column.strip() for column in str(value).split(",")]
  if not all(columns):
    raise FlagError("--label_column=%s has an empty column name: separate the columns with "
                    "single commas, e.g. --label_column=toxic,insult" % value)
  return columns


def make_processor(c):
  """The task's processor; FlagError for a head or label columns the task cannot take."""
  files = {"train": c.train_file, "dev": c.eval_file, "test": c.predict_file}
  try:
    processor = get_processor(
        c.task_name, data_dir=c.data_dir, files=files,
        skip_malformed_rows=c.skip_malformed_rows, text_column=c.text_column,
        text_b_column=c.text_b_column, label_columns=label_columns_of(c.label_column),
        id_column=c.id_column, has_header=c.has_header, delimiter=c.delimiter,
        labels=c.labels, quoting=c.quoting, head=None if c.head == "auto" else c.head,
        auxiliary_targets=c.auxiliary_targets, weight_column=c.sample_weight_column,
        split_headers={"train": c.train_has_header, "dev": c.eval_has_header,
                       "test": c.predict_has_header})
  except ValueError as e:
    raise FlagError(str(e))
  return processor


def label_spec_of(processor):
  """The processor's label spec (for csv, read from the train file unless --labels gives
  the classes); FlagError for a head that cannot take those labels."""
  try:
    return processor.label_spec
  except ValueError as e:
    if isinstance(e, DataError):
      raise
    raise FlagError(str(e))


def make_tokenizer(vocab_file, do_lower_case, hub_module, init_checkpoint, choice):
  """(tokenizer, vocab_file): the vocabulary of vocab_file, or of the hub module when
  there is none; choice is --tokenizer (auto, fast or python)."""
  if not vocab_file:
    from modeling.hub_module import tokenization_info
    vocab_file, do_lower_case = tokenization_info(hub_module)
    log.info("vocabulary from the hub module: %s (do_lower_case=%s)", vocab_file, do_lower_case)
  warning = tokenization.casing_mismatch_warning(do_lower_case, init_checkpoint)
  if warning:
    log.warning(warning)
  return fast_tokenization.tokenizer_for(vocab_file, do_lower_case, choice), vocab_file


def make_estimator(c, model_fn, cluster=None):
  session_config = xla_session_config() if c.use_xla else None
  try:
    return build_estimator(
        model_fn, c.output_dir, c.use_tpu, c.train_batch_size, c.eval_batch_size,
        c.predict_batch_size, save_checkpoints_steps=c.save_checkpoints_steps,
        iterations_per_loop=c.iterations_per_loop, num_tpu_cores=c.num_tpu_cores,
        seed=c.seed, log_step_count_steps=c.log_every_steps * 10, tpu_name=c.tpu_name,
        tpu_zone=c.tpu_zone, gcp_project=c.gcp_project, master=c.master,
        session_config=session_config, save_summary_steps=c.save_summary_steps,
        num_replicas=max(1, c.num_gpus), cluster=cluster)
  except BatchSplitError as e:  # (a cluster's replicas are known once its strategy exists)
    raise FlagError("--train_batch_size=%d is the global batch, and %s: every GPU of every "
                    "machine takes an equal share" % (c.train_batch_size, e))


def take_fraction(examples, fraction, seed):
  """A seeded random subset of round(fraction * n) examples (at least one), in file order."""
  if fraction >= 1.0:
    return examples
  keep = max(1, int(round(len(examples) * fraction)))
  chosen = sorted(random.Random(seed).sample(range(len(examples)), keep))
  return [examples[i] for i in chosen]


def in_training_order(examples, weights, seed):
  """The train rows (and their weights) in a seeded random order, the order their records
  are written in. The input's shuffle mixes only rows within its buffer, and record
  shards are runs of rows, so a file sorted by label would otherwise train on one label
  for thousands of rows at a time and give each machine of a cluster a skewed part."""
  order = list(range(len(examples)))
  random.Random(seed).shuffle(order)
  return ([examples[i] for i in order],
          [weights[i] for i in order] if weights is not None else None)


def featurise(c, processor, split, examples, tokenizer, vocab_file, pad_to_multiple,
              weights=None, fold=None):
  """Writes (or reuses) the split's TFRecords. Returns (record_files, metadata). With fold,
  the train and dev splits both come from the train file."""
  cache_dir = c.cache_dir or os.path.join(c.output_dir, "features")
  record_path = os.path.join(cache_dir, "%s.tf_record" % split)
  source = processor.file_for("train" if fold is not None else split)
  settings = {
      "task": processor.name, "split": split, "source_file": source,
      "source_sha256": file_sha256(source), "label_spec": processor.label_spec.to_card(),
      "truncation": truncation_of(c).as_dict(),
      "max_seq_length": c.max_seq_length,
      "vocab_sha256": tokenization.vocab_fingerprint(vocab_file),
      "do_lower_case": tokenizer.do_lower_case,
      # (the label columns are the label spec's)
      "columns": [c.text_column, c.text_b_column, c.id_column,
                  processor.has_header_for(split), c.delimiter, c.quoting,
                  c.skip_malformed_rows],
      "read": processor.accounts.get(split),  # lines, records, rows skipped by cause
  }
  if split == "train":
    settings.update(train_fraction=c.train_fraction, seed=c.seed,
                    order="in_training_order(seed)")
  if fold is not None:
    settings.update(fold=fold.index, num_folds=fold.num_folds, fold_seed=c.seed)
  metadata = build_records(examples, record_path, settings, tokenizer, pad_to_multiple,
                           num_shards=c.num_record_shards, num_workers=c.featurise_workers,
                           weights=weights)
  return metadata["files"], metadata


def num_train_steps_for(num_examples, num_train_steps, num_train_epochs, per_update):
  """Optimizer updates: num_train_steps when given (> 0), else enough epochs' worth of
  updates of per_update examples (batch size times accumulation steps)."""
  if num_train_steps > 0:
    return num_train_steps
  return max(1, int(math.ceil(num_examples * num_train_epochs / per_update)))


# --- The three modes --------------------------------------------------------------------

class Split(object):
  """One split, read, validated and featurised: its examples and record files."""

  def __init__(self, examples, record_files, metadata):
    self.examples = examples
    self.record_files = record_files
    self.metadata = metadata


def prepare_splits(c, processor, tokenizer, vocab_file, fold=None):
  """Reads, validates and featurises every split the requested modes need, before any
  training: a bad eval or predict file stops the run in seconds, not after training.
  With fold (a FoldPlan) the train file's rows of the other folds are the train split and
  its own fold's rows the dev split."""
  splits = {}
  if fold is not None:
    all_train, held_out = fold.split(processor.get_examples("train"))
    splits["dev"] = Split(held_out, *featurise(
        c, processor, "dev", held_out, tokenizer, vocab_file,
        _lcm(c.eval_batch_size, c.predict_batch_size), fold=fold))
  if c.do_train:
    if fold is None:
      all_train = processor.get_examples("train")
    examples = take_fraction(all_train, c.train_fraction, c.seed)
    if len(examples) != len(all_train):
      log.info("--train_fraction=%g: training on %d of %d rows", c.train_fraction,
               len(examples), len(all_train))
    weights = training_weights(c, processor, examples)
    examples, weights = in_training_order(examples, weights, c.seed)
    splits["train"] = Split(examples, *featurise(c, processor, "train", examples, tokenizer,
                                                 vocab_file, 0, weights, fold=fold))
  # The bias metric of jigsaw_bias predicts the dev records too: pad them for both sizes.
  dev_multiple = (_lcm(c.eval_batch_size, c.predict_batch_size)
                  if processor.name == "jigsaw_bias" else c.eval_batch_size)
  for split, wanted, batch_size in (("dev", c.do_eval, dev_multiple),
                                    ("test", c.do_predict, c.predict_batch_size)):
    if wanted and split not in splits:
      examples = processor.get_examples(split)
      splits[split] = Split(examples, *featurise(c, processor, split, examples, tokenizer,
                                                 vocab_file, batch_size))
  return splits


def training_weights(c, processor, examples):
  """Each train row's loss weight: the product of the class, column and identity weights
  asked for (None when none is). FlagError for weights the head cannot take."""
  spec = processor.label_spec
  parts = []
  try:
    if c.class_weights:
      if spec.kind != "classification":
        raise FlagError("--class_weights weighs the classes of a classification head; a %s "
                        "head has none. Use --sample_weight_column for per-row weights"
                        % spec.kind)
      by_class = (weights_lib.balanced_class_weights(examples, spec.classes)
                  if c.class_weights == ("balanced",) else
                  weights_lib.parse_class_weights(c.class_weights, spec.classes))
      log.info("class weights: %s", ", ".join("%s %.4g" % (cls, by_class[cls])
                                               for cls in spec.classes))
      parts.append(weights_lib.class_weighted(examples, by_class))
  except ValueError as e:
    raise FlagError(str(e))
  if c.sample_weight_column is not None:
    parts.append(weights_lib.column_weights(examples, str(c.sample_weight_column),
                                            processor.file_for("train")))
  if c.identity_weights:
    if processor.name != "jigsaw_bias":
      raise FlagError("--identity_weights is for task jigsaw_bias (its identity columns)")
    parts.append(jigsaw_identity_weights(examples, spec, processor.file_for("train")))
  if not parts:
    return None
  combined = [1.0] * len(examples)
  for part in parts:
    combined = [a * b for a, b in zip(combined, part)]
  log.info("training weights: min %.4g, mean %.4g, max %.4g over %d rows", min(combined),
           sum(combined) / len(combined), max(combined), len(combined))
  return combined


def jigsaw_targets(examples, spec):
  """Each Jigsaw row's target: the fraction (soft target: the first label column), or 1.0
  and 0.0 for the classes of target >= 0.5 (classification)."""
  if spec.kind == "classification":
    return [float(e.label) for e in examples]
  return [e.label[0] for e in examples]


def identity_columns_in(examples):
  """The scored identity columns the examples carry (in their extras)."""
  return [name for name in bias_metrics.IDENTITY_COLUMNS
          if any(name in e.extras for e in examples)]


def jigsaw_identity_weights(examples, spec, processor_train_file):
  """data/weights.identity_weights on Jigsaw rows: toxic when target >= 0.5, mentioning an
  identity when any of the nine scored identity values is >= 0.5."""
  toxic = [t >= 0.5 for t in jigsaw_targets(examples, spec)]
  present = identity_columns_in(examples)
  if not present:
    raise DataError(processor_train_file, "--identity_weights needs the identity columns "
                    "(%s), and the train file has none" % ", ".join(bias_metrics.IDENTITY_COLUMNS),
                    "add them, or drop --identity_weights")
  mentions = [any(identity_value(e.extras.get(name, "")) >= 0.5 for name in present)
              for e in examples]
  (log.info if any(mentions) else log.warning)(
      "identity weights: %d of %d train rows mention an identity (%s)", sum(mentions),
      len(examples), ", ".join(present))
  return weights_lib.identity_weights(toxic, mentions)


def _lcm(a, b):
  return a * b // math.gcd(a, b)


def head_checkpoint(output_dir, init_checkpoint, allow_untrained_head, mode, label_spec):
  """The checkpoint that eval and predict take the classifier head from, checked.

  That is the newest checkpoint in --output_dir, else --init_checkpoint when it holds
  a fine-tuned head. A head in no checkpoint has never been trained, and its
  predictions would be random: refused unless --allow_untrained_head. A head with
  another number of outputs belongs to another task: refused.
  """
  kept = eval_history.read_best(output_dir)
  if kept and tf.io.gfile.exists(kept["checkpoint"] + ".index"):
    source = kept["checkpoint"]
    log.info("%s keeps the best checkpoint by %s (%s at step %d): using it", os.path.dirname(
        source), kept["metric"], _format_metric(kept["value"]), kept["step"])
  else:
    source = tf.train.latest_checkpoint(output_dir) or init_checkpoint
  shape = head_shape(source) if source else None
  if shape is None:
    if allow_untrained_head:
      log.warning("--allow_untrained_head: the classifier head starts from random values, so "
                  "predictions are random")
      return None
    raise FlagError(
        "refusing to %s with an untrained classifier head: %s holds no fine-tuned model, and "
        "%s. Fine-tune first (add --do_train, which saves the model in --output_dir), or point "
        "--output_dir at a fine-tuned model's folder or --init_checkpoint at a fine-tuned "
        "checkpoint. --allow_untrained_head runs anyway, with random predictions" % (
            mode, output_dir,
            "--init_checkpoint=%s is a pre-trained encoder without a head" % init_checkpoint
            if init_checkpoint else "no --init_checkpoint was given"))
  if shape[0] != label_spec.num_outputs:
    raise FlagError("the classifier head in %s has %d outputs, but this run has %d (%s): the "
                    "checkpoint was trained for another task or label set. Use the labels it "
                    "was trained with, or another --output_dir" % (
                        source, shape[0], label_spec.num_outputs, label_spec.describe()))
  return source


def describe_checkpoint(path, step):
  """'<path> (global step N)', for the log."""
  if path is None:
    return "no checkpoint (random head)"
  return "%s (global step %s)" % (path, step if step is not None else "unknown")


def run_train(c, estimator, processor, split, num_train_steps, until_step=None, progress=None):
  """Trains to until_step (default: num_train_steps) from the newest checkpoint in
  --output_dir, continuing the input stream after the examples its steps used. progress
  (a ProgressHook) carries on from an earlier call; returns it."""
  per_update = c.train_batch_size * c.gradient_accumulation_steps
  start_step = resumed_step(c.output_dir)
  until_step = until_step or num_train_steps
  if progress is None:
    log.info("training: %d examples, batch %d, %d steps", len(split.examples), per_update,
             num_train_steps)
    if 0 < start_step < num_train_steps:
      log.info("resuming from the checkpoint at step %d of %d: the input continues after the "
               "%d examples those steps trained on (epoch %.2f)", start_step, num_train_steps,
               start_step * per_update, start_step * per_update / float(len(split.examples)))
    progress = ProgressHook(num_train_steps, per_update, c.log_every_steps,
                            loss_tensor_name=TRAIN_LOSS_NAME, fetch_loss=not c.use_tpu,
                            report=log.info)
  input_fn = input_fn_builder(split.record_files, c.max_seq_length, is_training=True,
                              label_spec=processor.label_spec, seed=c.seed,
                              dynamic_padding=c.dynamic_padding,
                              weighted=split.metadata["weighted"],
                              skip_examples=start_step * per_update)
  progress.train_started = time.time()
  if start_step < until_step:
    estimator.train(input_fn=input_fn, max_steps=until_step, hooks=[progress])
    log.info("trained to step %d in %s", until_step,
             format_seconds(time.time() - progress.train_started))
  return progress


# --- Evaluation during training ---------------------------------------------------------

# Eval results that are no metric to choose a checkpoint by.
NOT_METRICS = ("checkpoint", "global_step", "num_examples", "majority_baseline_accuracy")


def eval_metric_names(processor, dev_examples):
  """The metrics an evaluation of this run reports (as in eval_results.json)."""
  names = {"loss" if n == "eval_loss" else n for n in metric_names(processor.label_spec)}
  if processor.name == "jigsaw_bias" and identity_columns_in(dev_examples):
    names.update("bias_" + k for k in BIAS_FIGURES)
  return sorted(names - set(NOT_METRICS))


def check_best_metric(c, processor, dev_examples, output_dir):
  """--best_metric names a metric of this run, and an output_dir that already keeps a
  best checkpoint keeps it by the same metric."""
  if c.best_metric:
    names = eval_metric_names(processor, dev_examples)
    if c.best_metric not in names:
      raise FlagError("--best_metric=%s is not a metric of this run's evaluation (%s head); "
                      "choose one of: %s" % (c.best_metric, processor.label_spec.kind,
                                              ", ".join(names)))
  kept = eval_history.read_best(output_dir)
  if kept and kept["metric"] != c.best_metric:
    raise FlagError(
        "%s keeps the best checkpoint by --best_metric=%s (step %d), and this run %s. Pass "
        "--best_metric=%s --eval_every_steps=N to go on with that run, or use a new "
        "--output_dir" % (eval_history.best_dir(output_dir), kept["metric"], kept["step"],
                          "chooses by %s" % c.best_metric if c.best_metric else
                          "keeps none", kept["metric"]))


def train_with_evaluations(c, estimator, processor, splits, num_train_steps, seconds):
  """--eval_every_steps: training to each multiple of N steps (and to the end), each
  followed by an evaluation of its checkpoint; on a TPU, alternating training and
  evaluation loops. Every evaluation is a row of eval_history.csv; --best_metric keeps
  the best checkpoint in <output_dir>/best, and --early_stopping_patience stops when that
  many evaluations in a row have not improved on it. A re-run of the command continues
  where the history and the newest checkpoint stand.

  Returns (progress, the checkpoint that later modes use: the best one with
  --best_metric, else the last; the eval results of that checkpoint when it was the last
  evaluated, else None)."""
  goal = eval_history.Goal(c.best_metric) if c.best_metric else None
  history = eval_history.EvalHistory.load(
      os.path.join(c.output_dir, eval_history.HISTORY_CSV), resumed_step(c.output_dir))
  if history.rows:
    log.info("%d evaluations in %s so far (up to step %d)", len(history.rows), history.path,
             history.steps()[-1])
  seconds.setdefault("training", 0.0)
  seconds.setdefault("eval", 0.0)
  before = {"training": history.last("train_seconds_so_far", 0.0),
            "eval": history.last("eval_seconds_so_far", 0.0)}
  progress, last_results = None, None
  while True:
    step = resumed_step(c.output_dir)
    due = step % c.eval_every_steps == 0 or step >= num_train_steps
    if step and due and step not in history.steps():
      last_results = evaluate_during_training(c, estimator, processor, splits["dev"], step,
                                              history, goal, progress, seconds, before)
    if step >= num_train_steps:
      break
    if goal and c.early_stopping_patience and (
        history.evaluations_since_best(goal) >= c.early_stopping_patience):
      best = history.best_row(goal)
      log.info("early stopping at step %d of %d: %s has not improved for %d evaluations "
               "(best %s at step %s)", step, num_train_steps, goal.metric,
               history.evaluations_since_best(goal),
               best and _format_metric(best[goal.metric]), best and best["step"])
      break
    until = min(num_train_steps, (step // c.eval_every_steps + 1) * c.eval_every_steps)
    started = time.time()
    progress = run_train(c, estimator, processor, splits["train"], num_train_steps, until,
                         progress)
    seconds["training"] += time.time() - started
    if resumed_step(c.output_dir) <= step:  # never loop on a training that cannot advance
      raise RuntimeError("training from step %d to %d saved no later checkpoint in %s" % (
          step, until, c.output_dir))
  draw_learning_curve(c.output_dir, history, goal)
  latest = tf.train.latest_checkpoint(c.output_dir)
  if goal:
    kept = eval_history.read_best(c.output_dir)
    if kept is None:
      log.warning("no evaluation gave a value of %s: the last checkpoint is used", goal.metric)
    else:
      log.info("the best checkpoint by %s: %s at step %d (%s); eval, predict and export use it",
               goal.describe(), _format_metric(kept["value"]), kept["step"], kept["checkpoint"])
      if kept["step"] != checkpoint_global_step(latest):
        return progress, kept["checkpoint"], None
  return progress, latest, last_results


def _format_metric(value):
  return "%.4f" % value if isinstance(value, float) else str(value)


def evaluate_during_training(c, estimator, processor, split, step, history, goal, progress,
                             seconds, seconds_before):
  """Evaluates the checkpoint at step, appends its row to the history, and keeps it when
  it is the best so far. Returns its eval results."""
  checkpoint = tf.train.latest_checkpoint(c.output_dir)
  started = time.time()
  results = run_eval(c, estimator, processor, split, checkpoint)
  seconds["eval"] += time.time() - started
  previous = history.steps()[-1] if history.rows else 0
  train_loss = progress.mean_loss_between(previous, step) if progress else None
  if train_loss is None:  # on a TPU (or when resumed right here): the summaries' losses
    losses = [v for s, v in scalar_events(c.output_dir, "loss") if previous < s <= step]
    train_loss = sum(losses) / len(losses) if losses else None
  row = {k: v for k, v in results.items() if k not in NOT_METRICS}
  is_best = False
  if goal:
    is_best = goal.improves(results.get(goal.metric), history.best_value(goal))
    if results.get(goal.metric) is None:
      log.warning("eval at step %d: %s is undefined, so this checkpoint cannot be the best",
                  step, goal.metric)
    if is_best:
      kept = eval_history.keep_best(checkpoint, c.output_dir, goal, results[goal.metric], step)
      log.info("new best %s = %s at step %d, kept as %s", goal.metric,
               _format_metric(results[goal.metric]), step, kept)
  # (so far: this command's seconds after those of the commands before it, on a resume)
  row.update(step=step, train_loss=train_loss, best=int(is_best), checkpoint=checkpoint,
             train_seconds_so_far=seconds["training"] + seconds_before["training"],
             eval_seconds_so_far=seconds["eval"] + seconds_before["eval"])
  history.append(row)
  return results


def draw_learning_curve(output_dir, history, goal):
  """learning_curve.png: the history's training and eval loss (and the chosen metric)
  against step."""
  if not history.rows:
    return
  metric = goal.metric if goal else "loss"
  png = eval_history.learning_curve_png(history.rows, metric)
  path = os.path.join(output_dir, eval_history.CURVE_PNG)
  with tf.io.gfile.GFile(path, "wb") as out:
    out.write(png)
  log.info("%d evaluations in %s; learning curve in %s", len(history.rows), history.path, path)


def resumed_step(output_dir):
  """The global step of the newest checkpoint in output_dir (0 when there is none): where
  Estimator.train continues."""
  latest = tf.train.latest_checkpoint(output_dir)
  return (checkpoint_global_step(latest) or 0) if latest else 0


def _restore_path(c, checkpoint):
  """What Estimator restores: a checkpoint of --output_dir (or its best/) by path; None
  for the initialisation from --init_checkpoint (a fine-tuned head there, or none at
  all), which the model_fn does."""
  return checkpoint if checkpoint and checkpoint != c.init_checkpoint else None


def evaluate_checkpoints(c, estimator, processor, split, num_train_steps):
  """The evaluator task of a multi-worker run: evaluates each checkpoint the chief saves,
  for TensorBoard (<output_dir>/eval_evaluator), until the last. Returns the last one's
  step."""
  log.info("evaluating each new checkpoint in %s on %d dev examples, until step %d",
           c.output_dir, len(split.examples), num_train_steps)
  input_fn = input_fn_builder(split.record_files, c.max_seq_length, is_training=False,
                              label_spec=processor.label_spec,
                              dynamic_padding=c.dynamic_padding)
  estimator.evaluate_checkpoints(input_fn, num_train_steps)
  step = checkpoint_global_step(tf.train.latest_checkpoint(c.output_dir))
  log.info("the evaluator has evaluated the checkpoints up to step %s", step)
  return step


def run_eval(c, estimator, processor, split, checkpoint, outputs=None, name=None):
  """The dev split's metrics into eval_results. outputs, when the caller has predicted
  the split already (folds), spare the bias metric a second pass. name puts the
  TensorBoard events in <output_dir>/eval_<name> (the best checkpoint's, which would
  otherwise sit out of order among the evaluations during training)."""
  examples, meta = split.examples, split.metadata
  steps = meta["num_records"] // c.eval_batch_size
  input_fn = input_fn_builder(split.record_files, c.max_seq_length, is_training=False,
                              label_spec=processor.label_spec,
                              dynamic_padding=c.dynamic_padding)
  log.info("evaluating %d examples (+%d padding) in %d batches with %s", len(examples),
           meta["num_padding"], steps,
           describe_checkpoint(checkpoint, checkpoint and checkpoint_global_step(checkpoint)))
  raw = estimator.evaluate(input_fn=input_fn, steps=steps, name=name,
                           checkpoint_path=_restore_path(c, checkpoint))
  results = {k: _plain(v) for k, v in raw.items()}
  # Estimator's own "loss" averages per-batch means, so a part-padded last batch would
  # weigh too much; eval_loss is the exact mean over real examples.
  results["loss"] = results.pop("eval_loss")
  results["num_examples"] = int(round(results["num_examples"]))
  if results["num_examples"] != len(examples):
    raise RuntimeError("eval counted %d examples but the dev file has %d" %
                       (results["num_examples"], len(examples)))
  for key in sorted(k for k, v in results.items() if isinstance(v, float) and math.isnan(v)):
    log.warning("eval %s is undefined on this dev set (e.g. an AUC of a column with no "
                "positive or no negative row); recorded as null", key)
    results[key] = None
  if processor.label_spec.kind == "classification":
    results["majority_baseline_accuracy"] = majority_accuracy(examples)
  if processor.name == "jigsaw_bias":
    results.update(run_bias_report(c, estimator, processor, split, checkpoint, outputs))
  results["checkpoint"] = checkpoint
  write_eval_results(c.output_dir, results)
  return results


def run_bias_report(c, estimator, processor, split, checkpoint, outputs=None):
  """The Jigsaw Unintended Bias competition metric on the dev split, with its per-identity
  table (bias_metrics.csv) and chart (bias_metrics.png), from the split's outputs
  (predicted here unless given). Returns the summary figures for eval_results, prefixed
  bias_."""
  identities = identity_columns_in(split.examples)
  if not identities:
    log.warning("%s has none of the identity columns %s: no bias metric",
                processor.file_for("dev"), ", ".join(bias_metrics.IDENTITY_COLUMNS))
    return {}
  if outputs is None:
    outputs = predict_outputs(c, estimator, processor.label_spec, split, checkpoint)
  spec = processor.label_spec
  # The toxicity score: the target column's output (soft target: it comes first), or the
  # probability of class "1" (classification of target >= 0.5).
  toxic_output = spec.classes.index("1") if spec.kind == "classification" else 0
  scores = [o[toxic_output] for o in outputs]
  targets = jigsaw_targets(split.examples, spec)
  values = {name: [identity_value(e.extras.get(name, "")) for e in split.examples]
            for name in identities}
  table, summary = bias_metrics.bias_report(scores, targets, values)
  paths = []
  for name, content in bias_metrics.bias_report_files(table, summary):
    paths.append(os.path.join(c.output_dir, name))
    with tf.io.gfile.GFile(paths[-1], "wb") as out:  # a bucket on TPU
      out.write(content)
  csv_path, png_path = paths
  log.info("bias metric (Jigsaw Unintended Bias): final %.4f, overall AUC %.4f, power means: "
           "subgroup %.4f, BPSN %.4f, BNSP %.4f, over %s; per identity in %s and %s",
           summary["final_metric"], summary["overall_auc"], summary["power_mean_subgroup_auc"],
           summary["power_mean_bpsn_auc"], summary["power_mean_bnsp_auc"],
           ", ".join(summary["identities_scored"]), csv_path, png_path)
  for metric, names in sorted(summary["undefined"].items()):
    if names:
      log.warning("bias metric: %s is undefined for %s (no positive or no negative row); "
                  "the power mean is over the others", metric, ", ".join(names))
  if summary["note"]:
    log.warning("bias metric: %s", summary["note"])
  return {"bias_" + k: None if math.isnan(summary[k]) else summary[k] for k in BIAS_FIGURES}


# The bias metric's summary figures in eval results (prefixed bias_).
BIAS_FIGURES = ("final_metric", "overall_auc", "power_mean_subgroup_auc",
                "power_mean_bpsn_auc", "power_mean_bnsp_auc")


def identity_value(cell):
  """An identity column's cell as a fraction; NaN when empty (not annotated)."""
  return float(cell) if cell.strip() else float("nan")


def majority_accuracy(examples):
  counts = collections.Counter(e.label for e in examples if e.label is not None)
  return counts.most_common(1)[0][1] / float(sum(counts.values())) if counts else 0.0


def _plain(value):
  return value.item() if hasattr(value, "item") else value


def write_eval_results(output_dir, results):
  with tf.io.gfile.GFile(os.path.join(output_dir, "eval_results.txt"), "w") as out:
    for key in sorted(results):
      out.write("%s = %s\n" % (key, results[key]))
  with tf.io.gfile.GFile(os.path.join(output_dir, "eval_results.json"), "w") as out:
    json.dump(results, out, indent=2, sort_keys=True)
  for key in sorted(results):
    log.info("  eval %s = %s", key, results[key])


def run_predict(c, estimator, processor, split, checkpoint):
  examples, meta = split.examples, split.metadata
  step = checkpoint_global_step(checkpoint) if checkpoint else None
  log.info("predicting %d examples (+%d padding) with %s", len(examples), meta["num_padding"],
           describe_checkpoint(checkpoint, step))
  outputs = predict_outputs(c, estimator, processor.label_spec, split, checkpoint)
  path = write_test_results(c.output_dir, processor, examples, outputs,
                            {"checkpoint": checkpoint, "global_step": step})
  return path, outputs


def write_test_results(output_dir, processor, examples, outputs, model):
  """test_results.tsv (one line per predict row) and test_results.json (what predicted
  them: model, e.g. the checkpoint and its step). Returns the .tsv's path."""
  path = os.path.join(output_dir, "test_results.tsv")
  write_predictions(path, examples, outputs, processor.label_spec)
  with tf.io.gfile.GFile(os.path.join(output_dir, "test_results.json"), "w") as out:
    json.dump(dict(model, predict_file=processor.file_for("test"), rows=len(examples),
                   labels=processor.label_spec.classes,
                   label_spec=processor.label_spec.to_card()), out, indent=2, sort_keys=True)
  log.info("wrote %d predictions to %s", len(examples), path)
  return path


def predict_outputs(c, estimator, label_spec, split, checkpoint):
  """The head's outputs (a list of floats) for every example of a split, in input order;
  padding rows are dropped, and a row lost or predicted twice is an error."""
  input_fn = input_fn_builder(split.record_files, c.max_seq_length, is_training=False,
                              label_spec=label_spec, dynamic_padding=c.dynamic_padding)
  rows = {}
  for prediction in estimator.predict(input_fn=input_fn, yield_single_examples=True,
                                      checkpoint_path=_restore_path(c, checkpoint)):
    if not prediction["is_real_example"]:
      continue
    example_id = int(prediction["example_id"])
    if example_id in rows:
      raise RuntimeError("example %d was predicted twice" % example_id)
    rows[example_id] = prediction["outputs"].tolist()
  if sorted(rows) != list(range(len(split.examples))):
    raise RuntimeError("predicted %d rows for %d examples: rows were lost" %
                       (len(rows), len(split.examples)))
  return [rows[i] for i in range(len(split.examples))]


def write_predictions(path, examples, outputs, label_spec):
  """One line per input row, in input order: id, the label spec's prediction columns
  (e.g. per-class probabilities and the predicted class), then carried-through columns."""
  extras = sorted(set(k for e in examples for k in e.extras))
  header = ["id"] + label_spec.prediction_header()
  with tf.io.gfile.GFile(path, "w") as out:
    out.write("\t".join(header + extras) + "\n")
    for i, example in enumerate(examples):
      values = label_spec.prediction_cells(outputs[i])
      line = [_one_line(example.guid)] + values + [_one_line(example.extras.get(k, ""))
                                                    for k in extras]
      out.write("\t".join(line) + "\n")


def _one_line(text):
  return str(text).replace("\t", " ").replace("\n", " ")


# --- main --------------------------------------------------------------------------------

def run(c, cluster=None):
  """Runs the requested modes of a configuration (spec/config.py RunConfig), or its k-fold
  cross-validation. With cluster (spec.cluster.Cluster, from TF_CONFIG) this process is
  one task of a multi-worker training. Returns a dict of what was produced (for callers
  and tests)."""
  if cluster is not None:
    check_cluster_flags(c, cluster)
  check_run_flags(c)
  if c.saved_model:
    return {"predictions": run_saved_model(c)}
  if c.num_folds:
    return run_folds(c)
  return run_once(c, cluster=cluster)


def check_cluster_flags(c, cluster):
  """The flags of one task of a multi-worker run (the same on every task)."""
  if not c.do_train:
    raise FlagError("TF_CONFIG sets up a cluster for training: add --do_train, or unset "
                    "TF_CONFIG to evaluate or predict on this machine alone")
  for name, why, used in (
      [("use_tpu", "a TPU pod spreads training over its own hosts", c.use_tpu),
       ("num_gpus", "each machine of the cluster trains on all the GPUs it sees (choose them "
                    "with CUDA_VISIBLE_DEVICES)", c.num_gpus)] +
      [(name, what + " not written for replicas", True)
       for name, what in _flags_not_written_for_replicas(c)] +
      [("eval_every_steps", "add an \"evaluator\" task to TF_CONFIG: it evaluates every "
                            "checkpoint the chief saves", c.eval_every_steps),
       ("num_folds", "cross-validate without TF_CONFIG, on one machine", c.num_folds)]):
    if used:
      raise FlagError("--%s cannot be used with TF_CONFIG's cluster (%s): drop it" % (
          name, why))
  if cluster.is_evaluator and not c.do_eval:
    raise FlagError("TF_CONFIG makes this task the evaluator, which evaluates the dev split: "
                    "add --do_eval")
  if c.train_batch_size % cluster.num_workers:
    raise FlagError("--train_batch_size=%d is the global batch: it must split evenly over "
                    "TF_CONFIG's %d training tasks" % (c.train_batch_size, cluster.num_workers))
  if c.num_record_shards % cluster.num_workers:
    raise FlagError("--num_record_shards=%d: each of TF_CONFIG's %d training tasks reads "
                    "shards of its own, as many as every other task; pass "
                    "--num_record_shards=%d (or a multiple of it)" % (
                        c.num_record_shards, cluster.num_workers, cluster.num_workers))


def config_of_task(c, cluster):
  """What one task of a multi-worker run does: the chief everything asked for; a worker
  only trains, and the evaluator only evaluates (it reads the train split for the number
  of steps). Tasks other than the chief write their records apart from the chief's."""
  if cluster is None or cluster.is_chief:
    return c
  cache_dir = os.path.join(c.cache_dir or os.path.join(c.output_dir, "features"),
                           "%s_%d" % (cluster.task_type, cluster.task_index))
  return c.replace(do_eval=cluster.is_evaluator, do_predict=False, do_export=False,
                   cache_dir=cache_dir)


def run_once(c, fold=None, cluster=None):
  """One model: train, eval, predict. With fold (a FoldPlan), the train file's rows of
  the other folds train it, and its own fold's rows are its dev split. With cluster,
  this task's part of a multi-worker run (config_of_task)."""
  started = time.time()
  c = config_of_task(c, cluster)
  card = read_model_card(c.output_dir)
  if card:
    c = apply_model_card(c, card)
  bert_config = check_task_and_model_flags(c, card)
  truncation_of(c)
  setup_tensorflow()
  processor = make_processor(c)
  label_spec = label_spec_of(processor)
  if card:
    check_card_matches_task(card, processor, model_card.card_path(c.output_dir))
  tokenizer, vocab_file = make_tokenizer(c.vocab_file, c.do_lower_case,
                                         c.bert_hub_module_handle, c.init_checkpoint,
                                         c.tokenizer)
  log.info("task %s: %s", processor.name, label_spec.describe())
  if (c.do_eval or c.do_predict or c.do_export) and not c.do_train:
    checkpoint = head_checkpoint(  # refused before any work
        c.output_dir, c.init_checkpoint, c.allow_untrained_head and not c.do_export,
        "evaluate" if c.do_eval else "predict" if c.do_predict else "export", label_spec)
  tf.io.gfile.makedirs(c.output_dir)
  seconds = {}
  with timed(seconds, "featurisation"):
    splits = prepare_splits(c, processor, tokenizer, vocab_file, fold)
  if c.do_train:
    check_best_metric(c, processor, splits["dev"].examples if c.do_eval else [], c.output_dir)
    check_every_pipeline_has_rows(c, len(splits["train"].examples),
                                  cluster.num_workers if cluster else tpu_hosts(c))
  num_train_steps = num_train_steps_for(
      len(splits["train"].examples), c.num_train_steps, c.num_train_epochs,
      c.train_batch_size * c.gradient_accumulation_steps) if c.do_train else 0

  # A hub module brings its own encoder; the head needs only the config's initializer range.
  encoder_config = bert_config or BertConfig(vocab_size=len(tokenizer.vocab))
  model_fn = model_fn_builder(
      bert_config=encoder_config, label_spec=label_spec, init_checkpoint=c.init_checkpoint,
      learning_rate=c.learning_rate, num_train_steps=num_train_steps,
      num_warmup_steps=int(num_train_steps * c.warmup_proportion), use_tpu=c.use_tpu,
      hub_module_handle=c.bert_hub_module_handle,
      gradient_accumulation_steps=c.gradient_accumulation_steps,
      precision="float16" if c.use_fp16 else "bfloat16" if c.use_bf16 else "float32",
      xla_global_step_fix=c.use_xla, pooling=c.pooling, summary_dir=c.output_dir,
      save_summary_steps=c.save_summary_steps)
  estimator = make_estimator(c, model_fn, cluster)
  if cluster is not None:
    log.info("this process is %s", cluster.describe())
    if cluster.is_evaluator:
      return {"evaluated_to_step": evaluate_checkpoints(c, estimator, processor, splits["dev"],
                                                 num_train_steps)}

  outcome = {}
  if c.do_train:
    if cluster is None or cluster.is_chief:
      write_model_card(c, processor, vocab_file, tokenizer, bert_config)
    if c.eval_every_steps:
      progress, checkpoint, outcome["eval"] = train_with_evaluations(
          c, estimator, processor, splits, num_train_steps, seconds)
    else:
      with timed(seconds, "training"):
        progress = run_train(c, estimator, processor, splits["train"], num_train_steps)
      checkpoint = tf.train.latest_checkpoint(c.output_dir)
    outcome["train_progress"] = progress.history if progress else []
    outcome["train_losses"] = progress.losses if progress else []
    if cluster is not None and not cluster.is_chief:
      # TensorFlow has a worker save its own copy of every checkpoint in the chief's
      # output_dir: scratch, which no restart reads. The chief writes the results.
      scratch = os.path.join(c.output_dir, "tmp_%s_%d" % (cluster.task_type,
                                                         cluster.task_index))
      if tf.io.gfile.exists(scratch):
        tf.io.gfile.rmtree(scratch)
      return outcome
  if fold is not None:  # the held-out fold's predictions, before its eval (which uses them)
    outcome["oof"] = predict_outputs(c, estimator, label_spec, splits["dev"], checkpoint)
  if c.do_eval and outcome.get("eval") is None:  # (evaluated already when it was the last)
    with timed(seconds, "final eval" if c.eval_every_steps else "eval"):
      outcome["eval"] = run_eval(c, estimator, processor, splits["dev"], checkpoint,
                                 outcome.get("oof"), name="best" if c.best_metric else None)
  if fold is not None:
    write_fold_predictions(os.path.join(c.output_dir, "oof_predictions.tsv"),
                           splits["dev"].examples, [fold.index] * len(splits["dev"].examples),
                           outcome["oof"], label_spec)
  if c.do_predict:
    with timed(seconds, "predict"):
      outcome["predictions"], outcome["test_outputs"] = run_predict(
          c, estimator, processor, splits["test"], checkpoint)
    outcome["test_examples"], outcome["checkpoint"] = splits["test"].examples, checkpoint
  if c.do_export:
    # The card in --output_dir (this run's training may just have rewritten it); a model
    # without one, e.g. a fine-tuned --init_checkpoint, gets this run's card.
    export_card = read_model_card(c.output_dir) or card_of_run(
        c, processor, vocab_file, tokenizer, bert_config)
    with timed(seconds, "export"):
      outcome["export"] = run_export(c, encoder_config, label_spec, checkpoint, export_card,
                                     vocab_file)
  outcome["summary"] = write_run_summary(
      c, started, seconds, progress if c.do_train else None, bert_config,
      {"eval": outcome.get("eval"), "predictions": outcome.get("predictions"),
       "export": outcome.get("export"), "checkpoint": checkpoint,
       "best": eval_history.read_best(c.output_dir) if c.best_metric else None}, cluster)
  return outcome


class timed(object):
  """with timed(seconds, "phase"): records the block's wall time in seconds["phase"]."""

  def __init__(self, seconds, phase):
    self.seconds, self.phase = seconds, phase

  def __enter__(self):
    self.start = time.time()

  def __exit__(self, *exc):
    self.seconds[self.phase] = time.time() - self.start


RUN_SUMMARY = "run_summary.json"


def write_run_summary(c, started, seconds, progress, bert_config, results, cluster=None):
  """run_summary.json in --output_dir: the wall times (start-up and steady training
  apart), examples/sec, the device, the runtime versions and the flags, so that runs of
  one command on several machines compare row by row (tools/run_table.py). (A task of a
  cluster trains on every GPU its machine has; otherwise --num_gpus says how many.)"""
  import platform
  import numpy
  training = None
  if progress is not None:
    measured_steps, measured_seconds = progress.measured()
    training = {
        "steps": progress.total_steps, "batch_size": progress.batch_size,
        "global_step": checkpoint_global_step(tf.train.latest_checkpoint(c.output_dir)),
        "wall_seconds": seconds["training"],
        # train() to the end of its first step; on a TPU its first loop.
        "startup_seconds": progress.startups[0] if progress.startups else seconds["training"],
        # Evaluation during training calls train() again after each evaluation, and each
        # call builds its graph and restores the checkpoint anew.
        "restarts": max(0, len(progress.startups) - 1),
        "restart_seconds": sum(progress.startups[1:]),
        "examples_per_second": progress.steady_examples_per_second(),
        "measured_seconds": measured_seconds if measured_steps else None,
        "measured_steps": measured_steps}
  summary = {
      "format": "bert-text-classifier-run-summary", "version": 1,
      "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
      "total_seconds": time.time() - started,
      "seconds": seconds, "training": training,
      "device": describe_device(c.use_tpu, c.tpu_name, c.master, c.num_tpu_cores,
                                None if cluster is not None else c.num_gpus),
      "versions": {"python": platform.python_version(), "tensorflow": tf.__version__,
                   "numpy": numpy.__version__, "platform": platform.platform()},
      "model": ("hub module %s" % c.bert_hub_module_handle if c.bert_hub_module_handle else
                "BERT L=%d H=%d A=%d" % (bert_config.num_hidden_layers, bert_config.hidden_size,
                                         bert_config.num_attention_heads)),
      "results": results, "flags": c.as_dict(), "given_flags": sorted(c.given),
  }
  path = os.path.join(c.output_dir, RUN_SUMMARY)
  with tf.io.gfile.GFile(path, "w") as out:
    json.dump(summary, out, indent=2, sort_keys=True, default=str)
  log.info("run summary in %s: %s", path, ", ".join(
      "%s %s" % (phase, format_seconds(s)) for phase, s in sorted(seconds.items())))
  return path


def run_export(c, bert_config, label_spec, checkpoint, card, vocab_file):
  """The SavedModel of checkpoint, built on this machine's CPU (also after a TPU run), into
  --export_dir or a new version folder under <output_dir>/export. Returns its path."""
  export_dir = c.export_dir or export.versioned_export_dir(os.path.join(c.output_dir, "export"))
  model_fn = model_fn_builder(
      bert_config=bert_config, label_spec=label_spec, init_checkpoint=None, learning_rate=0.0,
      num_train_steps=0, num_warmup_steps=0, use_tpu=False,
      hub_module_handle=c.bert_hub_module_handle, pooling=c.pooling)
  with tf.io.gfile.GFile(vocab_file, "r") as f:  # a hub module's may be in a bucket
    vocab = f.read()
  export.export_saved_model(
      model_fn, checkpoint, export_dir, signature.output_name(label_spec),
      {signature.CARD_ASSET: model_card.to_json(card), signature.VOCAB_ASSET: vocab})
  log.info("exported %s to %s: predict from it alone with --saved_model=%s, or load it in "
           "Python with serving.predictor.Predictor", describe_checkpoint(
               checkpoint, checkpoint_global_step(checkpoint)), export_dir, export_dir)
  return export_dir


def run_saved_model(c):
  """--saved_model: the predict file's rows scored by an export alone, into
  test_results.tsv in --output_dir. The export's model card gives the task, the file
  layout, the labels and the tokenisation; flags that contradict it are refused."""
  setup_tensorflow()
  try:
    predictor = Predictor(c.saved_model, tokenizer=c.tokenizer, batch_size=c.predict_batch_size)
  except ValueError as e:
    raise FlagError("--saved_model=%s: %s" % (c.saved_model, e))
  with predictor:
    where = os.path.join(predictor.export_dir, "assets", signature.CARD_ASSET)
    c = apply_model_card(c, dict(predictor.card, hub_module=None), where)
    truncation_of(c)
    processor = make_processor(c)
    label_spec_of(processor)
    check_card_matches_task(predictor.card, processor, where)
    examples = processor.get_examples("test")
    tf.io.gfile.makedirs(c.output_dir)
    log.info("predicting %d rows of %s with the export %s", len(examples),
             processor.file_for("test"), predictor.export_dir)
    start = time.time()
    outputs = predictor.predict_outputs(examples)
    log.info("predicted %d rows in %s", len(examples), format_seconds(time.time() - start))
    return write_test_results(c.output_dir, processor, examples, outputs,
                              {"saved_model": predictor.export_dir})


# --- k-fold cross-validation ------------------------------------------------------------

class FoldPlan(object):
  """Fold `index` of `num_folds`; assignment[i] is train row i's fold."""

  def __init__(self, num_folds, index, assignment):
    self.num_folds = num_folds
    self.index = index
    self.assignment = assignment

  def split(self, examples):
    """(the other folds' examples, this fold's), each in file order."""
    if len(examples) != len(self.assignment):
      raise RuntimeError("the train file has %d rows but the folds were assigned for %d"
                         % (len(examples), len(self.assignment)))
    own = [e for e, a in zip(examples, self.assignment) if a == self.index]
    return [e for e, a in zip(examples, self.assignment) if a != self.index], own


def fold_strata(examples, label_spec):
  """What the folds are stratified by: the class; for 0/1 or fractional columns whether
  the first is >= 0.5; for numbers the quintile of the first."""
  if label_spec.kind == "classification":
    return [e.label for e in examples]
  if label_spec.kind == "regression":
    return folds_lib.quantile_bins([e.label[0] for e in examples])
  return [e.label[0] >= 0.5 for e in examples]


def run_folds(c):
  """k-fold cross-validation: one model per fold in <output_dir>/fold_<i>, each trained on
  the other folds' rows and evaluated and predicted on its own. With every fold run,
  oof_predictions.tsv holds an out-of-fold prediction for every train row (in file order)
  and folds_summary.json the mean and std of each metric over the folds; a single fold
  (--fold) writes only into its own folder."""
  if not c.do_train:
    raise FlagError("--num_folds=%d trains one model per fold: add --do_train" % c.num_folds)
  if c.num_folds < 2:
    raise FlagError("--num_folds=%d: k-fold needs at least 2 folds" % c.num_folds)
  if not -1 <= c.fold < c.num_folds:
    raise FlagError("--fold=%d is not a fold of --num_folds=%d: give 0 to %d, or -1 for all"
                    % (c.fold, c.num_folds, c.num_folds - 1))
  processor = make_processor(c)
  label_spec = label_spec_of(processor)
  examples = processor.get_examples("train")
  try:
    assignment = folds_lib.assign_folds(fold_strata(examples, label_spec), c.num_folds, c.seed)
  except ValueError as e:
    raise FlagError(str(e))
  chosen = list(range(c.num_folds)) if c.fold == -1 else [c.fold]
  evals, outputs, outcomes = {}, {}, {}
  for i in chosen:
    log.info("fold %d of %d (0-based): training on %d rows, evaluating on %d", i, c.num_folds,
             len(examples) - assignment.count(i), assignment.count(i))
    fold_config = c.replace(
        output_dir=os.path.join(c.output_dir, "fold_%d" % i), do_eval=True,
        cache_dir=os.path.join(c.cache_dir, "fold_%d" % i) if c.cache_dir else None,
        export_dir=os.path.join(c.export_dir, "fold_%d" % i) if c.export_dir else None)
    outcomes[i] = run_once(fold_config, FoldPlan(c.num_folds, i, assignment))
    evals[i], outputs[i] = outcomes[i]["eval"], outcomes[i]["oof"]
  result = {"folds": evals}
  if len(chosen) < c.num_folds:
    # One fold of several, perhaps on one of several machines writing to the same
    # --output_dir: its results stay in its own fold_<i> folder, and nothing is written
    # beside the other folds'.
    return result
  summary = fold_summary(evals, c.num_folds, c.seed,
                         [assignment.count(i) for i in range(c.num_folds)])
  with tf.io.gfile.GFile(os.path.join(c.output_dir, "folds_summary.json"), "w") as out:
    json.dump(summary, out, indent=2, sort_keys=True)
  for name, figures in sorted(summary["metrics"].items()):
    log.info("  %d-fold %s = %.4f +- %.4f", c.num_folds, name, figures["mean"], figures["std"])
  result["summary"] = summary
  if len(chosen) == c.num_folds:
    by_row = {}
    for i in chosen:
      rows = [r for r, a in enumerate(assignment) if a == i]
      by_row.update(zip(rows, outputs[i]))
    path = os.path.join(c.output_dir, "oof_predictions.tsv")
    write_fold_predictions(path, examples, assignment, [by_row[r] for r in range(len(examples))],
                           label_spec)
    log.info("wrote out-of-fold predictions for all %d train rows to %s", len(examples), path)
    result["oof_predictions"] = path
  if c.do_predict:
    result["predictions"] = write_fold_mean_predictions(
        c.output_dir, processor, [outcomes[i] for i in chosen])
  return result


def write_fold_mean_predictions(output_dir, processor, outcomes):
  """test_results.tsv in output_dir from every fold's model: each test row's outputs
  (probabilities, or values for regression) averaged over the folds, the usual k-fold
  ensemble; the predicted class is that of the highest mean probability."""
  examples = outcomes[0]["test_examples"]
  per_fold = [o["test_outputs"] for o in outcomes]
  mean = [[sum(values) / len(per_fold) for values in zip(*rows)] for rows in zip(*per_fold)]
  path = write_test_results(output_dir, processor, examples, mean, {
      "combined": "the mean of the %d folds' outputs" % len(outcomes),
      "checkpoints": [o["checkpoint"] for o in outcomes]})
  log.info("test_results.tsv averages the %d folds' predictions; each fold's own are in "
           "its fold_<i> folder", len(outcomes))
  return path


def fold_summary(evals, num_folds, seed, sizes):
  """The folds' metrics: each numeric one's mean and sample std over the folds run, and
  its value per fold (a metric undefined on some fold is averaged over the others, and
  the folds it lacks are listed)."""
  names = sorted(set(k for e in evals.values() for k, v in e.items()
                     if isinstance(v, (int, float)) and not isinstance(v, bool)
                     and k not in ("global_step", "num_examples")) |
                 set(k for e in evals.values() for k, v in e.items() if v is None))
  metrics = {}
  for name in names:
    values = {i: e.get(name) for i, e in evals.items()}
    defined = [v for v in values.values() if v is not None]
    if not defined:
      continue
    mean, std = folds_lib.mean_and_std(defined)
    metrics[name] = {"mean": mean, "std": std, "per_fold": {str(i): v for i, v in
                                                             sorted(values.items())},
                     "undefined_on_folds": [i for i, v in sorted(values.items()) if v is None]}
  return {"num_folds": num_folds, "folds_run": sorted(evals), "seed": seed,
          "fold_sizes": sizes, "metrics": metrics}


def write_fold_predictions(path, examples, fold_of, outputs, label_spec):
  """Out-of-fold predictions: id, fold, the head's prediction columns, one line per row."""
  with tf.io.gfile.GFile(path, "w") as out:
    out.write("\t".join(["id", "fold"] + label_spec.prediction_header()) + "\n")
    for example, fold, values in zip(examples, fold_of, outputs):
      out.write("\t".join([_one_line(example.guid), str(fold)] +
                           label_spec.prediction_cells(values)) + "\n")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError("unexpected arguments: %s" % " ".join(argv[1:]))
  logging.getLogger().setLevel(logging.INFO)
  tf.get_logger().setLevel(getattr(logging, flags.FLAGS.tf_log_level))
  try:
    cluster = parse_tf_config(os.environ.get("TF_CONFIG"))
  except ClusterError as e:
    sys.stderr.write("run_classifier: TF_CONFIG error: %s\n" % e)
    sys.exit(2)
  try:
    run(config_from_flags(flags.FLAGS), cluster)
  except FlagError as e:
    sys.stderr.write("run_classifier: flag error: %s\n" % e)
    sys.exit(2)
  except DataError as e:
    sys.stderr.write("run_classifier: data error: %s\n" % e)
    sys.exit(1)


# absl's help flags (and whether each shows only this module's flags).
HELP_ARGUMENTS = {"--help": True, "-help": True, "-?": True, "--helpshort": True,
                  "-helpshort": True, "--helpfull": False, "-helpfull": False}


def exit_after_help_if_asked(argv):
  """absl ends --help with exit code 1, as it ends a flag error; help asked for is no
  error (a script with `set -e` would stop), so the same usage is printed here, exit 0."""
  for arg in argv[1:]:
    if arg == "--":
      return
    if arg in HELP_ARGUMENTS:
      app.usage(shorthelp=HELP_ARGUMENTS[arg], writeto_stdout=True)
      if HELP_ARGUMENTS[arg]:
        print("\nTry --helpfull to get a list of all flags.")
      sys.exit(0)


if __name__ == "__main__":
  define_flags(flags.FLAGS)
  exit_after_help_if_asked(sys.argv)
  app.run(main)
