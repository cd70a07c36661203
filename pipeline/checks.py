"""The checks of the options, before any work: each problem stops the run with a FlagError
that names the option and the fix."""

import os

import tensorflow.compat.v1 as tf

from data import fast_tokenization
from data.long_texts import max_problem
from pipeline.calibration import MEAN_THRESHOLDS_REFUSED
from data.processors import processor_class
from modeling.checkpoint import files_problem as checkpoint_files_problem
from modeling.checkpoint import values_problem as checkpoint_values_problem
from modeling.checkpoint import EARLIER_CHECKPOINT_FIX, newest_checkpoint
from pipeline import multi_device, hf_export, onnx_export
from pipeline.training import check_best_metric
from spec.run_errors import ArtefactFault, FlagError

# Options that must be positive integers, in the order they are checked.
POSITIVE = ("train_batch_size", "eval_batch_size", "predict_batch_size",
            "save_checkpoints_steps", "save_summary_steps", "iterations_per_loop",
            "log_every_steps", "gradient_accumulation_steps", "num_record_shards")


def check_run(c, cluster=None):
  """Every check that needs no file: the modes, sizes, rates, devices and their
  combinations; with cluster (TF_CONFIG), what a task of a cluster can do."""
  if cluster is not None:
    multi_device.check_cluster(c.modes, c.device, c.training, cluster, c.given)
  check_modes(c.modes, c.model, c.outputs, c.given, c.device.use_tpu)
  for name in POSITIVE:
    value = c.value(name)
    if value <= 0:
      raise FlagError("--%s=%d must be a positive integer" % (name, value))
  if c.device.featurise_workers < 0:
    raise FlagError("--featurise_workers=%d must be 0 (one per core) or a positive integer"
                    % c.device.featurise_workers)
  check_training(c.training, c.modes, c.given)
  check_row_ranges(c.data, c.training, c.modes)
  check_thresholds(c.training, c.modes)
  check_calibration(c.training, c.modes)
  if c.outputs.eval_report and not (c.modes.do_eval or c.training.num_folds):
    raise FlagError("--eval_report reports on the dev split's evaluation: add --do_eval")
  check_device(c.device, c.training, c.modes, c.outputs.output_dir, c.given)
  from pipeline.build import check_fused_kernels  # (build imports what imports this module)
  check_fused_kernels(c.model, c.training, c.device, cluster)
  check_model_inputs(c.model)


def check_modes(modes, model, outputs, given, use_tpu):
  """Something to do, somewhere to write it, and the export flags that belong together."""
  if not (modes.do_train or modes.do_eval or modes.do_predict or modes.do_export):
    raise FlagError("nothing to do: pass at least one of --do_train, --do_eval, --do_predict, "
                    "--do_export")
  if not outputs.output_dir:
    raise FlagError("--output_dir is required")
  if model.saved_model:
    check_saved_model(modes, model, given, use_tpu)
  if outputs.export_dir and not modes.do_export:
    raise FlagError("--export_dir says where --do_export writes the SavedModel: add "
                    "--do_export, or drop --export_dir (to predict from an export, pass "
                    "--saved_model)")
  if set(outputs.export_format) - {"saved_model"} and not modes.do_export:
    raise FlagError("--export_format says what --do_export writes: add --do_export, or drop "
                    "--export_format")
  if "hf" in outputs.export_format:
    hf_export.check_hf_export(model.pooling, model.bert_hub_module_handle, None, "this run")
  if "onnx" in outputs.export_format:
    onnx_export.check_onnx_export()
  if (model.freeze_encoder and modes.do_train and not model.init_checkpoint and
      not model.bert_hub_module_handle and not newest_checkpoint(outputs.output_dir)):
    raise FlagError("--freeze_encoder trains the head on the encoder as it starts, and this "
                    "run has no pre-trained one: give --init_checkpoint (or "
                    "--bert_hub_module_handle)")
  if outputs.export_dir and tf.io.gfile.exists(outputs.export_dir):
    raise FlagError("--export_dir=%s already exists: an export never overwrites another. "
                    "Pass a new folder, or leave --export_dir out for a new numbered version "
                    "under <output_dir>/export" % outputs.export_dir)


def check_saved_model(modes, model, given, use_tpu):
  """--saved_model predicts, and the export brings its own model and vocabulary."""
  if not modes.do_predict or modes.do_train or modes.do_eval or modes.do_export:
    raise FlagError("--saved_model=%s predicts with an export: pass --do_predict alone (train, "
                    "evaluate and export from the model's --output_dir instead)"
                    % model.saved_model)
  for name in ("bert_config_file", "init_checkpoint", "vocab_file", "bert_hub_module_handle",
               "num_folds"):
    if name in given:
      raise FlagError("--%s has no use with --saved_model: the export holds the model, its "
                      "vocabulary and its model card. Drop --%s" % (name, name))
  if use_tpu:
    raise FlagError("--saved_model predicts on this machine's CPU/GPU: drop --use_tpu")


def check_training(training, modes, given):
  """Rates, fractions, the schedule, evaluation during training, and the weights, which
  only training uses."""
  check_periodic_eval(training, modes)
  if training.learning_rate <= 0:
    raise FlagError("--learning_rate=%g must be > 0 (BERT fine-tuning uses 2e-5 to 5e-5)" %
                    training.learning_rate)
  if not 0.0 < training.train_fraction <= 1.0:
    raise FlagError("--train_fraction=%g must be in (0, 1]; e.g. 0.1 trains on 10%% of the rows"
                    % training.train_fraction)
  if not 0.0 <= training.warmup_proportion < 1.0:
    raise FlagError("--warmup_proportion=%g must be in [0, 1)" % training.warmup_proportion)
  if training.num_train_steps < 0:
    raise FlagError("--num_train_steps=%d must be 0 or more (0: train --num_train_epochs over "
                    "the train split)" % training.num_train_steps)
  if modes.do_train and training.num_train_steps <= 0 and training.num_train_epochs <= 0:
    raise FlagError("--num_train_epochs=%g must be > 0, or give --num_train_steps" %
                    training.num_train_epochs)
  if "class_weights" in given and not training.class_weights:
    raise FlagError("--class_weights is empty: give one weight per class (or label column), "
                    "or 'balanced', or drop the flag")
  if not modes.do_train:
    for name in ("class_weights", "sample_weight_column", "identity_weights"):
      if name in given:
        raise FlagError("--%s weighs the training loss; it does nothing without --do_train"
                        % name)
    if training.continue_on_new_data:
      raise FlagError("--continue_on_new_data goes on training a folder's model on a new train "
                      "file; it does nothing without --do_train")


def check_calibration(training, modes):
  """--calibrate: a dev split to fit on, or, with k-fold, every fold's out-of-fold
  outputs."""
  if not training.calibrate:
    return
  if training.num_folds and training.fold >= 0:
    raise FlagError("--calibrate with --num_folds fits one temperature on every fold's "
                    "out-of-fold predictions; --fold=%d runs one fold: drop --fold (or "
                    "calibrate one model, without --num_folds)" % training.fold)
  if not modes.do_eval and not training.num_folds:  # (k-fold evaluates every fold)
    raise FlagError("--calibrate fits the temperature on the dev split: add --do_eval")


def check_windows(c, label_spec):
  """--doc_stride (given, or the model card's) with what windows are not built for, max
  over a softmax head of more than two classes, and --calibrate that would move the
  card's thresholds through a mean of windows: refused before any work."""
  model, training = c.model, c.training
  if not model.doc_stride:
    return
  if (training.calibrate and c.modes.do_eval and not training.num_folds and
      label_spec.thresholds and not training.tune_thresholds and
      model.window_aggregation == "mean"):  # (k-fold's: cross_validation.run_folds)
    raise FlagError(MEAN_THRESHOLDS_REFUSED)
  problem = model.window_aggregation == "max" and max_problem(label_spec.loss,
                                                              label_spec.num_outputs)
  if problem:
    raise FlagError(problem)


def check_thresholds(training, modes):
  """--tune_thresholds: an objective this project knows, and a dev split to tune on."""
  if training.tune_thresholds is None:
    return
  from spec.thresholds import parse_objective
  try:
    parse_objective(training.tune_thresholds)
  except ValueError as error:
    raise FlagError(str(error))
  if training.num_folds and training.fold >= 0:
    raise FlagError("--tune_thresholds with --num_folds tunes on every fold's out-of-fold "
                    "predictions; --fold=%d runs one fold: drop --fold (or tune later, on one "
                    "model's dev split)" % training.fold)
  if not modes.do_eval and not training.num_folds:  # (k-fold evaluates every fold)
    raise FlagError("--tune_thresholds chooses thresholds on the dev split: add --do_eval")


def check_row_ranges(data, training, modes):
  """--train_rows and --eval_rows choose rows of a file that the run reads."""
  for name, split_read, mode in (("train_rows", modes.do_train or training.num_folds, "--do_train"),
                                 ("eval_rows", modes.do_eval, "--do_eval")):
    if getattr(data, name) is not None and not split_read:
      raise FlagError("--%s=%s chooses rows to read for %s; this run does not: add %s or "
                      "drop --%s" % (name, getattr(data, name), mode, mode, name))
  if data.eval_rows is not None and training.num_folds:
    raise FlagError("--eval_rows=%s cannot be combined with --num_folds: each fold's dev "
                    "split is its own rows of the train file (choose them with --train_rows)"
                    % data.eval_rows)


def check_periodic_eval(training, modes):
  """--eval_every_steps, --best_metric and --early_stopping_patience go together."""
  if training.eval_every_steps < 0 or training.early_stopping_patience < 0:
    raise FlagError("--eval_every_steps and --early_stopping_patience must be >= 0 (0: off)")
  if training.eval_every_steps and not (modes.do_train and modes.do_eval):
    raise FlagError("--eval_every_steps=%d evaluates the dev split during training: add "
                    "--do_train and --do_eval" % training.eval_every_steps)
  if training.best_metric and not training.eval_every_steps:
    raise FlagError("--best_metric=%s picks the best of the evaluations during training: "
                    "add --eval_every_steps (e.g. --eval_every_steps=%d)" % (
                        training.best_metric, training.save_checkpoints_steps))
  if training.early_stopping_patience and not training.best_metric:
    raise FlagError("--early_stopping_patience=%d counts evaluations without improvement of "
                    "a metric: add --best_metric (e.g. --best_metric=loss)"
                    % training.early_stopping_patience)
  if training.eval_every_steps and training.num_folds:
    raise FlagError("--eval_every_steps cannot be combined with --num_folds: each fold's dev "
                    "split is its held-out rows, so choosing its checkpoint by them would make "
                    "the out-of-fold predictions optimistic. Drop one of them")


def check_device(device, training, modes, output_dir, given=frozenset()):
  """The tokenizer, the precision, and the device's own needs (GPUs, a TPU)."""
  if device.use_fp16 and device.use_bf16:
    raise FlagError("pass one of --use_fp16 (GPU) and --use_bf16 (TPU or CPU), not both")
  if device.use_fp16 and training.gradient_accumulation_steps > 1:
    raise FlagError("--use_fp16 cannot be combined with --gradient_accumulation_steps yet: "
                    "drop one of them")
  if device.num_gpus > 1 or device.num_gpus < 0:
    multi_device.check_gpu_replicas(device, training, modes.do_train)
  if device.use_tpu:
    multi_device.check_tpu(device, training, modes, output_dir, given)
    if device.use_fp16:
      raise FlagError("--use_fp16 is for GPUs; on a TPU pass --use_bf16")
    if device.use_xla:
      raise FlagError("--use_xla is implied on a TPU (everything there is XLA); drop it")
    if training.gradient_accumulation_steps > 1:
      raise FlagError("--gradient_accumulation_steps cannot be used with --use_tpu: use a "
                      "larger --train_batch_size spread over the TPU cores instead")
    if device.dynamic_padding:
      raise FlagError("--dynamic_padding cannot be used with --use_tpu: a TPU compiles one "
                      "static shape, so batches stay padded to --max_seq_length there")


def check_model_inputs(model):
  """The tokenizer asked for, a sequence that can hold [CLS] and [SEP], and a starting
  checkpoint that is one."""
  if model.tokenizer == "fast" and not fast_tokenization.available():
    raise FlagError("--tokenizer=fast needs the `tokenizers` package: pip install -r "
                    "requirements.txt (or pass --tokenizer=python)")
  if model.max_seq_length < 3:
    raise FlagError("--max_seq_length=%d is too short: [CLS] text [SEP] needs at least 3"
                    % model.max_seq_length)
  for name, usual in (("bert_config_file", "bert_config.json"), ("vocab_file", "vocab.txt")):
    path = getattr(model, name)
    if path and tf.io.gfile.isdir(path):
      inside = os.path.join(path, usual)
      raise FlagError("--%s=%s is a folder: pass the file itself%s" % (
          name, path, ", %s" % inside if tf.io.gfile.exists(inside) else ""))
  if model.init_checkpoint and tf.io.gfile.isdir(model.init_checkpoint):
    newest = tf.train.latest_checkpoint(model.init_checkpoint)
    raise FlagError("--init_checkpoint=%s is a folder: pass a checkpoint's prefix%s" % (
        model.init_checkpoint, " (its newest is %s)" % newest if newest else
        ", e.g. .../bert_model.ckpt (not the .index or .data file)"))
  if model.init_checkpoint and not tf.io.gfile.exists(model.init_checkpoint + ".index"):
    raise FlagError("--init_checkpoint=%s: no file %s.index. Give the checkpoint prefix, e.g. "
                    ".../bert_model.ckpt (not the .index or .data file)" %
                    (model.init_checkpoint, model.init_checkpoint))
  problem = model.init_checkpoint and checkpoint_files_problem(model.init_checkpoint)
  if problem:
    raise FlagError("--init_checkpoint=%s cannot be read: %s. Copy the whole checkpoint (its "
                    ".index and every .data-* file), or give another" % (
                        model.init_checkpoint, problem))
  if model.init_checkpoint and "://" not in model.init_checkpoint:
    # (its values, read once here: damaged bytes or numbers that are not finite would
    # otherwise surface in the first training step; a bucket's is checked as it is read)
    problem, _ = checkpoint_values_problem(model.init_checkpoint)
    if problem:
      raise ArtefactFault("--init_checkpoint=%s cannot be used: %s. Fix: copy the whole "
                          "checkpoint again, or give another" % (model.init_checkpoint,
                                                                 problem))


def check_train_split(training, device, featurised, task, output_dir, cluster=None):
  """What needs the train split's rows: --best_metric among the run's metrics (and the one
  a folder's best checkpoint was kept by), and rows in every input pipeline's shards."""
  dev_examples = featurised.dev.examples if featurised.dev else []
  check_best_metric(training.best_metric, output_dir, task, dev_examples)
  newest = newest_checkpoint(output_dir)
  problem = newest and checkpoint_files_problem(newest)
  if problem:
    raise FlagError("--output_dir=%s: training would resume from its newest checkpoint, %s, "
                    "which cannot be read: %s. Restore its files, or %s, or train into a new "
                    "--output_dir" % (output_dir, os.path.basename(newest), problem,
                                      EARLIER_CHECKPOINT_FIX))
  multi_device.check_every_pipeline_has_rows(
      featurised.train.num_examples, device.num_record_shards,
      multi_device.input_pipelines(device, cluster))


def check_task(data, given, needs_labels, reads_files=True):
  """The task's name, and the label and column options it reads (DataOptions; given: the
  options set explicitly; reads_files: whether the run reads any data file, which an
  export alone does not)."""
  if not data.task_name:
    raise FlagError("--task_name is required (or a model card in --output_dir)")
  processor = processor_class(data.task_name)
  if "labels" in given and not processor.takes_class_list:
    raise FlagError("--labels lists the classes of a task whose files may not name them "
                    "(csv's label column, TweetEval's indices); task %s has "
                    "its own labels. Drop --labels" % processor.name)
  if "label_column" in given and not processor.takes_label_column:
    raise FlagError("--label_column picks label columns of the csv and Jigsaw tasks; task %s "
                    "reads its own. Drop --label_column" % processor.name)
  for name in processor.required_options(needs_labels) if reads_files else ():
    if getattr(data, name) is None:
      raise FlagError("--task_name=%s needs --%s (a column name, or a 0-based position "
                      "with --nohas_header)" % (processor.name, name))
  if needs_labels or "label_column" in given:  # (a predict-only run reads no label: the
    check_texts_are_not_labels(data)           # card's column only names its outputs)


def check_texts_are_not_labels(data):
  """A text column that is also a label column: the model would read each row's answer
  in its input, and score well on nothing it could learn from text."""
  labels = set(data.label_columns() or ())
  if data.text_b_column is not None and str(data.text_b_column) == str(data.text_column):
    raise FlagError("--text_b_column=%s is also --text_column: each text would be paired with "
                    "itself. Pass the column of the second texts, or drop --text_b_column"
                    % data.text_b_column)
  for name in ("text_column", "text_b_column"):
    column = getattr(data, name)
    if column is not None and str(column) in labels:
      raise FlagError("--%s=%s is also a label column (--label_column=%s): the model would "
                      "read each row's label in its text. Pass the column of the texts"
                      % (name, column, data.label_column))
