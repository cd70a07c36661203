"""Decision thresholds tuned on the dev split: the objective a threshold is chosen by, and
the choice itself. Plain Python: the pipeline tunes, the label classes (spec/labels.py)
apply what the model card records.

A row is predicted positive when its score is at least the threshold. The candidates are
every distinct decision the dev split can tell apart: each dev score's rows and those
above it positive, the threshold midway between that score and the next lower one (the
lowest score itself, when every row is positive).
"""

import json
import math

from spec.run_errors import FlagError

DEFAULT_THRESHOLD = 0.5  # where a sigmoid or a binary head decides, unless tuned


class Thresholds(object):
  """The decision thresholds of a head (spec/labels.py's LabelSpec has them): none until
  tuned, each a decision name's (decision_names) threshold in [0, 1]."""

  thresholds = {}  # (replaced, never changed in place)

  def decision_names(self):
    """What a tuned threshold may decide: none, unless the head says."""
    return ()

  def set_thresholds(self, thresholds):
    """Decide by these thresholds ({decision name: threshold in [0, 1]}) instead of 0.5."""
    if thresholds is not None and not isinstance(thresholds, dict):
      raise FlagError("the thresholds are %s, not an object of thresholds by name"
                      % json.dumps(thresholds))
    thresholds = dict(thresholds or {})
    for name, value in sorted(thresholds.items()):
      if name not in self.decision_names():
        raise FlagError("a threshold of %s: the %s %s" % (
            json.dumps(name), self.describe(), "has no decision a threshold sets"
            if not self.decision_names() else "decides by thresholds of %s only"
            % ", ".join(self.decision_names())))
      if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
          0.0 <= value <= 1.0):
        raise FlagError("the threshold of %s is %s, not a number in [0, 1]"
                        % (name, json.dumps(value)))
    self.thresholds = {name: float(value) for name, value in thresholds.items()}

  def threshold(self, name):
    return self.thresholds.get(name, DEFAULT_THRESHOLD)


def listed(thresholds):
  """Thresholds by name as a log line shows them: "insult 0.31, toxic 0.42"."""
  return ", ".join("%s %.4g" % (name, value) for name, value in sorted(thresholds.items()))


def figures_of_counts(tp, fp, fn):
  """(precision, recall, f1) of these counts; each 0 where it is undefined."""
  precision = tp / float(tp + fp) if tp + fp else 0.0
  recall = tp / float(tp + fn) if tp + fn else 0.0
  f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  return precision, recall, f1


def parse_objective(text):
  """("f1", None), ("precision", P) or ("recall", R) from --tune_thresholds; ValueError
  with the fix otherwise."""
  value = text.strip().lower()
  if value == "f1":
    return "f1", None
  name, at, target = value.partition("@")
  if at and name in ("precision", "recall"):
    try:
      number = float(target)
      if "_" in target or not target.isascii():  # (Python reads 1_0 and a full-width １)
        raise ValueError(target)
    except ValueError:
      number = float("nan")
    if 0.0 < number <= 1.0:
      return name, number
    raise ValueError("--tune_thresholds=%s: %r is not a %s in (0, 1]; e.g. %s@0.9"
                     % (text, target, name, name))
  raise ValueError("--tune_thresholds=%s is not one of f1, precision@P, recall@R (e.g. "
                   "precision@0.9)" % text)


def objective_text(objective):
  """An objective (parse_objective's) in its one spelling: f1, precision@0.9."""
  kind, target = objective
  return kind if target is None else "%s@%s" % (kind, repr(target))


def figures_at(scores, positives, threshold):
  """(precision, recall, f1) of predicting positive where score >= threshold. Precision
  is 0 with no positive prediction, and F1 is 0 when precision and recall are."""
  tp = fp = fn = 0
  for score, positive in zip(scores, positives):
    predicted = score >= threshold
    tp += predicted and positive
    fp += predicted and not positive
    fn += positive and not predicted
  return figures_of_counts(tp, fp, fn)


def tune(scores, positives, objective):
  """The threshold that best meets objective (parse_objective's) on these rows, or None
  when no threshold can (no positive row; precision@P or recall@R out of reach). f1: the
  highest F1; precision@P: the highest recall whose precision is at least P; recall@R:
  the highest precision whose recall is at least R. Equal candidates: the higher
  threshold (fewer positive predictions)."""
  scores = [float(s) for s in scores]
  positives = [bool(p) for p in positives]
  if not any(positives) or any(math.isnan(s) for s in scores):
    return None
  kind, target = objective
  # Sweeping the distinct scores from the highest down: each step predicts one more
  # score's rows positive.
  order = sorted(range(len(scores)), key=lambda i: -scores[i])
  total_positive = sum(positives)
  best, best_key = None, None
  tp = fp = 0
  i = 0
  while i < len(order):
    threshold = scores[order[i]]
    while i < len(order) and scores[order[i]] == threshold:
      tp += positives[order[i]]
      fp += not positives[order[i]]
      i += 1
    precision, recall, f1 = figures_of_counts(tp, fp, total_positive - tp)
    if kind == "f1":
      key = f1
    elif kind == "precision":
      key = recall if precision >= target else None
    else:
      key = precision if recall >= target else None
    if key is not None and (best_key is None or key > best_key):
      # (midway to the next lower score: the same decisions on these rows, and a dev
      # row's score moved by less than half the gap, in another graph, falls the same way)
      best, best_key = (threshold if i == len(order) else
                        (threshold + scores[order[i]]) / 2.0), key
  return best
