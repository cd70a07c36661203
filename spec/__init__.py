"""What the layers agree on, in plain Python (no TensorFlow): the run's options and
RunConfig, the label specifications, the model card, the task names, the export's
signature, TF_CONFIG's cluster, the cores this process may use, and FlagError.

Every other package may import this one; it imports none of them.
"""
