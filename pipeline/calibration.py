"""--calibrate: temperature scaling fitted on the dev split (spec/calibration.py). The
temperature T minimises the dev rows' negative log-likelihood of the head's probabilities
at logits / T (softmax cross-entropy, or each column's sigmoid cross-entropy against its
0/1 label or fraction). That likelihood is convex in 1/T, so a golden-section search over
log T finds its one minimum. With windows (--doc_stride) T divides each window's logits
and the likelihood is that of the texts' aggregated outputs; the mean of several windows'
probabilities need not be convex in 1/T, so the search starts from the best point of a
grid over the range. The fit is reported beside the eval's metrics (the negative
log-likelihood and the expected calibration error before and after) and kept by the label
spec, which the model card carries to the graph of every later eval, predict and export.
Plain numpy.
"""

import logging
import math
import os

import numpy
import tensorflow.compat.v1 as tf

from data.long_texts import WindowLogits
from pipeline.card import record_label_spec
from pipeline.eval_report import calibration as reliability
from pipeline.outputs import write_eval_results
from spec.calibration import TEMPERATURE_RANGE, listed
from spec.run_errors import FlagError, NumericFault

log = logging.getLogger("run_classifier")

# Why a card's thresholds cannot follow a new temperature through windows' mean.
MEAN_THRESHOLDS_REFUSED = (
    "--calibrate would move the model card's tuned thresholds to the new temperature so "
    "that they decide as before, and no threshold does that for windows aggregated by "
    "their mean: add --tune_thresholds to tune them again at the new temperature")

SEARCH_STEPS = 80  # golden-section steps: the bracket of log T shrinks to 1e-16 of its width
GRID_POINTS = 41  # the grid over log T whose best point brackets the search
AT_BOUND = 1e-3  # a fit this close (in log T) to an end of TEMPERATURE_RANGE found none


def check_head(label_spec, asked):
  """FlagError when --calibrate is asked of a head without probabilities."""
  if asked and label_spec.calibrated_by() is None:
    raise FlagError("--calibrate scales the logits of a head with probabilities; a %s "
                    "predicts values: drop --calibrate" % label_spec.describe())


def _log_sigmoid(z):
  return -numpy.logaddexp(0.0, -z)


def softmax_nll(logits, targets, temperature):
  """The mean cross-entropy of softmax(logits / temperature) against targets: each row's
  true class (indices [rows]), or its shares of the outputs ([rows, outputs], summing
  to 1)."""
  z = numpy.asarray(logits, numpy.float64) / temperature
  top = z.max(axis=1, keepdims=True)
  log_norm = top[:, 0] + numpy.log(numpy.exp(z - top).sum(axis=1))
  targets = numpy.asarray(targets)
  if targets.ndim == 1:
    return float(numpy.mean(log_norm - z[numpy.arange(len(z)), targets]))
  return float(numpy.mean(log_norm - (targets * z).sum(axis=1)))


def sigmoid_nll(logits, targets, temperature):
  """The mean sigmoid cross-entropy of one column's logits / temperature against its
  targets (0/1 labels, or fractions in [0, 1])."""
  z = numpy.asarray(logits, numpy.float64) / temperature
  y = numpy.asarray(targets, numpy.float64)
  return float(-numpy.mean(y * _log_sigmoid(z) + (1.0 - y) * _log_sigmoid(-z)))


def fit_temperature(nll):
  """The temperature in TEMPERATURE_RANGE that minimises nll(temperature), or None when
  the minimum lies at either end of the range (the likelihood goes on falling beyond it:
  no temperature fits). A golden-section search between the neighbours of the best point
  of a grid over log T: the one minimum of a convex function of 1/T, the lowest of the
  grid's dips otherwise."""
  low, high = (math.log(t) for t in TEMPERATURE_RANGE)
  grid = numpy.linspace(low, high, GRID_POINTS)
  best = int(numpy.argmin([nll(math.exp(x)) for x in grid]))
  ratio = (math.sqrt(5.0) - 1.0) / 2.0
  a, b = grid[max(best - 1, 0)], grid[min(best + 1, GRID_POINTS - 1)]
  c, d = b - ratio * (b - a), a + ratio * (b - a)
  fc, fd = nll(math.exp(c)), nll(math.exp(d))
  for _ in range(SEARCH_STEPS):
    if fc <= fd:
      b, d, fd = d, c, fc
      c = b - ratio * (b - a)
      fc = nll(math.exp(c))
    else:
      a, c, fc = c, d, fd
      d = a + ratio * (b - a)
      fd = nll(math.exp(d))
  best = (a + b) / 2.0
  if best - low < AT_BOUND or high - best < AT_BOUND:
    return None
  return math.exp(best)


def scaled_outputs(label_spec, logits, temperatures, dtype=numpy.float32):
  """The head's probabilities at logits / temperatures (one per output), as the graph of
  a calibrated head gives them: one row per text, a text's windows' outputs aggregated
  where logits are WindowLogits."""
  if isinstance(logits, WindowLogits):
    return logits.aggregated(scaled_outputs(label_spec, logits.logits, temperatures,
                                            numpy.float64), dtype)
  z = numpy.asarray(logits, numpy.float64) / numpy.asarray(temperatures, numpy.float64)
  if label_spec.calibrated_by() == "head":
    z = numpy.exp(z - z.max(axis=1, keepdims=True))
    return (z / z.sum(axis=1, keepdims=True)).astype(dtype)
  return numpy.exp(_log_sigmoid(z)).astype(dtype)


def _held_off(p):
  """Probabilities held off 0 and 1 (by float64's smallest steps), for their logarithms."""
  return numpy.clip(p, numpy.finfo(numpy.float64).tiny, 1.0 - numpy.finfo(numpy.float64).epsneg)


def _window_nll(label_spec, logits, truth, j):
  """nll(temperature) of the texts' aggregated outputs, logits being WindowLogits: of the
  true classes (softmax), or of column j against its targets (sigmoid)."""
  if j is not None:  # (column j's windows alone, made once for every temperature tried)
    column = WindowLogits(logits.logits[:, j:j + 1], logits.counts, logits.aggregation,
                          logits.loss)

  def nll(t):
    if j is None:  # (truth: each text's shares of the outputs)
      p = scaled_outputs(label_spec, logits, [t] * label_spec.num_outputs, numpy.float64)
      return float(-numpy.mean((truth * numpy.log(_held_off(p))).sum(axis=1)))
    p = _held_off(scaled_outputs(label_spec, column, [t], numpy.float64)[:, 0])
    return float(-numpy.mean(truth * numpy.log(p) + (1.0 - truth) * numpy.log1p(-p)))
  return nll


def _problems(label_spec, examples, logits):
  """[(name, its suffix in eval_results.json, its dev targets, nll(temperature), ECE of
  outputs)]: what each temperature of the head is fitted to."""
  windows = isinstance(logits, WindowLogits)
  if label_spec.calibrated_by() == "head":  # (truth: each row's shares of the outputs, 1
    # for a row's class)
    truth = numpy.array([label_spec.output_targets(e.label) for e in examples],
                        numpy.float64).reshape(len(examples), label_spec.num_outputs)
    def ece(outputs):
      if outputs.shape[1] == 2:  # (as the evaluation report reads a binary head)
        return reliability(outputs[:, 1], truth[:, 1])["expected_calibration_error"]
      return reliability(outputs.max(axis=1), truth[numpy.arange(len(truth)),
                                                    outputs.argmax(axis=1)])[
          "expected_calibration_error"]
    nll = (_window_nll(label_spec, logits, truth, None) if windows else
           lambda t: softmax_nll(logits, truth, t))
    return [("all classes", "", truth, nll, ece)]
  labels = numpy.array([e.label for e in examples], numpy.float64).reshape(len(examples), -1)
  several = label_spec.num_outputs > 1
  return [(name, "_" + name if several else "", labels[:, j],
           _window_nll(label_spec, logits, labels[:, j], j) if windows else
           lambda t, j=j: sigmoid_nll(logits[:, j], labels[:, j], t),
           lambda outputs, j=j: reliability(outputs[:, j], labels[:, j])[
               "expected_calibration_error"])
          for j, name in enumerate(label_spec.columns)]


def calibrate(label_spec, examples, logits, where="the dev split"):
  """Fits the head's temperature on the examples' logits (the dev split's, rows in order)
  and gives it to label_spec. Returns the figures for eval_results.json: each temperature,
  and the negative log-likelihood and expected calibration error of the uncalibrated
  outputs (at the logits themselves) and the log-likelihood of the calibrated ones. A
  column whose dev targets are all one value, or whose fit ends at a bound of the range,
  keeps no temperature (1), and is reported as null."""
  if not isinstance(logits, WindowLogits):
    logits = numpy.asarray(logits, numpy.float64)
  if len(logits) != len(examples):
    raise ValueError("%d rows of logits for %d examples" % (len(logits), len(examples)))
  if len(examples) == 0 or not numpy.isfinite(getattr(logits, "logits", logits)).all():
    raise NumericFault("--calibrate: the logits of %s are %s: nothing to fit a temperature "
                       "to" % (where, "not all finite numbers" if len(examples) else "none"))
  fitted, figures = {}, {}
  problems = _problems(label_spec, examples, logits)
  uncalibrated = scaled_outputs(label_spec, logits, [1.0] * label_spec.num_outputs)
  for name, suffix, targets, nll, ece in problems:
    figures["nll_uncalibrated" + suffix] = nll(1.0)
    figures["ece_uncalibrated" + suffix] = ece(uncalibrated.astype(numpy.float64))
    one_value = bool((targets == targets[:1]).all())  # (every row one class, or one value)
    temperature = None if one_value else fit_temperature(nll)
    figures["temperature" + suffix] = temperature
    if temperature is None:
      log.warning("--calibrate: no temperature fits %s on %s (%s); left uncalibrated", name,
                  where, "its rows are all of one label" if one_value else
                  "the log-loss falls on beyond [%g, %g]: the model separates its rows "
                  "completely, or its logits do not tell them apart" % TEMPERATURE_RANGE)
      continue
    fitted[name] = temperature
    figures["nll_calibrated" + suffix] = nll(temperature)
  if label_spec.calibrated_by() == "head":
    label_spec.set_temperature(fitted.get("all classes"))
  else:
    label_spec.set_temperature(fitted or None)
  log.info("temperature fitted on %s: %s", where, "none" if label_spec.temperature is None
           else listed(label_spec.temperature))
  return figures


def calibration_errors(label_spec, examples, outputs):
  """{"ece_calibrated<suffix>": the expected calibration error} of the calibrated outputs
  of the examples, for each temperature label_spec has."""
  temperature = label_spec.temperature
  if temperature is None:
    return {}
  outputs = numpy.asarray(outputs, numpy.float64)
  return {"ece_calibrated" + suffix: ece(outputs)  # (no logits: no likelihood is asked)
          for name, suffix, _, _, ece in _problems(label_spec, examples, logits=None)
          if not isinstance(temperature, dict) or name in temperature}


def calibrate_after_eval(evaluator, dev, checkpoint, results, output_dir, retune=False):
  """Fits the temperature on the dev split's logits at checkpoint (the one results
  evaluated), adds its figures to results and eval_results.json, and gives it to the
  evaluator's label spec (this run's later reads of the dev outputs, its predictions and
  its export use it) and the folder's model card. The dev split is then predicted again,
  through the graph that divides by the temperature: what the thresholds are tuned on and
  the report reads are the outputs every later use of the model gives. The card's
  thresholds move with the temperature (moved_thresholds), unless retune: they are then
  tuned again after this."""
  label_spec = evaluator.label_spec
  earlier = label_spec.temperatures()  # (a card's earlier fit: this one replaces it)
  label_spec.set_temperature(None)
  figures = calibrate(label_spec, dev.examples, evaluator.dev_logits(dev, checkpoint))
  if earlier != label_spec.temperatures():
    evaluator.forget_dev_outputs()
    if label_spec.thresholds and not retune:
      moved_thresholds(label_spec, earlier, dev.windowing and dev.windowing.aggregation)
  figures.update(calibration_errors(label_spec, dev.examples,
                                    evaluator.dev_outputs(dev, checkpoint)))
  results.update(figures)
  write_eval_results(output_dir, results)
  record_label_spec(output_dir, label_spec, "temperature")
  exports = os.path.join(output_dir, "export")
  if tf.io.gfile.isdir(exports) and tf.io.gfile.listdir(exports):
    log.warning("the exports in %s were made before this calibration: each keeps the card "
                "and graph it was made with; export again (--do_export) for one that "
                "divides by the new temperature", exports)


def moved_thresholds(label_spec, earlier, aggregation=None):
  """Gives label_spec (calibrated anew) the thresholds that decide as its card's did at
  the earlier temperatures (None: none): a threshold p of a sigmoid column, or of a
  binary head's second class, is a logit of T log(p / (1 - p)), the same logit at the new
  temperature. (--tune_thresholds, when asked, tunes them again after this.) The windows'
  aggregation (None: no windows): the first window's output, or the max, moves with its
  logit as one window does; a mean of several windows' outputs has no threshold that
  decides as before, which is refused."""
  from pipeline.thresholds import decisions_of
  if aggregation == "mean":
    raise FlagError(MEAN_THRESHOLDS_REFUSED)
  new = label_spec.temperatures() or [1.0] * label_spec.num_outputs
  old = earlier or [1.0] * label_spec.num_outputs
  moved = {}
  for name, index in decisions_of(label_spec):
    p = label_spec.threshold(name)
    if name not in label_spec.thresholds or p <= 0.0 or p >= 1.0:
      moved[name] = p
      continue
    # (a binary softmax's second probability is the sigmoid of the logits' difference)
    logit = math.log(p / (1.0 - p)) * old[index] / new[index]
    moved[name] = float(numpy.exp(_log_sigmoid(logit)))
  log.info("the model card's thresholds move with the temperature, deciding as before: %s",
           ", ".join("%s %.4g -> %.4g" % (n, label_spec.threshold(n), moved[n])
                     for n in sorted(moved)))
  label_spec.set_thresholds({n: moved[n] for n in label_spec.thresholds})
  lost = sorted(n for n in label_spec.thresholds if 0.0 < moved[n] < 1.0 and
                numpy.float32(moved[n]) in (numpy.float32(0.0), numpy.float32(1.0)))
  if lost:
    log.warning("the moved threshold of %s is a probability that float32 outputs round to "
                "0 or 1: rows near it can no longer be told apart, so they may be decided "
                "otherwise than before; tune again (--tune_thresholds)", ", ".join(lost))
