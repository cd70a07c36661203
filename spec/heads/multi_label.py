"""The multi-label head: several 0/1 label columns, each its own yes/no question, learnt
by sigmoid cross-entropy."""

from spec.labels import BOOLEANS, LabelError, LabelSpec, parse_number


class MultiLabel(LabelSpec):
  """Several 0/1 columns, each its own yes/no question (e.g. Jigsaw Toxic's six labels)."""

  kind = "multi_label"
  loss = "sigmoid_cross_entropy"
  column_statistics = ("auc", "f1")  # (modeling/metrics.py STATISTICS)
  record_dtype = "float32"
  hf_problem_type = "multi_label_classification"
  class_weights_weigh = "positives"

  def parse(self, cells):
    values = []
    for i, cell in enumerate(cells):
      word = cell.strip().lower()
      value = BOOLEANS[word] if word in BOOLEANS else parse_number(cell, i, "0 or 1")
      if value not in (0.0, 1.0):
        raise LabelError("%r is not 0 or 1" % cell, "a multi-label column holds 0 or 1; for "
                         "fractions use --head=soft_target", index=i)
      values.append(value)
    return tuple(values)

  def prediction_header(self):
    return ["probability_%s" % c for c in self.columns]

  def decision_names(self):
    return self.columns

  def result(self, names, outputs):
    result = dict(super(MultiLabel, self).result(names, outputs),
                  labels=[name for name, p in zip(names, outputs) if p >= self.threshold(name)])
    if self.thresholds:  # (says which thresholds gave the labels)
      result["thresholds"] = {name: self.threshold(name) for name in names}
    return result
