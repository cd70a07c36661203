"""What an exported SavedModel and its readers agree on: the signature, its tensors and
the assets that make the export enough to predict from text.

modeling/export.py writes it; serving/predictor.py and TF Serving read it.
"""

SERVE_TAG = "serve"
SIGNATURE_NAME = "serving_default"
# int32 [batch, length]; any length up to the model card's max_seq_length, so a batch is
# padded only to its longest text.
INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")
CARD_ASSET = "model_card.json"
VOCAB_ASSET = "vocab.txt"


def output_name(label_spec):
  """The signature's one output [batch, num_outputs], named for what it holds: per-class
  (softmax) or per-column (sigmoid) probabilities, or a regression head's values."""
  return "values" if label_spec.kind == "regression" else "probabilities"
