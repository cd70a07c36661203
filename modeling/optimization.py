"""AdamWeightDecay with linear warm-up and linear decay, as BERT was fine-tuned."""

import re

import tensorflow.compat.v1 as tf

from modeling.replicas import sum_over_replicas

WEIGHT_DECAY_RATE = 0.01
NO_DECAY_PATTERNS = ("LayerNorm", "layer_norm", "bias")
CLIP_NORM = 1.0


# The ops of the update (schedule, clipping, AdamWeightDecay, step) are named under this
# scope, so that a profile can tell them from the backward pass (tools/profile_step.py).
UPDATE_SCOPE = "optimizer_update"


def learning_rate_schedule(init_lr, num_train_steps, num_warmup_steps, global_step):
  """Linear warm-up to init_lr over num_warmup_steps, then linear decay to 0 at num_train_steps.

  Warm-up uses (step + 1) so that the very first step already learns; the decay
  part is Google's polynomial decay with power 1.
  """
  step = tf.cast(global_step, tf.float32)
  total = float(max(num_train_steps, 1))
  decayed = init_lr * (1.0 - tf.minimum(step, total) / total)
  if not num_warmup_steps:
    return decayed
  warmup = init_lr * (step + 1.0) / float(num_warmup_steps)
  return tf.where(step < float(num_warmup_steps), warmup, decayed)


class AdamWeightDecayOptimizer(tf.train.Optimizer):
  """Adam with decoupled weight decay and no bias correction (BERT's optimizer).

  Its slots are variables named `<param>/adam_m` and `<param>/adam_v`, as in
  Google's checkpoints. It does not increment the global step.

  kernels: a modeling.fused.FusedKernels (one CPU device): each variable's update, with
  its gradient's clipping factor (apply_gradients' grad_scale), runs as one fused kernel.
  """

  def __init__(self, learning_rate, weight_decay_rate=0.0, beta_1=0.9, beta_2=0.999,
               epsilon=1e-6, exclude_from_weight_decay=None, name="AdamWeightDecayOptimizer",
               kernels=None):
    super(AdamWeightDecayOptimizer, self).__init__(False, name)
    self.kernels = kernels
    self.learning_rate = learning_rate
    self.weight_decay_rate = weight_decay_rate
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.exclude_from_weight_decay = exclude_from_weight_decay or ()

  def slots(self, param):
    """The (adam_m, adam_v) variables of a parameter, created on first use."""
    param_name = variable_name(param.name)
    with tf.variable_scope(tf.get_variable_scope(), reuse=tf.AUTO_REUSE):
      return tuple(tf.get_variable(param_name + suffix, shape=param.shape.as_list(),
                                   dtype=tf.float32, trainable=False,
                                   initializer=tf.zeros_initializer())
                   for suffix in ("/adam_m", "/adam_v"))

  def apply_gradients(self, grads_and_vars, global_step=None, name=None, grad_scale=None):
    """grad_scale: what every gradient is multiplied by first (global_norm_scale's
    clipping), within the fused kernel; only with kernels (without them, pass clipped
    gradients)."""
    if grad_scale is not None and self.kernels is None:
      raise ValueError("grad_scale is applied by the fused kernel: clip the gradients first")
    updates = []
    for grad, param in grads_and_vars:
      if grad is None or param is None:
        continue
      if isinstance(grad, tf.IndexedSlices):
        grad = tf.convert_to_tensor(grad)  # Every row's moments decay, touched or not.
      if self.kernels is not None:
        updates.append(self._apply_fused(grad, param, 1.0 if grad_scale is None else grad_scale))
      else:
        updates.append(self._apply_dense(grad, param))
    return tf.group(*updates, name=name)

  def _decay_factor(self, param):
    """What param is multiplied by before Adam's step: 1 - lr * the weight-decay rate."""
    return 1.0 - self.learning_rate * self.weight_decay_rate

  def _apply_fused(self, grad, param, grad_scale):
    """_apply_dense's arithmetic, with the gradient's clipping, in one kernel."""
    m, v = self.slots(param)
    decay = (self._decay_factor(param) if self.uses_weight_decay(variable_name(param.name))
             else 1.0)
    return self.kernels.adam_weight_decay(
        param, m, v, grad, tf.cast(grad_scale, tf.float32),
        tf.cast(self.learning_rate, tf.float32), tf.cast(decay, tf.float32), self.beta_1,
        self.beta_2, self.epsilon)

  def _apply_dense(self, grad, param):
    """param -= lr * (m / (sqrt(v) + eps) + wd * param), with m and v updated first.

    Written as a weight-decay scaling of param followed by TensorFlow's fused Adam
    kernel with both beta powers 0, which turns off its bias correction. That is
    the same arithmetic in three passes over memory instead of about a dozen,
    which matters for the 30522-row embedding table on every step.
    """
    m, v = self.slots(param)
    decay = []
    if self.uses_weight_decay(variable_name(param.name)):
      # After the gradient: nothing else orders this read and assign after the forward
      # pass's read of param, which would otherwise race them and sometimes see the
      # decayed value. A raw assign of the replica's own copy: under a MirroredStrategy,
      # param.assign would ask for an aggregation; every replica applies the same update.
      with tf.control_dependencies([grad]):
        decay.append(tf.raw_ops.AssignVariableOp(
            resource=param.handle,
            value=param.read_value() * self._decay_factor(param)))
    with tf.control_dependencies(decay):
      return tf.raw_ops.ResourceApplyAdam(
          var=param.handle, m=m.handle, v=v.handle, beta1_power=0.0, beta2_power=0.0,
          lr=self.learning_rate, beta1=self.beta_1, beta2=self.beta_2, epsilon=self.epsilon,
          grad=grad)

  def uses_weight_decay(self, param_name):
    if not self.weight_decay_rate:
      return False
    return not any(re.search(p, param_name) for p in self.exclude_from_weight_decay)


def variable_name(name):
  """'bert/x/kernel:0' -> 'bert/x/kernel'."""
  match = re.match("^(.*):\\d+$", name)
  return match.group(1) if match else name


def global_norm_scale(gradients, clip_norm):
  """What tf.clip_by_global_norm multiplies every gradient by: clip_norm / max(their
  global norm, clip_norm); NaN when the norm is not finite. Computed as it does, so that
  grad * this scale is its clipped gradient exactly."""
  norm = tf.global_norm(gradients)
  scale = clip_norm * tf.minimum(1.0 / norm, tf.constant(1.0, norm.dtype) / clip_norm)
  return scale + (norm - norm)


def create_train_op(loss, init_lr, num_train_steps, num_warmup_steps, use_tpu,
                    accumulation_steps=1, loss_scale=None, cross_shard=None, kernels=None):
  """Builds the train op: clipped gradients, AdamWeightDecay, and a global-step increment.

  On TPU the optimizer is wrapped in CrossShardOptimizer, which scales the loss by
  1/num_shards and sums gradients across cores. Clipping happens per core before
  that sum, as in Google's run_classifier.

  With accumulation_steps = k > 1 (not on TPU), each run of the op adds one
  batch's gradients to an accumulator, and every k-th run applies their mean:
  the update of one batch k times larger. The global step counts updates.

  With a loss_scale (a DynamicLossScale, for float16), the loss is scaled before
  differentiation and a step whose gradients are not finite is skipped (the
  global step still advances, so training always ends).

  kernels (a modeling.fused.FusedKernels, one CPU device): each variable's clipping,
  weight decay and Adam step run as one fused kernel, with the same arithmetic.
  """
  global_step = tf.train.get_or_create_global_step()
  with tf.name_scope(UPDATE_SCOPE):
    learning_rate = learning_rate_schedule(init_lr, num_train_steps, num_warmup_steps,
                                           global_step)
  optimizer = AdamWeightDecayOptimizer(learning_rate, weight_decay_rate=WEIGHT_DECAY_RATE,
                                       exclude_from_weight_decay=NO_DECAY_PATTERNS,
                                       kernels=kernels)
  if use_tpu and accumulation_steps > 1:
    raise ValueError("gradient accumulation is not supported on TPU")
  if kernels is not None and (use_tpu or cross_shard):
    raise ValueError("the fused optimizer kernel runs on a CPU, not on TPU")
  if use_tpu if cross_shard is None else cross_shard:
    optimizer = tf.tpu.CrossShardOptimizer(optimizer)
  if loss_scale is not None and accumulation_steps > 1:
    raise ValueError("float16 loss scaling and gradient accumulation cannot be combined")
  scaled = loss_scale.scale_loss(loss) if loss_scale is not None else loss
  grads, tvars = _trained(optimizer.compute_gradients(scaled, tf.trainable_variables()))
  grads = sum_over_replicas(grads, tvars)

  def apply(gradients):
    with tf.name_scope(UPDATE_SCOPE):
      if kernels is not None:
        apply_op = optimizer.apply_gradients(
            zip(gradients, tvars), global_step=global_step,
            grad_scale=global_norm_scale(gradients, CLIP_NORM))
      else:
        clipped, _ = tf.clip_by_global_norm(gradients, clip_norm=CLIP_NORM)
        apply_op = optimizer.apply_gradients(zip(clipped, tvars), global_step=global_step)
      with tf.control_dependencies([apply_op]):
        return tf.group(apply_op, global_step.assign_add(1))

  if loss_scale is not None or accumulation_steps > 1:
    for param in tvars:
      optimizer.slots(param)  # made outside the tf.cond below: TF1 cannot initialise them inside
  if loss_scale is not None:
    return _loss_scaled_train_op(grads, apply, loss_scale, global_step)
  if accumulation_steps <= 1:
    return apply(grads)
  return _accumulating_train_op(grads, tvars, apply, accumulation_steps)


def _trained(grads_and_vars):
  """(gradients, variables) of the variables the loss depends on. Others (e.g. BERT's
  pooler under mean pooling) have no gradient: they are left as they are, and logged."""
  unused = [v.op.name for g, v in grads_and_vars if g is None]
  if unused:
    tf.logging.info("not trained (the loss does not depend on them): %s", ", ".join(unused))
  used = [(g, v) for g, v in grads_and_vars if g is not None]
  return [g for g, _ in used], [v for _, v in used]


def _loss_scaled_train_op(grads, apply, loss_scale, global_step):
  grads, finite = loss_scale.unscale(grads)
  step = tf.cond(finite, lambda: apply(grads), lambda: tf.group(global_step.assign_add(1)))
  with tf.control_dependencies([step]):
    return tf.group(step, loss_scale.update(finite))


def _accumulating_train_op(grads, tvars, apply, steps):
  accumulators = [tf.get_variable(variable_name(v.name) + "/grad_accum", v.shape.as_list(),
                                  tf.float32, tf.zeros_initializer(), trainable=False)
                  for v in tvars]
  micro_step = tf.get_variable("grad_accum_step", [], tf.int64, tf.zeros_initializer(),
                               trainable=False)
  added = [a.assign_add(tf.convert_to_tensor(g)) for a, g in zip(accumulators, grads)]
  with tf.control_dependencies(added):
    count = micro_step.assign_add(1)

  def apply_mean():
    update = apply([a.read_value() / float(steps) for a in accumulators])
    with tf.control_dependencies([update]):
      return tf.group(*[a.assign(tf.zeros_like(a)) for a in accumulators])

  return tf.cond(tf.equal(count % steps, 0), apply_mean, tf.no_op)
