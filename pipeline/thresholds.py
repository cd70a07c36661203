"""--tune_thresholds: the decision thresholds of a binary classification or multi-label
head, chosen on the dev split's outputs (spec/thresholds.py), reported beside the eval's
metrics and kept by the label spec, which the model card carries to every predictor."""

import logging

from pipeline.card import record_thresholds
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


def tune(label_spec, objective_text, examples, outputs):
  """(the thresholds by name, the figures for eval_results.json) from the dev examples
  and the head's outputs for them (rows in the same order). A name whose threshold cannot
  be met on these rows keeps 0.5 and is reported as null."""
  objective = thresholds_lib.parse_objective(objective_text)
  decisions = decisions_of(label_spec)
  several = len(decisions) > 1
  chosen, figures = {}, {"threshold_objective": objective_text}
  for name, index in decisions:
    scores = [row[index] for row in outputs]
    positives = [_positive(label_spec, e, index) for e in examples]
    threshold = thresholds_lib.tune(scores, positives, objective)
    suffix = "_" + name if several else ""
    if threshold is None:
      log.warning("--tune_thresholds=%s: no threshold of %s meets it on the dev split (%d "
                  "positive rows of %d); it stays %g", objective_text, name, sum(positives),
                  len(positives), thresholds_lib.DEFAULT_THRESHOLD)
    else:
      chosen[name] = threshold
    figures["threshold" + suffix] = threshold
    for at, value in (("0.5", thresholds_lib.DEFAULT_THRESHOLD), ("threshold", threshold)):
      if value is None:
        continue
      precision, recall, f1 = thresholds_lib.figures_at(scores, positives, value)
      figures.update({"precision_at_%s%s" % (at, suffix): precision,
                      "recall_at_%s%s" % (at, suffix): recall,
                      "f1_at_%s%s" % (at, suffix): f1})
  log.info("decision thresholds tuned on the dev split for %s: %s", objective_text,
           thresholds_lib.listed(chosen) or "none")
  return chosen, figures


def tune_after_eval(objective_text, evaluator, dev, checkpoint, results, output_dir):
  """Tunes the thresholds on the dev split's outputs at checkpoint (the one results
  evaluated), adds their figures to results and eval_results.json, and gives them to the
  evaluator's label spec (this run's predictions decide by them) and the folder's card."""
  label_spec = evaluator.label_spec
  tuned, figures = tune(label_spec, objective_text, dev.examples,
                        evaluator.predict_outputs(dev, checkpoint))
  label_spec.set_thresholds(tuned)
  results.update(figures)
  write_eval_results(output_dir, results)
  record_thresholds(output_dir, label_spec)
