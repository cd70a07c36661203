"""Building the TPUEstimator: one construction for Cloud TPU and for the local CPU/GPU."""

import json
import os

import tensorflow.compat.v1 as tf

# On CPU, a global JIT level alone compiles nothing: auto-clustering must be switched
# on for the CPU device too. TensorFlow reads this before its first session.
XLA_CPU_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
# The collection in which the Estimator caches its global-step read (training_util's name,
# the same on TF 1.15 and 2.15; it is not part of the public API).
GLOBAL_STEP_READ_KEY = "global_step_read_op_cache"


def xla_session_config():
  """A session config that JIT-compiles clusters of the graph with XLA, on CPU and GPU."""
  flags = os.environ.get("TF_XLA_FLAGS", "")
  if XLA_CPU_FLAGS not in flags:
    os.environ["TF_XLA_FLAGS"] = (flags + " " + XLA_CPU_FLAGS).strip()
  config = tf.ConfigProto()
  config.graph_options.optimizer_options.global_jit_level = tf.OptimizerOptions.ON_1
  return config


def plain_global_step_read():
  """Re-registers the Estimator's global-step read as read_value() + 0.

  On TF 1.15 the Estimator's own read (initialized_value() + 0) stays 0 when XLA
  clusters it, so StopAtStepHook never stops training. A plain read does not.
  """
  graph = tf.get_default_graph()
  global_step = tf.train.get_global_step()
  if global_step is None:
    return
  graph.clear_collection(GLOBAL_STEP_READ_KEY)
  graph.add_to_collection(GLOBAL_STEP_READ_KEY, global_step.read_value() + 0)


GRAPH_FILE = "graph.pbtxt"  # (what the Estimator's saver writes into the model folder)


class CheckpointSaver(tf.train.CheckpointSaverHook):
  """The Estimator's own checkpoint saver (every save_steps steps and at the end of a
  training), less what it writes when a session starts: a checkpoint of the state the
  session began in, which is either the checkpoint it has just restored or the start
  that a run from nothing makes again (BERT-Base's weights and Adam moments: 1.3 GB,
  written again by every resumed run and every stretch between evaluations), and, into
  a folder that holds them already, the graph files (graph.pbtxt; the graph and meta
  graph in TensorBoard's events). Given to estimator.train as a hook, it takes the place
  of the Estimator's saver, which then adds none (checkpoint_hooks says where)."""

  def after_create_session(self, session, coord):
    self._session_starting = True
    try:
      if tf.io.gfile.exists(os.path.join(self._checkpoint_dir, GRAPH_FILE)):
        self._timer.update_last_triggered_step(session.run(self._global_step_tensor))
      else:
        super(CheckpointSaver, self).after_create_session(session, coord)
    finally:
      self._session_starting = False

  def _save(self, session, step):
    if getattr(self, "_session_starting", False):
      return False  # (a stop is never asked for here)
    return super(CheckpointSaver, self)._save(session, step)


def checkpoint_hooks(output_dir, device, training, cluster=None):
  """The hooks that save a training's checkpoints in place of the Estimator's own saver:
  [CheckpointSaver] on one machine, checkpointing every training.save_checkpoints_steps
  steps; [] (the Estimator's own, unchanged) on a TPU, whose TPUEstimator adds its saver
  to its step's hooks, in a cluster, where only the chief saves, or without checkpoints."""
  if device.use_tpu or cluster is not None or not training.save_checkpoints_steps:
    return []
  return [CheckpointSaver(output_dir, save_steps=training.save_checkpoints_steps)]


def build_estimator(model_fn, output_dir, device, training, cluster=None, session_config=None,
                    replica_device_type="GPU", tpu_resolver=None):
  """A TPUEstimator over model_fn, writing into output_dir; with device.use_tpu False the
  same graph runs on the local device.

  device (spec.options.DeviceOptions): use_tpu, the TPU (tpu_name or master, tpu_zone,
  gcp_project), num_tpu_cores and iterations_per_loop, num_gpus, use_xla.
  training (spec.options.TrainingOptions): the three batch sizes, seed,
  save_checkpoints_steps, save_summary_steps and log_every_steps (the Estimator logs
  every ten of them).

  Batch sizes are global. On TPU, TPUEstimator hands each core
  batch_size / num_tpu_cores through params['batch_size'] (PER_HOST_V2 input: on a pod
  every host calls input_fn, see data.input_fn.pipeline_of), and runs
  iterations_per_loop steps on the device between host round trips.
  num_gpus > 1 trains on that many local devices of replica_device_type with
  TensorFlow's MirroredStrategy instead, and a cluster (spec.cluster.Cluster, from
  TF_CONFIG) on several machines with its MultiWorkerMirroredStrategy (see
  ReplicatedEstimator). session_config, when given, replaces the one of use_xla.
  tpu_resolver: what finds the TPU of device.tpu_name (TPUClusterResolver; tests pass a
  recorder).
  """
  if session_config is None and device.use_xla:
    session_config = xla_session_config()
  common = dict(model_dir=output_dir, save_checkpoints_steps=training.save_checkpoints_steps,
                tf_random_seed=training.seed, save_summary_steps=training.save_summary_steps,
                log_step_count_steps=training.log_every_steps * 10,
                session_config=session_config)
  batch_sizes = (training.train_batch_size, training.eval_batch_size,
                 training.predict_batch_size)
  if cluster is not None:
    return ReplicatedEstimator(model_fn, common, multi_worker_strategy(cluster), *batch_sizes,
                               cluster=cluster)
  if device.num_gpus > 1:
    return ReplicatedEstimator(model_fn, common,
                               mirrored_strategy(device.num_gpus, replica_device_type),
                               *batch_sizes)
  resolver = None
  if device.use_tpu and device.tpu_name:  # (a name, a grpc:// address, or "local")
    resolver = (tpu_resolver or tf.distribute.cluster_resolver.TPUClusterResolver)(
        device.tpu_name, zone=device.tpu_zone, project=device.gcp_project)
  run_config = tf.estimator.tpu.RunConfig(
      cluster=resolver, master=device.master,
      tpu_config=tf.estimator.tpu.TPUConfig(
          iterations_per_loop=device.iterations_per_loop, num_shards=device.num_tpu_cores,
          per_host_input_for_training=tf.estimator.tpu.InputPipelineConfig.PER_HOST_V2),
      **common)
  return tf.estimator.tpu.TPUEstimator(
      use_tpu=device.use_tpu, model_fn=model_fn, config=run_config,
      train_batch_size=batch_sizes[0], eval_batch_size=batch_sizes[1],
      predict_batch_size=batch_sizes[2])


# The evaluator task's evaluations go to <model_dir>/eval_<this>.
EVALUATOR_NAME = "evaluator"


class BatchSplitError(ValueError):
  """A global train batch that does not split evenly over the strategy's replicas."""


def replica_devices(num_replicas, device_type="GPU"):
  return ["/%s:%d" % (device_type.lower(), i) for i in range(num_replicas)]


def mirrored_strategy(num_replicas, device_type="GPU"):
  with tf.Graph().as_default():  # TF 2.15 would otherwise check the devices eagerly,
    # against the process's devices rather than those of the sessions Estimator creates.
    return tf.distribute.MirroredStrategy(devices=replica_devices(num_replicas, device_type))


def multi_worker_strategy(cluster):
  """The collective all-reduce strategy of TF_CONFIG's cluster (every GPU of each machine,
  or its CPU), built from TF_CONFIG itself; None on the evaluator, which evaluates on one
  device (the strategy cannot be built there: the evaluator is outside the cluster)."""
  if cluster.is_evaluator:
    return None
  # (Not in a graph of its own, unlike mirrored_strategy: TF 2.15 copies it for each task
  # eagerly, and its copies then name devices that no graph's session has.)
  return tf.distribute.experimental.MultiWorkerMirroredStrategy()


class ReplicatedEstimator(object):
  """The TPUEstimator interface (train, evaluate, predict; model_fn returning a
  TPUEstimatorSpec; input_fn(params) batching params['batch_size']) over a
  tf.estimator.Estimator whose training runs under a distribution strategy: a
  MirroredStrategy over local devices, or with a cluster (TF_CONFIG) a
  MultiWorkerMirroredStrategy over its machines.

  TPUEstimator itself cannot: on TF 1.15 it does not hand input_fn the strategy's
  input context. In training each replica takes train_batch_size / num_replicas
  examples per step, so the batch size stays global; the train op sums the replicas'
  gradients of their 1/num_replicas-scaled losses (modeling.replicas), the global
  batch's mean gradient. On several machines each one's input_fn reads its own
  shards (params 'input_pipeline_id' and 'num_input_pipelines'), and training goes
  through tf.estimator.train_and_evaluate, the only way Estimator trains multi-worker.
  Evaluation and prediction run on one device: the exact
  metrics (ROC-AUC, Spearman) gather every prediction, which the strategy's per-replica
  metric variables cannot, and Estimator.predict takes no strategy.
  """

  def __init__(self, model_fn, run_config_args, strategy, train_batch_size, eval_batch_size,
               predict_batch_size, cluster=None):
    self.num_replicas = strategy.num_replicas_in_sync if strategy is not None else 1
    if train_batch_size % self.num_replicas:
      raise BatchSplitError("the train batch size %d does not split over %d replicas" %
                            (train_batch_size, self.num_replicas))
    self.cluster = cluster
    self._batch_sizes = {"train": train_batch_size // self.num_replicas,
                         "eval": eval_batch_size, "predict": predict_batch_size}
    if cluster is not None:
      _check_the_environment_agrees(cluster)
    config = tf.estimator.RunConfig(train_distribute=strategy, **run_config_args)
    self._estimator = tf.estimator.Estimator(_as_estimator_model_fn(model_fn), config=config)

  def train(self, input_fn, max_steps=None, hooks=None):
    if self.cluster is None:
      self._estimator.train(self._batched(input_fn, "train"), max_steps=max_steps,
                            hooks=hooks)
    else:
      tf.estimator.train_and_evaluate(
          self._estimator,
          tf.estimator.TrainSpec(self._batched(input_fn, "train"), max_steps=max_steps,
                                 hooks=hooks),
          tf.estimator.EvalSpec(_only_on_the_evaluator))
    return self

  def evaluate_checkpoints(self, input_fn, until_step):
    """The evaluator's loop: evaluates each new checkpoint the training tasks save, until
    one of step until_step or later, for TensorBoard in <model_dir>/eval_EVALUATOR_NAME
    (a folder of its own: the chief's evaluation writes <model_dir>/eval, and two
    writers on one host could pick the same event file name)."""
    tf.estimator.train_and_evaluate(
        self._estimator,
        tf.estimator.TrainSpec(_only_on_the_training_tasks, max_steps=until_step),
        tf.estimator.EvalSpec(self._batched(input_fn, "eval"), steps=None,
                              name=EVALUATOR_NAME, start_delay_secs=0, throttle_secs=1))

  def evaluate(self, input_fn, steps=None, hooks=None, checkpoint_path=None, name=None):
    return self._estimator.evaluate(self._batched(input_fn, "eval"), steps=steps, hooks=hooks,
                                    checkpoint_path=checkpoint_path, name=name)

  def predict(self, input_fn, predict_keys=None, hooks=None, checkpoint_path=None,
              yield_single_examples=True):
    return self._estimator.predict(self._batched(input_fn, "predict"),
                                   predict_keys=predict_keys, hooks=hooks,
                                   checkpoint_path=checkpoint_path,
                                   yield_single_examples=yield_single_examples)

  def _batched(self, input_fn, mode):
    batch_size = self._batch_sizes[mode]

    def input_fn_with_batch_size(params, input_context=None):
      params = dict(params, batch_size=batch_size)
      if mode == "train":  # (each of this pipeline's replicas takes a batch of every step)
        params.update(batches_per_step=self.num_replicas)
      if input_context is not None:  # one pipeline per machine under a multi-worker strategy
        params.update(input_pipeline_id=input_context.input_pipeline_id,
                      num_input_pipelines=input_context.num_input_pipelines,
                      batches_per_step=max(1, input_context.num_replicas_in_sync //
                                           input_context.num_input_pipelines))
      return input_fn(params)

    return input_fn_with_batch_size


def _check_the_environment_agrees(cluster):
  """RunConfig and the strategy read TF_CONFIG from the environment themselves: it must
  name the task of the cluster this run was given."""
  task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task") or {}
  if (task.get("type"), task.get("index", 0)) != (cluster.task_type, cluster.task_index):
    raise ValueError("the TF_CONFIG environment variable names the task %s %s, not the "
                     "cluster's %s %d" % (task.get("type"), task.get("index", 0),
                                          cluster.task_type, cluster.task_index))


def _only_on_the_evaluator(params):
  raise RuntimeError("a training task ran an evaluation: only TF_CONFIG's evaluator task "
                     "evaluates during a multi-worker run")


def _only_on_the_training_tasks(params):
  raise RuntimeError("the evaluator task ran training: only the chief and the workers train")


def _as_estimator_model_fn(model_fn):
  def estimator_model_fn(features, labels, mode, params):
    return model_fn(features, labels, mode, params).as_estimator_spec()
  return estimator_model_fn
