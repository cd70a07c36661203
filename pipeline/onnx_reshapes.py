"""A rewrite of a converted ONNX model that drops the shape arithmetic TensorFlow's graph
does at run time (keep_rows_unflattened).

The encoder (modeling/bert.py, as Google's) multiplies its [batch, length, width]
activations by a layer's weights as a matrix of rows: it reshapes them to
[batch * length, width] before the product and back to [batch, length, ...] after it,
computing the shape to restore from the tensors' run-time shapes. tf2onnx writes each of
those computations as a chain of Shape, Cast, Slice, Concat and Cast nodes: about 270 of
the MiniLM model's 467 nodes, each a kernel that onnxruntime runs on every run.

ONNX's MatMul multiplies a [batch, length, width] tensor by a matrix as it stands, so the
rows need not be flattened: keep_rows_unflattened removes each reshape that merges a
tensor's first two axes when every node that then reads the rows works on each row alone
(a product by a constant matrix, elementwise arithmetic with constants of no row axis,
GELU, a last-axis softmax or layer norm, a one-hot), and gives each reshape after them,
and every other reshape whose target is computed, a constant target written with ONNX's
0 (this axis as it is) and -1 (what is left). The shape chains are then read by nothing,
and go.

What each reshape's output is on any input comes from running the original model on
inputs of three shapes (PROBES: batch and length both prime, and 1 by 1), and a reshape
is rewritten only where one constant target gives its output shape on all of them. The
model's inputs must be of one [batch, length] shape, as the ids signature's are (a model
that also runs on inputs of different lengths is left as it was), and its shapes must
not depend on the ids' values (the first probe again on ids of ones gives the same).
Anything else (an input that is not a [batch, length] integer tensor, a subgraph that
reads the graph's tensors, a row read outside the rows' nodes or along an axis given as
a positive number, a shape of the rows still read after the rewrite, a model onnx's
checker refuses) leaves the model as it was. The export then checks the rewritten
model's outputs against TensorFlow's (pipeline/onnx_export.py).
"""

import numpy as np

from pipeline.onnx_fusion import (constant_values, names_in, names_read_in_bodies, opset_of,
                                   unique_name)

# The [batch, length] shapes of the inputs the model is probed on.
PROBES = ((3, 7), (5, 11), (1, 1))

# Nodes that work on each row of a [rows, ...] tensor alone, elementwise.
UNARY = {"Abs", "Cast", "Erf", "Exp", "Gelu", "Identity", "Log", "Neg", "Reciprocal",
         "Relu", "Sigmoid", "Sqrt", "Tanh"}
BINARY = {"Add", "Div", "Mul", "Pow", "Sub"}
LAST_AXIS = {"LayerNormalization", "LogSoftmax", "OneHot", "Softmax"}
# The operator set from which a Softmax without an axis is over the last axis (before, over
# every axis from the second: of a flattened row tensor's one, but not of its rows').
SOFTMAX_LAST_AXIS_OPSET = 13


def keep_rows_unflattened(model):
  """Rewrites model (an onnx ModelProto) as the module's docstring says. Returns how many
  reshapes were removed or given a constant target (0: the model is unchanged). The
  model is changed only when the rewritten one passes onnx's checker."""
  import onnx
  graph = model.graph
  if opset_of(model) < SOFTMAX_LAST_AXIS_OPSET or names_read_in_bodies(graph.node):
    return 0
  dims = _probed_dims(model)
  if dims is None:
    return 0
  constants = constant_values(graph)
  outputs = {o.name for o in graph.output}
  readers = {}
  for node in graph.node:
    for name in set(node.input):
      readers.setdefault(name, []).append(node)
  new_dims = {}  # each row tensor's dims (per probe) once its rows are not flattened
  removed = {}   # the output of a flattening reshape removed -> its input
  for node in graph.node:
    if _flattens_first_two_axes(node, constants, dims):
      rows = _rows_from(node, readers, constants, dims, outputs)
      if rows is not None and not set(rows) & set(new_dims):
        new_dims.update(rows)
        removed[node.output[0]] = node.input[0]
  if any(x in new_dims for x in removed.values()):
    return 0  # (a flattening of row tensors: not one this rewrite unflattens)
  targets, bypassed = {}, {}
  for node in graph.node:
    if node.op_type != "Reshape" or _allows_zero(node) or node.output[0] not in dims:
      continue
    data = node.input[0]
    if data not in dims or (data not in new_dims and node.input[1] in constants):
      continue  # (a constant's reshape; a constant target, its input as it was)
    ins, outs = new_dims.get(data, dims[data]), dims[node.output[0]]
    if ins == outs and node.output[0] not in outputs:
      bypassed[node.output[0]] = data
      continue
    target = constant_target(ins, outs)
    if target is None:
      if data in new_dims:
        return 0  # (the rows' shape could not be restored: no rewrite at all)
      continue
    targets[node.output[0]] = target
  if not (removed or bypassed or targets):
    return 0
  rewritten = onnx.ModelProto()
  rewritten.CopyFrom(model)
  count = _rewrite(rewritten.graph, removed, bypassed, targets, set(new_dims))
  if count is None:
    return 0
  try:
    onnx.checker.check_model(rewritten)
  except onnx.checker.ValidationError:
    return 0
  model.CopyFrom(rewritten)
  return count


def constant_target(ins, outs):
  """The constant target of a Reshape (0: that axis of its input; -1: what is left) whose
  output has the dims outs[k] from an input of the dims ins[k] for every probe k, or
  None."""
  target = []
  for axis in range(len(outs[0])):
    values = {out[axis] for out in outs}
    if len(values) == 1 and 0 not in values:
      target.append(values.pop())
    elif all(axis < len(i) and i[axis] == o[axis] for i, o in zip(ins, outs)):
      target.append(0)
    else:
      target.append(-1)
  if target.count(-1) > 1:
    return None
  return target if all(reshaped(i, target) == list(o) for i, o in zip(ins, outs)) else None


def reshaped(dims, target):
  """The dims of a Reshape of a tensor of dims to target (ONNX's 0 and -1), or None."""
  out = [dims[axis] if value == 0 and axis < len(dims) else value
         for axis, value in enumerate(target)]
  size, known = int(np.prod(dims)), int(np.prod([v for v in out if v != -1]))
  if -1 in out:
    if known == 0 or size % known:
      return None
    out[out.index(-1)] = size // known
  return out if int(np.prod(out)) == size else None


def _probed_dims(model):
  """{tensor name: [its dims on each of PROBES]} for every input and node output of model,
  from onnxruntime runs on ids of zeros; None when the model's inputs are not all
  [batch, length] integer tensors, a probe fails, a shape depends on the ids' values (the
  first probe's shape again on ids of ones gives other dims), or the model also runs on
  inputs of different lengths (the rewrite takes them to be of one shape, as the ids
  signature's are)."""
  import onnx
  import onnxruntime
  from onnx import helper
  kinds = {}
  for value in model.graph.input:
    tensor = value.type.tensor_type
    if len(tensor.shape.dim) != 2 or tensor.elem_type not in (
        onnx.TensorProto.INT32, onnx.TensorProto.INT64) or any(
            d.HasField("dim_value") for d in tensor.shape.dim):
      return None
    kinds[value.name] = np.int32 if tensor.elem_type == onnx.TensorProto.INT32 else np.int64
  names = [o for node in model.graph.node for o in node.output if o]
  probe = onnx.ModelProto()
  probe.CopyFrom(model)
  known = {o.name for o in probe.graph.output}
  probe.graph.output.extend(helper.make_empty_tensor_value_info(name) for name in names
                            if name not in known)
  options = onnxruntime.SessionOptions()
  options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL

  def feeds(batch, length, fill=0, longer=0):
    return {name: np.full([batch, length + k * longer], fill, kind)
            for k, (name, kind) in enumerate(sorted(kinds.items()))}
  try:
    session = onnxruntime.InferenceSession(probe.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    wanted = [o.name for o in session.get_outputs()]
    runs = [session.run(wanted, feeds(batch, length)) for batch, length in PROBES]
    again = session.run(wanted, feeds(*PROBES[0], fill=1))
  except Exception:  # (onnxruntime raises its own kinds: the model is left as it was)
    return None
  if any(np.shape(a) != np.shape(b) for a, b in zip(runs[0], again)):
    return None
  if len(kinds) > 1:
    try:
      session.run(wanted[:1], feeds(*PROBES[0], longer=1))
      return None
    except Exception:  # (what is wanted: its inputs must be of one shape)
      pass
  dims = {name: [list(np.shape(run[k])) for run in runs] for k, name in enumerate(wanted)}
  dims.update((name, [list(shape) for shape in PROBES]) for name in kinds)
  return dims


def _allows_zero(node):
  return any(a.name == "allowzero" and a.i for a in node.attribute)


def _flattens_first_two_axes(node, constants, dims):
  """Whether node is a Reshape to a constant target that merges its input's first two axes
  (and keeps the others) on every probe."""
  if node.op_type != "Reshape" or _allows_zero(node) or node.input[1] not in constants:
    return False
  x, out = dims.get(node.input[0]), dims.get(node.output[0])
  return x is not None and out is not None and all(
      len(i) >= 2 and o == [i[0] * i[1]] + i[2:] for i, o in zip(x, out))


def _rows_from(flatten, readers, constants, dims, outputs):
  """{tensor: its dims on each probe with the rows unflattened} of every tensor computed
  row by row from the output of flatten (a reshape merging its input's first two axes),
  or None when one of them is a graph output or is read other than row by row, by a
  final reshape (as its data) or by a Shape node."""
  lead = [d[:2] for d in dims[flatten.input[0]]]
  rows = {flatten.output[0]: [l + d[1:] for l, d in zip(lead, dims[flatten.output[0]])]}
  pending = [flatten.output[0]]
  while pending:
    name = pending.pop()
    if name in outputs:
      return None
    for node in readers.get(name, []):
      if node.op_type == "Shape" or (node.op_type == "Reshape" and node.input[0] == name and
                                     node.input[1] != name):
        continue  # (a Shape must be unread once the targets are constant: _rewrite checks)
      if not _row_by_row(node, name, constants, dims):
        return None
      for out in node.output:
        if out and out not in rows:
          rows[out] = [l + d[1:] for l, d in zip(lead, dims[out])]
          pending.append(out)
  # (every input of the rows' nodes is a row tensor or a constant that _row_by_row allowed)
  for name in list(rows):
    for node in readers.get(name, []):
      if node.op_type in ("Shape", "Reshape"):
        continue
      for other in node.input:
        if other and other not in rows and other not in constants:
          return None
  return rows


def _row_by_row(node, name, constants, dims):
  """Whether node, reading the row tensor name, computes its output row by row: so that
  the same node on the unflattened rows gives the same values, unflattened."""
  rank = len(dims[name][0])
  op = node.op_type
  if op == "MatMul":
    weights = constants.get(node.input[1])
    return node.input[0] == name and rank >= 2 and weights is not None and weights.ndim == 2
  if op in UNARY:
    return True
  if op in BINARY:
    for other in node.input:
      value = constants.get(other)
      if other != name and value is not None and not (
          value.ndim < rank or (value.ndim == rank and value.shape[0] == 1)):
        return False
    return all(len(dims[other][0]) == rank for other in node.input
               if other in dims and other not in constants)
  if op in LAST_AXIS:  # (a positive axis would be another one once the rows gain an axis)
    axis = [a.i for a in node.attribute if a.name == "axis"]
    return node.input[0] == name and (not axis or axis[0] == -1)
  return False


def _rewrite(graph, removed, bypassed, targets, rows):
  """Applies the rewrite to graph: the flattening reshapes' and identity reshapes' readers
  read their inputs, the other reshapes get their constant targets, and every node and
  constant that nothing reads then goes. The count of reshapes rewritten, or None when a
  Shape node still reads a row tensor (its values would change)."""
  from onnx import numpy_helper
  skipped = dict(removed)
  skipped.update(bypassed)

  def source(name):
    while name in skipped:
      name = skipped[name]
    return name
  names = names_in(graph)
  nodes = list(graph.node)  # (the same objects throughout: nodes are told apart by id)
  read_first = {id(node): node.input[0] for node in nodes if node.op_type == "Shape"}
  for node in nodes:
    for k, name in enumerate(node.input):
      node.input[k] = source(name)
    key = node.output[0]
    if node.op_type == "Reshape" and key in targets:
      target = unique_name(names, (node.name or key) + "/constant_shape")
      graph.initializer.append(numpy_helper.from_array(np.array(targets[key], np.int64),
                                                       target))
      node.input[1] = target
  outputs = {o.name for o in graph.output}
  while True:
    read = {name for node in nodes for name in node.input} | outputs
    kept = [node for node in nodes if any(o in read for o in node.output)]
    if len(kept) == len(nodes):
      break
    nodes = kept
  if any(read_first.get(id(node)) in rows for node in nodes):
    return None  # (a shape of the rows, or of their flattening, still read: it would change)
  read = {name for node in nodes for name in node.input} | outputs
  del graph.node[:]
  graph.node.extend(nodes)
  kept = [t for t in graph.initializer if t.name in read]
  del graph.initializer[:]
  graph.initializer.extend(kept)
  kept = [v for v in graph.value_info if v.name in read and v.name not in rows]
  del graph.value_info[:]
  graph.value_info.extend(kept)
  return len(removed) + len(bypassed) + len(targets)
