"""The int8 ONNX model's quality, measured when it is exported: the held-out ROC-AUC of
the export's fp32 and int8 models (each in onnxruntime, through the ONNX predictor that
serves them) on the dev split the run evaluated, written beside them as
int8_quality.json. A server serves the int8 model only where that file says it keeps
the fp32 model's quality (serving/onnx_predictor.int8_problem)."""

import json
import logging
import os

import numpy as np

from modeling.statistics import roc_auc
from spec import signature

log = logging.getLogger(__name__)


def held_out_auc(label_spec, examples, outputs):
  """The mean ROC-AUC of a head's outputs on labelled examples: of a two-output softmax
  head's second output; else of each output, its positives the rows whose target for it
  (LabelSpec.output_targets: 1 for a row's class) is at least 0.5. None where it is
  undefined (a head of values; an output whose rows are all of one kind)."""
  by = label_spec.calibrated_by()
  outputs = np.asarray(outputs, np.float64)
  if by is None or not len(examples):
    return None
  targets = np.array([label_spec.output_targets(e.label) for e in examples], np.float64)
  columns = [1] if by == "head" and outputs.shape[1] == 2 else range(outputs.shape[1])
  aucs = [roc_auc(outputs[:, j], targets[:, j] >= 0.5) for j in columns]
  return None if np.isnan(aucs).any() else float(np.mean(aucs))


def measure(folder, label_spec, examples):
  """The figures of int8_quality.json for the ONNX folder (its files and manifest written):
  each model's held-out ROC-AUC on examples (the dev split's), or None when the head has
  none."""
  from serving.onnx_predictor import OnnxPredictor
  figures = {"split": "dev", "rows": len(examples), "metric": "roc_auc",
             "bound": signature.INT8_AUC_BOUND}
  for name, int8 in (("fp32", False), ("int8", True)):
    predictor = OnnxPredictor(folder, int8=int8)
    figures[name] = held_out_auc(label_spec, examples, predictor.predict_outputs(examples))
  return figures


def write(folder, label_spec, examples):
  """Writes int8_quality.json into the ONNX folder when the run evaluated (examples: the
  dev split's; None: it did not, and the int8 model is then not served)."""
  if examples is None:
    log.info("ONNX: the int8 model's held-out quality is not measured (no dev split was "
             "evaluated with this export), so a server will not serve it; export in a run "
             "with --do_eval to measure it")
    return
  figures = measure(folder, label_spec, examples)
  with open(os.path.join(folder, signature.ONNX_INT8_QUALITY), "w") as f:
    f.write(json.dumps(figures, indent=2, sort_keys=True) + "\n")
  if figures["fp32"] is None:
    log.info("ONNX: no held-out ROC-AUC measures this head on the %d dev rows, so a "
             "server will not serve its int8 model", len(examples))
    return
  log.info("ONNX: held-out ROC-AUC on the %d dev rows: fp32 %.4f, int8 %.4f (%s)",
           len(examples), figures["fp32"], figures["int8"],
           "a server may serve it" if signature.int8_keeps_quality(figures) else
           "more than %g below: a server will not serve it" % signature.INT8_AUC_BOUND)

