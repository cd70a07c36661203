"""Building the TPUEstimator: one construction for Cloud TPU and for the local CPU/GPU."""

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


def build_estimator(model_fn, output_dir, use_tpu, train_batch_size, eval_batch_size,
                    predict_batch_size, save_checkpoints_steps=1000, iterations_per_loop=1000,
                    num_tpu_cores=8, seed=None, log_step_count_steps=100, tpu_name=None,
                    tpu_zone=None, gcp_project=None, master=None, session_config=None,
                    save_summary_steps=100):
  """A TPUEstimator; with use_tpu=False the same graph runs on the local device.

  Batch sizes are global. On TPU, TPUEstimator hands each core
  batch_size / num_tpu_cores through params['batch_size'] (PER_HOST_V2 input),
  and runs iterations_per_loop steps on the device between host round trips.
  """
  resolver = None
  if use_tpu and tpu_name:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu_name, zone=tpu_zone, project=gcp_project)
  run_config = tf.estimator.tpu.RunConfig(
      cluster=resolver, master=master, model_dir=output_dir,
      save_checkpoints_steps=save_checkpoints_steps, tf_random_seed=seed,
      save_summary_steps=save_summary_steps,
      log_step_count_steps=log_step_count_steps, session_config=session_config,
      tpu_config=tf.estimator.tpu.TPUConfig(
          iterations_per_loop=iterations_per_loop, num_shards=num_tpu_cores,
          per_host_input_for_training=tf.estimator.tpu.InputPipelineConfig.PER_HOST_V2))
  return tf.estimator.tpu.TPUEstimator(
      use_tpu=use_tpu, model_fn=model_fn, config=run_config,
      train_batch_size=train_batch_size, eval_batch_size=eval_batch_size,
      predict_batch_size=predict_batch_size)


def describe_device(use_tpu, tpu_name=None, master=None, num_tpu_cores=8):
  """{"kind": TPU, GPU or CPU, "description": what it is, "count": how many} of the
  device this run computes on, for the run's summary."""
  if use_tpu:
    return {"kind": "TPU", "count": num_tpu_cores,
            "description": "Cloud TPU %s, %d cores" % (tpu_name or master, num_tpu_cores)}
  gpus = tf.config.experimental.list_physical_devices("GPU")
  if gpus:
    from tensorflow.python.client import device_lib  # the only GPU-model query on both TFs
    names = [d.physical_device_desc for d in device_lib.list_local_devices()
             if d.device_type == "GPU"]
    models = [part.split("name: ", 1)[1] for desc in names for part in desc.split(", ")
              if part.startswith("name: ")]
    return {"kind": "GPU", "count": len(gpus),
            "description": "%d x %s" % (len(gpus), models[0] if models else "GPU")}
  return {"kind": "CPU", "count": os.cpu_count(),
          "description": "%s, %d cores" % (_cpu_model(), os.cpu_count())}


def _cpu_model():
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  import platform
  return platform.processor() or platform.machine()
