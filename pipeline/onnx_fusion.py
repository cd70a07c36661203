"""Rewrites of a converted ONNX model that onnxruntime cannot find by itself: the layer
norms (fuse_layer_norms) and the GELU's argument (divide_gelu_arguments).

tf2onnx writes each of the encoder's layer normalisations (modeling/bert.py: tf.nn.moments
and tf.nn.batch_normalization) as twelve elementwise nodes, with the means as
GlobalAveragePool:

  mean = GlobalAveragePool(x)           (ReduceMean over the last axis, keepdims)
  var  = GlobalAveragePool((x - mean) * (x - mean))
  s    = Reciprocal(Sqrt(var + epsilon)) * gamma
  y    = x * s + (beta - mean * s)

onnxruntime's own layer-norm fusion matches ReduceMean and Div, not this, and so runs every
node of it, on every layer, for each text. fuse_layer_norms replaces each with one
LayerNormalization(x, gamma, beta) node over the last axis (ONNX operator set 17), which
onnxruntime runs as one kernel and fuses further with the residual Add before it.

Only a subgraph that computes exactly that is replaced: float32 x whose last dimension is
known (a GlobalAveragePool's x of rank 3), gamma and beta constant vectors of that length,
epsilon one constant of no more axes than x, and no tensor of it read outside it (by
another node, as the graph's output, or in an If or Loop body). Any other graph is left as
it was. The export checks the rewritten model's outputs against TensorFlow's, as it checks
the conversion (pipeline/onnx_export.py).
"""

import numpy as np

# The operator set in which ONNX has LayerNormalization.
LAYER_NORM_OPSET = 17


def fuse_layer_norms(model):
  """Replaces each layer normalisation of model (an onnx ModelProto) by one
  LayerNormalization node. Returns how many were replaced. The model is changed only when
  the rewritten one passes onnx's checker (else the checker's error, and model unchanged)."""
  import onnx
  from onnx import helper, shape_inference
  if opset_of(model) < LAYER_NORM_OPSET:
    raise ValueError("a LayerNormalization node needs ONNX operator set %d; the model has %d"
                     % (LAYER_NORM_OPSET, opset_of(model)))
  graph = model.graph
  every = list(graph.node)  # (the same objects throughout: nodes are told apart by id)
  shapes = tensor_shapes(shape_inference.infer_shapes(model))
  inputs = {i.name for i in graph.input}
  constants = constant_values(graph)
  # Read outside the graph's own nodes: its outputs, and the tensors of the enclosing scope
  # that the bodies of its If, Loop and Scan nodes read.
  outside = {o.name for o in graph.output} | names_read_in_bodies(every)
  matcher = _Matcher(every, outside, constants, shapes)
  names = {node.name for node in every}
  replaced, epsilons = {}, set()  # id of each final Add -> (its node, the nodes it replaces)
  for node in every:
    if node.op_type == "Add":
      found = matcher.layer_norm(node)
      if found is not None:
        (x, gamma, beta, epsilon, epsilon_name), inner = found
        name = unique_name(names, (node.name or node.output[0]) + "/LayerNormalization")
        fused = helper.make_node("LayerNormalization", [x, gamma, beta], list(node.output),
                                 name=name, axis=-1, epsilon=epsilon)
        replaced[id(node)] = (fused, inner)
        epsilons.add(epsilon_name)
  if not replaced:
    return 0
  dropped = {id(inner) for _, nodes in replaced.values() for inner in nodes}
  gone = {node.output[0] for _, nodes in replaced.values() for node in nodes}
  nodes = [replaced[id(node)][0] if id(node) in replaced else node
           for node in every if id(node) not in dropped]
  read = {name for node in nodes for name in node.input} | outside | inputs
  unread = epsilons - read  # (an epsilon of no other node: its constant goes too)
  rewritten = onnx.ModelProto()
  rewritten.CopyFrom(model)
  for field, kept in (
      (rewritten.graph.node, [n for n in nodes if not (
          n.op_type == "Constant" and n.output[0] in unread)]),
      (rewritten.graph.initializer, [t for t in graph.initializer if t.name not in unread]),
      (rewritten.graph.value_info, [v for v in graph.value_info if v.name not in gone])):
    del field[:]
    field.extend(kept)
  onnx.checker.check_model(rewritten)
  model.CopyFrom(rewritten)
  return len(replaced)


def divide_gelu_arguments(model):
  """Writes each x * (1/sqrt(2)) that only Erf nodes read as x / sqrt(2), the form in which
  onnxruntime fuses the exact GELU, 0.5 * x * (1 + erf(x / sqrt(2))), into one kernel (its
  Gelu, with the bias Add before it). TensorFlow's grappler folds the quotient into a
  product by the reciprocal before tf2onnx sees it, and onnxruntime then runs the GELU as
  five elementwise nodes. The two differ by at most a rounding of x / sqrt(2). Returns how
  many were rewritten (model, an onnx ModelProto, is changed in place)."""
  from onnx import numpy_helper
  graph = model.graph
  constants = constant_values(graph)
  outside = {o.name for o in graph.output} | names_read_in_bodies(graph.node)
  readers = {}
  for node in graph.node:
    for name in set(node.input):
      readers.setdefault(name, []).append(node.op_type)
  names = names_in(graph)
  sqrt2, replaced = None, set()
  rewritten = 0
  for node in graph.node:
    if node.op_type != "Mul" or len(node.input) != 2 or node.output[0] in outside or set(
        readers.get(node.output[0], ["none"])) != {"Erf"}:
      continue
    for x, factor in _both(node.input):
      value = constants.get(factor)
      if value is not None and _is_reciprocal_sqrt2(value) and x not in constants:
        if sqrt2 is None:
          sqrt2 = unique_name(names, "gelu/sqrt2")
          graph.initializer.append(numpy_helper.from_array(np.array(np.sqrt(2), np.float32),
                                                           sqrt2))
        node.op_type = "Div"
        del node.input[:]
        node.input.extend([x, sqrt2])
        replaced.add(factor)
        rewritten += 1
        break
  read = {name for node in graph.node for name in node.input} | outside | {
      i.name for i in graph.input}
  unread = replaced - read  # (a factor no other node reads goes, as its product did)
  kept = [t for t in graph.initializer if t.name not in unread]
  del graph.initializer[:]
  graph.initializer.extend(kept)
  kept = [n for n in graph.node if not (n.op_type == "Constant" and n.output[0] in unread)]
  del graph.node[:]
  graph.node.extend(kept)
  return rewritten


def _is_reciprocal_sqrt2(value):
  """Whether a constant is one float32 1/sqrt(2) (to its last bit or two), of no axes that
  would broadcast x to them."""
  return (value.dtype == np.float32 and value.size == 1 and value.ndim <= 1 and
          abs(float(value.ravel()[0]) * np.sqrt(2) - 1) <= 2 ** -22)


def constant_values(graph):
  """{tensor name: its numpy value} of the graph's constants: its initializers that are not
  also inputs (which a caller may change), and its Constant nodes' values."""
  from onnx import numpy_helper
  inputs = {i.name for i in graph.input}
  constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer
               if t.name not in inputs}
  for node in graph.node:
    if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
      constants[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
  return constants


def names_read_in_bodies(nodes):
  """The tensor names that the subgraphs of nodes (If's branches, Loop's and Scan's bodies,
  at any depth) read."""
  read = set()
  for body in _bodies(nodes):
    read |= {name for inner in body.node for name in inner.input}
    read |= names_read_in_bodies(body.node)
  return read


def names_in(graph):
  """Every tensor name graph defines: its inputs, initializers and node outputs, and
  those of its nodes' subgraphs (at any depth), where a new name must not be either."""
  names = {t.name for t in graph.initializer} | {i.name for i in graph.input}
  for node in graph.node:
    names.update(node.output)
  for body in _bodies(graph.node):
    names |= names_in(body)
  return names


def _bodies(nodes):
  """The subgraphs that nodes hold as attributes (If's branches, Loop's and Scan's
  bodies), one level down."""
  from onnx import AttributeProto
  for node in nodes:
    for attribute in node.attribute:
      if attribute.type == AttributeProto.GRAPH:
        yield attribute.g
      elif attribute.type == AttributeProto.GRAPHS:
        yield from attribute.graphs


def unique_name(names, name):
  """name, or name with the first number that makes it unique in names (which gains it)."""
  candidate, number = name, 1
  while candidate in names:
    candidate, number = "%s_%d" % (name, number), number + 1
  names.add(candidate)
  return candidate


def opset_of(model):
  """The model's operator set version of the default (ONNX) domain."""
  return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def tensor_shapes(model):
  """{tensor name: its dimensions (an int where known, else None)} of every tensor whose
  rank shape inference found."""
  shapes = {}
  for info in list(model.graph.value_info) + list(model.graph.input) + list(
      model.graph.output):
    tensor_type = info.type.tensor_type
    if tensor_type.HasField("shape"):
      shapes[info.name] = [d.dim_value if d.HasField("dim_value") else None
                           for d in tensor_type.shape.dim]
  return shapes


class _Matcher(object):
  """Finds the layer normalisation that ends in an Add node (the module's docstring gives the
  subgraph). Every intermediate node must be used by the subgraph alone."""

  def __init__(self, nodes, outside, constants, shapes):
    self.constants, self.shapes = constants, shapes
    self.producers = {output: node for node in nodes for output in node.output}
    self.readers = {}  # tensor name -> the nodes that read it (None: read outside them)
    for node in nodes:
      for name in set(node.input):
        self.readers.setdefault(name, []).append(node)
    for name in outside:
      self.readers.setdefault(name, []).append(None)

  def layer_norm(self, add):
    """((x, gamma, beta, epsilon, epsilon's tensor), the subgraph's other nodes), or
    None."""
    for scaled, shifted in _both(add.input):
      found = self._scaled_and_shifted(add, scaled, shifted)
      if found is not None:
        return found
    return None

  def _scaled_and_shifted(self, add, scaled, shifted):
    x_times_s = self._op(scaled, "Mul")
    beta_minus = self._op(shifted, "Sub")
    if x_times_s is None or beta_minus is None:
      return None
    beta, mean_times_s = beta_minus.input
    mean_times_s = self._op(mean_times_s, "Mul")
    if mean_times_s is None:
      return None
    for x, s in _both(x_times_s.input):
      for mean, s_again in _both(mean_times_s.input):
        if s != s_again:
          continue
        scale = self._scale(s)
        if scale is None:
          continue
        gamma, epsilon, variance, scale_nodes = scale
        statistics = self._mean_and_variance(x, mean, variance)
        if statistics is None:
          continue
        units = self._last_dim(gamma, beta)
        rank = len(self.shapes[x])
        if units is None or self.shapes[x][-1] != units or self.constants[
            epsilon].ndim > rank:  # (a constant of more axes would broadcast x to them)
          continue
        inner = [x_times_s, beta_minus, mean_times_s] + scale_nodes + statistics
        if not self._used_only_inside(inner, add):
          continue
        return (x, gamma, beta, float(self.constants[epsilon].ravel()[0]), epsilon), inner
    return None

  def _scale(self, s):
    """s = Reciprocal(Sqrt(variance + epsilon)) * gamma: (gamma, epsilon's tensor, variance,
    nodes)."""
    times_gamma = self._op(s, "Mul")
    if times_gamma is None:
      return None
    for reciprocal, gamma in _both(times_gamma.input):
      reciprocal = self._op(reciprocal, "Reciprocal")
      sqrt = reciprocal is not None and self._op(reciprocal.input[0], "Sqrt")
      plus_epsilon = sqrt and self._op(sqrt.input[0], "Add")
      if not plus_epsilon or gamma not in self.constants:
        continue
      for variance, epsilon in _both(plus_epsilon.input):
        value = self.constants.get(epsilon)
        if value is not None and value.size == 1 and float(value.ravel()[0]) >= 0:
          return gamma, epsilon, variance, [times_gamma, reciprocal, sqrt, plus_epsilon]
    return None

  def _mean_and_variance(self, x, mean, variance):
    """The nodes of mean = the mean of x over its last axis and variance = the mean of
    (x - mean) * (x - mean) over it (mean's, variance's, the square's, the difference's),
    or None."""
    mean_node = self._mean_over_last_axis(mean, x)
    variance_node = self.producers.get(variance)
    if mean_node is None or variance_node is None or not variance_node.input:
      return None
    square = self._op(variance_node.input[0], "Mul")
    if square is None or square.input[0] != square.input[1]:
      return None
    difference = self._op(square.input[0], "Sub")
    if difference is None or list(difference.input) != [x, mean] or (
        self._mean_over_last_axis(variance, square.output[0]) is None):
      return None
    return [mean_node, variance_node, square, difference]

  def _mean_over_last_axis(self, name, of):
    """The node that makes name as the mean of tensor `of` over its last axis with the axis
    kept (GlobalAveragePool of a rank-3 tensor, or ReduceMean), or None."""
    node = self.producers.get(name)
    rank = len(self.shapes.get(of) or ())
    if node is None or list(node.input[:1]) != [of] or not rank:
      return None
    if node.op_type == "GlobalAveragePool":  # (over every axis from the third)
      return node if rank == 3 else None
    if node.op_type == "ReduceMean" and len(node.input) == 1:
      attributes = {a.name: a for a in node.attribute}
      axes = list(attributes["axes"].ints) if "axes" in attributes else None
      keepdims = attributes["keepdims"].i if "keepdims" in attributes else 1
      if axes is not None and [a % rank for a in axes] == [rank - 1] and keepdims == 1:
        return node
    return None

  def _last_dim(self, gamma, beta):
    """The units of constant vectors gamma and beta of one length, else None."""
    g, b = self.constants.get(gamma), self.constants.get(beta)
    if g is None or b is None or g.ndim != 1 or g.shape != b.shape:
      return None
    if g.dtype != np.float32 or b.dtype != np.float32:
      return None
    return g.shape[0]

  def _used_only_inside(self, nodes, add):
    """Whether every output of nodes is read by nodes or add alone."""
    inside = {id(node) for node in nodes + [add]}
    return all(len(node.output) == 1 and all(
        reader is not None and id(reader) in inside
        for reader in self.readers.get(node.output[0], [])) for node in nodes)

  def _op(self, name, op_type):
    node = self.producers.get(name)
    return node if node is not None and node.op_type == op_type else None


def _both(pair):
  """The two orders of a commutative op's inputs."""
  a, b = pair
  return ((a, b), (b, a))
