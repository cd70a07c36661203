"""model_fn for TPUEstimator: encoder + head + loss + optimizer + metrics, in all three modes."""

import dataclasses
from typing import Optional, Tuple

import tensorflow.compat.v1 as tf

from modeling import head
from modeling.bert import BertModel
from modeling.checkpoint import init_from_checkpoint, variables_allowed_random
from modeling.replicas import mean_over_replicas
from modeling.estimator import plain_global_step_read
from modeling.loss_scale import DynamicLossScale
from modeling.metrics import metric_fn_for
from modeling.optimization import create_train_op, learning_rate_schedule
from modeling.summaries import training_scalars
from spec.model_card import POOLINGS

TRAIN_LOSS_NAME = "train_loss"
ENCODER_SCOPE = "bert"  # (BertModel's variables, as Google's checkpoints name them)
SEQ_LENGTH_NAME = "batch_seq_length"
PRECISIONS = ("float32", "float16", "bfloat16")


@dataclasses.dataclass(frozen=True)
class ModelSettings(object):
  """Everything model_fn_builder builds besides the encoder's config and the head; a run's
  come from pipeline.build.model_fn_of alone.

  init_checkpoint: what the variables start from (None: random, a test's graph).
  learning_rate, num_train_steps, num_warmup_steps: AdamW's schedule (linear warm-up,
  then linear decay to 0 at num_train_steps).
  use_tpu: a TPUEstimator step on TPU cores (one-hot embeddings unless
  use_one_hot_embeddings says otherwise).
  hub_module_handle: the encoder comes from a TF1 hub module or a TF2 SavedModel instead
  of BertModel; init_checkpoint still initialises any variable it names (e.g. the head),
  a TF2 encoder's excepted.
  gradient_accumulation_steps > 1: the mean gradient of that many batches is applied
  (num_train_steps then counts updates, not batches).
  precision "float16" (GPU, with dynamic loss scaling) or "bfloat16" (TPU, or a CPU
  with bfloat16 units) runs the encoder in that precision; train_only_precision: only
  in training, eval and predict in float32, as an export computes (a CPU's bfloat16).
  xla_global_step_fix: read the global step outside XLA's clusters (modeling.estimator).
  pooling "cls" feeds the head BERT's pooled output (tanh(dense([CLS])), Google's
  classifier); "mean" feeds it the mean of the last layer over the real tokens (the
  pooler is then unused).
  summary_dir, save_summary_steps: on TPU, where the learning rate (and the loss scale)
  are written for TensorBoard, and how often.
  cross_shard: see optimization.create_train_op (False only to compile the TPU step on a
  CPU).
  freeze_encoder: train the head alone; the encoder keeps its initial weights (restored
  as usual) and runs without dropout.
  fused_kernels: BertModel runs modeling.fused's CPU kernels (one CPU device; the caller
  decides, pipeline.build.fused_kernels_for), in every mode, and training's optimizer
  its update kernel. Not for a graph that is exported: a SavedModel must load without
  this project's library.
  own_bf16_matmul: with fused_kernels and precision bfloat16, the encoder's matrix
  multiplies (dense and attention) are the kernels' own bfloat16 matmul
  (modeling.fused.FusedKernels), between float32 activations, for a runtime whose own
  bfloat16 kernels emulate it (TF 1.15; the caller decides, pipeline.build.own_bf16_matmul).
  classifier_dropout: the training dropout rate on what the head reads; None: the
  config's hidden_dropout_prob, as Google's classifier.
  positive_weights: a sigmoid head's training loss weighs each output's positives by its
  weight (one per output, each positive and finite); None: 1.
  """
  init_checkpoint: Optional[str] = None
  learning_rate: float = 5e-5
  num_train_steps: int = 0
  num_warmup_steps: int = 0
  use_tpu: bool = False
  use_one_hot_embeddings: Optional[bool] = None
  hub_module_handle: Optional[str] = None
  gradient_accumulation_steps: int = 1
  precision: str = "float32"
  train_only_precision: bool = False
  xla_global_step_fix: bool = False
  pooling: str = "cls"
  summary_dir: Optional[str] = None
  save_summary_steps: int = 100
  cross_shard: Optional[bool] = None
  freeze_encoder: bool = False
  fused_kernels: bool = False
  own_bf16_matmul: bool = False
  classifier_dropout: Optional[float] = None
  positive_weights: Optional[Tuple[float, ...]] = None

  def __post_init__(self):
    if self.positive_weights is not None and not all(
        isinstance(w, float) and 0.0 < w < float("inf") for w in self.positive_weights):
      raise ValueError("positive_weights %r are not all positive finite floats"
                       % (self.positive_weights,))
    if self.pooling not in POOLINGS:
      raise ValueError("pooling %r is not one of %s" % (self.pooling, ", ".join(POOLINGS)))
    if self.precision not in PRECISIONS:
      raise ValueError("precision %r is not one of %s" % (self.precision,
                                                          ", ".join(PRECISIONS)))
    if self.gradient_accumulation_steps < 1:
      raise ValueError("gradient_accumulation_steps is %r, not at least 1"
                       % self.gradient_accumulation_steps)
    beside_kernels = [name for name, present in (
        ("use_tpu", self.use_tpu), ("precision float16", self.precision == "float16"),
        ("gradient_accumulation_steps > 1", self.gradient_accumulation_steps > 1),
        ("hub_module_handle", bool(self.hub_module_handle))) if present]
    if self.fused_kernels and beside_kernels:
      # (A run's options never get here: pipeline.build.fused_kernel_obstacles.)
      raise ValueError("fused_kernels cannot be combined with %s" % ", ".join(beside_kernels))
    if self.own_bf16_matmul and not (self.fused_kernels and self.precision == "bfloat16"):
      raise ValueError("own_bf16_matmul needs fused_kernels and precision bfloat16")

  @property
  def one_hot_embeddings(self):
    return self.use_tpu if self.use_one_hot_embeddings is None else self.use_one_hot_embeddings


def model_fn_builder(bert_config, label_spec, settings):
  """Returns a model_fn(features, labels, mode, params) for TPUEstimator: BERT (or a hub
  encoder), the head of label_spec (spec/labels.py: its outputs, loss, metrics and the
  label's shape in `features`), and the optimizer and the rest as settings
  (ModelSettings) say. Training records the learning rate (and the loss scale) for
  TensorBoard."""
  if not isinstance(settings, ModelSettings):
    raise TypeError("model_fn_builder's settings are a ModelSettings, not %r" % (settings,))
  s = settings
  num_outputs = label_spec.num_outputs
  if s.positive_weights is not None and len(s.positive_weights) != num_outputs:
    raise ValueError("%d positive weights for a head of %d outputs"
                     % (len(s.positive_weights), num_outputs))

  def model_fn(features, labels, mode, params):
    del labels, params  # Labels travel inside `features`; batch size is the input_fn's business.
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    if s.xla_global_step_fix and is_training:
      plain_global_step_read()
    # Named so that hooks and benchmarks can see how long (dynamically padded) batches are.
    tf.identity(tf.shape(features["input_ids"])[1], name=SEQ_LENGTH_NAME)
    # (eval and predict in float32 where train_only_precision; the kernels' own bfloat16
    # matmul computes between float32 activations)
    precision = s.precision if is_training or not s.train_only_precision else "float32"
    own_matmul = s.own_bf16_matmul and precision == "bfloat16"
    kernels = fused_kernels_of_step(own_matmul) if s.fused_kernels else None
    pooled = encode(bert_config, features, is_training and not s.freeze_encoder,
                    s.one_hot_embeddings, s.hub_module_handle,
                    compute_dtype=tf.as_dtype("float32" if own_matmul else precision),
                    pooling=s.pooling,
                    trainable=not s.freeze_encoder, fused_kernels=kernels)
    logits = head.head_logits(
        pooled, num_outputs, is_training, bert_config.initializer_range,
        (bert_config.hidden_dropout_prob if s.classifier_dropout is None
         else s.classifier_dropout),
        dropout=kernels and (lambda x, rate: kernels.dropout(x, rate, kernels.HEAD_SITE)))
    # Only the new head may start from random values (and, when it goes unused, the
    # pooler; a hub module's variables come from the module).
    variables = tf.trainable_variables()
    if s.hub_module_handle:  # (a TF2 encoder's come from the hub model, or a run's checkpoint)
      from modeling.hub_module import initialised_from
      variables = initialised_from(s.init_checkpoint, variables)
    scaffold_fn = init_from_checkpoint(
        s.init_checkpoint, variables, s.use_tpu, report=is_training,
        may_start_random=None if s.hub_module_handle else variables_allowed_random(s.pooling))
    if s.freeze_encoder:  # (initialised above; the optimizer trains what stays in the list)
      # BertModel's variables, by name (a replica reuses the first one's); a frozen hub
      # model's never joined the trainable ones.
      trainable = tf.get_collection_ref(tf.GraphKeys.TRAINABLE_VARIABLES)
      trainable[:] = [v for v in trainable if not v.op.name.startswith(ENCODER_SCOPE + "/")]
    spec = tf.estimator.tpu.TPUEstimatorSpec
    # Eval and predict read a calibrated head's logits divided by its temperature (the
    # label spec's when the graph is built: a run that calibrates then predicts and exports
    # with it); training reads them as they are.
    read = head.temperature_scaled(logits, label_spec.temperatures())
    if mode == tf.estimator.ModeKeys.PREDICT:
      # Record batches carry their ids and padding flags (and get the logits as they are,
      # which --calibrate fits on); a serving request has neither.
      predictions = {"outputs": head.outputs_of(label_spec, read)}
      if "example_id" in features:
        predictions.update(logits=logits, example_id=features["example_id"],
                           is_real_example=features["is_real_example"])
      return spec(mode=mode, predictions=predictions, scaffold_fn=scaffold_fn)

    label_ids = features["label_ids"]
    is_real = features["is_real_example"]
    if mode == tf.estimator.ModeKeys.TRAIN:
      per_example_loss, outputs = head.loss_and_outputs(label_spec, logits, label_ids,
                                                        s.positive_weights)
      if s.num_train_steps < 1:  # (the schedule decays to 0 over them: no step would learn)
        raise ValueError("a training graph needs num_train_steps >= 1, not %d"
                         % s.num_train_steps)
      if "sample_weight" in features:  # class, column or identity weights
        per_example_loss *= features["sample_weight"]
      loss = tf.reduce_mean(per_example_loss)
      # Under a MirroredStrategy each replica's loss covers its share of the batch.
      tf.identity(mean_over_replicas(loss), name=TRAIN_LOSS_NAME)
      loss_scale = DynamicLossScale() if s.precision == "float16" else None
      train_op = create_train_op(loss, s.learning_rate, s.num_train_steps, s.num_warmup_steps,
                                 s.use_tpu, accumulation_steps=s.gradient_accumulation_steps,
                                 loss_scale=loss_scale, cross_shard=s.cross_shard,
                                 kernels=kernels)
      scalars = {"learning_rate": learning_rate_schedule(
          s.learning_rate, s.num_train_steps, s.num_warmup_steps, tf.train.get_global_step())}
      if loss_scale is not None:
        scalars["fp16_loss_scale"] = loss_scale.scale
      host_call = training_scalars(scalars, s.use_tpu, s.summary_dir, s.save_summary_steps)
      return spec(mode=mode, loss=loss, train_op=train_op, scaffold_fn=scaffold_fn,
                  host_call=host_call)

    # (the evaluation's loss is unweighted, as its metrics are)
    per_example_loss, outputs = head.loss_and_outputs(label_spec, read, label_ids)
    metric_fn = metric_fn_for(label_spec)
    tensors = {"per_example_loss": per_example_loss, "is_real_example": is_real,
               "labels": label_ids, "logits": read, "outputs": outputs}
    return spec(mode=mode, loss=head.mean_over_real(per_example_loss, is_real),
                eval_metrics=(metric_fn, tensors), scaffold_fn=scaffold_fn)

  return model_fn


def fused_kernels_of_step(own_bf16_matmul=False):
  """The fused kernels (modeling.fused; loaded only by runs that use them), seeded by the
  graph's seed and the global step."""
  from modeling.fused import FusedKernels, step_seed
  return FusedKernels(step_seed(), own_bf16_matmul)


def encode(bert_config, features, is_training, use_one_hot_embeddings, hub_module_handle=None,
           compute_dtype=tf.float32, pooling="cls", trainable=True, fused_kernels=None):
  """What the head reads [batch, hidden], from BertModel or a BERT hub module (TF1 or
  TF2): the pooled output, or with pooling "mean" the last layer's mean over the real
  tokens. trainable False keeps a hub model's variables out of the trainable ones.
  fused_kernels: modeling.fused.FusedKernels for BertModel."""
  if hub_module_handle:
    from modeling.hub_module import hub_pooled_output  # Only hub users need tensorflow_hub.
    return hub_pooled_output(hub_module_handle, features, is_training, pooling, trainable)
  model = BertModel(bert_config, is_training, features["input_ids"], features["input_mask"],
                    features["segment_ids"], use_one_hot_embeddings=use_one_hot_embeddings,
                    compute_dtype=compute_dtype, pooled_only=pooling == "cls",
                    fused_kernels=fused_kernels)
  if pooling == "mean":
    return head.mean_pool(model.get_sequence_output(), features["input_mask"])
  return model.get_pooled_output()
