r"""Fine-tune BERT for text classification, multi-label, soft-target or regression heads
with (TPU)Estimator.

The same graph runs on CPU, GPU and TPU: --use_tpu switches TPUEstimator between a
Cloud TPU and the local device. This file reads the flags (defined once, in
spec/options.py) and runs Google's steps: processor -> InputFeatures in TFRecords ->
input_fn -> model_fn -> TPUEstimator -> train, evaluate, predict, export. Each step's
details are in pipeline/. Nothing else reads flags.

  python run_classifier.py --task_name=jigsaw_toxic --data_dir=... \
      --bert_config_file=.../bert_config.json --vocab_file=.../vocab.txt \
      --init_checkpoint=.../bert_model.ckpt --do_train --do_eval --do_predict \
      --output_dir=/tmp/out
"""

import logging
import os
import sys
import time

from absl import app
from absl import flags

import tensorflow.compat.v1 as tf

from data.data_error import DataError
from pipeline import (build, calibration, card, checks, cross_validation, eval_history,
                      eval_report, evaluation, export_run, machine, multi_device, outputs,
                      splits, state, stopping, task_extras, thresholds, training,
                      workspace)
from spec import config, option_docs, option_index
from spec.cluster import ClusterError, parse_tf_config
from spec.run_errors import FileFault, FlagError, MemoryFault, NumericFault, ProcessFault

log = logging.getLogger("run_classifier")


# --- Flags: every option of spec/options.py, with its type, default, choices and help -----

def define_flags(flag_values):
  """Defines a flag for every option of spec/options.py on flag_values."""
  for _, field in option_index.option_fields():
    name, kind = field.name, option_index.base_type(field)
    if option_index.choices(name):
      flags.DEFINE_enum(name, field.default, option_index.choices(name), option_index.help_of(name),
                        flag_values=flag_values)
    elif kind is tuple:
      default = None if field.default is None else list(field.default)  # (absl wants a list)
      flags.DEFINE_list(name, default, option_index.help_of(name), flag_values=flag_values)
    else:
      define = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer, float: flags.DEFINE_float,
                str: flags.DEFINE_string}[kind]
      define(name, field.default, option_index.help_of(name), flag_values=flag_values)


def parse_flags(argv):
  """The configuration of a command line (argv[0] is the program's name), without absl's
  global FLAGS: for running the pipeline from Python and from tests."""
  values = flags.FlagValues()
  define_flags(values)
  values(list(argv))
  return config_from_flags(values)


def config_from_flags(flag_values):
  """The RunConfig of parsed flags; `given` names the flags set on the command line."""
  values = {name: flag_values[name].value for name in option_index.option_names()}
  values = {name: tuple(v) if isinstance(v, list) else v for name, v in values.items()}
  given = frozenset(name for name in option_index.option_names() if flag_values[name].present)
  return config.RunConfig(given=given, **values)


# --- The pipeline -------------------------------------------------------------------------

def run(c, cluster=None):
  """Runs the modes of a configuration (spec/config.py RunConfig), or its k-fold
  cross-validation. With cluster (spec.cluster.Cluster, from TF_CONFIG) this process is
  one task of a multi-worker training. Returns what was produced (pipeline.outputs
  ModelRun, or FoldsRun)."""
  checks.check_run(c, cluster)
  workspace.check_writable(c.outputs, c.modes, c.model.saved_model)
  c = multi_device.with_record_shards(c, cluster)  # a shard for each machine or TPU host
  machine.prepare()  # graph mode on either runtime; the C allocator
  trains_here = c.modes.do_train and (cluster is None or cluster.is_chief)
  with workspace.faults_reported(c.outputs.output_dir), \
      workspace.training_lock(cross_validation.folder_trained(c.training, c.outputs.output_dir),
                              holds=trains_here):
    if c.model.saved_model:
      return export_run.predict_with_export(c)
    if c.training.num_folds:
      return cross_validation.run_folds(c, run_model)
    return run_model(c, cluster=cluster)


def run_model(c, fold=None, cluster=None, write_summary=True):
  """One model through Google's steps. With fold (pipeline.cross_validation.FoldPlan), the train
  file's rows of the other folds train it and its own fold's rows are its dev split; with
  cluster, this task's part of a multi-worker run. write_summary: run_summary.json (not
  for a k-fold fold's export after the folds, which keeps its training's)."""
  started, seconds, result = time.time(), {}, outputs.ModelRun()
  # This task's part, and the settings of the model card (the folder's, or a fine-tuned
  # --init_checkpoint's).
  c, found_card, card_path = card.settle(c, cluster)
  c, precision, slower = build.with_chosen_precision(c, cluster)  # (bfloat16 where it pays)
  log.info(precision)
  if slower:
    log.warning(slower)
  modes, output_dir = c.modes, c.outputs.output_dir
  checks.check_task(c.data, c.given, needs_labels=modes.do_train or modes.do_eval,
                    reads_files=modes.do_train or modes.do_eval or modes.do_predict)
  bert_config = build.bert_config_of(c.model, found_card, card_path)

  # The processor reads the task's files into InputExamples; the tokenizer makes their ids.
  processor = build.make_processor(c.data, c.training.sample_weight_column,
                                   card.classes_source(found_card, card_path, c.given), c.heads)
  label_spec, task = processor.label_spec, task_extras.task_of(processor)
  if found_card:
    card.check_matches_task(found_card, processor, card_path)
    c = card.settle_head_options(found_card, label_spec, c, card_path)
    if not modes.do_train:  # (a training's: card.carry_over)
      card.apply_card_reading(found_card, label_spec)
  thresholds.check_head(label_spec, c.training.tune_thresholds)
  calibration.check_head(label_spec, c.training.calibrate)
  checks.check_windows(c, label_spec)
  eval_report.check_head(label_spec, c.outputs.eval_report)
  tokenizer, vocab_file = build.make_tokenizer(c.model)
  log.info("task %s: %s", processor.name, label_spec.describe())
  checkpoint = evaluation.checkpoint_to_use(modes, output_dir, c.model.init_checkpoint,
                                            label_spec)
  tf.io.gfile.makedirs(output_dir)

  # InputExamples -> InputFeatures -> TFRecords, for every split, before any training; each
  # split's input_fn reads its records back.
  with outputs.timed(seconds, "featurisation"):
    featurised = splits.prepare_splits(
        c, task, tokenizer, vocab_file, fold,
        multi_device.own_record_shards(cluster, c.device.num_record_shards))
  result.windows = featurised.windows()
  num_train_steps = 0
  if modes.do_train:  # what the folder holds must be what this run would continue
    num_train_steps = build.num_train_steps_for(featurised.train.num_examples, c.training)
    checks.check_train_split(c.training, c.device, featurised, task, output_dir, cluster)
    stream = state.input_stream(c.device, c.training,
                                multi_device.input_pipelines(c.device, cluster))
    resumed_step = training.resumed_step(output_dir)
    trained_on, data_from_step = state.continued_state(
        state.training_state(c.training, stream, featurised.train, processor.file_for("train"),
                             num_train_steps),
        found_card, card_path, resumed_step, c.training.continue_on_new_data)
    if found_card:  # (its calibration and thresholds hold while the model does not change)
      card.carry_over(found_card, label_spec, trains=resumed_step < num_train_steps)

  # model_fn and the (TPU)Estimator: one graph for a CPU, a GPU or a Cloud TPU. (A hub
  # module brings its own encoder, and encoder_config is then the vocabulary's size.)
  encoder_config = build.encoder_config(bert_config, tokenizer)
  fused, why_not = build.fused_kernels_for(c.model, c.training, c.device, cluster)
  log.info("fused CPU kernels: %s", "on" if fused else "off (%s)" % why_not)
  model_fn = build.model_fn_of(c.model, c.training, c.device, output_dir, encoder_config,
                               label_spec, num_train_steps, fused_kernels=fused,
                               class_weights=splits.class_weights_of(featurised.train,
                                                                     label_spec))
  # (every peer up before the estimator starts this task's server, which would wait for
  # one that never comes for ever)
  with stopping.phase(stopping.AWAITING_PEERS):
    multi_device.await_peers(cluster, c.device.cluster_wait_seconds)
  estimator = build.make_estimator(model_fn, output_dir, c.device, c.training, cluster)
  evaluator = evaluation.Evaluator(estimator, task, output_dir, c.training.eval_batch_size,
                                   c.model.init_checkpoint)
  if cluster is not None and cluster.is_evaluator:  # evaluates the chief's checkpoints
    result.evaluated_to_step = training.evaluate_checkpoints(estimator, featurised.dev,
                                                             output_dir, num_train_steps)
    return result

  trainer = None
  if modes.do_train:  # estimator.train on the train split's input_fn (in stretches with evals)
    if cluster is None or cluster.is_chief:
      card.write_model_card(output_dir, card.card_of_run(
          c.model, c.as_dict(), processor, vocab_file, tokenizer, bert_config, trained_on))
    trainer = training.Trainer(estimator, featurised.train, c.training, output_dir,
                               num_train_steps, fetch_loss=not c.device.use_tpu,
                               data_from_step=data_from_step,
                               saver_hooks=build.checkpoint_hooks(output_dir, c.device,
                                                                  c.training, cluster))
    checkpoint, result.eval = trainer.train(seconds, evaluator, featurised.dev)
    if trainer.progress:  # (None when the folder's model had reached its last step)
      result.train_progress, result.train_losses = (trainer.progress.history,
                                                    trainer.progress.losses)
    if cluster is not None and not cluster.is_chief:  # the chief writes the results
      multi_device.remove_worker_scratch(output_dir, cluster)
      return result
  result.checkpoint = checkpoint  # (the best one with --best_metric, else the newest)
  if modes.do_train and checkpoint and (modes.do_eval or modes.do_predict or modes.do_export):
    evaluation.check_values(checkpoint, "use")  # (whole, and its numbers finite)
  if fold is not None:  # the held-out rows' outputs, for the folds' out-of-fold predictions
    result.oof, result.oof_logits = cross_validation.predict_held_out(
        evaluator, featurised.dev, checkpoint, fold)
  if modes.do_eval and result.eval is None:  # estimator.evaluate on the dev split's input_fn
    with outputs.timed(seconds, "final eval" if c.training.eval_every_steps else "eval"):
      result.eval = evaluator.evaluate(featurised.dev, checkpoint, result.oof,
                                       name="best" if c.training.best_metric else None)
  # (before the thresholds, which tune on its outputs; k-fold fits on every fold's at once)
  if c.training.calibrate and result.eval is not None and fold is None:
    calibration.calibrate_after_eval(evaluator, featurised.dev, checkpoint, result.eval,
                                     output_dir, retune=bool(c.training.tune_thresholds))
  if c.training.tune_thresholds and result.eval is not None:  # (on the checkpoint used)
    thresholds.tune_after_eval(c.training.tune_thresholds, evaluator, featurised.dev,
                               checkpoint, result.eval, output_dir)
  elif label_spec.thresholds and result.eval is not None:  # (the figures it decides at)
    thresholds.report_after_eval(evaluator, featurised.dev, checkpoint, result.eval,
                                 output_dir)
  if c.outputs.eval_report and result.eval is not None:  # (at the thresholds it decides by)
    eval_report.write(output_dir, label_spec, featurised.dev.examples,
                      evaluator.dev_outputs(featurised.dev, checkpoint))
  if modes.do_predict:  # estimator.predict on the test split's input_fn -> test_results.tsv
    with outputs.timed(seconds, "predict"):
      result.predictions, result.test_outputs, result.test_logits = evaluator.predict(
          featurised.test, checkpoint)
    result.test_sha256 = featurised.test.metadata["source_sha256"]
  if modes.do_export:  # the SavedModel, with the folder's card (or this run's, if it has none)
    export_card = card.read_model_card(output_dir) or card.card_of_run(
        c.model, c.as_dict(), processor, vocab_file, tokenizer, bert_config)
    serving_fn = build.model_fn_of(c.model, c.training, c.device, output_dir, encoder_config,
                                   label_spec, serving=True)
    with outputs.timed(seconds, "export"):
      result.export = export_run.export_model(
          c.outputs, serving_fn, label_spec, checkpoint, export_card, vocab_file,
          featurised.dev.examples if result.eval is not None else None)
  if write_summary:
    result.summary = outputs.write_run_summary(
        c, started, seconds, trainer and trainer.progress, bert_config, result,
        eval_history.read_best(output_dir) if c.training.best_metric else None, cluster)
  return result


# --- main ---------------------------------------------------------------------------------

# Each kind of error a run can end in: its class, the word the one line starts with, and
# the exit code (settings 2, everything else 1; a signal 128 + its number).
ERRORS = ((ClusterError, "TF_CONFIG error", 2), (FlagError, "flag error", 2),
          (DataError, "data error", 1), (FileFault, "file error", 1),
          (ProcessFault, "process error", 1), (NumericFault, "model error", 1),
          (MemoryFault, "memory error", 1))


def main(argv):
  if len(argv) > 1:
    raise app.UsageError("unexpected arguments: %s" % " ".join(argv[1:]))
  logging.getLogger().setLevel(logging.INFO)
  tf.get_logger().setLevel(getattr(logging, flags.FLAGS.tf_log_level))
  if "TF_CONFIG" in os.environ and not os.environ["TF_CONFIG"].strip():
    log.info("TF_CONFIG is set but empty: this run is one process, as with no TF_CONFIG")
    del os.environ["TF_CONFIG"]  # (TensorFlow's own readers fail on an empty value)
  c = config_from_flags(flags.FLAGS)
  stopping.stop_on_signals()
  try:
    run(multi_device.with_tpu_found(c, os.environ, multi_device.on_tpu_vm()),
        parse_tf_config(os.environ.get("TF_CONFIG")))
  except stopping.RunStopped as e:
    sys.stderr.write("run_classifier: %s\n" % stopping.how_to_go_on(
        e, training.newest_step(c.outputs.output_dir)))
    sys.exit(e.exit_code)
  except tf.errors.OpError as e:  # (outside the run's own report: a bucket out of reach)
    fault = workspace.file_fault(e)
    if fault is None:
      raise
    sys.stderr.write("run_classifier: file error: %s\n" % fault)
    sys.exit(1)
  except tuple(kind for kind, _, _ in ERRORS) as e:
    word, code = next((w, c) for kind, w, c in ERRORS if isinstance(e, kind))
    sys.stderr.write("run_classifier: %s: %s\n" % (word, e))
    sys.exit(code)


# absl's help flags (and whether each shows only this module's flags).
HELP_ARGUMENTS = {"--help": True, "-help": True, "-?": True, "--helpshort": True,
                  "-helpshort": True, "--helpfull": False, "-helpfull": False}


def exit_after_help_if_asked(argv):
  """--help prints this program's options by group (spec/option_docs.py: the words and
  order of docs/reference/flags.md), exit 0 (absl ends --help with exit 1, as it ends a
  flag error, which would stop a script with `set -e`); --helpfull adds absl's own."""
  for arg in argv[1:]:
    if arg == "--":
      return
    if arg in HELP_ARGUMENTS:
      if HELP_ARGUMENTS[arg]:  # (this program's options by group, as the reference has them)
        print(option_docs.help_text())
        print("Try --helpfull for absl's own flags too.")
      else:
        app.usage(shorthelp=False, writeto_stdout=True)
      sys.exit(0)


if __name__ == "__main__":
  define_flags(flags.FLAGS)
  exit_after_help_if_asked(sys.argv)
  app.run(main)
