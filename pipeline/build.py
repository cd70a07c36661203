"""The pieces of Google's pipeline that a configuration builds: the processor and the
tokenizer on the data side, model_fn and the (TPU)Estimator on the model side."""

import logging
import math

from data import fast_tokenization, tokenization
from data.features import Truncation
from data.processors import processor_for
from modeling.bert import BertConfig
from modeling.estimator import BatchSplitError, build_estimator
from modeling.model_fn import model_fn_builder
from spec.errors import FlagError

log = logging.getLogger(__name__)


def truncation_of(model):
  """The truncation strategy of --truncation and --truncation_head_tokens."""
  try:
    return Truncation(model.truncation, model.truncation_head_tokens)
  except FlagError as e:
    raise FlagError("--truncation=%s --truncation_head_tokens=%s: %s" % (
        model.truncation, model.truncation_head_tokens, e))


def make_processor(data, weight_column=None):
  """The processor (data/processors.py) of the DataOptions, with its label spec settled:
  for csv, the classes are read from the train file unless --labels gives them.
  weight_column: --sample_weight_column, read into the train examples."""
  processor = processor_for(data, weight_column)
  processor.label_spec  # pylint: disable=pointless-statement  (refused now, not later)
  return processor


def make_tokenizer(model):
  """(tokenizer, vocab_file) of the ModelOptions: the vocabulary of --vocab_file, or of the
  hub module when there is none. All tokenizer choices give Google's FullTokenizer ids."""
  vocab_file, do_lower_case = model.vocab_file, model.do_lower_case
  if not vocab_file:
    from modeling.hub_module import tokenization_info
    vocab_file, do_lower_case = tokenization_info(model.bert_hub_module_handle)
    log.info("vocabulary from the hub module: %s (do_lower_case=%s)", vocab_file, do_lower_case)
  warning = tokenization.casing_mismatch_warning(do_lower_case, model.init_checkpoint)
  if warning:
    log.warning(warning)
  return (fast_tokenization.tokenizer_for(vocab_file, do_lower_case, model.tokenizer),
          vocab_file)


def encoder_config(bert_config, tokenizer):
  """The encoder's config; a hub module brings its own encoder, and the head needs only
  the config's initializer range."""
  return bert_config or BertConfig(vocab_size=len(tokenizer.vocab))


def num_train_steps_for(num_examples, training):
  """Optimizer updates: --num_train_steps when given (> 0), else enough epochs' worth of
  updates of training.per_update() examples."""
  if training.num_train_steps > 0:
    return training.num_train_steps
  return max(1, int(math.ceil(num_examples * training.num_train_epochs /
                              training.per_update())))


def model_fn_of(c, bert_config, label_spec, num_train_steps=0, serving=False):
  """Google's model_fn_builder with this run's encoder, head, optimizer and device. With
  serving, the graph an export is built from: predictions only, in float32 on this
  machine's CPU (also after a TPU run), the weights all from the checkpoint."""
  training, device = c.training, c.device
  return model_fn_builder(
      bert_config=bert_config, label_spec=label_spec,
      init_checkpoint=None if serving else c.model.init_checkpoint,
      learning_rate=0.0 if serving else training.learning_rate,
      num_train_steps=num_train_steps,
      num_warmup_steps=int(num_train_steps * training.warmup_proportion),
      use_tpu=device.use_tpu and not serving,
      hub_module_handle=c.model.bert_hub_module_handle, pooling=c.model.pooling,
      gradient_accumulation_steps=training.gradient_accumulation_steps,
      precision="float32" if serving else device.precision(),
      xla_global_step_fix=device.use_xla and not serving,
      summary_dir=c.outputs.output_dir, save_summary_steps=training.save_summary_steps)


def make_estimator(model_fn, output_dir, device, training, cluster=None):
  """The (TPU)Estimator of model_fn in output_dir: a Cloud TPU with --use_tpu, else this
  machine (several GPUs with --num_gpus, several machines with a cluster)."""
  try:
    return build_estimator(model_fn, output_dir, device, training, cluster)
  except BatchSplitError as e:  # (a cluster's replicas are known once its strategy exists)
    raise FlagError("--train_batch_size=%d is the global batch, and %s: every GPU of every "
                    "machine takes an equal share" % (training.train_batch_size, e))
