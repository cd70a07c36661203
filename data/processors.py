"""The processor of each task name (spec/task_names.py): what turns its files into
InputExamples.

The tasks live in data/glue.py, data/jigsaw.py and data/csv_task.py; each processor
class reads the options of its own task (settings_of).
"""

from data.csv_task import CsvProcessor
from data.glue import GLUE_PROCESSORS
from data.jigsaw import JigsawBiasProcessor, JigsawToxicProcessor
from spec.run_errors import FlagError
from spec.task_names import TASK_NAMES, canonical_task_name



def _registry(classes):
  """{name: class} of the processor classes, each under the name it carries; the names must
  be spec/task_names.py's, which the options and the model card know, each once."""
  if len(set(TASK_NAMES)) != len(TASK_NAMES):
    raise TypeError("spec/task_names.py's TASK_NAMES lists a name twice: %s" % ", ".join(
        sorted(set(n for n in TASK_NAMES if TASK_NAMES.count(n) > 1))))
  registry = {}
  for cls in classes:
    if not isinstance(cls.name, str):
      raise TypeError("the processor %s carries no task name (its name is %r)"
                      % (cls.__name__, cls.name))
    if cls.name in registry:
      raise TypeError("two processors are named %r: %s and %s" % (
          cls.name, registry[cls.name].__name__, cls.__name__))
    registry[cls.name] = cls
  if sorted(registry) != sorted(TASK_NAMES):
    raise TypeError("the processors' names and spec/task_names.py's TASK_NAMES differ: "
                    "processors only: %s; TASK_NAMES only: %s" % (
                        sorted(set(registry) - set(TASK_NAMES)),
                        sorted(set(TASK_NAMES) - set(registry))))
  return registry


PROCESSORS = _registry(GLUE_PROCESSORS + (JigsawToxicProcessor, JigsawBiasProcessor,
                                          CsvProcessor))


def processor_class(task_name):
  """The processor class of a task name (case-insensitive, aliases too); FlagError when
  there is none."""
  if not task_name:
    raise FlagError("--task_name is required (or a model card in --output_dir)")
  name = canonical_task_name(task_name)
  if name is None:
    raise FlagError("--task_name=%s is unknown; use one of: %s"
                    % (task_name, ", ".join(TASK_NAMES)))
  return PROCESSORS[name]


def get_processor(task_name, weight_column=None, **settings):
  """The processor of a task, built with settings: those every processor takes (data_dir,
  files, skip_malformed_rows, quoting, head: a head kind of spec/labels.py, None for the
  task's default) and the task's own (jigsaw_toxic: label_columns; jigsaw_bias:
  label_columns, auxiliary_targets; xnli: language; csv: text_column, text_b_column,
  label_columns, id_column, has_header, split_headers, delimiter, labels). weight_column
  names a train column of per-row weights, read into each train example's extras."""
  if isinstance(settings.get("label_columns"), str):
    settings["label_columns"] = [settings["label_columns"]]
  processor = processor_class(task_name)(**settings)
  processor.weight_column = weight_column
  return processor


def processor_for(options, weight_column=None):
  """The processor of the run's DataOptions (spec/options.py)."""
  cls = processor_class(options.task_name)
  return get_processor(options.task_name, weight_column, **cls.settings_of(options))
