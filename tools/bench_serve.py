"""The HTTP server's speed: requests/s and latency (p50, p99) under 1, 8 and 32 concurrent
clients on loopback, on MiniLM (all-MiniLM-L6-v2 in Google's layout), for each backend.

  ./run.sh benchmark serve [--backends tf,onnx,onnx_int8 --clients 1,8,32 --requests 400
                            --seconds 30 --out_dir docs/serve]

It fine-tunes MiniLM for --train_steps steps on real comments and exports it with its
ONNX model, evaluating it on held-out comments so that the export measures its int8
model's quality (not timed, as the predictor benchmark does). Then, for each backend in
turn (tf: the SavedModel in TensorFlow; onnx: the fp32 ONNX model in onnxruntime;
onnx_int8: the int8 one, which the server serves only where that quality held), it starts
`./run.sh serve` on the export and, for each number of clients, sends one-text requests
(real comments, in turn) from that many threads until --requests have been answered or
--seconds have passed, and checks every answer against the backend's predictor's result
for its text (ANSWER_TOLERANCE), computed before the server starts. The clients run on
the same 2 cores as the server, so the figures are a floor.
"""

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from spec.signature import INT8_AUC_BOUND  # noqa: E402
from tools import assets, bench_predictor  # noqa: E402


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--data", default=bench_predictor.SHARED_COMMENTS if os.path.exists(
      bench_predictor.SHARED_COMMENTS) else bench_predictor.SAMPLE_COMMENTS,
                      help="CSV rows text,label without a header")
  parser.add_argument("--clients", default="1,8,32", help="concurrent clients, per run")
  parser.add_argument("--requests", type=int, default=400, help="answers per run, at most")
  parser.add_argument("--seconds", type=float, default=30.0, help="time per run, at most")
  parser.add_argument("--train_steps", type=int, default=60)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--backends", default=",".join(BACKENDS),
                      help="the servers to measure, in turn: " + ", ".join(
                          "%s (%s)" % item for item in BACKENDS.items()))
  parser.add_argument("--eval_rows", type=int, default=500,
                      help="held-out comments the export scores its fp32 and int8 models on "
                      "(at most a third of the file's rows)")
  parser.add_argument("--out_dir", default=os.path.join(ROOT, "output", "bench_serve"))
  parser.add_argument("--work_dir", default=os.path.join(ROOT, ".cache", "bench_serve"))
  parser.add_argument("--cache_dir", default=assets.DEFAULT_CACHE)
  args = parser.parse_args(argv)
  args.clients = [int(n) for n in args.clients.split(",")]
  if min(args.clients) < 1 or args.requests < 1 or args.seconds <= 0:
    parser.error("--clients, --requests and --seconds must be above 0")
  args.backends = args.backends.split(",")
  unknown = [name for name in args.backends if name not in BACKENDS]
  if unknown or not args.backends:
    parser.error("--backends=%s: give some of %s" % (",".join(args.backends),
                                                     ",".join(BACKENDS)))
  if args.eval_rows < 2:
    parser.error("--eval_rows=%d: ROC-AUC needs at least 2 held-out rows" % args.eval_rows)
  return args


# Each backend's name, what it serves, and the arguments of ./run.sh serve that serve it.
BACKENDS = {"tf": "the SavedModel in TensorFlow",
            "onnx": "the fp32 ONNX model in onnxruntime",
            "onnx_int8": "the int8 ONNX model in onnxruntime"}
SERVE_ARGUMENTS = {"tf": [], "onnx": ["--backend=onnx"], "onnx_int8": ["--backend=onnx", "--int8"]}


def percentile(values, fraction):
  """The nearest-rank percentile: the smallest value with at least fraction of the values
  at or below it."""
  ordered = sorted(values)
  rank = max(1, -(-len(ordered) * fraction // 1))
  return ordered[int(rank) - 1]


# How far an answer's numbers may be from the predictor's for the same text (the server
# batches it with other texts, padded to another length).
ANSWER_TOLERANCE = 1e-5


def answer_problem(got, wanted, tolerance=ANSWER_TOLERANCE):
  """How an answer differs from the predictor's result for its text (its labels, or a
  number by more than tolerance), or None."""
  if isinstance(wanted, dict):
    if not isinstance(got, dict) or sorted(got) != sorted(wanted):
      return "%r, where the predictor gives %r" % (got, wanted)
    for key in wanted:
      problem = answer_problem(got[key], wanted[key], tolerance)
      if problem:
        return problem
    return None
  if isinstance(wanted, float):
    if not isinstance(got, (int, float)) or not abs(got - wanted) <= tolerance:
      return "%r, where the predictor gives %r" % (got, wanted)
    return None
  return None if got == wanted else "%r, where the predictor gives %r" % (got, wanted)


def load(url, texts, clients, max_requests, max_seconds, expected=None):
  """Sends one-text requests from clients threads until max_requests are answered or
  max_seconds pass. Returns (answers, seconds, latencies in s); a wrong answer stops it:
  one that is not one result, or, given expected (the predictor's result for each text),
  one that is not its text's."""
  lock = threading.Lock()
  state = {"sent": 0}
  latencies, failures = [], []
  deadline = time.time() + max_seconds

  def client():
    while time.time() < deadline and not failures:
      with lock:
        if state["sent"] >= max_requests:
          return
        k = state["sent"]
        state["sent"] += 1
      body = json.dumps({"instances": [texts[k % len(texts)]]}).encode()
      request = urllib.request.Request(url, data=body,
                                       headers={"Content-Type": "application/json"})
      start = time.time()
      try:
        with urllib.request.urlopen(request, timeout=120) as answer:
          predictions = json.loads(answer.read().decode())["predictions"]
      except (urllib.error.URLError, ValueError, KeyError) as e:
        failures.append("request %d: %s" % (k, e))
        return
      seconds = time.time() - start
      if len(predictions) != 1 or "probabilities" not in predictions[0]:
        failures.append("request %d: answered %r" % (k, predictions))
        return
      problem = expected and answer_problem(predictions[0], expected[k % len(texts)])
      if problem:
        failures.append("request %d: answered %s" % (k, problem))
        return
      with lock:
        latencies.append(seconds)

  threads = [threading.Thread(target=client) for _ in range(clients)]
  start = time.time()
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  if failures:
    raise SystemExit("bench_serve: " + failures[0])
  return len(latencies), time.time() - start, latencies


def free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


class ServerRefused(Exception):
  """The server stopped before serving, saying why in its one line (exit status 2)."""


def serving(command, cwd, port, log_path, timeout=180):
  """Starts command, a server of the model "model" on port; returns (the process, its
  status URL) once it answers. ServerRefused with its line if it refuses to serve;
  RuntimeError with the end of its log if it fails otherwise."""
  log = open(log_path, "w")
  process = subprocess.Popen(command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  log.close()  # (the child holds its own copy)
  status = "http://127.0.0.1:%d/v1/models/model" % port
  deadline = time.time() + timeout
  while time.time() < deadline and process.poll() is None:
    try:
      urllib.request.urlopen(status, timeout=5).read()
      return process, status
    except (urllib.error.URLError, ConnectionError):
      time.sleep(0.5)
  if process.poll() is None:
    process.kill()
  process.wait()
  with open(log_path) as f:
    said = f.read()
  refusal = [line for line in said.splitlines() if line.startswith("serve: ")]
  if process.returncode == 2 and refusal:
    raise ServerRefused(refusal[-1][len("serve: "):])
  raise RuntimeError("the server did not answer:\n" + said[-3000:])


def main(argv=None):
  args = parse_args(argv)
  unavailable = any(backend != "tf" for backend in args.backends) and (
      bench_predictor.onnx_unavailable())
  if unavailable:  # (before any work)
    raise SystemExit("bench_serve: --backends=%s: %s (or measure --backends=tf alone)"
                     % (",".join(args.backends), unavailable))
  rows, held_out = split_rows(args.data, args.eval_rows)
  texts = [text for text, _ in rows]
  shutil.rmtree(args.work_dir, ignore_errors=True)
  os.makedirs(args.work_dir)
  os.makedirs(args.out_dir, exist_ok=True)
  train_file, eval_file = (os.path.join(args.work_dir, name) for name in ("rows.csv",
                                                                         "held_out.csv"))
  bench_predictor.write_rows(train_file, rows)
  bench_predictor.write_rows(eval_file, held_out)
  model = os.path.join(args.work_dir, "model")
  with_onnx = any(backend != "tf" for backend in args.backends)
  print("fine-tuning MiniLM for %d steps and exporting it (not timed)" % args.train_steps)
  bench_predictor.fine_tune_and_export(
      args, assets.minilm_google_dir(args.cache_dir), train_file, model,
      "saved_model,onnx" if with_onnx else "saved_model", eval_file)
  figures = {"backends": {}, "python": platform.python_version(),
             "machine": bench_predictor.machine(), "max_seq_length": args.max_seq_length,
             "data": os.path.relpath(args.data, os.path.dirname(ROOT)),
             "int8_quality": int8_quality(model) if with_onnx else None}
  for backend in args.backends:
    print("%s: %s" % (backend, BACKENDS[backend]), flush=True)
    figures["backends"][backend] = measure(args, model, texts, backend)
  import tensorflow as tf
  figures["tensorflow"] = tf.__version__
  bench_predictor.write_results(args.out_dir, figures, results_markdown(figures))


TRAIN_ROWS = 1000  # (the rows fine-tuned on, whose texts the clients send, at most)


def split_rows(path, eval_rows):
  """The rows to fine-tune on (up to TRAIN_ROWS) and eval_rows held-out rows after them
  (at most a third of a smaller file, as the test sample is), in a seeded order of the
  file's rows (as the predictor benchmark draws them)."""
  rows = bench_predictor.read_rows(path, shuffle=True, program="bench_serve")
  held = min(eval_rows, len(rows) // 3)
  train = min(TRAIN_ROWS, len(rows) - held)
  return rows[:train], rows[train:train + held]


def int8_quality(model):
  """The export's measure of its int8 model (onnx/int8_quality.json)."""
  from serving.predicting import find_export
  from spec import signature
  with open(os.path.join(find_export(model), signature.ONNX_FOLDER,
                         signature.ONNX_INT8_QUALITY)) as f:
    return json.load(f)


def measure(args, model, texts, backend):
  """The runs of one backend's server: a figure per number of clients; or the server's
  refusal, {"refused": its line}, when it does not serve (int8 whose quality did not
  hold)."""
  texts = texts[:args.requests]  # (the texts a run sends, in turn)
  print("  the predictor's results for the %d texts sent, to check every answer against"
        % len(texts), flush=True)
  expected = predicted(model, texts, backend)
  port = free_port()
  try:
    process, status = serving([os.path.join(ROOT, "run.sh"), "serve"] +
                              SERVE_ARGUMENTS[backend] + [model, "--port", str(port)], ROOT,
                              port, os.path.join(args.work_dir, "server_%s.log" % backend))
  except ServerRefused as e:
    print("  the server refused: %s" % e, flush=True)
    return {"refused": str(e).replace(args.work_dir, "<--work_dir>")}
  except RuntimeError as e:
    raise SystemExit("bench_serve: %s" % e)
  url = status + ":predict"
  runs = []
  try:
    load(url, texts, 1, 3, args.seconds)  # (the first runs of a session allocate)
    for clients in args.clients:
      answers, seconds, latencies = load(url, texts, clients, args.requests, args.seconds,
                                         expected)
      runs.append({"clients": clients, "requests": answers, "seconds": seconds,
                   "requests_per_s": answers / seconds,
                   "p50_ms": 1000 * percentile(latencies, 0.5),
                   "p99_ms": 1000 * percentile(latencies, 0.99)})
      print("  %2d clients: %d requests in %.1f s, %.1f/s, p50 %.1f ms, p99 %.1f ms" % (
          clients, answers, seconds, runs[-1]["requests_per_s"], runs[-1]["p50_ms"],
          runs[-1]["p99_ms"]), flush=True)
  finally:
    process.terminate()
    process.wait(30)
  from serving import server_options
  options = server_options.parse_args(SERVE_ARGUMENTS[backend] + [model])
  return {"runs": runs, "workers": server_options.workers(options)[0]}


def predicted(model, texts, backend):
  """The results of the backend's predictor (what ./run.sh predict-onnx prints, for onnx)
  for texts, run here before the server starts."""
  if backend == "tf":
    from serving.predictor import Predictor
    predictor = Predictor(model)
  else:
    from serving.onnx_predictor import OnnxPredictor
    predictor = OnnxPredictor(model, int8=backend == "onnx_int8")
  with predictor:
    return predictor.predict(texts)


def results_markdown(figures):
  lines = ["MiniLM export served by `./run.sh serve` on loopback, one text per request "
           "(max_seq_length %d, Python %s, TF %s; %s; the clients share the machine; every "
           "answer is the backend's predictor's result for its text, within %g):" % (
               figures["max_seq_length"], figures["python"], figures["tensorflow"],
               figures["machine"], ANSWER_TOLERANCE), "",
           "| backend | clients | requests | requests/s | p50 ms | p99 ms |",
           "|---|---|---|---|---|---|"]
  for backend, measured in figures["backends"].items():
    for run in measured.get("runs", []):
      lines.append("| %s | %d | %d | %.1f | %.1f | %.1f |" % (
          backend, run["clients"], run["requests"], run["requests_per_s"], run["p50_ms"],
          run["p99_ms"]))
  quality = figures["int8_quality"]
  lines.append("")
  for backend, measured in figures["backends"].items():
    said = "- `%s`: %s" % (backend, BACKENDS[backend])
    if measured.get("workers", 1) > 1:
      said += ", %d batches at once (one a core)" % measured["workers"]
    if "refused" in measured:
      said = "- `%s`: not served: %s" % (backend, measured["refused"])
    elif backend == "onnx_int8":
      said += (", served because its held-out ROC-AUC (%s) is at most %s below the fp32 "
               "model's (%s) on the %d comments the export scored" % (
                   _auc(quality["int8"]), INT8_AUC_BOUND, _auc(quality["fp32"]),
                   quality["rows"]))
    lines.append(said.rstrip(".") + ".")
  return "\n".join(lines) + "\n"


def _auc(value):
  return "none" if value is None else "%.4f" % value


if __name__ == "__main__":
  main()
