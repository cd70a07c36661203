"""Data side of the pipeline: files -> InputExamples -> InputFeatures -> TFRecords -> input_fn.

Nothing in this package imports `modeling`; `pipeline/` wires the two together.
"""
