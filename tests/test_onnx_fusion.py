"""The rewrites of a converted ONNX model (pipeline/onnx_fusion.py). The encoder's layer
norm as tf2onnx converts it becomes one LayerNormalization node with the same outputs; the
subgraph in every order of its commutative inputs is found; a subgraph that computes
anything else, or whose nodes are used outside it, is left as it was. The exact GELU's
argument, a product by 1/sqrt(2), becomes the quotient that onnxruntime fuses into one
Gelu kernel, with the same outputs; a product that is not that argument alone stays."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

pytestmark = pytest.mark.tf2_only  # (onnx and tf2onnx are in the TF 2.15 environment)


def reference_layer_norm(x, gamma, beta, epsilon):
  mean = x.mean(-1, keepdims=True)
  variance = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def run(model, x):
  import onnxruntime
  session = onnxruntime.InferenceSession(model.SerializeToString(),
                                         providers=["CPUExecutionProvider"])
  return session.run(None, {"x": x})


def converted(session, graph, input_name):
  """The ONNX model of graph's tensor y (its variables' values in session) from its
  placeholder input_name, converted as the export converts."""
  import tensorflow.compat.v1 as tf
  import tf2onnx
  from pipeline import onnx_export
  graph_def = tf.graph_util.convert_variables_to_constants(session, graph.as_graph_def(),
                                                           ["y"])
  model, _ = tf2onnx.convert.from_graph_def(
      graph_def, input_names=[input_name + ":0"], output_names=["y:0"],
      opset=onnx_export.ONNX_OPSET, tensors_to_rename={input_name + ":0": input_name,
                                                       "y:0": "y"})
  return model


def test_the_encoders_layer_norm_as_tf2onnx_writes_it_becomes_one_node():
  import onnx
  import tensorflow.compat.v1 as tf
  from modeling import bert
  from pipeline import onnx_fusion
  rng = np.random.RandomState(0)
  gamma, beta = rng.uniform(0.5, 2, 24).astype(np.float32), rng.randn(24).astype(np.float32)
  with tf.Graph().as_default() as graph:
    x = tf.placeholder(tf.float32, [None, None, 24], name="x")
    tf.identity(bert.layer_norm(bert.layer_norm(x, name="first") * 3.0), name="y")
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      session.run([tf.assign(v, gamma if "gamma" in v.name else beta)
                   for v in tf.global_variables() if v.name.startswith("LayerNorm/")])
      model = converted(session, graph, "x")
  unfused = onnx.ModelProto.FromString(model.SerializeToString())
  assert onnx_fusion.fuse_layer_norms(model) == 2
  ops = [node.op_type for node in model.graph.node]
  assert ops.count("LayerNormalization") == 2
  assert not {"GlobalAveragePool", "ReduceMean", "Sqrt", "Reciprocal"} & set(ops)
  assert len(ops) == 3, ops  # the two norms and the product between them
  inputs = rng.randn(3, 7, 24).astype(np.float32) * 4 + 1
  (fused,) = run(model, inputs)
  (before,) = run(unfused, inputs)
  wanted = reference_layer_norm(reference_layer_norm(inputs, 1, 0, 1e-12) * 3, gamma, beta,
                                1e-12)
  np.testing.assert_allclose(fused, wanted, atol=2e-5, rtol=1e-5)
  np.testing.assert_allclose(fused, before, atol=2e-5, rtol=1e-5)


def layer_norm_graph(draw_order, units, epsilon, rank, mean_op, breaks=None):
  """The ONNX model of tf2onnx's layer norm of input x (float32 of rank `rank`, last
  dimension units), each commutative node's inputs in the order draw_order() gives.
  breaks: one change that makes it not a layer norm (or its nodes used outside it)."""
  from onnx import TensorProto, helper, numpy_helper
  from pipeline.onnx_fusion import LAYER_NORM_OPSET
  rng = np.random.RandomState(units)
  gamma = rng.uniform(0.5, 2, units).astype(np.float32)
  beta = rng.randn(units).astype(np.float32)
  epsilon_axes = [1] * (rank + 1) if breaks == "epsilon of more axes than x" else []
  constants = [numpy_helper.from_array(gamma, "gamma"), numpy_helper.from_array(beta, "beta"),
               numpy_helper.from_array(np.full(epsilon_axes, epsilon, np.float32), "epsilon")]

  def pair(a, b):
    return [a, b] if draw_order() else [b, a]

  def mean(name, of):
    axis = 1 if breaks == "mean over another axis" and name == "mean" else rank - 1
    if mean_op == "GlobalAveragePool" and axis == rank - 1:
      return helper.make_node("GlobalAveragePool", [of], [name])
    return helper.make_node("ReduceMean", [of], [name], axes=[axis], keepdims=1)

  nodes = [mean("mean", "x"),
           helper.make_node("Sub", ["x2" if breaks == "variance of another tensor" else "x",
                                    "mean"], ["d"]),
           helper.make_node("Mul", ["d", "d"], ["d2"]),
           mean("variance", "x2" if breaks == "variance of another tensor" else "d2"),
           helper.make_node("Add", pair("variance", "epsilon"), ["plus"]),
           helper.make_node("Sqrt", ["plus"], ["root"]),
           helper.make_node("Reciprocal", ["root"], ["r"]),
           helper.make_node("Mul", pair("r", "gamma_in" if breaks == "gamma an input"
                                        else "gamma"), ["s"]),
           helper.make_node("Mul", pair("mean", "s"), ["ms"]),
           helper.make_node("Mul", pair("x", "s"), ["xs"]),
           helper.make_node("Sub", ["beta", "ms"], ["shift"]),
           helper.make_node("Add", pair("xs", "shift"), ["y"])]
  if breaks == "variance of another tensor":
    nodes.insert(0, helper.make_node("Mul", ["x", "x"], ["x2"]))
  if breaks == "its difference read in a branch":
    then, otherwise = (helper.make_graph([helper.make_node("Identity", [name], ["out"])],
                                         branch, [], [helper.make_tensor_value_info(
                                             "out", TensorProto.FLOAT, None)])
                       for branch, name in (("then", "d"), ("else", "x")))
    nodes.append(helper.make_node("If", ["flag"], ["branch"], then_branch=then,
                                  else_branch=otherwise))
  shape = ["batch"] * (rank - 1) + [
      "units" if breaks == "x's last dimension unknown" else units]
  inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
  if breaks == "gamma an input":
    inputs.append(helper.make_tensor_value_info("gamma_in", TensorProto.FLOAT, [units]))
  outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)]
  if breaks == "its mean an output too":
    outputs.append(helper.make_tensor_value_info("mean", TensorProto.FLOAT, None))
  if breaks == "its difference read in a branch":
    inputs.append(helper.make_tensor_value_info("flag", TensorProto.BOOL, []))
    outputs.append(helper.make_tensor_value_info("branch", TensorProto.FLOAT, None))
  graph = helper.make_graph(nodes, "layer_norm", inputs, outputs, constants)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", LAYER_NORM_OPSET)])
  return model, gamma, beta


@settings(max_examples=25, deadline=None)
@given(orders=st.lists(st.booleans(), min_size=6, max_size=6), units=st.integers(1, 9),
       epsilon=st.sampled_from([1e-12, 1e-6, 1e-3, 0.5]),
       rank_and_mean=st.sampled_from([(3, "GlobalAveragePool"), (3, "ReduceMean"),
                                      (2, "ReduceMean"), (4, "ReduceMean")]))
def test_the_layer_norm_is_found_in_every_order_of_its_inputs(orders, units, epsilon,
                                                             rank_and_mean):
  from pipeline.onnx_fusion import fuse_layer_norms
  rank, mean_op = rank_and_mean
  order = iter(orders)
  model, gamma, beta = layer_norm_graph(lambda: next(order), units, epsilon, rank, mean_op)
  x = np.random.RandomState(1).randn(*([2, 3, 4][:rank - 1] + [units])).astype(np.float32)
  assert fuse_layer_norms(model) == 1
  assert [node.op_type for node in model.graph.node] == ["LayerNormalization"]
  assert [t.name for t in model.graph.initializer] == ["gamma", "beta"]
  np.testing.assert_allclose(run(model, x)[0], reference_layer_norm(x, gamma, beta, epsilon),
                             atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("breaks", [
    "mean over another axis", "variance of another tensor", "gamma an input",
    "its mean an output too", "its difference read in a branch",
    "epsilon of more axes than x", "x's last dimension unknown"])
def test_a_subgraph_that_is_not_exactly_a_layer_norm_is_left_as_it_was(breaks):
  from pipeline.onnx_fusion import fuse_layer_norms
  model, _, _ = layer_norm_graph(lambda: True, 4, 1e-6, 3, "ReduceMean", breaks)
  before = model.SerializeToString()
  assert fuse_layer_norms(model) == 0
  assert model.SerializeToString() == before


def test_a_model_below_the_operator_set_of_layer_normalization_is_refused():
  from pipeline.onnx_fusion import fuse_layer_norms
  model, _, _ = layer_norm_graph(lambda: True, 4, 1e-6, 3, "ReduceMean")
  model.opset_import[0].version = 15
  with pytest.raises(ValueError) as error:
    fuse_layer_norms(model)
  assert str(error.value) == ("a LayerNormalization node needs ONNX operator set 17; the "
                              "model has 15")


def test_two_unnamed_layer_norms_and_what_others_read_are_kept_apart():
  """Two layer norms of unnamed nodes, one after the other, become two nodes of different
  names; an If branch's constant and an input's default that no node reads stay."""
  from onnx import TensorProto, helper, numpy_helper
  from pipeline.onnx_fusion import fuse_layer_norms
  model, gamma, beta = layer_norm_graph(lambda: True, 5, 1e-6, 3, "GlobalAveragePool")
  graph = model.graph
  renamed = {"x": "y", "y": "z"}
  for node in list(graph.node):
    second = helper.make_node(node.op_type, [renamed.get(
        n, n if n in ("gamma", "beta", "epsilon") else "second_" + n) for n in node.input],
        [renamed.get(n, "second_" + n) for n in node.output])
    second.attribute.extend(node.attribute)
    graph.node.append(second)
  shape = ["batch", "batch", 5]
  branch = helper.make_graph([helper.make_node("Add", ["z", "offset"], ["out"])], "then", [],
                             [helper.make_tensor_value_info("out", TensorProto.FLOAT, shape)])
  graph.node.append(helper.make_node("If", ["flag"], ["w"], then_branch=branch,
                                     else_branch=branch))
  graph.initializer.extend([numpy_helper.from_array(np.float32(10), "offset"),
                            numpy_helper.from_array(np.float32(3), "unused")])
  graph.input.extend([helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
                      helper.make_tensor_value_info("unused", TensorProto.FLOAT, [])])
  del graph.output[:]
  graph.output.extend([helper.make_tensor_value_info("w", TensorProto.FLOAT, shape)])
  assert fuse_layer_norms(model) == 2
  graph = model.graph  # (the model's new graph)
  fused = [node for node in graph.node if node.op_type == "LayerNormalization"]
  assert [node.output[0] for node in fused] == ["y", "z"]
  assert len({node.name for node in graph.node}) == len(graph.node)
  assert sorted(t.name for t in graph.initializer) == ["beta", "gamma", "offset", "unused"]
  import onnxruntime
  session = onnxruntime.InferenceSession(model.SerializeToString(),
                                         providers=["CPUExecutionProvider"])
  x = np.random.RandomState(2).randn(2, 3, 5).astype(np.float32)
  (w,) = session.run(None, {"x": x, "flag": np.array(True)})
  np.testing.assert_allclose(w, reference_layer_norm(reference_layer_norm(
      x, gamma, beta, 1e-6), gamma, beta, 1e-6) + 10, atol=2e-5, rtol=1e-5)


def optimized_ops(model):
  """The op types of model as onnxruntime runs it (after its own fusions), and a session."""
  import os
  import tempfile
  import onnx
  import onnxruntime
  options = onnxruntime.SessionOptions()
  with tempfile.TemporaryDirectory() as folder:
    options.optimized_model_filepath = os.path.join(folder, "optimized.onnx")
    session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    ops = [node.op_type for node in onnx.load(options.optimized_model_filepath).graph.node]
  return ops, session


def test_the_exact_gelu_as_tensorflow_writes_it_becomes_onnxruntimes_one_kernel():
  """The encoder's exact GELU of a dense layer, converted as the export converts it, reaches
  ONNX as a product by 1/sqrt(2) that onnxruntime runs as five nodes; written as the
  quotient, onnxruntime runs it as one Gelu kernel, with the same outputs."""
  import onnx
  import tensorflow.compat.v1 as tf
  import tf2onnx
  from modeling import bert
  from pipeline import onnx_export, onnx_fusion
  rng = np.random.RandomState(3)
  weights, bias = rng.randn(6, 8).astype(np.float32), rng.randn(8).astype(np.float32)
  with tf.Graph().as_default():
    x = tf.placeholder(tf.float32, [None, 6], name="x")
    tf.identity(bert.gelu_exact(tf.matmul(x, weights) + bias), name="y")
    graph_def = tf.get_default_graph().as_graph_def()
  model, _ = tf2onnx.convert.from_graph_def(graph_def, input_names=["x:0"],
                                            output_names=["y:0"], opset=onnx_export.ONNX_OPSET,
                                            tensors_to_rename={"x:0": "x", "y:0": "y"})
  before, unfused = optimized_ops(model)
  assert "Erf" in before and "Gelu" not in before  # (what the rewrite is for)
  original = onnx.ModelProto.FromString(model.SerializeToString())
  assert onnx_fusion.divide_gelu_arguments(model) == 1
  onnx.checker.check_model(model)
  after, fused = optimized_ops(model)
  assert not {"Erf", "Mul"} & set(after), after
  assert {"Gelu", "BiasGelu"} & set(after), after
  inputs = rng.randn(5, 6).astype(np.float32) * 3
  (got,) = fused.run(None, {"x": inputs})
  (wanted,) = unfused.run(None, {"x": inputs})
  z = inputs @ weights + bias
  reference = 0.5 * z * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
  np.testing.assert_allclose(got, reference, atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(got, wanted, atol=1e-6, rtol=1e-6)
  assert onnx_fusion.divide_gelu_arguments(model) == 0  # (rewritten once)
  # (the reciprocal, read by no other node, replaced by the square root)
  assert len(model.graph.initializer) == len(original.graph.initializer)
  assert [t.name for t in model.graph.initializer if t.name not in {
      t.name for t in original.graph.initializer}] == ["gelu/sqrt2"]


def gelu_graph(factor=1 / math.sqrt(2), factor_first=False, as_node=False, breaks=None):
  """y = 0.5 x (1 + erf(x * factor)) as onnx nodes, the factor an initializer or a Constant
  node, first or second; breaks: what makes the product one the rewrite must leave."""
  from onnx import TensorProto, helper, numpy_helper
  value = np.full([1, 1, 1] if breaks == "a factor of more axes" else [], factor, np.float32)
  nodes, initializers = [], [numpy_helper.from_array(np.float32(1), "one"),
                             numpy_helper.from_array(np.float32(0.5), "half")]
  if as_node:
    nodes.append(helper.make_node("Constant", [], ["factor"],
                                  value=numpy_helper.from_array(value)))
  else:
    initializers.append(numpy_helper.from_array(value, "factor"))
  nodes += [helper.make_node("Mul", ["factor", "x"] if factor_first else ["x", "factor"],
                             ["scaled"]),
            helper.make_node("Erf", ["scaled"], ["erf"]),
            helper.make_node("Add", ["erf", "one"], ["plus_one"]),
            helper.make_node("Mul", ["half", "x"], ["half_x"]),
            helper.make_node("Mul", ["half_x", "plus_one"], ["y"])]
  outputs = ["y"] + (["scaled"] if breaks == "the product an output" else [])
  if breaks == "the product read by another node":
    nodes.append(helper.make_node("Neg", ["scaled"], ["negated"]))
    outputs.append("negated")
  graph = helper.make_graph(
      nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 4])],
      [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs],
      initializers)
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("factor_first", [False, True])
@pytest.mark.parametrize("as_node", [False, True])
def test_the_gelus_product_is_found_in_either_order_and_as_either_constant(factor_first,
                                                                          as_node):
  from pipeline.onnx_fusion import divide_gelu_arguments
  model = gelu_graph(factor_first=factor_first, as_node=as_node)
  _, unfused = optimized_ops(model)
  assert divide_gelu_arguments(model) == 1
  assert "factor" not in {t.name for t in model.graph.initializer} | {
      o for n in model.graph.node for o in n.output}  # (read by no other node: gone)
  ops, fused = optimized_ops(model)
  assert "Gelu" in ops and "Erf" not in ops, ops
  x = np.linspace(-6, 6, 48, dtype=np.float32).reshape(12, 4)
  np.testing.assert_allclose(fused.run(None, {"x": x})[0], unfused.run(None, {"x": x})[0],
                             atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("breaks", [
    "another factor", "a factor of more axes", "the product an output",
    "the product read by another node"])
def test_a_product_that_is_not_the_gelus_argument_alone_is_left_as_it_was(breaks):
  from pipeline.onnx_fusion import divide_gelu_arguments
  model = gelu_graph(factor=0.7 if breaks == "another factor" else 1 / math.sqrt(2),
                     breaks=breaks)
  before = model.SerializeToString()
  assert divide_gelu_arguments(model) == 0
  assert model.SerializeToString() == before


def test_the_square_roots_name_is_new_to_every_subgraph_too():
  """A model whose If branch defines a tensor named gelu/sqrt2 already: the rewritten
  model's square root takes another name (one name, one tensor, in any scope), passes
  onnx's checker and gives the same outputs."""
  import onnx
  from onnx import TensorProto, helper, numpy_helper
  from pipeline.onnx_fusion import divide_gelu_arguments
  model = gelu_graph()
  branch = helper.make_graph(
      [helper.make_node("Constant", [], ["gelu/sqrt2"],
                        value=numpy_helper.from_array(np.float32(2))),
       helper.make_node("Mul", ["y", "gelu/sqrt2"], ["branch_out"])],
      "branch", [], [helper.make_tensor_value_info("branch_out", TensorProto.FLOAT,
                                                    ["rows", 4])])
  model.graph.input.append(helper.make_tensor_value_info("flag", TensorProto.BOOL, []))
  model.graph.node.append(helper.make_node("If", ["flag"], ["z"], then_branch=branch,
                                           else_branch=branch))
  model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["rows", 4]))
  model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                               ["rows", 4]))
  onnx.checker.check_model(model)
  _, unfused = optimized_ops(model)
  assert divide_gelu_arguments(model) == 1
  onnx.checker.check_model(model)  # (one name, one tensor: else not single assignment)
  assert "gelu/sqrt2_1" in {t.name for t in model.graph.initializer}
  _, fused = optimized_ops(model)
  x = np.linspace(-6, 6, 48, dtype=np.float32).reshape(12, 4)
  for got, wanted in zip(fused.run(None, {"x": x, "flag": np.array(True)}),
                         unfused.run(None, {"x": x, "flag": np.array(True)})):
    np.testing.assert_allclose(got, wanted, atol=1e-6, rtol=1e-6)
