"""model_fn for TPUEstimator: encoder + head + loss + optimizer + metrics, in all three modes."""

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


def model_fn_builder(bert_config, label_spec, init_checkpoint, learning_rate, num_train_steps,
                     num_warmup_steps, use_tpu, use_one_hot_embeddings=None,
                     hub_module_handle=None, gradient_accumulation_steps=1,
                     precision="float32", xla_global_step_fix=False, pooling="cls",
                     summary_dir=None, save_summary_steps=100, cross_shard=None,
                     freeze_encoder=False, fused_kernels=False, classifier_dropout=None):
  """Returns a model_fn(features, labels, mode, params) for TPUEstimator.

  label_spec (spec/labels.py) gives the head's outputs, its loss, its metrics and the
  label's shape in `features`. pooling "cls" feeds the head BERT's pooled output
  (tanh(dense([CLS])), Google's classifier); "mean" feeds it the mean of the last layer
  over the real tokens (the pooler is then unused). With hub_module_handle the encoder
  comes from a TF1 hub module or a TF2 SavedModel instead of BertModel; init_checkpoint
  still initialises any variable it names (e.g. the head), a TF2 encoder's excepted.
  gradient_accumulation_steps > 1 applies the mean gradient of that many batches
  (num_train_steps then counts updates, not batches). precision "float16" (GPU,
  with dynamic loss scaling) or "bfloat16" (TPU) runs the encoder in that precision.
  Training records the learning rate (and the loss scale) for TensorBoard; on TPU they
  are written into summary_dir every save_summary_steps steps.
  cross_shard: see optimization.create_train_op (False only to compile the TPU step
  on a CPU).
  freeze_encoder: train the head alone; the encoder keeps its initial weights (restored
  as usual) and runs without dropout.
  fused_kernels: BertModel runs modeling.fused's CPU kernels (float32, one CPU device; the
  caller decides, pipeline.build.fused_kernels_for), in every mode. Not for a graph that
  is exported: a SavedModel must load without this project's library.
  classifier_dropout: the training dropout rate on what the head reads; None: the
  config's hidden_dropout_prob, as Google's classifier.
  """
  if use_one_hot_embeddings is None:
    use_one_hot_embeddings = use_tpu
  num_outputs = label_spec.num_outputs
  if pooling not in POOLINGS:
    raise ValueError("pooling %r is not one of %s" % (pooling, ", ".join(POOLINGS)))

  def model_fn(features, labels, mode, params):
    del labels, params  # Labels travel inside `features`; batch size is the input_fn's business.
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    if xla_global_step_fix and is_training:
      plain_global_step_read()
    # Named so that hooks and benchmarks can see how long (dynamically padded) batches are.
    tf.identity(tf.shape(features["input_ids"])[1], name=SEQ_LENGTH_NAME)
    kernels = fused_kernels_of_step() if fused_kernels else None
    pooled = encode(bert_config, features, is_training and not freeze_encoder,
                    use_one_hot_embeddings, hub_module_handle,
                    compute_dtype=tf.as_dtype(precision), pooling=pooling,
                    trainable=not freeze_encoder, fused_kernels=kernels)
    logits = head.head_logits(
        pooled, num_outputs, is_training, bert_config.initializer_range,
        bert_config.hidden_dropout_prob if classifier_dropout is None else classifier_dropout,
        dropout=kernels and (lambda x, rate: kernels.dropout(x, rate, kernels.HEAD_SITE)))
    # Only the new head may start from random values (and, when it goes unused, the
    # pooler; a hub module's variables come from the module).
    variables = tf.trainable_variables()
    if hub_module_handle:  # (a TF2 encoder's come from the hub model, or a run's checkpoint)
      from modeling.hub_module import initialised_from
      variables = initialised_from(init_checkpoint, variables)
    scaffold_fn = init_from_checkpoint(
        init_checkpoint, variables, use_tpu, report=is_training,
        may_start_random=None if hub_module_handle else variables_allowed_random(pooling))
    if freeze_encoder:  # (initialised above; the optimizer trains what stays in the list)
      # BertModel's variables, by name (a replica reuses the first one's); a frozen hub
      # model's never joined the trainable ones.
      trainable = tf.get_collection_ref(tf.GraphKeys.TRAINABLE_VARIABLES)
      trainable[:] = [v for v in trainable if not v.op.name.startswith(ENCODER_SCOPE + "/")]
    spec = tf.estimator.tpu.TPUEstimatorSpec
    if mode == tf.estimator.ModeKeys.PREDICT:
      # Record batches carry their ids and padding flags; a serving request has neither.
      predictions = {"outputs": head.outputs_of(label_spec, logits)}
      predictions.update((k, features[k]) for k in ("example_id", "is_real_example")
                         if k in features)
      return spec(mode=mode, predictions=predictions, scaffold_fn=scaffold_fn)

    label_ids = features["label_ids"]
    per_example_loss, outputs = head.loss_and_outputs(label_spec, logits, label_ids)
    is_real = features["is_real_example"]
    if mode == tf.estimator.ModeKeys.TRAIN:
      if "sample_weight" in features:  # class, column or identity weights
        per_example_loss *= features["sample_weight"]
      loss = tf.reduce_mean(per_example_loss)
      # Under a MirroredStrategy each replica's loss covers its share of the batch.
      tf.identity(mean_over_replicas(loss), name=TRAIN_LOSS_NAME)
      loss_scale = DynamicLossScale() if precision == "float16" else None
      train_op = create_train_op(loss, learning_rate, num_train_steps, num_warmup_steps, use_tpu,
                                 accumulation_steps=gradient_accumulation_steps,
                                 loss_scale=loss_scale, cross_shard=cross_shard)
      scalars = {"learning_rate": learning_rate_schedule(
          learning_rate, num_train_steps, num_warmup_steps, tf.train.get_global_step())}
      if loss_scale is not None:
        scalars["fp16_loss_scale"] = loss_scale.scale
      host_call = training_scalars(scalars, use_tpu, summary_dir, save_summary_steps)
      return spec(mode=mode, loss=loss, train_op=train_op, scaffold_fn=scaffold_fn,
                  host_call=host_call)

    metric_fn = metric_fn_for(label_spec)
    tensors = {"per_example_loss": per_example_loss, "is_real_example": is_real,
               "labels": label_ids, "logits": logits, "outputs": outputs}
    return spec(mode=mode, loss=head.mean_over_real(per_example_loss, is_real),
                eval_metrics=(metric_fn, tensors), scaffold_fn=scaffold_fn)

  return model_fn


def fused_kernels_of_step():
  """The fused kernels (modeling.fused; loaded only by runs that use them), seeded by the
  graph's seed and the global step."""
  from modeling.fused import FusedKernels, step_seed
  return FusedKernels(step_seed())


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
