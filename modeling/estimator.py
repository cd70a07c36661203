"""Building the TPUEstimator: one construction for Cloud TPU and for the local CPU/GPU."""

import tensorflow.compat.v1 as tf


def build_estimator(model_fn, output_dir, use_tpu, train_batch_size, eval_batch_size,
                    predict_batch_size, save_checkpoints_steps=1000, iterations_per_loop=1000,
                    num_tpu_cores=8, seed=None, log_step_count_steps=100, tpu_name=None,
                    tpu_zone=None, gcp_project=None, master=None, session_config=None):
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
      log_step_count_steps=log_step_count_steps, session_config=session_config,
      tpu_config=tf.estimator.tpu.TPUConfig(
          iterations_per_loop=iterations_per_loop, num_shards=num_tpu_cores,
          per_host_input_for_training=tf.estimator.tpu.InputPipelineConfig.PER_HOST_V2))
  return tf.estimator.tpu.TPUEstimator(
      use_tpu=use_tpu, model_fn=model_fn, config=run_config,
      train_batch_size=train_batch_size, eval_batch_size=eval_batch_size,
      predict_batch_size=predict_batch_size)
