"""The tasks by name: every processor class in data/tasks/ that carries a name (what turns
its files into InputExamples).

A task is one module of data/tasks/ (or one class in one): it is found there, so nothing
else lists it. Each processor class reads the options of its own task (settings_of).
"""

from data import tasks
from data.examples import DataProcessor
from spec.found import classes_in
from spec.run_errors import FlagError


def _registry(classes):
  """({name: class}, {alias: name}) of the processor classes, each under the name it
  carries (lower case) and its aliases; a name or alias given twice stops the import with
  both classes."""
  registry, aliases = {}, {}
  for cls in classes:
    if not isinstance(cls.name, str) or cls.name != cls.name.lower() or not cls.name:
      raise TypeError("the processor %s carries no task name in lower case (its name is %r)"
                      % (cls.__name__, cls.name))
    for name in (cls.name,) + tuple(cls.aliases):
      other = registry.get(name) or registry.get(aliases.get(name))
      if other is not None:
        raise TypeError("two processors are named %r: %s and %s" % (
            name, other.__name__, cls.__name__))
      if name != cls.name:
        aliases[name] = cls.name
    registry[cls.name] = cls
  return registry, aliases


# (a class that carries no name, such as jigsaw's base class, is no task)
PROCESSORS, TASK_ALIASES = _registry(classes_in(tasks, DataProcessor, "name"))
TASK_NAMES = tuple(sorted(PROCESSORS))


def canonical_task_name(task_name):
  """The task's registered name (case-insensitive, aliases resolved), or None if unknown."""
  name = task_name.lower()
  name = TASK_ALIASES.get(name, name)
  return name if name in PROCESSORS else None


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
  files, skip_malformed_rows, quoting, head: a head kind of spec/heads/, None for the
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
