"""The HTTP server's start-up options: parsed, and every one checked before the model loads
and the port is bound (a problem is one line, and the server does not start)."""

import argparse
import math
import re
import socket

from spec.cores import usable_cores

DEFAULT_PORT = 8501  # (TF Serving's REST port)
BACKENDS = ("tf", "onnx")
MAX_BATCH_WAIT_MS = 1000  # (a batch's wait for more requests; a lone request waits it out)


def parse_args(argv=None):
  parser = argparse.ArgumentParser(prog="./run.sh serve", description=(
      "Serve a fine-tuned model over HTTP in TF Serving's REST shape."))
  parser.add_argument("path", help="an export, or a run's --output_dir (its newest export)")
  parser.add_argument("--port", type=int, default=DEFAULT_PORT)
  parser.add_argument("--host", default="127.0.0.1",
                      help="the address to listen on (0.0.0.0: every interface)")
  parser.add_argument("--model_name", default="model", help="the <name> of the URLs")
  parser.add_argument("--max_batch", type=int, default=32,
                      help="the most texts predicted at once from waiting requests")
  parser.add_argument("--batch_wait_ms", type=float, default=0.0, help=(
      "how long a batch waits for more requests after its first, at most %d (0: none; a "
      "batch takes the requests waiting when the model is free, and those that arrive "
      "while it runs make the next)" % MAX_BATCH_WAIT_MS))
  parser.add_argument("--max_body_mb", type=float, default=8.0,
                      help="the largest request body taken")
  parser.add_argument("--max_instances", type=int, default=4096,
                      help="the most instances one request may hold")
  parser.add_argument("--max_windows", type=int, default=4096,
                      help="the most windows one request's texts may make, for a model "
                      "that reads long texts in windows (--doc_stride)")
  parser.add_argument("--backend", choices=BACKENDS, default="tf", help=(
      "what runs the model: tf, the SavedModel in TensorFlow; onnx, the export's onnx/ "
      "folder (--export_format=onnx) in onnxruntime, without TensorFlow (./run.sh serve "
      "runs it in the ONNX environment)"))
  parser.add_argument("--int8", action="store_true", help=(
      "with --backend=onnx: the int8 model, where the export records that it keeps the "
      "fp32 model's held-out quality (its dev split's ROC-AUC at most 0.002 below)"))
  parser.add_argument("--workers", type=int, default=None, help=(
      "with --backend=onnx: how many batches run at once, each in its own thread and on "
      "its share of the cores, at most one per core this server may use (default: with "
      "--int8, whose runs are one text each, one per core; otherwise 1, on every core, as "
      "TensorFlow runs)"))
  return parser.parse_args(argv)


def workers(args):
  """How many batches the server runs at once (--workers), and the threads within an
  operator each has (None, for one worker: the backend's own, every core). By default,
  onnxruntime's int8 model, which runs one text at a time (serving/onnx_predictor.py),
  runs one on each usable core: a run of one text gains little from a second thread,
  and two such runs at once nearly twice as many texts a second; every other model runs
  one batch at a time on every core."""
  if args.backend != "onnx":
    return 1, None
  cores = usable_cores()
  count = args.workers or (cores if args.int8 else 1)
  return count, (max(1, cores // count) if count > 1 else None)


# A model's name as the URLs carry it: letters, digits and . _ - (not a lone dot or two).
MODEL_NAME = re.compile(r"^(?!\.{1,2}$)[A-Za-z0-9._-]{1,64}$")


def problem(args):
  """What is wrong with the server's options (one sentence naming the option and what it
  takes), or None."""
  if args.int8 and args.backend != "onnx":
    return "--int8 serves an export's int8 ONNX model: add --backend=onnx"
  if not MODEL_NAME.match(args.model_name):
    return ("--model_name=%r cannot be part of the URL /v1/models/<name>:predict: use 1 to 64 "
            "letters, digits, '.', '_' or '-' (not '.' or '..' alone), e.g. "
            "--model_name=toxicity" % args.model_name)
  if not 0 < args.port < 65536:
    return "--port=%d is not a TCP port: give one from 1 to 65535 (TF Serving's REST port " \
           "is %d)" % (args.port, DEFAULT_PORT)
  if args.workers is not None and args.backend != "onnx":
    return ("--workers runs onnxruntime's batches side by side: add --backend=onnx "
            "(TensorFlow runs one batch at a time, on every core)")
  if args.workers is not None:
    cores = usable_cores()
    if args.workers > cores:
      return ("--workers=%d: this server may use %d cores, and each worker runs its batches "
              "on one at least: give at most %d" % (args.workers, cores, cores))
  for name, value, least in (("max_batch", args.max_batch, 1),
                             ("workers", 1 if args.workers is None else args.workers, 1),
                             ("max_instances", args.max_instances, 1),
                             ("max_windows", args.max_windows, 1)):
    if value < least:
      return "--%s=%d must be 1 or more" % (name, value)
  if not 0 <= args.batch_wait_ms <= MAX_BATCH_WAIT_MS:  # (False for nan too)
    return ("--batch_wait_ms=%r must be a number of milliseconds from 0 to %d (a lone "
            "request waits that long for others)" % (args.batch_wait_ms, MAX_BATCH_WAIT_MS))
  if not (math.isfinite(args.max_body_mb) and args.max_body_mb > 0):
    return "--max_body_mb=%r must be a number of megabytes above 0" % args.max_body_mb
  try:
    socket.getaddrinfo(args.host, args.port, type=socket.SOCK_STREAM)
  except (socket.gaierror, UnicodeError) as e:
    return "--host=%s is not an address of this machine (%s): give one such as 127.0.0.1 or " \
           "0.0.0.0" % (args.host, e)
  return None


def port_problem(host, port):
  """Why host:port cannot be listened on (in use, or not this machine's), or None: asked
  before the model loads (seconds), by binding and closing a socket."""
  try:
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
      probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
      probe.bind((host, port))
  except OSError as e:
    return "cannot listen on %s:%d: %s (another server there? pass another --port)" % (
        host, port, e.strerror or e)
  return None


