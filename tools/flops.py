"""Matrix-multiply FLOPs of BERT, the usual yardstick for achieved throughput, from the
list of the matrix multiplies themselves (which tools/profile_step.py also times alone)."""


def forward_matmuls(config, seq_length, num_outputs=2, pooled_only=False, batch=1):
  """The forward pass's matrix multiplies for `batch` examples of seq_length tokens, as
  (count, m, k, n): count products of an [m, k] by a [k, n] matrix.

  Per layer: the Q, K, V and output projections and the feed-forward pair over every
  token, and per attention head the scores [S, d] x [d, S] and the context [S, S] x
  [S, d]. Then the pooler and the head. Embedding gathers, softmax and LayerNorm are not
  matmuls and are left out, as is customary. With pooled_only (BertModel's classifier
  mode) the last layer projects keys and values for every token but computes everything
  else for the first token only.
  """
  h, i, s = config.hidden_size, config.intermediate_size, seq_length
  heads = config.num_attention_heads
  d = h // heads
  tokens = batch * s
  full_layer = [(1, tokens, h, h)] * 4 + [(1, tokens, h, i), (1, tokens, i, h),
                                          (batch * heads, s, d, s), (batch * heads, s, s, d)]
  products = []
  for _ in range(config.num_hidden_layers - (1 if pooled_only else 0)):
    products += full_layer
  if pooled_only:
    products += [(1, tokens, h, h)] * 2 + [  # keys and values of every token
        (1, batch, h, h), (batch * heads, 1, d, s), (batch * heads, 1, s, d),
        (1, batch, h, h), (1, batch, h, i), (1, batch, i, h)]
  return products + [(1, batch, h, h), (1, batch, h, num_outputs)]


def backward_matmuls(forward):
  """The two products the backward pass computes for each forward one: the gradient of
  the left factor ([m, n] x [n, k]) and of the right one ([k, m] x [m, n])."""
  return [shape for count, m, k, n in forward for shape in ((count, m, n, k), (count, k, m, n))]


def matmul_flops(products):
  return sum(2 * count * m * k * n for count, m, k, n in products)


def forward_flops_per_example(config, seq_length, num_outputs=2, pooled_only=False):
  """Multiply-add FLOPs (2 per MAC) of one example's forward pass at seq_length tokens."""
  return matmul_flops(forward_matmuls(config, seq_length, num_outputs, pooled_only))


def train_flops_per_example(config, seq_length, num_outputs=2, pooled_only=False):
  """Forward plus backward: the backward pass computes two products per forward one."""
  return 3 * forward_flops_per_example(config, seq_length, num_outputs, pooled_only)


def train_flops_of_steps(config, lengths, batch, pooled_only=False):
  """Training FLOPs of steps of `batch` examples, one step per entry of lengths (the
  sequence length that step computed)."""
  return sum(train_flops_per_example(config, n, pooled_only=pooled_only)
             for n in lengths) * batch
