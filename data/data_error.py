"""One error type for bad input, so every message names the file, the place and the fix."""


class DataError(ValueError):
  """Bad input data. The message says where (file, line, column) and how to fix it."""

  def __init__(self, path, problem, fix, line=None, column=None):
    self.path = path
    self.problem = problem
    self.fix = fix
    self.line = line
    self.column = column
    super(DataError, self).__init__(self._format())

  def _format(self):
    where = str(self.path)
    if self.line is not None:
      where += ", line %d" % self.line
    if self.column is not None:
      where += ", column %r" % (self.column,)
    return "%s: %s. Fix: %s" % (where, self.problem, self.fix)
