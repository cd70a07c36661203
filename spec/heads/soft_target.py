"""The soft-target head: a fraction in [0, 1] per label column, learnt by sigmoid
cross-entropy against the fraction itself."""

from spec.labels import LabelError, LabelSpec, parse_number


class SoftTarget(LabelSpec):
  """Fractions in [0, 1] (e.g. the share of raters who found a comment toxic), learnt with
  sigmoid cross-entropy against the fraction itself."""

  kind = "soft_target"
  loss = "sigmoid_cross_entropy"
  column_statistics = ("auc", "spearman", "mse")
  record_dtype = "float32"
  hf_problem_type = "multi_label_classification"  # (Hugging Face has no soft targets)
  class_weights_weigh = "positives"

  def parse(self, cells):
    values = []
    for i, cell in enumerate(cells):
      value = parse_number(cell, i, "a fraction in [0, 1]")
      if not 0.0 <= value <= 1.0:
        raise LabelError("target %r is outside [0, 1]" % cell, "give a fraction in [0, 1], or "
                         "use --head=regression for other numbers", index=i)
      values.append(value)
    return tuple(values)
