"""Training on more than one device: the GPUs of one machine, the machines of a TF_CONFIG
cluster, the hosts of a TPU pod slice. What each needs of the options, and what one task
of a cluster does."""

import glob
import logging
import os
import socket
import time

import tensorflow.compat.v1 as tf

from data.tfrecord import shard_sizes
from spec.run_errors import FlagError, ProcessFault

log = logging.getLogger(__name__)

# Cores a TPU host feeds (v2-8, v3-8, and each host of a v2 or v3 pod slice).
CORES_PER_TPU_HOST = 8


def flags_not_written_for_replicas(device, training):
  """[(flag, what of it)] of the flags set whose updates replicas cannot run yet."""
  return [(name, what) for name, what, used in (
      ("use_fp16", "its loss-scale update is", device.use_fp16),
      ("gradient_accumulation_steps", "its accumulators are",
       training.gradient_accumulation_steps > 1)) if used]


def check_gpu_replicas(device, training, do_train):
  """--num_gpus other than 0 or 1: MirroredStrategy over the GPUs of this machine."""
  if device.num_gpus < 0:
    raise FlagError("--num_gpus=%d must be 0 or more" % device.num_gpus)
  if device.use_tpu:
    raise FlagError("--num_gpus is for the GPUs of this machine; a TPU spreads each batch "
                    "over --num_tpu_cores. Drop --num_gpus")
  for name, what in flags_not_written_for_replicas(device, training):
    raise FlagError("--%s cannot be combined with --num_gpus=%d yet (%s not written for "
                    "replicas): drop one of them" % (name, device.num_gpus, what))
  if training.train_batch_size % device.num_gpus:
    raise FlagError("--train_batch_size=%d is the global batch: it must split evenly over "
                    "--num_gpus=%d (each GPU takes an equal share)"
                    % (training.train_batch_size, device.num_gpus))
  if do_train:
    gpus = len(tf.config.experimental.list_physical_devices("GPU"))
    if gpus < device.num_gpus:
      raise FlagError("--num_gpus=%d, but TensorFlow sees %d GPU%s on this machine (check "
                      "CUDA_VISIBLE_DEVICES and that TensorFlow's GPU build is installed)"
                      % (device.num_gpus, gpus, "" if gpus == 1 else "s"))


# The TPU of a TPU VM: attached to this machine, so TPUClusterResolver(tpu="local") finds it,
# and it reads and writes this machine's disk.
LOCAL_TPU = "local"
NO_TPU = ("--use_tpu found no TPU: name one with --tpu_name (or --master), set TPU_NAME (or "
          "COLAB_TPU_ADDR, as a Colab TPU runtime does), or run on a TPU VM, whose own TPU "
          "is used (--tpu_name=local)")


def with_tpu_found(c, environ, on_tpu_vm):
  """c with --use_tpu's TPU named, and the log saying where it came from: the flags'
  (--tpu_name, --master), else TPU_NAME's, else COLAB_TPU_ADDR's (a Colab TPU node, as
  grpc://<address>), else this machine's own when on_tpu_vm (tpu_name 'local'). A FlagError
  names the three ways to give one when there is none. environ: the process's
  environment, read by the entry point. Without --use_tpu, c unchanged."""
  device = c.device
  if not device.use_tpu:
    return c
  if device.tpu_name or device.master:
    log.info("TPU: %s (from the flags)", device.tpu_name or device.master)
    return c
  if environ.get("TPU_NAME"):
    name, source = environ["TPU_NAME"], "TPU_NAME"
  elif environ.get("COLAB_TPU_ADDR"):
    address = environ["COLAB_TPU_ADDR"]
    name = address if address.startswith("grpc://") else "grpc://" + address
    source = "COLAB_TPU_ADDR, a Colab TPU"
  elif on_tpu_vm:
    name, source = LOCAL_TPU, "this TPU VM's own TPU"
  else:
    raise FlagError(NO_TPU)
  log.info("TPU: %s (from %s)", name, source)
  return c.replace(tpu_name=name)


# The PCI vendor id of Google's TPU chips (as a TPU VM's /sys lists them).
GOOGLE_PCI_VENDOR = "0x1ae0"


def on_tpu_vm(dev="/dev", sys_devices="/sys/bus/pci/devices"):
  """Whether this machine is a TPU VM: its TPU chips are devices here, accel0.. (v2 to v4),
  or vfio groups (from v5) of PCI devices of Google's (a host that hands other devices to
  vfio, such as a GPU passed through to a VM, is none)."""
  if glob.glob(os.path.join(dev, "accel[0-9]*")):
    return True
  if not glob.glob(os.path.join(dev, "vfio", "[0-9]*")):
    return False
  for vendor in glob.glob(os.path.join(sys_devices, "*", "vendor")):
    try:
      with open(vendor) as f:
        if f.read().strip().lower() == GOOGLE_PCI_VENDOR:
          return True
    except OSError:
      continue
  return False


def check_tpu(device, training, modes, output_dir, given=frozenset()):
  """--use_tpu: an address, a bucket to write to (but on a TPU VM), batches that split over
  the cores, and on a pod slice what every host can do."""
  if not (device.tpu_name or device.master):
    raise FlagError(NO_TPU)
  if device.tpu_name and device.master:
    raise FlagError("--tpu_name=%s and --master=%s both name the TPU: pass one of them"
                    % (device.tpu_name, device.master))
  local = device.tpu_name == LOCAL_TPU
  if local and tf.__version__.startswith("1."):
    raise FlagError("--tpu_name=local (a TPU VM's own TPU) needs TF 2.15 with the TPU VM's "
                    "TPU runtime: TF 1.15 reaches TPU nodes only (a name or grpc:// address)")
  if local and device.num_tpu_cores > CORES_PER_TPU_HOST and not output_dir.startswith("gs://"):
    raise FlagError("--num_tpu_cores=%d is a pod slice of several TPU VMs, each with a disk of "
                    "its own: --output_dir must be on Cloud Storage (gs://bucket/path)"
                    % device.num_tpu_cores)
  if not local and not output_dir.startswith("gs://"):
    raise FlagError("--use_tpu needs --output_dir on Cloud Storage (gs://bucket/path): the TPU "
                    "cannot write to this machine's disk (a TPU VM's own TPU, "
                    "--tpu_name=local, can)")
  for name in ("train_batch_size", "eval_batch_size", "predict_batch_size"):
    if getattr(training, name) % device.num_tpu_cores:
      raise FlagError("--%s=%d must be a multiple of --num_tpu_cores=%d (each core gets an "
                      "equal share)" % (name, getattr(training, name), device.num_tpu_cores))
  if device.num_tpu_cores > CORES_PER_TPU_HOST:
    _check_pod(device, training, modes, given)


def _check_pod(device, training, modes, given):
  """A pod slice (more cores than one host has): each host reads its own record shards."""
  hosts, remainder = divmod(device.num_tpu_cores, CORES_PER_TPU_HOST)
  if remainder:
    raise FlagError("--num_tpu_cores=%d: a pod slice has a multiple of %d cores (v3-32 has "
                    "32)" % (device.num_tpu_cores, CORES_PER_TPU_HOST))
  if modes.do_train and "num_record_shards" in given and device.num_record_shards % hosts:
    raise FlagError("--num_tpu_cores=%d is %d hosts, and each host reads record shards of "
                    "its own, as many as every other host: pass --num_record_shards=%d (or a "
                    "multiple of it)" % (device.num_tpu_cores, hosts, hosts))
  if training.num_folds:
    raise FlagError("--num_folds on a pod slice would evaluate and predict each held-out "
                    "fold on every host: cross-validate on one TPU host (--num_tpu_cores=8)")
  for mode in ("do_eval", "do_predict"):
    if getattr(modes, mode):
      raise FlagError("--%s on a pod slice (--num_tpu_cores=%d) would read the dev or test "
                      "file on every host: train on the pod, then run --%s from the same "
                      "--output_dir on one TPU host (--num_tpu_cores=8), a GPU or the CPU"
                      % (mode, device.num_tpu_cores, mode))


def tpu_hosts(device):
  """The TPU hosts that feed a run (1 off a TPU)."""
  return max(1, device.num_tpu_cores // CORES_PER_TPU_HOST) if device.use_tpu else 1


def input_pipelines(device, cluster):
  """How many input pipelines feed each training step: one per machine of a cluster or per
  TPU host, else one."""
  return cluster.num_workers if cluster is not None else tpu_hosts(device)


def own_record_shards(cluster, num_record_shards):
  """The train record shards one task of a cluster reads, and so the only ones it
  featurises: the chief's are pipeline 0's and worker i's pipeline i + 1's (every
  num_workers-th shard from there, as data.input_fn.files_of_pipeline takes them); the
  evaluator, which trains on none, only counts the rows. None (every shard) off a
  cluster."""
  if cluster is None:
    return None
  if cluster.is_evaluator:
    return []
  pipeline = 0 if cluster.is_chief else cluster.task_index + 1
  return list(range(pipeline, num_record_shards, cluster.num_workers))


def check_every_pipeline_has_rows(num_examples, num_record_shards, pipelines):
  """Each machine or TPU host reads every pipelines-th record shard; an input pipeline
  without a row would end while the others wait for it."""
  if pipelines == 1:
    return
  sizes = shard_sizes(num_examples, num_record_shards)
  for pipeline in range(pipelines):
    if not sum(sizes[pipeline::pipelines]):
      raise FlagError("%d training rows in --num_record_shards=%d shards leave the input "
                      "pipeline of machine or TPU host %d of %d without a row: pass fewer "
                      "shards" % (num_examples, num_record_shards, pipeline, pipelines))


def check_cluster(modes, device, training, cluster, given=frozenset()):
  """The options of one task of a multi-worker run (the same on every task)."""
  if not modes.do_train:
    raise FlagError("TF_CONFIG sets up a cluster for training: add --do_train, or unset "
                    "TF_CONFIG to evaluate or predict on this machine alone")
  for name, why, used in (
      [("use_tpu", "a TPU pod spreads training over its own hosts", device.use_tpu),
       ("num_gpus", "each machine of the cluster trains on all the GPUs it sees (choose them "
                    "with CUDA_VISIBLE_DEVICES)", device.num_gpus)] +
      [(name, what + " not written for replicas", True)
       for name, what in flags_not_written_for_replicas(device, training)] +
      [("eval_every_steps", "add an \"evaluator\" task to TF_CONFIG: it evaluates every "
                            "checkpoint the chief saves", training.eval_every_steps),
       ("num_folds", "cross-validate without TF_CONFIG, on one machine", training.num_folds)]):
    if used:
      raise FlagError("--%s cannot be used with TF_CONFIG's cluster (%s): drop it" % (
          name, why))
  if cluster.is_evaluator and not modes.do_eval:
    raise FlagError("TF_CONFIG makes this task the evaluator, which evaluates the dev split: "
                    "add --do_eval")
  if training.train_batch_size % cluster.num_workers:
    raise FlagError("--train_batch_size=%d is the global batch: it must split evenly over "
                    "TF_CONFIG's %d training tasks" % (training.train_batch_size,
                                                       cluster.num_workers))
  if "num_record_shards" in given and device.num_record_shards % cluster.num_workers:
    raise FlagError("--num_record_shards=%d: each of TF_CONFIG's %d training tasks reads "
                    "shards of its own, as many as every other task; pass "
                    "--num_record_shards=%d (or a multiple of it)" % (
                        device.num_record_shards, cluster.num_workers, cluster.num_workers))


def with_record_shards(c, cluster=None):
  """The configuration with as many record shards as input pipelines feed each training
  step (the machines of a cluster, the hosts of a pod slice), when --num_record_shards is
  not given and its default does not split over them: each pipeline reads shards of its
  own. The log says so. (A value given that does not split is refused by the checks.)"""
  pipelines = input_pipelines(c.device, cluster)
  shards = c.device.num_record_shards
  if (not c.modes.do_train or c.is_given("num_record_shards") or pipelines == 1 or
      shards % pipelines == 0):
    return c
  log.info("%d input pipelines feed each step (%s), each reading record shards of its own: "
           "writing %d shards (--num_record_shards=%d)", pipelines,
           "TF_CONFIG's training tasks" if cluster is not None else "the pod slice's hosts",
           pipelines, pipelines)
  return c.replace(num_record_shards=pipelines)


def for_this_task(c, cluster):
  """What one task of a multi-worker run does: the chief everything asked for; a worker
  only trains, and the evaluator only evaluates (it reads the train split for the number
  of steps). Tasks other than the chief write their records apart from the chief's."""
  if cluster is None or cluster.is_chief:
    return c
  cache_dir = os.path.join(c.outputs.features_dir(),
                           "%s_%d" % (cluster.task_type, cluster.task_index))
  return c.replace(do_eval=cluster.is_evaluator, do_predict=False, do_export=False,
                   cache_dir=cache_dir)


def remove_worker_scratch(output_dir, cluster):
  """TensorFlow has a worker save its own copy of every checkpoint in the chief's
  output_dir: scratch, which no restart reads."""
  scratch = os.path.join(output_dir, "tmp_%s_%d" % (cluster.task_type, cluster.task_index))
  if tf.io.gfile.exists(scratch):
    tf.io.gfile.rmtree(scratch)


def await_peers(cluster, seconds, clock=time.time, sleep=time.sleep):
  """Before TensorFlow starts this task's server: ProcessFault when this task's port is
  taken on this machine, or when another training task of the cluster has not answered
  on its TF_CONFIG address after seconds (TensorFlow would wait for it for ever, inside
  C++, deaf to signals). Each task listens on its own port meanwhile, so tasks that start
  in any order find each other (a connection is all a probe asks: the system's backlog
  answers it). Says whom it waits for every 30 s; a signal stops it at once."""
  if cluster is None or cluster.is_evaluator or cluster.own_address is None:
    return
  port = int(cluster.own_address.rpartition(":")[2])
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as beacon:
    beacon.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (as gRPC's server does)
    try:
      beacon.bind(("", port))
      beacon.listen(64)
    except OSError as e:
      raise ProcessFault(
          "TF_CONFIG's %s %d listens on %s, and port %d is taken on this machine (%s): stop "
          "what uses it, or give this task another port in TF_CONFIG (on every machine)"
          % (cluster.task_type, cluster.task_index, cluster.own_address, port,
             e.strerror or e))
    started = said = clock()
    for kind, index, address in cluster.peers():
      host, _, peer_port = address.rpartition(":")
      while True:
        try:
          socket.create_connection((host, int(peer_port)), timeout=2).close()
          break
        except OSError as e:
          reason = e.strerror or str(e)
        if clock() - started >= seconds:
          raise ProcessFault(
              "TF_CONFIG's %s %d at %s did not answer within %d s (%s): start it (the same "
              "command, with TF_CONFIG's task {\"type\": \"%s\", \"index\": %d}), check "
              "its address and that its port is open to this machine, or wait longer with "
              "--cluster_wait_seconds" % (kind, index, address, seconds, reason, kind, index))
        if clock() - said >= 30:
          log.info("waiting for %s %d at %s (%d s so far, for up to %d s)", kind, index,
                   address, clock() - started, seconds)
          said = clock()
        sleep(1)
  log.info("every training task of the cluster answers (%d)", cluster.num_workers)
