"""The multi-worker cluster a run belongs to, from TensorFlow's TF_CONFIG (plain Python).

TF_CONFIG is the JSON that TensorFlow's distribution reads on every machine of a
cluster: the same "cluster" everywhere (the chief and the workers, by host:port), and
this machine's own "task". An evaluator task is not listed in the cluster.
run_classifier reads the environment variable; the rest of the project takes a Cluster.
"""

import json

TRAINING_TASKS = ("chief", "worker")


class ClusterError(ValueError):
  """A TF_CONFIG that cannot describe a training cluster, with the fix."""


class Cluster(object):
  """This task's role in a multi-worker run: task_type (chief, worker or evaluator),
  task_index, and num_workers, the training tasks (the chief and the workers)."""

  def __init__(self, task_type, task_index, num_workers, addresses=None):
    self.task_type, self.task_index, self.num_workers = task_type, task_index, num_workers
    # {(task type, index): "host:port"} of the training tasks.
    self.addresses = dict(addresses or {})

  @property
  def own_address(self):
    """This task's host:port (None for the evaluator, which is outside the cluster)."""
    return self.addresses.get((self.task_type, self.task_index))

  def peers(self):
    """[(task type, index, host:port)] of the other training tasks."""
    return [(kind, index, address) for (kind, index), address in sorted(self.addresses.items())
            if (kind, index) != (self.task_type, self.task_index)]

  @property
  def is_chief(self):
    """The one task that writes checkpoints, results and the model card."""
    return self.task_type == "chief"

  @property
  def is_evaluator(self):
    return self.task_type == "evaluator"

  def describe(self):
    name = "%s %d" % (self.task_type, self.task_index)
    return "%s of a cluster of %d training tasks (a chief and %d worker%s)" % (
        name, self.num_workers, self.num_workers - 1, "" if self.num_workers == 2 else "s")


def parse_tf_config(text):
  """The Cluster of a TF_CONFIG value; None when it is empty or names no cluster of
  several machines (a chief alone, as some services set on one machine, is one process).
  ClusterError for one this project cannot train with."""
  if not text or not text.strip():
    return None
  try:
    tf_config = json.loads(text)
  except ValueError as e:
    raise ClusterError("TF_CONFIG is not JSON (%s): it must look like {\"cluster\": "
                       "{\"chief\": [\"host0:2222\"], \"worker\": [\"host1:2222\"]}, "
                       "\"task\": {\"type\": \"chief\", \"index\": 0}}" % e)
  if not isinstance(tf_config, dict):
    raise ClusterError("TF_CONFIG must be a JSON object with \"cluster\" and \"task\"")
  cluster = tf_config.get("cluster") or {}
  task = tf_config.get("task") or {}
  if not isinstance(cluster, dict) or not isinstance(task, dict):
    raise ClusterError("TF_CONFIG's \"cluster\" and \"task\" must be JSON objects, e.g. "
                       "\"cluster\": {\"chief\": [\"host0:2222\"]}, \"task\": {\"type\": "
                       "\"chief\", \"index\": 0}")
  cluster = {kind: tasks for kind, tasks in cluster.items() if tasks != []}
  if not cluster or set(cluster) == {"chief"} and cluster["chief"] and isinstance(
      cluster["chief"], list) and len(cluster["chief"]) == 1:
    return None  # (a chief alone, with no worker listed or an empty list: one process)
  task_type, task_index = task.get("type"), task.get("index", 0)
  if "ps" in cluster:
    raise ClusterError("TF_CONFIG lists parameter servers (\"ps\"): with Estimators they "
                       "train asynchronously, which this project does not support. Use "
                       "\"chief\" and \"worker\" tasks only (synchronous all-reduce)")
  unknown = sorted(set(cluster) - set(TRAINING_TASKS))
  if unknown:
    raise ClusterError("TF_CONFIG's cluster has task types %s; it takes \"chief\" (one) "
                       "and \"worker\" (any number)" % ", ".join(unknown))
  for kind in TRAINING_TASKS:
    if not isinstance(cluster.get(kind, []), list):
      raise ClusterError("TF_CONFIG's cluster lists its %s tasks as %r: give a list of "
                         "\"host:port\" addresses, e.g. [\"host1:2222\"]"
                         % (kind, cluster[kind]))
  if len(cluster.get("chief", [])) != 1:
    raise ClusterError("TF_CONFIG's cluster needs exactly one \"chief\" (it writes the "
                       "checkpoints and results); it has %d" % len(cluster.get("chief", [])))
  if task_type not in TRAINING_TASKS + ("evaluator",):
    raise ClusterError("TF_CONFIG's task type is %r: it must be \"chief\", \"worker\" or "
                       "\"evaluator\"" % (task_type,))
  if "index" not in task and task_type != "evaluator":
    raise ClusterError("TF_CONFIG's task has no \"index\": give its place in the cluster's "
                       "%s list, e.g. \"task\": {\"type\": \"%s\", \"index\": 0}"
                       % (task_type, task_type))
  if task_type != "evaluator" and not (
      isinstance(task_index, int) and not isinstance(task_index, bool) and
      0 <= task_index < len(cluster[task_type])):
    raise ClusterError("TF_CONFIG's task is %s %r, but its cluster has %d %s task%s" % (
        task_type, task_index, len(cluster.get(task_type, [])), task_type,
        "" if len(cluster.get(task_type, [])) == 1 else "s"))
  addresses = {}
  for kind in TRAINING_TASKS:
    for index, address in enumerate(cluster.get(kind, [])):
      problem = address_problem(address)
      if problem:
        raise ClusterError("TF_CONFIG's %s %d is %r: %s" % (kind, index, address, problem))
      addresses[(kind, index)] = address
  seen = {}
  for task, address in sorted(addresses.items()):
    if address in seen:
      raise ClusterError("TF_CONFIG gives %s %d and %s %d the same address %s: each task "
                         "listens on a port of its own" % (seen[address] + task + (address,)))
    seen[address] = task
  num_workers = len(cluster["chief"]) + len(cluster.get("worker", []))
  return Cluster(task_type, task_index, num_workers, addresses)


def address_problem(address):
  """What makes a task's address no "host:port" (a sentence ending in its fix), or None."""
  if not isinstance(address, str):
    return "not a \"host:port\" text. Write each task as \"host:port\", e.g. \"10.0.0.2:2222\""
  host, colon, port = address.rpartition(":")
  if not colon or not host:
    return ("it has no port. Write it as \"host:port\", e.g. \"%s:2222\"" % address
            if address else "it is empty. Write it as \"host:port\", e.g. \"10.0.0.2:2222\"")
  if not port.isdigit() or not 0 < int(port) < 65536:
    return "its port %r is not a TCP port. Give one from 1 to 65535, e.g. \"%s:2222\"" % (
        port, host)
  return None
