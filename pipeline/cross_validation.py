"""k-fold cross-validation: one model per fold, each trained on the other folds' rows and
evaluated and predicted on its own; then the out-of-fold predictions of every train row,
the folds' metrics, and the folds' mean predictions of the test file."""

import logging
import os

import numpy

from data import fold_assignment as folds_lib
from data.long_texts import WindowLogits
from data.data_error import DataError
from data.files import write_whole
from data.reread import read_again
from modeling.checkpoint import checkpoint_global_step
from pipeline import calibration, eval_report, thresholds
from pipeline.build import make_processor
from pipeline.card import read_model_card, record_label_spec
from pipeline.outputs import (FoldsRun, json_text, paired, write_eval_results,
                              write_fold_predictions, write_test_results)
from pipeline.splits import check_hashed_then_read
from pipeline.task_extras import task_of
from pipeline.training_order import check_folds_balanced
from spec.heads import from_card
from spec.run_errors import FlagError

log = logging.getLogger(__name__)


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
  strata = [label_spec.stratum(e.label) for e in examples]
  return folds_lib.quantile_bins(strata) if label_spec.strata_by_quantile else strata


def check_folds(training, do_train):
  """--num_folds trains, at least two folds, and --fold names one of them (or -1)."""
  if not do_train:
    raise FlagError("--num_folds=%d trains one model per fold: add --do_train"
                    % training.num_folds)
  if training.num_folds < 2:
    raise FlagError("--num_folds=%d: k-fold needs at least 2 folds" % training.num_folds)
  if not -1 <= training.fold < training.num_folds:
    raise FlagError("--fold=%d is not a fold of --num_folds=%d: give 0 to %d, or -1 for all"
                    % (training.fold, training.num_folds, training.num_folds - 1))


def folder_trained(training, output_dir):
  """The folder a run trains into: one fold's own (a run of --fold=<i>, one machine's part
  of a cross-validation), else --output_dir. A training holds it (pipeline.workspace)."""
  if training.num_folds and training.fold >= 0:
    return os.path.join(output_dir, "fold_%d" % training.fold)
  return output_dir


def decided_out_of_fold(training):
  """Whether the folds' models decide by what every fold's out-of-fold outputs fit (a
  temperature, thresholds): their cards, files and exports are then written after all."""
  return bool(training.calibrate or training.tune_thresholds)


def fold_config(c, i):
  """The configuration of fold i: its own folders under --output_dir (and --cache_dir,
  --export_dir), evaluated on its held-out rows. (--calibrate and --tune_thresholds fit
  on every fold's out-of-fold outputs, after all folds, not on a fold's own: each fold's
  export waits for them.)"""
  outputs = c.outputs
  return c.replace(
      output_dir=os.path.join(outputs.output_dir, "fold_%d" % i), do_eval=True,
      tune_thresholds=None,
      do_export=c.modes.do_export and not decided_out_of_fold(c.training),
      cache_dir=os.path.join(outputs.cache_dir, "fold_%d" % i) if outputs.cache_dir else None,
      export_dir=os.path.join(outputs.export_dir, "fold_%d" % i) if outputs.export_dir else None)


def run_folds(c, run_model):
  """Runs run_model(config, fold_plan) for each fold asked for, in <output_dir>/fold_<i>.
  With every fold run, oof_predictions.tsv holds an out-of-fold prediction for every train
  row (in file order) and folds_summary.json the mean and std of each metric over the
  folds; with --do_predict, test_results.tsv is the folds' mean. A single fold (--fold)
  writes only into its own folder. Returns a FoldsRun."""
  check_folds(c.training, c.modes.do_train)
  num_folds, output_dir = c.training.num_folds, c.outputs.output_dir
  processor = make_processor(c.data, c.training.sample_weight_column, head_options=c.heads)
  thresholds.check_head(processor.label_spec, c.training.tune_thresholds)
  calibration.check_head(processor.label_spec, c.training.calibrate)
  check_hashed_then_read(processor, ["train"] + (["test"] if c.modes.do_predict else []))
  examples = processor.get_examples("train")
  assignment = folds_lib.assign_folds(fold_strata(examples, processor.label_spec), num_folds,
                                      c.training.seed)
  check_folds_balanced(c.training, task_of(processor), examples, assignment, num_folds)
  chosen = list(range(num_folds)) if c.training.fold == -1 else [c.training.fold]
  earlier = [found for found in fold_cards(c, chosen) if found]  # (a rerun's)
  aggregation = window_aggregation_of(c, earlier)
  if (c.training.calibrate and not c.training.tune_thresholds and aggregation == "mean" and
      any(found["label_spec"].get("thresholds") for found in earlier)):
    raise FlagError(calibration.MEAN_THRESHOLDS_REFUSED)  # (before any fold runs)
  runs = {}
  for i in chosen:
    log.info("fold %d of %d (0-based): training on %d rows, evaluating on %d", i, num_folds,
             len(examples) - assignment.count(i), assignment.count(i))
    runs[i] = run_model(fold_config(c, i), FoldPlan(num_folds, i, assignment))
  result = FoldsRun(folds={i: run.eval for i, run in runs.items()})
  if len(chosen) < num_folds:
    # One fold of several, perhaps on one of several machines writing to the same
    # --output_dir: its results stay in its own fold_<i> folder, and nothing is written
    # beside the other folds'.
    return result
  result.summary = fold_summary(result.folds, num_folds, c.training.seed,
                                [assignment.count(i) for i in range(num_folds)])
  oof = in_row_order(runs, assignment, lambda run: run.oof)
  carried = carried_decisions(c, chosen) if decided_out_of_fold(c.training) else None
  if carried and not c.training.calibrate:  # (its outputs are at the cards' temperature)
    processor.label_spec.set_temperature(carried.temperature)
  if c.training.calibrate:  # (then the thresholds tune on, and every fold divides by, it)
    result.summary["calibration"], oof = calibrate_out_of_fold(
        processor.label_spec, examples, assignment, runs)
  if carried and carried.thresholds and not c.training.tune_thresholds:
    processor.label_spec.set_thresholds(carried.thresholds)  # (deciding as they did)
    if c.training.calibrate:
      calibration.moved_thresholds(processor.label_spec, carried.temperatures(),
                                   aggregation)
  if c.training.tune_thresholds:  # (then the folds' cards and mean predictions use them)
    result.summary["thresholds"] = thresholds.tune_out_of_fold(
        c.training.tune_thresholds, processor.label_spec, examples, oof)
  if decided_out_of_fold(c.training):
    for i in chosen:
      decide_fold_again(fold_config(c, i), processor, i,
                        FoldPlan(num_folds, i, assignment).split(examples)[1], runs[i])
  write_whole(os.path.join(output_dir, "folds_summary.json"), json_text(result.summary))
  for name, figures in sorted(result.summary["metrics"].items()):
    missing = figures["undefined_on_folds"]
    if figures["mean"] is None:
      log.warning("  %d-fold %s is undefined on every fold (an AUC, say, of held-out rows "
                  "that are all of one class)", num_folds, name)
      continue
    log.info("  %d-fold %s = %.4f +- %.4f%s", num_folds, name, figures["mean"], figures["std"],
             " (over the %d folds where it is defined; undefined on fold%s %s)" % (
                 num_folds - len(missing), "s" if len(missing) > 1 else "",
                 ", ".join(str(i) for i in missing)) if missing else "")
  result.oof_predictions = os.path.join(output_dir, "oof_predictions.tsv")
  write_fold_predictions(result.oof_predictions, examples, assignment, oof,
                         processor.label_spec)
  log.info("wrote out-of-fold predictions for all %d train rows to %s", len(examples),
           result.oof_predictions)
  if c.modes.do_predict:
    result.predictions = write_fold_mean_predictions(output_dir, processor,
                                                     [runs[i] for i in chosen])
  if c.modes.do_export and decided_out_of_fold(c.training):
    for i in chosen:  # (each fold's card now has what its export's graph decides by)
      run_model(fold_config(c, i).replace(do_train=False, do_eval=False, do_predict=False,
                                          do_export=True), write_summary=False)
  return result


def fold_cards(c, chosen):
  """The model card of each chosen fold's folder (None where it has none)."""
  return [read_model_card(fold_config(c, i).outputs.output_dir) for i in chosen]


def window_aggregation_of(c, cards):
  """How the folds' models aggregate windows: --window_aggregation with --doc_stride,
  else as the first of the folds' cards that records windows says (a rerun reads them
  from the cards); None without windows."""
  if c.model.doc_stride:
    return c.model.window_aggregation
  for found in cards:
    windows = found["truncation"].get("windows")
    if windows:
      return windows["aggregation"]
  return None


def carried_decisions(c, chosen):
  """The label spec of the folds' cards after their runs, when it carries a temperature or
  thresholds (folds trained by an earlier run keep its decisions, and predicted this
  run's outputs by them): what this run keeps of them where it fits nothing new. None
  when they carry none; the folds' cards disagreeing is refused."""
  specs = [from_card(found["label_spec"]) if found else None
           for found in fold_cards(c, chosen)]
  decisions = set((None, None) if s is None else (
      json_text(s.temperatures()), json_text(s.thresholds or None)) for s in specs)
  if len(decisions) > 1:
    raise FlagError("the folds' model cards in %s hold different temperatures or thresholds "
                    "(a fold's card was edited, or written by another run): run the folds "
                    "again into a new --output_dir" % c.outputs.output_dir)
  first = specs[0]
  return first if first is not None and (first.temperature is not None or
                                         first.thresholds) else None


def calibrate_out_of_fold(label_spec, examples, assignment, runs):
  """--calibrate with k-fold: one temperature fitted on every train row's out-of-fold
  logits, given to label_spec; each fold's held-out and test outputs become those of its
  logits divided by it (what its graph gives once its card has it). Returns
  (folds_summary.json's "calibration" figures, the out-of-fold outputs in row order)."""
  texts = in_row_order(runs, assignment, lambda run: run.oof_logits)
  some = next(iter(runs.values())).oof_logits
  figures = calibration.calibrate(
      label_spec, examples,
      some.of_texts(texts) if isinstance(some, WindowLogits) else numpy.array(texts),
      where="the out-of-fold predictions")
  temperatures = label_spec.temperatures() or [1.0] * label_spec.num_outputs
  for run in runs.values():
    run.oof = calibration.scaled_outputs(label_spec, run.oof_logits, temperatures)
    if run.test_logits is not None:
      run.test_outputs = calibration.scaled_outputs(label_spec, run.test_logits, temperatures)
  oof = in_row_order(runs, assignment, lambda run: run.oof)
  figures.update(calibration.calibration_errors(label_spec, examples, numpy.array(oof)))
  return figures, oof


def in_row_order(runs, assignment, per_fold):
  """per_fold(run) of every fold's run ({fold: ModelRun}; its held-out rows', in file
  order) as one list of every train row's, in file order (assignment: each row's fold)."""
  by_row = {}
  for i, run in runs.items():
    by_row.update(zip([r for r, a in enumerate(assignment) if a == i], per_fold(run)))
  return [by_row[r] for r in range(len(assignment))]


def decide_fold_again(c, processor, index, held_out, run):
  """A fold's card and files, written before the out-of-fold fits, again at the fitted
  temperature and tuned thresholds (processor's label spec has them): its card keeps
  them, and its oof_predictions.tsv, eval_results.json's figures, report and
  test_results.tsv are those of the outputs and decisions they give."""
  label_spec, output_dir = processor.label_spec, c.outputs.output_dir
  record_label_spec(output_dir, label_spec)
  write_fold_predictions(os.path.join(output_dir, "oof_predictions.tsv"), held_out,
                         [index] * len(held_out), run.oof, label_spec)
  if label_spec.thresholds:
    run.eval.update(thresholds.figures_at_card_thresholds(label_spec, held_out, run.oof))
  write_eval_results(output_dir, run.eval)
  if c.outputs.eval_report:
    eval_report.write(output_dir, label_spec, held_out, run.oof)
  if c.modes.do_predict:
    rows = read_again(processor, "test", run.test_sha256)
    write_test_results(output_dir, processor, paired(rows, run.test_outputs), {
        "checkpoint": run.checkpoint, "global_step": checkpoint_global_step(run.checkpoint),
        "decisions": "the temperature and thresholds fitted on every fold's out-of-fold "
                     "predictions"})


def predict_held_out(evaluator, split, checkpoint, fold):
  """A fold's outputs on its held-out rows (its dev split), also written into its folder
  as oof_predictions.tsv. Returns them, and their logits before any temperature."""
  outputs = evaluator.dev_outputs(split, checkpoint)
  write_fold_predictions(os.path.join(evaluator.output_dir, "oof_predictions.tsv"),
                         split.examples, [fold.index] * len(split.examples), outputs,
                         evaluator.label_spec)
  return outputs, evaluator.dev_logits(split, checkpoint)


def write_fold_mean_predictions(output_dir, processor, runs):
  """test_results.tsv in output_dir from every fold's model: each test row's outputs
  (probabilities, or values for regression) averaged over the folds, the usual k-fold
  ensemble; the predicted class is that of the highest mean probability."""
  if len(set(run.test_sha256 for run in runs)) > 1:
    raise DataError(processor.file_for("test"), "the file changed between the folds' "
                    "predictions (their records were made of other bytes): their mean "
                    "would mix the outputs of other rows", "run again once nothing writes "
                    "to it")
  mean = numpy.zeros(runs[0].test_outputs.shape, numpy.float64)
  for run in runs:
    mean += run.test_outputs
  mean /= len(runs)
  rows = read_again(processor, "test", runs[0].test_sha256)
  path = write_test_results(output_dir, processor, paired(rows, mean), {
                                "combined": "the mean of the %d folds' outputs" % len(runs),
                                "checkpoints": [run.checkpoint for run in runs]})
  log.info("test_results.tsv averages the %d folds' predictions; each fold's own are in "
           "its fold_<i> folder", len(runs))
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
    if not defined:  # (undefined on every fold: said, never left out unsaid)
      metrics[name] = {"mean": None, "std": None, "per_fold": {str(i): None for i in evals},
                       "undefined_on_folds": sorted(evals)}
      continue
    mean, std = folds_lib.mean_and_std(defined)
    metrics[name] = {"mean": mean, "std": std, "per_fold": {str(i): v for i, v in
                                                             sorted(values.items())},
                     "undefined_on_folds": [i for i, v in sorted(values.items()) if v is None]}
  return {"num_folds": num_folds, "folds_run": sorted(evals), "seed": seed,
          "fold_sizes": sizes, "metrics": metrics}
