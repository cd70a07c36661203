"""Model side of the pipeline: BERT encoder, classifier head, optimizer, model_fn.

The encoder knows only tensors; the head and loss, the optimizer and model_fn are
separate layers on top of it.
"""
