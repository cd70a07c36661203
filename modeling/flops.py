"""Matrix-multiply FLOPs of BERT, the usual yardstick for achieved throughput."""


def forward_flops_per_example(config, seq_length, num_outputs=2, pooled_only=False):
  """Multiply-add FLOPs (2 per MAC) of one example's forward pass at seq_length tokens.

  Per layer and token: Q, K, V and output projections (4 H^2 MACs), the
  feed-forward pair (2 H I), and attention scores and context (2 S H). Plus the
  pooler and the head. Embedding gathers, softmax and LayerNorm are not matmuls
  and are left out, as is customary. With pooled_only (BertModel's classifier
  mode) the last layer projects keys and values for every token but computes
  everything else for the first token only.
  """
  h, i, s = config.hidden_size, config.intermediate_size, seq_length
  per_layer = s * (4 * h * h + 2 * h * i) + 2 * s * s * h
  full_layers = config.num_hidden_layers
  macs = h * h + h * num_outputs
  if pooled_only:
    full_layers -= 1
    macs += s * 2 * h * h + (2 * h * h + 2 * h * i) + 2 * s * h
  macs += full_layers * per_layer
  return 2 * macs


def train_flops_per_example(config, seq_length, num_outputs=2, pooled_only=False):
  """Forward plus backward: the backward pass costs about twice the forward."""
  return 3 * forward_flops_per_example(config, seq_length, num_outputs, pooled_only)
