"""Temperature scaling (--calibrate): a head's logits divided by a temperature fitted on the
dev split, so that its probabilities say how often they come true. Plain Python: the
pipeline fits it (pipeline/calibration.py), the graph divides by it (modeling/model_fn.py)
and the label classes (spec/labels.py) carry what the model card records.

A softmax head has one temperature for all its logits (dividing each by one number keeps
the order of the classes, so the predicted class never changes); a sigmoid head (multi-label,
soft target) one per label column, each column its own yes/no question. A regression head
predicts values, not probabilities: it has none.
"""

import json

from spec.run_errors import FlagError
from spec.thresholds import listed as listed_by_name

# The temperatures a fit may choose: a fit that ends at either bound (a dev split whose rows
# the model separates completely, say) has found no temperature, and is not used.
TEMPERATURE_RANGE = (0.01, 100.0)


class Calibration(object):
  """The temperature of a head (spec/labels.py's LabelSpec has one): None until fitted; a
  number for a softmax head, {label column: number} for a sigmoid head."""

  temperature = None  # (replaced, never changed in place)

  def calibrated_by(self):
    """'head' (one temperature), 'column' (one per label column) or None (no
    probabilities: nothing to calibrate), by the head's loss."""
    return {"softmax_cross_entropy": "head",
            "sigmoid_cross_entropy": "column"}.get(self.loss)

  def set_temperature(self, value):
    """Divide the logits by this temperature (calibrated_by's shape; None: by none)."""
    by = self.calibrated_by()
    if value is None:
      self.temperature = None
      return
    if by is None:
      raise FlagError("a temperature: the %s predicts values, not probabilities, so it has "
                      "none to calibrate" % self.describe())
    if by == "head":
      self.temperature = _checked(value, "the temperature")
      return
    if value == {}:  # (no column fitted: the head is not calibrated)
      self.temperature = None
      return
    if not isinstance(value, dict):
      raise FlagError("the temperature of a %s is %s, not an object of temperatures by "
                      "label column" % (self.describe(), json.dumps(value)))
    for name in sorted(value):
      if name not in self.columns:
        raise FlagError("a temperature of %s: the %s has no such label column (it has %s)"
                        % (json.dumps(name), self.describe(), ", ".join(self.columns)))
    self.temperature = {name: _checked(v, "the temperature of %s" % name)
                        for name, v in value.items()}

  def temperatures(self):
    """What the graph divides each logit by (a float per output; 1 for a column that has
    no temperature), or None when the head is not calibrated."""
    if self.temperature is None:
      return None
    if isinstance(self.temperature, dict):
      return [self.temperature.get(name, 1.0) for name in self.columns]
    return [self.temperature] * self.num_outputs


def _checked(value, what):
  low, high = TEMPERATURE_RANGE
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
      low <= value <= high):
    raise FlagError("%s is %s, not a number in [%g, %g]" % (what, json.dumps(value), low, high))
  return float(value)


def listed(temperature):
  """A temperature as a log line shows it: "1.73", or "insult 1.2, toxic 0.91" (as
  thresholds by name are)."""
  if isinstance(temperature, dict):
    return listed_by_name(temperature)
  return "%.4g" % temperature
