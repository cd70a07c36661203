"""The pieces of Google's pipeline that a configuration builds: the processor and the
tokenizer on the data side; the BertConfig, model_fn and the (TPU)Estimator on the model
side."""

import logging
import math

import tensorflow.compat.v1 as tf

from data import fast_tokenization, vocabulary
from data.files import exists, not_a_file_problem
from data.features import Truncation
from data.long_texts import Windowing
from data.processors import processor_for
from modeling.bert import BertConfig, BertConfigError
from modeling.checkpoint import encoder_problem
from modeling.estimator import BatchSplitError, build_estimator, checkpoint_hooks
from modeling.model_fn import ModelSettings, model_fn_builder
from pipeline import machine
from spec.heads import apply_options
from spec.run_errors import FlagError
from spec.model_card import CardError

log = logging.getLogger(__name__)


def truncation_of(model):
  """The truncation strategy of --truncation and --truncation_head_tokens."""
  try:
    return Truncation(model.truncation, model.truncation_head_tokens)
  except FlagError as e:
    raise FlagError("--truncation=%s --truncation_head_tokens=%s: %s" % (
        model.truncation, model.truncation_head_tokens, e))


def windowing_of(model):
  """The windows of --doc_stride and --window_aggregation, or None (0: no windows)."""
  if not model.doc_stride:
    return None
  return Windowing(model.doc_stride, model.window_aggregation, model.max_seq_length)


def reading_entry(model):
  """The model card's truncation entry: which tokens of a long text are kept, and its
  windows where --doc_stride asks for them."""
  entry = truncation_of(model).as_dict()
  windowing = windowing_of(model)
  return dict(entry, windows=windowing.as_dict()) if windowing else entry


def make_processor(data, weight_column=None, classes_from=None, head_options=None):
  """The processor (data/processors.py) of the DataOptions, with its label spec settled:
  for csv, the classes are read from the train file unless --labels gives them.
  weight_column: --sample_weight_column, read into the train examples. classes_from: the
  model card whose classes --labels holds, for the errors of a row with another label.
  head_options: the run's `heads` group, the head's own options (None: their defaults)."""
  processor = processor_for(data, weight_column)
  processor.classes_from = classes_from
  apply_options(processor.label_spec, head_options)  # (refused now, not later)
  return processor


def make_tokenizer(model):
  """(tokenizer, vocab_file) of the ModelOptions: the vocabulary of --vocab_file, or of the
  hub module when there is none. All tokenizer choices give Google's FullTokenizer ids."""
  vocab_file, do_lower_case = model.vocab_file, model.do_lower_case
  if not vocab_file:
    from modeling.hub_module import tokenization_info
    vocab_file, do_lower_case = tokenization_info(model.bert_hub_module_handle)
    log.info("vocabulary from the hub module: %s (do_lower_case=%s)", vocab_file, do_lower_case)
  warning = vocabulary.casing_mismatch_warning(do_lower_case, model.init_checkpoint)
  if warning:
    log.warning(warning)
  tokenizer = fast_tokenization.tokenizer_for(vocab_file, do_lower_case, model.tokenizer)
  problem = vocabulary.casing_problem(tokenizer.vocab, vocab_file, do_lower_case)
  if problem:
    raise FlagError(problem)
  return tokenizer, vocab_file


def bert_config_of(model, card=None, card_path=None):
  """The BertConfig of --bert_config_file, else of the model card (card_path: where it was
  read); None with a hub module, which brings its own. Checked against --max_seq_length
  and the vocabulary before any work."""
  card_config = card and card["bert_config"]
  if not model.bert_hub_module_handle:
    for name in ("bert_config_file", "vocab_file"):
      if not getattr(model, name) and not card_config:
        raise FlagError("--%s is required (or give --bert_hub_module_handle)" % name)
  config = None
  if model.bert_config_file:
    config, source = read_bert_config(model.bert_config_file), model.bert_config_file
  elif card_config:
    try:
      config, source = BertConfig.from_dict(card_config), card_path
    except BertConfigError as e:
      raise CardError("%s: its bert_config cannot be used (%s): train the model again, or pass "
                      "the bert_config.json it was trained from as --bert_config_file"
                      % (card_path, e))
  if config is not None and model.max_seq_length > config.max_position_embeddings:
    raise FlagError("--max_seq_length=%d exceeds max_position_embeddings=%d in %s. Pass "
                    "--max_seq_length=%d or less" % (
                        model.max_seq_length, config.max_position_embeddings, source,
                        config.max_position_embeddings))
  if model.vocab_file and config is not None:
    vocabulary.check_vocab_matches_config(model.vocab_file, config.vocab_size, source)
  problem = (config and model.init_checkpoint and not model.bert_hub_module_handle and
             encoder_problem(model.init_checkpoint, config, model.pooling))
  if problem:  # (only the new head may start from random values)
    raise FlagError("--init_checkpoint=%s does not match the BERT config %s: %s. Pass the "
                    "bert_config.json that came with the checkpoint" % (
                        model.init_checkpoint, source, problem))
  return config


def read_bert_config(path):
  """The BertConfig of --bert_config_file; FlagError when it is missing or no config."""
  if not exists(path):
    raise FlagError("--bert_config_file=%s does not exist" % path)
  problem = not_a_file_problem(path)
  if problem:
    raise FlagError("--bert_config_file=%s cannot be read: %s. Pass the bert_config.json "
                    "that came with the checkpoint" % (path, problem))
  try:
    return BertConfig.from_json_file(path)
  except BertConfigError as e:
    raise FlagError("--bert_config_file=%s cannot be used: %s. Pass the bert_config.json "
                    "that came with the checkpoint" % (path, e))


def encoder_config(bert_config, tokenizer):
  """The encoder's config; a hub module brings its own encoder, and the head needs only
  the config's initializer range."""
  return bert_config or BertConfig(vocab_size=vocabulary.vocab_size(tokenizer.vocab))


def num_train_steps_for(num_examples, training):
  """Optimizer updates: --num_train_steps when given (> 0), else enough epochs' worth of
  updates of training.per_update() examples."""
  if training.num_train_steps > 0:
    return training.num_train_steps
  return max(1, int(math.ceil(num_examples * training.num_train_epochs /
                              training.per_update())))


def model_fn_of(model, training, device, summary_dir, bert_config, label_spec,
                num_train_steps=0, serving=False, fused_kernels=False, class_weights=None):
  """Google's model_fn_builder with this run's encoder and head (ModelOptions), optimizer
  (TrainingOptions) and device (DeviceOptions); TPU summaries go to summary_dir. With
  serving, the graph an export is built from: predictions only, in float32 on this
  machine's CPU (also after a TPU run), the weights all from the checkpoint.
  fused_kernels: the encoder runs its fused CPU kernels (fused_kernels_for); never in a
  serving graph, which must load without them. class_weights: the train records' resolved
  --class_weights; a sigmoid head's loss weighs each column's positives by them."""
  positive_weights = None
  if class_weights and label_spec.class_weights_weigh == "positives" and not serving:
    positive_weights = tuple(float(class_weights[c]) for c in label_spec.columns)
  return model_fn_builder(bert_config, label_spec, ModelSettings(
      positive_weights=positive_weights,
      init_checkpoint=None if serving else model.init_checkpoint,
      learning_rate=0.0 if serving else training.learning_rate,
      num_train_steps=num_train_steps,
      num_warmup_steps=int(num_train_steps * training.warmup_proportion),
      use_tpu=device.use_tpu and not serving,
      hub_module_handle=model.bert_hub_module_handle, pooling=model.pooling,
      freeze_encoder=model.freeze_encoder,
      gradient_accumulation_steps=training.gradient_accumulation_steps,
      precision="float32" if serving else device.precision(),
      # (a CPU evaluates and predicts in float32, as its exports do: the CLI's outputs,
      # and what calibration and thresholds are fitted on, are every predictor's)
      train_only_precision=device.use_bf16 and not device.use_tpu,
      xla_global_step_fix=device.use_xla and not serving,
      summary_dir=summary_dir, save_summary_steps=training.save_summary_steps,
      fused_kernels=fused_kernels and not serving, classifier_dropout=model.classifier_dropout,
      own_bf16_matmul=own_bf16_matmul(fused_kernels and not serving,
                                      "float32" if serving else device.precision())))


def own_bf16_matmul(fused_kernels, precision, tf_version=None, environ=None):
  """Whether a training's bfloat16 matrix multiplies are the fused kernels' own
  (BertBf16MatMul): with the fused kernels (one CPU), in bfloat16, on a runtime whose own
  CPU kernels would emulate bfloat16 (machine.onednn_problem: TF 1.15, or TF 2 with
  oneDNN off)."""
  return bool(fused_kernels and precision == "bfloat16" and machine.onednn_problem(
      tf.__version__ if tf_version is None else tf_version, environ))


FIND = object()  # (an argument this module finds out for itself)


def own_matmul_problem(c, cluster=None, gpus=None):
  """None where this run's fused kernels would multiply bfloat16 on the CPU's bfloat16
  units, AMX or AVX512_BF16 (a runtime without oneDNN then trains in bfloat16 at their
  rate), else why not."""
  fused, why_not = fused_kernels_for(c.model, c.training, c.device, cluster, gpus)
  if not fused:
    return ("the fused kernels (which multiply bfloat16 on AMX or AVX512_BF16) are off: %s"
            % why_not)
  from modeling.fused import bf16_matmul_units
  units = bf16_matmul_units()
  return (None if units in ("AMX_BF16", "AVX512_BF16")
          else "the fused kernels' bfloat16 matmul: %s" % units)


def with_own_matmul(problem, own_problem):
  """(why the runtime does not compute bfloat16 matmuls in bfloat16, or None; whether it
  does by the fused kernels' own matmul), once that matmul is counted: problem is
  machine.onednn_problem's, own_problem own_matmul_problem's."""
  if own_problem is None:
    return None, True
  return "%s; %s" % (problem, own_problem), False


def training_own_matmul_problem(**device):
  """own_matmul_problem of a training with these device options (the others' defaults):
  for a benchmark's own measurements."""
  from spec.config import RunConfig
  return own_matmul_problem(RunConfig(do_train=True, **device))


def with_chosen_precision(c, cluster=None, instructions=None, tf_version=None, gpus=None,
                          environ=None, own_matmul=FIND):
  """(c, the log line of the precision the encoder computes in, and a warning or None).
  Where --use_bf16 is not given, a training on a CPU whose matmul units take bfloat16
  (AVX512_BF16 or AMX, machine.bf16_instructions) on a runtime that computes in them
  (TF 2's oneDNN; or TF 1.15 with the fused kernels, whose own matmul runs on them) runs
  the encoder in bfloat16, float32 master weights and loss: c then has use_bf16 set. Not
  beside a GPU or an option that computes otherwise (--use_xla, a hub encoder), nor in a
  cluster (cluster: its TF_CONFIG), whose machines may differ. Off a TPU, eval and predict compute in float32, as the exports
  do (model_fn_of). A given --use_bf16 on a CPU that would emulate bfloat16 runs, with a
  warning that it is slower than float32. instructions, tf_version, gpus, environ: what
  this machine has, found when None; own_matmul: own_matmul_problem's answer, found when
  FIND (and only asked of a runtime without oneDNN, on a CPU with bfloat16 units)."""
  device = c.device
  if device.use_tpu:
    return c, "encoder precision on the TPU: %s (%s)" % (
        device.precision(), "--use_bf16" if device.use_bf16 else "no --use_bf16"), None
  if device.use_fp16:
    return c, "encoder precision: float16 (--use_fp16)", None
  if not c.modes.do_train:
    return c, ("encoder precision: float32 (off a TPU, eval and predict compute in "
               "float32, as the exports do)"), None
  instructions = machine.bf16_instructions() if instructions is None else instructions
  problem = machine.onednn_problem(tf.__version__ if tf_version is None else tf_version,
                                   environ)
  computes_in_it = "TensorFlow computes in it"
  if problem and instructions and (device.use_bf16 or "use_bf16" not in c.given):
    problem, own = with_own_matmul(problem, own_matmul_problem(c, cluster, gpus)
                                   if own_matmul is FIND else own_matmul)
    if own:
      computes_in_it = ("the fused kernels compute in it (their own matmul, on AMX or "
                        "AVX512_BF16; "
                        "TensorFlow's CPU kernels here would emulate it)")

  def gpu_seen():
    return bool(tf.config.experimental.list_physical_devices("GPU") if gpus is None
                else gpus)
  if device.use_bf16:
    slow = ("this CPU has no bfloat16 matmul instructions (%s)" % ", ".join(
        f.upper() for f in machine.BF16_FLAGS) if not instructions else problem)
    if slow and not device.use_xla and gpu_seen():  # (the encoder computes on the GPU)
      slow = None
    return c, ("encoder precision: bfloat16 in training (--use_bf16), float32 in eval and "
               "predict"), slow and (
        "--use_bf16 on this CPU: %s, so bfloat16 is emulated and slower than float32 "
        "(it trains in bfloat16 all the same)" % slow)
  obstacle = ("--use_bf16=false" if "use_bf16" in c.given else
              "this CPU has no bfloat16 matmul instructions" if not instructions else
              problem or ("--use_xla" if device.use_xla else
                          "--bert_hub_module_handle" if c.model.bert_hub_module_handle
                          else "a cluster (TF_CONFIG)" if cluster is not None else None))
  if obstacle is None and gpu_seen():
    obstacle = "a GPU that TensorFlow sees"
  if obstacle:
    return c, "encoder precision: float32 (%s)" % obstacle, None
  return c.replace(use_bf16=True), (
      "encoder precision: bfloat16 in training, chosen: this CPU has %s and %s (float32 "
      "master weights and loss; float32 in eval and predict, as the exports; "
      "--use_bf16=false keeps float32)" % (", ".join(i.upper() for i in instructions),
                                            computes_in_it)), None


def training_choices(given_bf16=False, **device):
  """(the encoder's precision in training, whether it runs the fused CPU kernels, why
  not, the precision's log line) of a training with these device options (the others'
  defaults), as run_classifier decides them: for a benchmark's own training loop.
  given_bf16: use_bf16 counts as given (as --use_bf16 or --use_bf16=false), as on a TPU."""
  from spec.config import RunConfig
  given = given_bf16 or device.get("use_tpu")
  c, said, _ = with_chosen_precision(RunConfig(
      do_train=True, given=frozenset(["use_bf16"] if given else []), **device))
  fused, why_not = fused_kernels_for(c.model, c.training, c.device)
  return c.device.precision(), fused, why_not, said


def fused_kernel_obstacles(model, training, device, cluster=None):
  """The options that rule out the encoder's fused CPU kernels, as their flags name them.
  They run on one CPU device, on float32 or bfloat16 activations, and key their dropout
  on the step, so a TPU, float16, XLA, several GPUs, gradient accumulation (one step,
  several batches), a hub encoder or a cluster rules them out. Looks at no device."""
  return [reason for reason, present in (
      ("--use_tpu", device.use_tpu), ("--use_fp16", device.use_fp16),
      ("--use_xla", device.use_xla),
      ("--num_gpus=%d" % device.num_gpus, device.num_gpus > 1),
      ("--gradient_accumulation_steps=%d" % training.gradient_accumulation_steps,
       training.gradient_accumulation_steps > 1),
      ("--bert_hub_module_handle", bool(model.bert_hub_module_handle)),
      ("a cluster (TF_CONFIG)", cluster is not None)) if present]


def check_fused_kernels(model, training, device, cluster=None):
  """--fused_kernels=on with an option that rules the kernels out: a FlagError, before
  any work."""
  obstacles = fused_kernel_obstacles(model, training, device, cluster)
  if obstacles and device.fused_kernels == "on":
    raise FlagError(_fused_refusal(obstacles))


def _fused_refusal(obstacles):
  return ("--fused_kernels=on cannot be used here: %s. Pass --fused_kernels=auto (they "
          "run where they can) or off" % "; ".join(obstacles))


def fused_kernels_for(model, training, device, cluster=None, gpus=None):
  """Whether the run's encoder runs its fused CPU kernels (--fused_kernels), as
  (True, None) or (False, why not): not where an option rules them out
  (fused_kernel_obstacles), nor beside a GPU that TensorFlow sees, nor where they do not
  build. With --fused_kernels=on, any of those is a FlagError.
  gpus: the GPUs TensorFlow sees (found here when None, and only when no option rules
  the kernels out: listing TF 2.15's devices reads TF_XLA_FLAGS once and for all, before
  --use_xla would set them)."""
  if device.fused_kernels == "off":
    return False, "--fused_kernels=off"
  obstacles = fused_kernel_obstacles(model, training, device, cluster)
  if not obstacles:
    if gpus is None:
      gpus = tf.config.experimental.list_physical_devices("GPU")
    obstacles = ["a GPU that TensorFlow sees"] if gpus else []
  if not obstacles:
    from modeling.fused import unavailable_reason
    problem = unavailable_reason()
    obstacles = [problem] if problem else []
  if obstacles and device.fused_kernels == "on":
    raise FlagError(_fused_refusal(obstacles))
  return (False, "; ".join(obstacles)) if obstacles else (True, None)


def make_estimator(model_fn, output_dir, device, training, cluster=None):
  """The (TPU)Estimator of model_fn in output_dir: a Cloud TPU with --use_tpu, else this
  machine (several GPUs with --num_gpus, several machines with a cluster)."""
  try:
    return build_estimator(model_fn, output_dir, device, training, cluster)
  except BatchSplitError as e:  # (a cluster's replicas are known once its strategy exists)
    raise FlagError("--train_batch_size=%d is the global batch, and %s: every GPU of every "
                    "machine takes an equal share" % (training.train_batch_size, e))
