"""The run's configuration, typed: what run_classifier.run() takes.

run_classifier.py builds it from its flags (config_from_flags); Python code and tests
may build it directly, without absl:

  from spec.config import RunConfig
  run(RunConfig(task_name="sst-2", data_dir="glue/SST-2", output_dir="/tmp/out", ...))

Each field has the meaning (and the default) of the run_classifier flag of the same
name. `given` names the fields that were set explicitly: a model card supplies the
others, and contradicts none of the given ones. Built directly, a config counts as
given every field whose value differs from its default. Values are checked for their type and
their choices here; run_classifier checks what they mean together.
"""

import dataclasses
from typing import FrozenSet, Optional, Tuple

from spec.labels import HEAD_KINDS

CHOICES = {
    "tokenizer": ("auto", "fast", "python"),
    "quoting": ("auto", "csv", "none"),
    "head": ("auto",) + HEAD_KINDS,
    "pooling": ("cls", "mean"),
    "truncation": ("head", "tail", "head_tail"),
    "tf_log_level": ("DEBUG", "INFO", "WARNING", "ERROR"),
}


class ConfigError(ValueError):
  """A configuration value of the wrong type or outside its choices."""


@dataclasses.dataclass(frozen=True)
class RunConfig(object):
  # What to run.
  do_train: bool = False
  do_eval: bool = False
  do_predict: bool = False
  do_export: bool = False
  output_dir: Optional[str] = None
  export_dir: Optional[str] = None
  saved_model: Optional[str] = None
  cache_dir: Optional[str] = None
  # The task and its files.
  task_name: Optional[str] = None
  data_dir: Optional[str] = None
  train_file: Optional[str] = None
  eval_file: Optional[str] = None
  predict_file: Optional[str] = None
  text_column: Optional[str] = None
  text_b_column: Optional[str] = None
  label_column: Optional[str] = None
  id_column: Optional[str] = None
  has_header: bool = True
  train_has_header: Optional[bool] = None
  eval_has_header: Optional[bool] = None
  predict_has_header: Optional[bool] = None
  quoting: str = "auto"
  delimiter: Optional[str] = None
  labels: Optional[Tuple[str, ...]] = None
  skip_malformed_rows: bool = False
  # The head and its labels.
  head: str = "auto"
  auxiliary_targets: bool = False
  pooling: str = "cls"
  class_weights: Optional[Tuple[str, ...]] = None
  sample_weight_column: Optional[str] = None
  identity_weights: bool = False
  # The pre-trained model and its inputs.
  bert_config_file: Optional[str] = None
  vocab_file: Optional[str] = None
  init_checkpoint: Optional[str] = None
  bert_hub_module_handle: Optional[str] = None
  do_lower_case: bool = True
  max_seq_length: int = 128
  truncation: str = "head"
  truncation_head_tokens: Optional[int] = None
  tokenizer: str = "auto"
  # Training.
  train_batch_size: int = 32
  eval_batch_size: int = 8
  predict_batch_size: int = 8
  learning_rate: float = 5e-5
  num_train_epochs: float = 3.0
  num_train_steps: int = 0
  gradient_accumulation_steps: int = 1
  warmup_proportion: float = 0.1
  train_fraction: float = 1.0
  seed: int = 12345
  save_checkpoints_steps: int = 1000
  save_summary_steps: int = 100
  log_every_steps: int = 10
  eval_every_steps: int = 0
  best_metric: Optional[str] = None
  early_stopping_patience: int = 0
  allow_untrained_head: bool = False
  num_folds: int = 0
  fold: int = -1
  # Speed.
  num_record_shards: int = 1
  featurise_workers: int = 1
  dynamic_padding: bool = False
  use_fp16: bool = False
  use_bf16: bool = False
  use_xla: bool = False
  # Several GPUs (MirroredStrategy).
  num_gpus: int = 0
  # Cloud TPU.
  use_tpu: bool = False
  tpu_name: Optional[str] = None
  tpu_zone: Optional[str] = None
  gcp_project: Optional[str] = None
  master: Optional[str] = None
  num_tpu_cores: int = 8
  iterations_per_loop: int = 1000
  # Logging.
  tf_log_level: str = "ERROR"
  # The fields set explicitly (the others are defaults, which a model card may replace);
  # None: those that differ from their defaults.
  given: Optional[FrozenSet[str]] = None

  def __post_init__(self):
    for field in dataclasses.fields(self):
      if field.name != "given":
        _check_type(field, getattr(self, field.name))
    if self.given is None:
      object.__setattr__(self, "given", frozenset(
          f.name for f in dataclasses.fields(self)
          if f.name != "given" and getattr(self, f.name) != f.default))
    unknown = set(self.given) - set(option_names())
    if unknown:
      raise ConfigError("given names unknown options: %s" % ", ".join(sorted(unknown)))

  def is_given(self, name):
    return name in self.given

  def replace(self, **changes):
    """A copy with these values (a model card's, say); `given` is unchanged."""
    return dataclasses.replace(self, **changes)

  def as_dict(self):
    """Every option and its value (for the model card), `given` aside."""
    return {name: _plain(getattr(self, name)) for name in option_names()}


def option_names():
  return [f.name for f in dataclasses.fields(RunConfig) if f.name != "given"]


def default(name):
  return {f.name: f.default for f in dataclasses.fields(RunConfig)}[name]


def _plain(value):
  return list(value) if isinstance(value, tuple) else value


_TYPES = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}


def _check_type(field, value):
  annotation = field.type
  optional = getattr(annotation, "__origin__", None) is not None and type(None) in getattr(
      annotation, "__args__", ())
  if value is None:
    if optional:
      return
    raise ConfigError("%s must be set (got None)" % field.name)
  base = annotation.__args__[0] if optional else annotation
  if getattr(base, "__origin__", None) in (tuple, Tuple):
    if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
      raise ConfigError("%s must be a tuple of strings, not %r" % (field.name, value))
    return
  allowed = _TYPES[base]
  if isinstance(value, bool) and base is not bool or not isinstance(value, allowed):
    raise ConfigError("%s must be %s, not %r" % (field.name, base.__name__, value))
  if field.name in CHOICES and value not in CHOICES[field.name]:
    raise ConfigError("%s=%r is not one of %s" % (field.name, value,
                                                  ", ".join(CHOICES[field.name])))
