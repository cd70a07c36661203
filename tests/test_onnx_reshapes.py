"""The rewrite that keeps a converted model's rows unflattened (pipeline/onnx_reshapes.py).
The encoder's dense layers as TensorFlow writes them (rows flattened, then reshaped back to
a shape computed at run time) lose every shape computation and give the same outputs on
inputs of every shape, one token and one text included; a model where a flattened row
tensor is read other than row by row, or whose shape is read elsewhere, is left as it
was; the constant targets restore each probe's shape or are refused."""

import numpy as np
import pytest

pytestmark = pytest.mark.tf2_only  # (onnx and tf2onnx are in the TF 2.15 environment)

# The shapes the rewritten models are checked on: more than the probes, and none of them.
SHAPES = [(1, 1), (2, 1), (1, 9), (4, 6), (3, 7), (6, 2)]


def run(model, ids):
  import onnxruntime
  session = onnxruntime.InferenceSession(model.SerializeToString(),
                                         providers=["CPUExecutionProvider"])
  return session.run(None, {"ids": ids})


def test_the_encoders_dense_layers_as_tf2onnx_writes_them_lose_their_shape_arithmetic():
  """Two dense layers of the encoder (modeling/bert.py: rows flattened for the product, a
  GELU between, the rows restored and split into heads from run-time shapes), converted
  as the export converts: no Shape, Slice or Concat is left, and the outputs are the
  same on every shape."""
  import onnx
  import tensorflow.compat.v1 as tf
  from modeling import bert
  from pipeline.onnx_reshapes import keep_rows_unflattened
  from test_onnx_fusion import converted
  rng = np.random.RandomState(0)
  table = rng.randn(50, 8).astype(np.float32)
  with tf.Graph().as_default() as graph:
    ids = tf.placeholder(tf.int32, [None, None], name="ids")
    x = tf.gather(table, ids)
    hidden = bert.dense(x, 12, "intermediate", tf.truncated_normal_initializer(0.5),
                        activation=bert.gelu_exact)
    out = bert.dense(hidden, 8, "output", tf.truncated_normal_initializer(0.5)) + x
    shape = tf.shape(out)
    heads = tf.transpose(tf.reshape(out, [shape[0], shape[1], 2, 4]), [0, 2, 1, 3])
    tf.identity(heads, name="y")
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      model = converted(session, graph, "ids")
  before = onnx.ModelProto.FromString(model.SerializeToString())
  ops = [node.op_type for node in model.graph.node]
  assert ops.count("Shape") >= 2 and "Concat" in ops  # (what the rewrite is for)
  assert keep_rows_unflattened(model) >= 3
  onnx.checker.check_model(model)
  ops = [node.op_type for node in model.graph.node]
  assert not {"Shape", "Slice", "Concat"} & set(ops), ops
  assert ops.count("Reshape") == 1  # (the heads' split, to a constant [0, 0, 2, 4])
  for batch, length in SHAPES:
    ids_in = rng.randint(0, 50, [batch, length]).astype(np.int32)
    (got,), (wanted,) = run(model, ids_in), run(before, ids_in)
    assert got.shape == wanted.shape == (batch, 2, length, 4)
    np.testing.assert_allclose(got, wanted, atol=1e-5, rtol=1e-5)


def rows_graph(breaks=None):
  """ids [batch, length] -> x = table[ids] [batch, length, 4] -> x flattened to [-1, 4] ->
  MatMul, Add, Erf, Mul -> restored to Shape(x)[:2] + [6] as TensorFlow restores it (a
  Cast, Slice and Concat of Shape); breaks: what makes the rows a rewrite must leave."""
  from onnx import TensorProto, helper, numpy_helper
  rng = np.random.RandomState(1)
  constants = {"table": rng.randn(30, 4), "weights": rng.randn(4, 6), "bias": rng.randn(6),
               "flat": np.array([-1, 4], np.int64), "units": np.array([6], np.int64),
               "start": np.array([0], np.int64), "end": np.array([2], np.int64),
               "wide": rng.randn(1, 1, 6)}
  nodes = [helper.make_node("Gather", ["table", "ids"], ["x"]),
           helper.make_node("Reshape", ["x", "flat"], ["rows"]),
           helper.make_node("MatMul", ["rows", "weights"], ["product"]),
           helper.make_node("Add", ["product", "bias"], ["biased"]),
           helper.make_node("Erf", ["biased"], ["erf"]),
           helper.make_node("Mul", ["biased", "erf"], ["activated"]),
           helper.make_node("Shape", ["x"], ["x_shape"]),
           helper.make_node("Slice", ["x_shape", "start", "end"], ["lead"]),
           helper.make_node("Concat", ["lead", "units"], ["target"], axis=0),
           helper.make_node("Reshape", ["activated", "target"], ["y"])]
  outputs = ["y"]
  if breaks == "a row tensor an output":
    outputs.append("biased")
  elif breaks == "a row tensor read across rows":
    nodes.append(helper.make_node("ReduceSum", ["biased"], ["summed"], keepdims=0))
    outputs.append("summed")
  elif breaks == "the rows' shape read elsewhere":
    nodes.append(helper.make_node("Shape", ["product"], ["rows_shape"]))
    outputs.append("rows_shape")
  elif breaks == "a constant of more axes":
    nodes[3] = helper.make_node("Add", ["product", "wide"], ["biased"])
  elif breaks == "a transpose of the rows":
    nodes[4] = helper.make_node("Transpose", ["biased"], ["erf_t"])
    nodes.insert(5, helper.make_node("Transpose", ["erf_t"], ["erf"]))
  elif breaks == "a layer norm with unnamed outputs":  # (a row-by-row node, kept)
    constants.update(gamma=np.ones(6), beta=np.zeros(6))
    nodes[4] = helper.make_node("LayerNormalization", ["biased", "gamma", "beta"],
                                ["erf", "", "inverse_deviation"])
  elif breaks == "a constant reshaped to its own shape":  # (not a row tensor: kept)
    nodes += [helper.make_node("Shape", ["bias"], ["bias_shape"]),
              helper.make_node("Reshape", ["bias", "bias_shape"], ["bias_again"])]
    outputs.append("bias_again")
  elif breaks == "a branch naming a tensor as the rewrite would":
    branch = helper.make_graph(
        [helper.make_node("Constant", [], ["y/constant_shape"],
                          value=numpy_helper.from_array(np.float32(2)))], "branch", [],
        [helper.make_tensor_value_info("y/constant_shape", TensorProto.FLOAT, [])])
    nodes += [helper.make_node("Constant", [], ["yes"],
                               value=numpy_helper.from_array(np.array(True))),
              helper.make_node("If", ["yes"], ["two"], then_branch=branch,
                               else_branch=branch)]
    outputs.append("two")
  elif breaks == "a softmax along axis 1":  # (the last of the rows' matrix, not of the rows)
    nodes[4] = helper.make_node("Softmax", ["biased"], ["erf"], axis=1)
  elif breaks == "the flattening's shape read":
    nodes.append(helper.make_node("Shape", ["rows"], ["rows_shape"]))
    outputs.append("rows_shape")
  elif breaks == "a shape from the ids' values":
    constants.update(zero=np.array(0, np.int64), one=np.array(1, np.int64))
    nodes += [helper.make_node("ReduceMax", ["ids"], ["largest"], keepdims=0),
              helper.make_node("Cast", ["largest"], ["largest64"], to=TensorProto.INT64),
              helper.make_node("Add", ["largest64", "one"], ["count"]),
              helper.make_node("Range", ["zero", "count", "one"], ["counted"]),
              helper.make_node("Shape", ["counted"], ["counted_shape"]),
              helper.make_node("Concat", ["counted_shape", "units_one"], ["column"], axis=0),
              helper.make_node("Reshape", ["counted", "column"], ["values_column"])]
    constants["units_one"] = np.array([1], np.int64)
    outputs.append("values_column")
  inputs = [helper.make_tensor_value_info(
      "ids", TensorProto.INT32, [3, "length"] if breaks == "an input of fixed size" else
      ["batch", "length"])]
  if breaks == "a second input of its own length":
    inputs.append(helper.make_tensor_value_info("other", TensorProto.INT32, ["b", "l"]))
    nodes.append(helper.make_node("Cast", ["other"], ["other_float"], to=TensorProto.FLOAT))
    outputs.append("other_float")
  graph = helper.make_graph(
      nodes, "rows", inputs,
      [helper.make_tensor_value_info(name, TensorProto.INT64, [2])
       if name == "rows_shape" else helper.make_tensor_value_info(
           name, TensorProto.INT64 if name == "values_column" else TensorProto.FLOAT, [])
       for name in outputs],
      [numpy_helper.from_array(value.astype(np.float32) if value.dtype == np.float64 else
                               value, name) for name, value in constants.items()])
  return helper.make_model(graph, opset_imports=[helper.make_opsetid(
      "", 12 if breaks == "operator set 12" else 17)])


@pytest.mark.parametrize("variant", [
    "a layer norm with unnamed outputs", "a constant reshaped to its own shape",
    "a branch naming a tensor as the rewrite would"])
def test_rows_beside_other_nodes_are_rewritten_and_the_rest_kept(variant):
  import onnx
  from pipeline.onnx_reshapes import keep_rows_unflattened
  model = rows_graph(variant)
  before = onnx.ModelProto.FromString(model.SerializeToString())
  assert keep_rows_unflattened(model) == 2
  onnx.checker.check_model(model)
  assert "Concat" not in {node.op_type for node in model.graph.node}
  for batch, length in SHAPES:
    ids = np.random.RandomState(batch).randint(0, 30, [batch, length]).astype(np.int32)
    for got, wanted in zip(run(model, ids), run(before, ids)):
      np.testing.assert_allclose(got, wanted, atol=1e-6, rtol=1e-6)


def test_flattened_rows_are_kept_and_the_computed_target_goes():
  import onnx
  from pipeline.onnx_reshapes import keep_rows_unflattened
  model = rows_graph()
  before = onnx.ModelProto.FromString(model.SerializeToString())
  assert keep_rows_unflattened(model) == 2  # (the flattening removed; the output's target)
  assert [node.op_type for node in model.graph.node] == ["Gather", "MatMul", "Add", "Erf",
                                                         "Mul", "Reshape"]
  from pipeline.onnx_fusion import constant_values
  assert constant_values(model.graph)[model.graph.node[-1].input[1]].tolist() == [0, 0, 6]
  assert not {"flat", "units", "start", "end"} & {t.name for t in model.graph.initializer}
  for batch, length in SHAPES:
    ids = np.random.RandomState(batch).randint(0, 30, [batch, length]).astype(np.int32)
    (got,), (wanted,) = run(model, ids), run(before, ids)
    assert got.shape == (batch, length, 6)
    np.testing.assert_allclose(got, wanted, atol=1e-6, rtol=1e-6)
  assert keep_rows_unflattened(model) == 0  # (once)


@pytest.mark.parametrize("breaks", [
    "a row tensor an output", "a row tensor read across rows", "the rows' shape read elsewhere",
    "a constant of more axes", "a transpose of the rows", "an input of fixed size",
    "operator set 12", "a softmax along axis 1", "the flattening's shape read",
    "a shape from the ids' values", "a second input of its own length"])
def test_rows_read_other_than_row_by_row_are_left_as_they_were(breaks):
  from pipeline.onnx_reshapes import keep_rows_unflattened
  model = rows_graph(breaks)
  before = model.SerializeToString()
  assert keep_rows_unflattened(model) == 0
  assert model.SerializeToString() == before


@pytest.mark.parametrize("ins,outs,wanted", [
    ([[3, 7, 8], [5, 11, 8], [1, 1, 8]], [[3, 7, 2, 4], [5, 11, 2, 4], [1, 1, 2, 4]],
     [0, 0, 2, 4]),
    ([[21, 8], [55, 8], [1, 8]], [[3, 7, 8], [5, 11, 8], [1, 1, 8]], None),  # (two unknowns)
    ([[3, 7, 8], [5, 11, 8], [1, 1, 8]], [[21, 8], [55, 8], [1, 8]], [-1, 8]),
    ([[3, 7, 2, 4], [5, 11, 2, 4], [1, 1, 2, 4]], [[3, 7, 8], [5, 11, 8], [1, 1, 8]],
     [0, 0, 8]),
    ([[3, 7], [5, 11], [1, 1]], [[7, 3], [11, 5], [1, 1]], None),  # (a transpose's shape)
])
def test_a_constant_target_restores_every_probes_shape_or_there_is_none(ins, outs, wanted):
  from pipeline.onnx_reshapes import constant_target, reshaped
  assert constant_target(ins, outs) == wanted
  if wanted is not None:
    assert [reshaped(i, wanted) for i in ins] == outs
