"""Data-parallel training through TensorFlow's own strategies (MirroredStrategy on the
GPUs of one machine, MultiWorkerMirroredStrategy on several machines), and the replica
arithmetic the train op needs under them."""

import tensorflow.compat.v1 as tf


def _several_replicas():
  """The replica context when several replicas compute this step together, else None
  (outside a strategy, or under one with a single replica)."""
  context = tf.distribute.get_replica_context()
  if context is None or context.num_replicas_in_sync == 1:
    return None
  return context


def sum_over_replicas(gradients, variables):
  """Each gradient summed over the replicas, the same on every replica (the identity on
  one), placed where its variable lives.

  Under a strategy, a v1 Optimizer's compute_gradients divides each replica's loss by
  the number of replicas (and the Estimator then reports the replicas' mean loss), so
  the sum is the gradient of the global batch's mean loss. The train op clips and
  applies it on every replica, as one device would with the whole batch.
  (ReplicaContext.all_reduce would do, but on TF 1.15 it fails on mirrored variables.)
  """
  context = _several_replicas()
  if context is None:
    return gradients
  # The embedding's gradient stays IndexedSlices (the replicas' rows gathered, not summed
  # into a dense table): clip_by_global_norm then sees the norm one device sees, whose
  # slices hold one row per token, repeated tokens apart. (Dense, the clipped update
  # differed from one device's as soon as the norm reached the clip.)
  pairs = list(zip(gradients, variables))

  def reduce_all(strategy, per_replica_pairs):
    return strategy.extended.batch_reduce_to(tf.distribute.ReduceOp.SUM, per_replica_pairs)

  return list(context.merge_call(reduce_all, args=(pairs,)))


def mean_over_replicas(value):
  """A scalar's mean over the replicas (itself on one): the training loss that logs and
  hooks read is the global batch's, not the first replica's share of it."""
  context = _several_replicas()
  if context is None:
    return value

  def reduce_mean(strategy, per_replica):
    return strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None)

  return context.merge_call(reduce_mean, args=(value,))
