"""The BERT encoder, with exactly the variable names and shapes of Google's checkpoints.

All tensors here are plain graph tensors; nothing knows about Estimators, labels or
optimizers. Layers are built on tf.get_variable (not Keras), which behaves the same
on TF 1.15 and TF 2.15 and gives the names `.../kernel`, `.../bias`,
`.../LayerNorm/gamma` and `.../LayerNorm/beta` that the checkpoints use.
"""

import copy
import json
import math

import tensorflow.compat.v1 as tf

from modeling.compat import static_shape


class BertConfigError(ValueError):
  """A BERT config that cannot describe a model: a bad value, or a file that is not one."""


class BertConfig(object):
  """The hyper-parameters of a BERT model, as in Google's bert_config.json."""

  FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "intermediate_size", "hidden_act", "hidden_dropout_prob",
            "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
            "initializer_range")

  def __init__(self, vocab_size, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
               intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
               attention_probs_dropout_prob=0.1, max_position_embeddings=512,
               type_vocab_size=2, initializer_range=0.02):
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.num_hidden_layers = num_hidden_layers
    self.num_attention_heads = num_attention_heads
    self.intermediate_size = intermediate_size
    self.hidden_act = hidden_act
    self.hidden_dropout_prob = hidden_dropout_prob
    self.attention_probs_dropout_prob = attention_probs_dropout_prob
    self.max_position_embeddings = max_position_embeddings
    self.type_vocab_size = type_vocab_size
    self.initializer_range = initializer_range
    self.validate()

  def validate(self):
    if self.hidden_size % self.num_attention_heads:
      raise BertConfigError("hidden_size %d is not a multiple of num_attention_heads %d" %
                            (self.hidden_size, self.num_attention_heads))
    if self.hidden_act not in ACTIVATIONS:
      raise BertConfigError("unknown hidden_act %r; known: %s" %
                            (self.hidden_act, ", ".join(sorted(ACTIVATIONS))))
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
      if not 0 <= getattr(self, name) < 1:  # (1 would drop everything; TF's dropout refuses it)
        raise BertConfigError("%s is %r, not a probability from 0 up to (not including) 1"
                              % (name, getattr(self, name)))

  # Each field's type in a config file: whole numbers, fractions, the activation's name.
  TYPES = {"hidden_act": (str,), "hidden_dropout_prob": (int, float),
           "attention_probs_dropout_prob": (int, float), "initializer_range": (int, float)}

  @classmethod
  def from_dict(cls, values):
    if not isinstance(values, dict):
      raise BertConfigError("a bert config is a JSON object, not %s" % type(values).__name__)
    missing = [f for f in ("vocab_size",) if f not in values]
    if missing:
      raise BertConfigError("bert config lacks %s" % ", ".join(missing))
    for name in cls.FIELDS:
      allowed = cls.TYPES.get(name, (int,))
      if name in values and (isinstance(values[name], bool) or
                             not isinstance(values[name], allowed)):
        raise BertConfigError("%s is %r, not %s" % (
            name, values[name], "a number" if float in allowed else
            "a name" if str in allowed else "a whole number"))
      if name in values and allowed == (int,) and values[name] < 1:  # (sizes and counts)
        raise BertConfigError("%s is %r, not a whole number of at least 1" % (name,
                                                                               values[name]))
    return cls(**{k: v for k, v in values.items() if k in cls.FIELDS})

  @classmethod
  def from_json_file(cls, path):
    with tf.io.gfile.GFile(path, "r") as f:
      try:
        values = json.load(f)
      except ValueError as e:
        raise BertConfigError("%s is not valid JSON: %s" % (path, e))
    try:
      return cls.from_dict(values)
    except BertConfigError as e:
      raise BertConfigError("%s: %s" % (path, e))

  def to_dict(self):
    return {f: getattr(self, f) for f in self.FIELDS}

  def to_json_string(self):
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

  def without_dropout(self):
    config = copy.deepcopy(self)
    config.hidden_dropout_prob = 0.0
    config.attention_probs_dropout_prob = 0.0
    return config


def gelu_tanh(x):
  """GELU with the tanh approximation, as Google's BERT computes it ("gelu")."""
  # x * x * x rather than tf.pow(x, 3): the same value, several times cheaper on CPU.
  cdf = 0.5 * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))))
  return x * cdf


def gelu_exact(x):
  """GELU with the error function, as Hugging Face's "gelu" is defined."""
  return 0.5 * x * (1.0 + tf.math.erf(x / math.sqrt(2.0)))


ACTIVATIONS = {"gelu": gelu_tanh, "gelu_exact": gelu_exact, "relu": tf.nn.relu,
               "tanh": tf.tanh, "linear": None}


def initializer(config):
  return tf.truncated_normal_initializer(stddev=config.initializer_range)


def dense_variables(in_units, units, name, kernel_initializer, dtype, bias_dtype=None):
  """`name/kernel` [in, units] and `name/bias` [units], read in dtype (the bias in
  bias_dtype when given)."""
  with tf.variable_scope(name):
    kernel = tf.get_variable("kernel", [in_units, units], dtype=dtype,
                             initializer=kernel_initializer)
    bias = tf.get_variable("bias", [units], dtype=bias_dtype or dtype,
                           initializer=tf.zeros_initializer())
  return kernel, bias


def as_matrix(x):
  """[..., C] -> [rows, C]: one 2-D matrix multiply (which TF 2.15's oneDNN rewrites fuse
  with the bias that follows) instead of tensordot's reshapes around a 3-D operand."""
  return tf.reshape(x, [-1, static_shape(x)[-1]]) if x.shape.ndims != 2 else x


def like_rows_of(y, x):
  """[rows, C'] back to x's leading shape: [..., C'] (other ranks are left as they are)."""
  return y if x.shape.ndims == 2 or y.shape.ndims != 2 else tf.reshape(
      y, tf.concat([tf.shape(x)[:-1], tf.shape(y)[-1:]], 0))


def dense(x, units, name, kernel_initializer, activation=None, bias_activation=None,
          matmul=tf.matmul):
  """x [..., in] -> [..., units], with variables `name/kernel` [in, units] and `name/bias`.
  bias_activation(y, bias), if given, adds the bias and applies the activation at once
  (a fused kernel: its bias is read in float32 whatever x's dtype). matmul(rows, kernel):
  the matrix multiply (the fused kernels' own in bfloat16 where TensorFlow has none)."""
  kernel, bias = dense_variables(static_shape(x)[-1], units, name, kernel_initializer, x.dtype,
                                 tf.float32 if bias_activation else None)
  y = matmul(as_matrix(x), kernel)
  if bias_activation:
    return like_rows_of(bias_activation(y, bias), x)
  y = tf.nn.bias_add(y, bias)
  return like_rows_of(activation(y) if activation is not None else y, x)


def layer_norm(x, name="LayerNorm", epsilon=1e-12):
  """Layer normalisation over the last axis with `LayerNorm/beta` and `LayerNorm/gamma`.

  Always computed in float32 (an epsilon of 1e-12 and a variance need it); the
  result is cast back to the input's dtype.
  """
  if x.dtype != tf.float32:
    return tf.cast(layer_norm(tf.cast(x, tf.float32), name, epsilon), x.dtype)
  gamma, beta = layer_norm_variables(static_shape(x)[-1], name)
  mean, variance = tf.nn.moments(x, [-1], keep_dims=True)
  # batch_normalization is what Google's layer norm computes. The spelled-out
  # (x - mean) * rsqrt(var + eps) * gamma + beta is matched by TF 2.15's oneDNN
  # layer-norm fusion, which crashes the process when the sequence length is unknown.
  return tf.nn.batch_normalization(x, mean, variance, offset=beta, scale=gamma,
                                   variance_epsilon=epsilon)


def layer_norm_variables(units, name="LayerNorm"):  # `name/gamma` and `name/beta` [units]
  with tf.variable_scope(name):
    beta = tf.get_variable("beta", [units], initializer=tf.zeros_initializer())
    gamma = tf.get_variable("gamma", [units], initializer=tf.ones_initializer())
  return gamma, beta


def dropout(x, rate):
  return tf.nn.dropout(x, rate=rate) if rate else x


class BertModel(object):
  """The BERT encoder.

  Inputs are int32 [batch, seq] tensors. Outputs:
    sequence_output [batch, seq, hidden]: the last layer,
    pooled_output [batch, hidden]: tanh(dense(first token)),
    all_layers: list of [batch, seq, hidden], one per layer.

  compute_dtype tf.float16 (GPU) or tf.bfloat16 (TPU) runs the transformer in that
  precision. The variables stay float32 with the same names (a custom getter
  casts them when read); LayerNorm and softmax run in float32; outputs are float32.

  pooled_only=True is for classifiers, which read only pooled_output: the last
  layer then computes only the first token's row ([batch, 1, hidden]), since no
  other row of it reaches the pooler. Keys and values still come from every
  token, so pooled_output and every gradient are those of the full model, but the
  last layer costs about a sixth as much. sequence_output is then unavailable.

  fused_kernels (modeling.fused.FusedKernels; CPU) runs each layer's elementwise work in
  fused kernels: the same function within float32 rounding, own dropout masks. With
  compute_dtype tf.bfloat16 they take and give bfloat16 activations but compute in float32
  (layer norm, softmax and GELU included) and read their parameters in float32.
  """

  def __init__(self, config, is_training, input_ids, input_mask=None, token_type_ids=None,
               use_one_hot_embeddings=False, scope="bert", compute_dtype=tf.float32,
               pooled_only=False, fused_kernels=None):
    if fused_kernels is not None and compute_dtype not in (tf.float32, tf.bfloat16):
      raise ValueError("the fused kernels take float32 or bfloat16, not %s"
                       % compute_dtype.name)
    if not is_training:
      config = config.without_dropout()
    _, seq_length = _check_inputs(input_ids, config)
    if input_mask is None:
      input_mask = tf.ones_like(input_ids)
    if token_type_ids is None:
      token_type_ids = tf.zeros_like(input_ids)
    init = initializer(config)

    getter = float32_storage_getter if compute_dtype != tf.float32 else None
    with tf.variable_scope(scope, custom_getter=getter):
      with tf.variable_scope("embeddings"):
        self.embedding_output = _embeddings(config, input_ids, token_type_ids, seq_length,
                                            use_one_hot_embeddings, init, fused_kernels)
      with tf.variable_scope("encoder"):
        hidden = tf.cast(self.embedding_output, compute_dtype)
        attention_bias = tf.cast(_attention_bias(input_mask), compute_dtype)
        layers = _transformer(config, hidden, attention_bias, init, pooled_only,
                              fused_kernels)
        self.all_layers = [tf.cast(layer, tf.float32) for layer in layers]
        self.sequence_output = None if pooled_only else self.all_layers[-1]
      with tf.variable_scope("pooler"):
        first_token = layers[-1][:, 0, :]
        self.pooled_output = tf.cast(dense(first_token, config.hidden_size, "dense", init,
                                           activation=tf.tanh), tf.float32)

  def get_pooled_output(self):
    return self.pooled_output

  def get_sequence_output(self):
    if self.sequence_output is None:
      raise ValueError("this BertModel was built with pooled_only=True, so its last layer "
                       "has only the first token; build it with pooled_only=False")
    return self.sequence_output


def float32_storage_getter(getter, name, *args, **kwargs):
  """Keeps trainable variables in float32 and returns them cast to the requested dtype."""
  requested = kwargs.get("dtype") or tf.float32
  if kwargs.get("trainable", True) and requested != tf.float32:
    kwargs["dtype"] = tf.float32
    return tf.cast(getter(name, *args, **kwargs), requested)
  return getter(name, *args, **kwargs)


def _check_inputs(input_ids, config):
  shape = static_shape(input_ids)
  if len(shape) != 2:
    raise ValueError("input_ids must be [batch, seq_length], got shape %s" % shape)
  if shape[1] is None:  # Hub modules take any length; it is known only at run time.
    return shape[0], tf.shape(input_ids)[1]
  if shape[1] > config.max_position_embeddings:
    raise ValueError("sequence length %d exceeds max_position_embeddings %d" %
                     (shape[1], config.max_position_embeddings))
  return shape[0], shape[1]


def _embeddings(config, input_ids, token_type_ids, seq_length, use_one_hot, init, fused=None):
  """Word + token-type + position embeddings, normalised and dropped out."""
  word_table = tf.get_variable("word_embeddings", [config.vocab_size, config.hidden_size],
                               initializer=init)
  if use_one_hot:
    # TPUs gather slowly and cannot compile the sparse gradient of a gather.
    words = tf.matmul(tf.one_hot(tf.reshape(input_ids, [-1]), config.vocab_size), word_table)
    words = tf.reshape(words, [-1, seq_length, config.hidden_size])
  else:
    words = tf.gather(word_table, input_ids)

  type_table = tf.get_variable("token_type_embeddings",
                               [config.type_vocab_size, config.hidden_size], initializer=init)
  # The type vocabulary is tiny, so a one-hot matmul is the fast path on every device.
  types = tf.matmul(tf.one_hot(tf.reshape(token_type_ids, [-1]), config.type_vocab_size),
                    type_table)
  types = tf.reshape(types, [-1, seq_length, config.hidden_size])

  position_table = tf.get_variable("position_embeddings",
                                   [config.max_position_embeddings, config.hidden_size],
                                   initializer=init)
  positions = tf.expand_dims(position_table[:seq_length], 0)

  output = layer_norm(words + types + positions)
  if fused is not None:
    return fused.dropout(output, config.hidden_dropout_prob, fused.EMBEDDINGS_SITE)
  return dropout(output, config.hidden_dropout_prob)


def _attention_bias(input_mask):
  """[batch, seq] mask of 1s and 0s -> [batch, 1, 1, seq] additive bias (0 or -10000)."""
  mask = tf.cast(input_mask, tf.float32)[:, tf.newaxis, tf.newaxis, :]
  return (1.0 - mask) * -10000.0


def _transformer(config, x, attention_bias, init, pooled_only=False, fused=None):
  """The layers' outputs [batch, seq, hidden]; with pooled_only the last is [batch, 1, hidden].
  With fused kernels, layer i's dropouts are the sites 3i, 3i + 1 and 3i + 2."""
  activation = ACTIVATIONS[config.hidden_act]
  bias_gelu = fused.bias_gelu if fused is not None and config.hidden_act == "gelu" else None
  layers = []
  for index in range(config.num_hidden_layers):
    # Every row of a layer depends on every row of the layer below, but row i of
    # a layer's output depends only on row i of its queries and residual input.
    last = index == config.num_hidden_layers - 1
    queries = x[:, :1, :] if pooled_only and last else x
    with tf.variable_scope("layer_%d" % index):
      with tf.variable_scope("attention"):
        with tf.variable_scope("self"):
          context = _self_attention(config, queries, x, attention_bias, init,
                                    fused and (fused, 3 * index))
        with tf.variable_scope("output"):
          attended = _output(config, context, queries, init, fused and (fused, 3 * index + 1))
      with tf.variable_scope("intermediate"):
        hidden = dense(attended, config.intermediate_size, "dense", init, activation=activation,
                       bias_activation=bias_gelu,
                       matmul=fused.matmul if fused is not None else tf.matmul)
      with tf.variable_scope("output"):
        x = _output(config, hidden, attended, init, fused and (fused, 3 * index + 2))
    layers.append(x)
  return layers


def _output(config, x, residual, init, fused_site=None):
  """layer_norm(dropout(dense(x)) + residual), in residual's shape; with (fused kernels,
  site), everything after the matrix multiply in one kernel."""
  if not fused_site:
    out = dense(x, config.hidden_size, "dense", init)
    return layer_norm(dropout(out, config.hidden_dropout_prob) + residual)
  fused, site = fused_site
  gamma, beta = layer_norm_variables(config.hidden_size)
  return dense(x, config.hidden_size, "dense", init, bias_activation=(
      lambda y, bias: fused.dropout_add_norm(y, bias, as_matrix(residual), gamma, beta,
                                             config.hidden_dropout_prob, site)),
               matmul=fused.matmul)


def _sequence_length(t):
  return static_shape(t)[1] or tf.shape(t)[1]


def _self_attention(config, queries, x, attention_bias, init, fused_site=None):
  """Multi-head scaled dot-product attention of queries [B, Q, H] over x [B, S, H].

  Returns the context [B, Q, H]. Q is S (self-attention of every token) or 1
  (only the first token, whose row is queries = x[:, :1]). With (fused kernels, site),
  the heads are split and merged by copies and the scale, mask, softmax and dropout are
  one kernel.
  """
  heads = config.num_attention_heads
  head_size = config.hidden_size // heads

  def split_heads(t, name):  # dense, then [B, S, H] -> [B, heads, S, head_size]
    shape = [-1, _sequence_length(t), heads, head_size]
    if fused_site:  # (the bias add and the transpose as one copy)
      return dense(t, config.hidden_size, name, init, bias_activation=(
          lambda y, bias: fused_site[0].split_heads(
              tf.reshape(y, shape[:2] + [config.hidden_size]), bias, heads)),
                   matmul=fused_site[0].matmul)
    return tf.transpose(tf.reshape(dense(t, config.hidden_size, name, init), shape),
                        [0, 2, 1, 3])

  query, key, value = (split_heads(queries, "query"), split_heads(x, "key"),
                       split_heads(x, "value"))

  scale = 1.0 / math.sqrt(float(head_size))
  if fused_site:
    fused, site = fused_site
    probs = fused.attention_softmax(fused.matmul(query, key, transpose_b=True),
                                    tf.cast(attention_bias[:, 0, 0, :], tf.float32), scale,
                                    config.attention_probs_dropout_prob, site)
  else:
    scores = tf.matmul(query, key, transpose_b=True) * scale
    probs = tf.nn.softmax(tf.cast(scores + attention_bias, tf.float32))  # float32 for range
    probs = dropout(tf.cast(probs, x.dtype), config.attention_probs_dropout_prob)
  if fused_site:
    return fused_site[0].merge_heads(fused_site[0].matmul(probs, value))
  context = tf.matmul(probs, value)
  context = tf.transpose(context, [0, 2, 1, 3])
  return tf.reshape(context, [-1, _sequence_length(queries), config.hidden_size])
