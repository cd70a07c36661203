"""--tune_thresholds: the decision thresholds of a binary classification or multi-label
head, chosen on the dev split's outputs (spec/thresholds.py), reported beside the eval's
metrics and kept by the label spec, which the model card carries to every predictor."""

import logging

from pipeline.card import record_label_spec
from pipeline.outputs import write_eval_results
from spec import thresholds as thresholds_lib
from spec.run_errors import FlagError

log = logging.getLogger("run_classifier")


def decisions_of(label_spec):
  """[(name, output index)]: what each threshold of this head decides (the label class's
  decision_names), and which of the head's outputs it reads."""
  outputs = label_spec.classes or list(label_spec.columns)
  return [(name, outputs.index(name)) for name in label_spec.decision_names()]


def check_head(label_spec, objective):
  """FlagError unless --tune_thresholds=objective has a decision to tune on this head."""
  if objective is not None and not label_spec.decision_names():
    raise FlagError("--tune_thresholds tunes the decision of a binary classification head "
                    "or of each multi-label column; a %s has none: drop --tune_thresholds"
                    % label_spec.describe())


def _positive(label_spec, example, index):
  if label_spec.has_classes:
    return example.label == label_spec.classes[index]
  return example.label[index] >= 0.5


def _columns(label_spec, examples, outputs):
  """[(decision name, its suffix in eval_results.json, scores, positives)] of the rows."""
  decisions = decisions_of(label_spec)
  several = len(decisions) > 1
  return [(name, "_" + name if several else "", [row[index] for row in outputs],
           [_positive(label_spec, e, index) for e in examples]) for name, index in decisions]


def _figures(columns, chosen, figures):
  """figures with each column's threshold (chosen's; None: not met) and its precision,
  recall and F1 at 0.5 and at the threshold."""
  for name, suffix, scores, positives in columns:
    threshold = chosen.get(name)
    figures["threshold" + suffix] = threshold
    for at, value in (("0.5", thresholds_lib.DEFAULT_THRESHOLD), ("threshold", threshold)):
      if value is None:
        continue
      precision, recall, f1 = thresholds_lib.figures_at(scores, positives, value)
      figures.update({"precision_at_%s%s" % (at, suffix): precision,
                      "recall_at_%s%s" % (at, suffix): recall,
                      "f1_at_%s%s" % (at, suffix): f1})
  return figures


def tune(label_spec, objective_text, examples, outputs, where="the dev split"):
  """(the thresholds by name, their figures for eval_results.json) from the examples
  (the dev split's, or every train row's out of fold) and the head's outputs for them
  (rows in the same order). A name whose threshold cannot be met on these rows keeps 0.5
  and is reported as null."""
  objective = thresholds_lib.parse_objective(objective_text)
  spelled = thresholds_lib.objective_text(objective)
  columns = _columns(label_spec, examples, outputs)
  chosen = {}
  for name, _, scores, positives in columns:
    threshold = thresholds_lib.tune(scores, positives, objective)
    if threshold is None:
      log.warning("--tune_thresholds=%s: no threshold of %s meets it on %s (%d positive rows "
                  "of %d); it stays %g", spelled, name, where, sum(positives), len(positives),
                  thresholds_lib.DEFAULT_THRESHOLD)
    else:
      chosen[name] = threshold
  log.info("decision thresholds tuned on %s for %s: %s", where, spelled,
           thresholds_lib.listed(chosen) or "none")
  return chosen, _figures(columns, chosen, {"threshold_objective": spelled})


def tune_after_eval(objective_text, evaluator, dev, checkpoint, results, output_dir):
  """Tunes the thresholds on the dev split's outputs at checkpoint (the one results
  evaluated), adds their figures to results and eval_results.json, and gives them to the
  evaluator's label spec (this run's predictions decide by them) and the folder's card."""
  label_spec = evaluator.label_spec
  tuned, figures = tune(label_spec, objective_text, dev.examples,
                        evaluator.dev_outputs(dev, checkpoint))
  label_spec.set_thresholds(tuned)
  results.update(figures)
  write_eval_results(output_dir, results)
  record_label_spec(output_dir, label_spec)


def figures_at_card_thresholds(label_spec, examples, outputs):
  """The figures (tune's) of the examples at the thresholds label_spec decides by (the
  model card's)."""
  columns = _columns(label_spec, examples, outputs)
  return _figures(columns, {name: label_spec.threshold(name) for name, _, _, _ in columns},
                  {"thresholds_from": "model card"})


def report_after_eval(evaluator, dev, checkpoint, results, output_dir):
  """The dev figures at the thresholds the model card gives (the eval's own metrics
  decide at 0.5, or by the highest output), added to results and eval_results.json."""
  results.update(figures_at_card_thresholds(evaluator.label_spec, dev.examples,
                                            evaluator.dev_outputs(dev, checkpoint)))
  write_eval_results(output_dir, results)


def tune_out_of_fold(objective_text, label_spec, examples, outputs):
  """k-fold: the thresholds tuned on every train row's out-of-fold outputs, given to
  label_spec (the folds' cards and mean predictions then decide by them). Returns their
  figures (folds_summary.json's "thresholds")."""
  tuned, figures = tune(label_spec, objective_text, examples, outputs,
                        where="the out-of-fold predictions")
  label_spec.set_thresholds(tuned)
  return figures

