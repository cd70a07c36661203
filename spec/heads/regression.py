"""The regression head: numbers of any range per label column, learnt by squared error."""

from spec.labels import LabelSpec, parse_number


class Regression(LabelSpec):
  """Numbers of any range (e.g. STS-B's similarity in [0, 5]), learnt by squared error."""

  kind = "regression"
  loss = "squared_error"
  column_statistics = ("pearson", "spearman", "mse")
  record_dtype = "float32"
  output_name = "values"
  hf_problem_type = "regression"
  strata_by_quantile = True

  def stratum(self, label):
    return label[0]

  def parse(self, cells):
    return tuple(parse_number(cell, i, "a number") for i, cell in enumerate(cells))

  def prediction_header(self):
    if len(self.columns) == 1:
      return ["prediction"]
    return super(Regression, self).prediction_header()
