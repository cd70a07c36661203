"""The head on BERT's pooled output, and the losses that label specs name.

Variable names (`output_weights` [num_outputs, hidden], `output_bias`) are those of
Google's run_classifier, so its fine-tuned checkpoints load here too.
"""

import tensorflow.compat.v1 as tf

from modeling.compat import static_shape


def mean_pool(sequence_output, input_mask):
  """The mean of sequence_output [batch, seq, hidden] over each row's real tokens
  (input_mask [batch, seq] is 1 for them): [batch, hidden]. Padding never counts."""
  mask = tf.cast(input_mask, sequence_output.dtype)[:, :, None]
  total = tf.reduce_sum(sequence_output * mask, axis=1)
  return total / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)


def _dropout(x, rate):
  return tf.nn.dropout(x, rate=rate)


def head_logits(pooled_output, num_outputs, is_training, initializer_range=0.02,
                dropout_rate=0.1, dropout=None):
  """pooled_output [batch, hidden] -> logits [batch, num_outputs]. In training the
  pooled output gets dropout_rate: the encoder's hidden dropout, which is the 0.1 that
  Google's classifier hard-codes for every released BERT config, and 0 turns it off with
  the encoder's (a run without randomness, as the resume test needs). dropout(x, rate):
  another dropout than TensorFlow's (the fused kernels' seeded one)."""
  hidden = static_shape(pooled_output)[-1]
  weights = tf.get_variable("output_weights", [num_outputs, hidden],
                            initializer=tf.truncated_normal_initializer(stddev=initializer_range))
  bias = tf.get_variable("output_bias", [num_outputs], initializer=tf.zeros_initializer())
  if is_training and dropout_rate > 0:
    pooled_output = (dropout or _dropout)(pooled_output, dropout_rate)
  return tf.nn.bias_add(tf.matmul(pooled_output, weights, transpose_b=True), bias)


def temperature_scaled(logits, temperatures):
  """logits [batch, n] divided by each output's temperature (n positive floats; None: as
  they are): a calibrated head's logits (spec/calibration.py)."""
  if temperatures is None:
    return logits
  if len(temperatures) != static_shape(logits)[-1]:
    raise ValueError("%d temperatures for %d outputs" % (len(temperatures),
                                                         static_shape(logits)[-1]))
  return logits / tf.constant(temperatures, logits.dtype, shape=[len(temperatures)])


def classification_loss(logits, label_ids):
  """Softmax cross-entropy. Returns (per_example_loss [batch], probabilities [batch, labels])."""
  num_labels = static_shape(logits)[-1]
  log_probs = tf.nn.log_softmax(logits, axis=-1)
  one_hot = tf.one_hot(label_ids, depth=num_labels, dtype=tf.float32)
  per_example_loss = -tf.reduce_sum(one_hot * log_probs, axis=-1)
  return per_example_loss, tf.nn.softmax(logits, axis=-1)


def sigmoid_loss(logits, targets, positive_weights=None):
  """Sigmoid cross-entropy of each output against its 0/1 label or fraction y in [0, 1],
  averaged over the outputs. positive_weights [n] (None: 1) weigh each output's positive
  part: -(w y log p + (1 - y) log(1 - p)). Returns (per_example_loss [batch],
  probabilities [batch, n])."""
  targets = tf.cast(targets, tf.float32)
  if positive_weights is None:
    per_output = tf.nn.sigmoid_cross_entropy_with_logits(labels=targets, logits=logits)
  else:  # (softplus(-x) is -log p, stably; -log(1 - p) is x + softplus(-x))
    weights = tf.constant(positive_weights, tf.float32, shape=[static_shape(logits)[-1]])
    per_output = ((1.0 - targets) * logits +
                  (1.0 + (weights - 1.0) * targets) * tf.nn.softplus(-logits))
  return tf.reduce_mean(per_output, axis=-1), tf.nn.sigmoid(logits)


def squared_error_loss(logits, targets):
  """Squared error averaged over the outputs. Returns (per_example_loss [batch],
  predictions [batch, n])."""
  return tf.reduce_mean(tf.square(logits - tf.cast(targets, tf.float32)), axis=-1), logits


# The losses a label spec can name (spec/labels.py LabelSpec.loss).
LOSSES = {"softmax_cross_entropy": classification_loss, "sigmoid_cross_entropy": sigmoid_loss,
          "squared_error": squared_error_loss}


def loss_and_outputs(label_spec, logits, labels, positive_weights=None):
  """The spec's loss: its own graph_loss where it has one, else the loss its `loss` names
  (positive_weights: sigmoid_loss's, of a sigmoid head). Returns (per_example_loss
  [batch], outputs [batch, num_outputs]): outputs are probabilities, or the predicted
  values of a regression head."""
  if positive_weights is not None:
    if label_spec.loss != "sigmoid_cross_entropy" or label_spec.class_weights_weigh != (
        "positives"):
      raise ValueError("positive weights weigh a sigmoid head's outputs; a %s has none"
                       % label_spec.describe())
    return sigmoid_loss(logits, labels, positive_weights)
  own = label_spec.graph_loss(tf, logits, labels)
  if own is not None:
    per_example_loss, outputs = own
    n = static_shape(logits)[-1]
    if per_example_loss.shape.ndims != 1 or outputs.shape.ndims != 2 or (
        outputs.shape.as_list()[-1] != n):
      raise ValueError("the %s's graph_loss gives a loss of shape %s and outputs of shape %s "
                       "for logits of shape %s (it must give [batch] and [batch, %d])" % (
                           label_spec.describe(), per_example_loss.shape,
                           outputs.shape, logits.shape, n))
    return per_example_loss, outputs
  return LOSSES[label_spec.loss](logits, labels)


# What each loss's outputs are, from the logits alone (serving has no labels).
OUTPUTS = {"softmax_cross_entropy": lambda logits: tf.nn.softmax(logits, axis=-1),
           "sigmoid_cross_entropy": tf.nn.sigmoid, "squared_error": tf.identity}


def outputs_of(label_spec, logits):
  """The head's outputs [batch, num_outputs] without a loss: those loss_and_outputs gives
  (a head's own graph_loss keeps the outputs of the family its `loss` names)."""
  return OUTPUTS[label_spec.loss](logits)


def mean_over_real(per_example_loss, is_real_example):
  """The mean loss over real rows only; padding rows added to fill a batch do not count."""
  weights = tf.cast(is_real_example, tf.float32)
  return tf.reduce_sum(per_example_loss * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)
