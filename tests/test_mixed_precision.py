"""float16/bfloat16 graphs build and train on CPU, and dynamic loss scaling behaves."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import THREE_CLASSES, model_features, small_config
from modeling.bert import BertModel
from modeling.loss_scale import DynamicLossScale
from modeling.model_fn import ModelSettings, model_fn_builder


def test_loss_scale_halves_on_overflow_and_grows_after_good_steps():
  with tf.Graph().as_default():
    grad = tf.placeholder(tf.float32, [3])
    scale = DynamicLossScale(initial_scale=1024.0, growth_interval=3, minimum_scale=256.0)
    (unscaled,), finite = scale.unscale([grad])
    update = scale.update(finite)
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())

      def step(values):
        out = session.run([unscaled, finite], {grad: values})
        session.run(update, {grad: values})
        return out, session.run([scale.scale, scale.good_steps])

      (values, ok), state = step([1024.0, 2048.0, 0.0])
      assert ok and values.tolist() == [1.0, 2.0, 0.0] and state == [1024.0, 1]
      (_, ok), state = step([np.inf, 1.0, 1.0])
      assert not ok and state == [512.0, 0]
      (_, ok), state = step([np.nan, 1.0, 1.0])
      assert not ok and state == [256.0, 0]
      (_, ok), state = step([np.nan, 1.0, 1.0])
      assert state == [256.0, 0]  # never below the minimum
      for expected_good in (1, 2):
        assert step([1.0, 1.0, 1.0])[1] == [256.0, expected_good]
      assert step([1.0, 1.0, 1.0])[1] == [512.0, 0]  # grew after 3 good steps


def _train_steps(precision, fused_kernels=False):
  config = small_config()
  with tf.Graph().as_default():
    features = model_features(config)
    model_fn = model_fn_builder(config, THREE_CLASSES, ModelSettings(
        learning_rate=1e-3, num_train_steps=10, precision=precision,
        fused_kernels=fused_kernels))
    spec = model_fn(features, None, tf.estimator.ModeKeys.TRAIN, {})
    names = sorted((v.name, v.dtype.base_dtype.name) for v in tf.trainable_variables())
    ops = tf.get_default_graph().get_operations()
    # (The op types that compute in bfloat16: the precision is really the graph's.)
    _BF16_OPS[(precision, fused_kernels)] = sorted({
        op.type for op in ops if op.outputs and op.outputs[0].dtype == tf.bfloat16})
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      before = session.run(tf.trainable_variables())
      loss, _ = session.run([spec.loss, spec.train_op])
      after = session.run(tf.trainable_variables())
      step = session.run(tf.train.get_global_step())
  return names, loss, before, after, step


_FLOAT32_NAMES = []
_BF16_OPS = {}


@pytest.mark.parametrize("precision, fused_kernels", [
    ("float16", False), ("bfloat16", False), ("bfloat16", True)])
def test_low_precision_keeps_float32_variables_and_trains(precision, fused_kernels):
  if not _FLOAT32_NAMES:  # (the float32 model's variables, built once for both precisions)
    _FLOAT32_NAMES.append(_train_steps("float32")[0])
  names32 = _FLOAT32_NAMES[0]
  names, loss, before, after, step = _train_steps(precision, fused_kernels)
  # Same checkpoint variables, all float32 master weights (plus the loss-scale state).
  assert names == names32 and {d for _, d in names} == {"float32"}
  assert np.isfinite(loss) and step == 1
  assert all(not np.array_equal(b, a) for b, a in zip(before, after))
  computed = _BF16_OPS[(precision, fused_kernels)]
  if precision == "bfloat16":
    assert {"MatMul", "BatchMatMulV2"} <= set(computed), computed
  if fused_kernels:  # the kernels take and give bfloat16; no elementwise op of TF's does,
    # but the sums of gradients and the pooler's dense layer (one row of each text)
    kernels = {"BertBiasGelu", "BertDropoutAddNorm", "BertAttentionSoftmax", "BertSplitHeads",
               "BertMergeHeads"}
    kernels |= {name + "Grad" for name in kernels - {"BertMergeHeads"}}
    moves = {"Cast", "Reshape", "Identity", "StridedSlice", "StridedSliceGrad", "AddN"}
    pooler = {"BiasAdd", "BiasAddGrad", "Tanh", "TanhGrad"}
    assert kernels <= set(computed), computed
    # (TF 1.15's batched matmul gradient sums over broadcast axes, none here: its Sum)
    matmuls = {"MatMul", "BatchMatMulV2", "Sum"}
    assert set(computed) <= kernels | moves | pooler | matmuls, computed


def test_float16_encoder_is_close_to_float32():
  config = small_config()
  rng = np.random.RandomState(0)
  ids = tf.constant(rng.randint(0, config.vocab_size, (2, 9)), tf.int32)
  with tf.Graph().as_default():
    ids = tf.constant(rng.randint(0, config.vocab_size, (2, 9)), tf.int32)
    with tf.variable_scope("m"):
      full = BertModel(config, False, ids)
    with tf.variable_scope("m", reuse=True):
      half = BertModel(config, False, ids, compute_dtype=tf.float16)
    assert half.get_pooled_output().dtype == tf.float32
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      a, b = session.run([full.get_sequence_output(), half.get_sequence_output()])
  np.testing.assert_allclose(b, a, atol=3e-2)
  assert np.abs(a - b).max() > 0  # really computed in half precision


def test_bf16_instructions_are_read_from_the_cpu_s_flags(tmp_path):
  from pipeline.machine import bf16_instructions
  info = tmp_path / "cpuinfo"
  info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16 avx512_bf16\n"
                  "processor\t: 1\nflags\t\t: fpu\n")
  assert bf16_instructions(str(info)) == ["avx512_bf16", "amx_bf16"]
  info.write_text("flags\t\t: fpu avx2 avx512f avx512_bf16x\n")
  assert bf16_instructions(str(info)) == []
  assert bf16_instructions(str(tmp_path / "none")) == []


def test_bfloat16_is_chosen_on_a_cpu_that_computes_in_it_unless_told_otherwise():
  """Each case: what the machine has and what was given -> the precision and the log."""
  from pipeline.build import with_chosen_precision
  from spec.config import RunConfig
  units = ["avx512_bf16", "amx_bf16"]
  chosen = ("encoder precision: bfloat16 in training, chosen: this CPU has AVX512_BF16, "
            "AMX_BF16 and TensorFlow computes in it (float32 master weights and loss; "
            "float32 in eval and predict, as the exports; --use_bf16=false keeps float32)")
  no_amx = ("the fused kernels' bfloat16 matmul: the fused kernels were built without AMX "
            "or AVX512_BF16 (this CPU or compiler has neither)")
  tf1 = ("TF 1.15.5's CPU kernels have no oneDNN: they convert bfloat16 to float32 and "
         "back; " + no_amx)
  off = "TF_ENABLE_ONEDNN_OPTS=0 turns TensorFlow's oneDNN kernels off; " + no_amx
  own = chosen.replace("TensorFlow computes in it", "the fused kernels compute in it (their "
                       "own matmul, on AMX or AVX512_BF16; TensorFlow's CPU kernels here "
                       "would emulate it)")
  given_bf16 = ("encoder precision: bfloat16 in training (--use_bf16), float32 in eval and "
                "predict")
  emulated = ("--use_bf16 on this CPU: %s, so bfloat16 is emulated and slower than float32 "
              "(it trains in bfloat16 all the same)")
  no_units = "this CPU has no bfloat16 matmul instructions (AVX512_BF16, AMX_BF16)"
  cases = [  # (given options, instructions, TF, GPUs, environment, cluster) -> expected
      ({}, units, "2.15.1", [], {}, None, True, chosen, None),
      ({}, [], "2.15.1", [], {}, None, False,
       "encoder precision: float32 (this CPU has no bfloat16 matmul instructions)", None),
      ({}, units, "1.15.5", [], {}, None, False, "encoder precision: float32 (%s)" % tf1, None),
      ({}, units, "2.15.1", [], {"TF_ENABLE_ONEDNN_OPTS": "0"}, None, False,
       "encoder precision: float32 (%s)" % off, None),
      ({"use_bf16": False}, units, "2.15.1", [], {}, None, False,
       "encoder precision: float32 (--use_bf16=false)", None),
      ({"use_xla": True}, units, "2.15.1", [], {}, None, False,
       "encoder precision: float32 (--use_xla)", None),
      ({"fused_kernels": "on"}, units, "2.15.1", [], {}, None, True, chosen, None),
      ({"bert_hub_module_handle": "https://tfhub.dev/x"}, units, "2.15.1", [], {}, None, False,
       "encoder precision: float32 (--bert_hub_module_handle)", None),
      ({}, units, "2.15.1", [], {}, "a cluster", False,
       "encoder precision: float32 (a cluster (TF_CONFIG))", None),
      ({}, units, "2.15.1", ["GPU:0"], {}, None, False,
       "encoder precision: float32 (a GPU that TensorFlow sees)", None),
      ({"use_fp16": True}, units, "2.15.1", [], {}, None, False,
       "encoder precision: float16 (--use_fp16)", None),
      ({"use_tpu": True, "use_bf16": True}, [], "2.15.1", [], {}, None, True,
       "encoder precision on the TPU: bfloat16 (--use_bf16)", None),
      ({"use_tpu": True}, units, "2.15.1", [], {}, None, False,
       "encoder precision on the TPU: float32 (no --use_bf16)", None),
      ({"use_bf16": True}, units, "2.15.1", [], {}, None, True, given_bf16, None),
      ({"use_bf16": True}, [], "2.15.1", [], {}, None, True, given_bf16, emulated % no_units),
      ({"use_bf16": True}, [], "2.15.1", ["GPU:0"], {}, None, True, given_bf16, None),
      ({"use_bf16": True}, units, "1.15.5", [], {}, None, True, given_bf16, emulated % tf1),
      # (TF 1.15, or oneDNN off, with the fused kernels' matmul on AMX or AVX512_BF16)
      ({}, units, "1.15.5", [], {}, None, True, own, None, None),
      ({}, units, "2.15.1", [], {"TF_ENABLE_ONEDNN_OPTS": "0"}, None, True, own, None, None),
      ({"use_bf16": True}, units, "1.15.5", [], {}, None, True, given_bf16, None, None),
      ({"use_bf16": False}, units, "1.15.5", [], {}, None, False,
       "encoder precision: float32 (--use_bf16=false)", None, "never asked"),
      ({}, units, "1.15.5", [], {}, None, False, "encoder precision: float32 (TF 1.15.5's "
       "CPU kernels have no oneDNN: they convert bfloat16 to float32 and back; the fused "
       "kernels (which multiply bfloat16 on AMX or AVX512_BF16) are off: "
       "--fused_kernels=off)", None,
       "the fused kernels (which multiply bfloat16 on AMX or AVX512_BF16) are off: "
       "--fused_kernels=off"),
      ({"do_train": False}, units, "2.15.1", [], {}, None, False,
       "encoder precision: float32 (off a TPU, eval and predict compute in float32, as the "
       "exports do)", None),
  ]
  for case in cases:
    (given, instructions, version, gpus, environ, cluster, bf16, line, warning), own_matmul = (
        case[:9], case[9] if len(case) > 9 else no_amx)
    c = RunConfig(given=frozenset(given), **dict(dict(do_train=True), **given))
    got, said, warned = with_chosen_precision(c, cluster, instructions, version, gpus, environ,
                                              own_matmul)
    assert (got.device.use_bf16, said, warned) == (bf16, line, warning), given
    assert got.given == c.given


def test_a_run_on_a_bfloat16_cpu_trains_in_bfloat16_and_predicts_as_its_export(
    tmp_path, tiny_checkpoint, monkeypatch):
  """This machine's CPU said to have AMX (and TF_ENABLE_ONEDNN_OPTS unset): TF 2 trains
  in bfloat16 through oneDNN, TF 1.15 by the fused kernels' own matmul (said to run on
  AMX: on a CPU with neither AMX nor AVX512_BF16, the same product in float32), and the
  run summary records it.
  Its predictions are those of its float32 export (eval and predict compute in float32),
  and differ from those of the same training in float32 by bfloat16's rounding only."""
  import csv
  import json
  import os
  from conftest import TINY_JIGSAW_RUN, run_with_log
  from data.features import InputExample
  from pipeline import machine
  from serving.predictor import Predictor
  from spec.config import RunConfig
  from pipeline import build
  monkeypatch.setattr(machine, "bf16_instructions", lambda cpuinfo=None: ["amx_bf16"])
  monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
  monkeypatch.setattr(build, "own_matmul_problem", lambda *args: None)
  computes = ("TensorFlow computes in it" if tf.__version__.startswith("2.") else
              "the fused kernels compute in it (their own matmul, on AMX or AVX512_BF16")

  def predictions(output_dir):
    with open(os.path.join(output_dir, "test_results.tsv")) as f:
      return np.array([[float(v) for v in r[1:3]]
                       for r in list(csv.reader(f, delimiter="\t"))[1:]])
  runs = {}
  for name, given in (("bf16", {}), ("fp32", {"use_bf16": False})):
    output_dir = str(tmp_path / name)
    _, log = run_with_log(RunConfig(
        init_checkpoint=tiny_checkpoint, output_dir=output_dir, do_train=True,
        do_predict=True, do_export=name == "bf16", given=frozenset(given),
        **dict(TINY_JIGSAW_RUN, **given)))
    runs[name] = (output_dir, log, predictions(output_dir))
  output_dir, log, bf16 = runs["bf16"]
  assert ("encoder precision: bfloat16 in training, chosen: this CPU has AMX_BF16 and "
          + computes) in log
  assert "fused CPU kernels: on" in log
  assert json.load(open(os.path.join(output_dir, "run_summary.json")))["flags"]["use_bf16"]
  assert "encoder precision: float32 (--use_bf16=false)" in runs["fp32"][1]
  import pandas
  from conftest import JIGSAW
  test = pandas.read_csv(os.path.join(JIGSAW, "test.csv"))
  with Predictor(output_dir) as predictor:
    exported = np.array(predictor.predict_outputs(
        [InputExample(i, t) for i, t in enumerate(test.comment_text)]))
  np.testing.assert_allclose(bf16, exported, atol=1e-5)
  difference = np.abs(bf16 - runs["fp32"][2]).max()
  assert np.isfinite(bf16).all() and bf16.shape == (33, 2)
  assert 0 < difference < 0.05, difference
