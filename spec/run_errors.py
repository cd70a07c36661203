"""The error of a setting that cannot work, and the faults of a place, for whichever layer
finds them."""

import errno

# The system errors that are faults of a place (where a file goes), not of the program:
# pipeline/workspace.py gives each its fix.
PLACE_FAULTS = frozenset([errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES,
                          errno.EPERM, errno.EIO])


class FlagError(ValueError):
  """A setting (a flag, or the RunConfig field of the same name) that cannot work, or
  that contradicts another one or the model. The message names the setting and the fix;
  run_classifier prints it as a flag error and exits 2. Raised where the mistake is
  found, never made from some other ValueError: a bug stays a traceback."""


class FileFault(Exception):
  """A fault of a place, not of the program or its input: a full disk, a read-only file
  system, no permission. The message names the path and the fix; run_classifier prints it
  as a file error and exits 1."""


class ArtefactFault(FileFault):
  """A file the project wrote for later use (a run's history, its record of the best
  checkpoint, a checkpoint, records, an export) that cannot be used as it is: missing, cut
  short, edited, replaced, or holding values that are not numbers. Verified before every
  use; the message names the file, what is wrong and the way forward, and run_classifier
  prints it as a file error and exits 1."""


class NumericFault(Exception):
  """A model whose outputs or metrics are not finite numbers (NaN or infinity): the message
  names the first bad row, metric or variable and the way forward. Nothing is written
  from such outputs; run_classifier prints it as a model error and exits 1."""


class MemoryFault(Exception):
  """The device ran out of memory (a GPU's, most often): the message names the device and
  the options that lower what a step needs; run_classifier prints it as a memory error
  and exits 1."""


class ProcessFault(Exception):
  """A worker process of the run that was killed (by the system's out-of-memory killer,
  say) or failed: the message says which and how; run_classifier prints it as a process
  error and exits 1."""
