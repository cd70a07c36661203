"""An HTTP server around the predictor, in TF Serving's REST shape, on aiohttp.

  POST /v1/models/<name>:predict   {"instances": ["a text", ...]}   (pairs: [["a", "b"], ...])
                                   -> {"predictions": [<the predictor's result>, ...]}
  GET  /v1/models/<name>           the model's status, as TF Serving gives it

Requests that arrive together are predicted together: when the model is free, a batcher
takes the requests waiting (until their texts reach max_batch; with a wait_seconds above
0, also those that come within it of the first), runs the predictor on them in its own
thread (in runs of at most max_batch texts), and gives each request its own results back,
in its order. Requests that arrive while the model runs wait for the next batch; on
onnxruntime, a batch runs on each core at once (--workers), each worker taking its share
of the requests waiting. A bad request is answered with a 4xx and {"error": "<what is
wrong>"}; it never reaches a batch, and a batch that fails is run again request by
request, so that only the request at fault fails.

  python -m serving.server OUTPUT_OR_EXPORT_DIR [--port 8501] [--host 127.0.0.1]
                          [--backend=onnx [--workers N]]

The model runs in TensorFlow (the SavedModel), or with --backend=onnx in onnxruntime (the
export's onnx/ folder), where TensorFlow need not be installed.
"""

import asyncio
import functools
import json
import logging
import os
import sys

from aiohttp import web

from serving import server_options
from serving.batcher import Batcher, ClientGone

log = logging.getLogger(__name__)

def first_line(error):
  """The first line of an exception's message (its type's name when it has none)."""
  return (str(error).splitlines() or [type(error).__name__])[0]


def make_app(predictor, model_name="model", max_batch=32, wait_seconds=0.0,
             max_body_bytes=8 << 20, max_instances=4096, max_windows=4096, workers=1):
  """The aiohttp application serving predictor as model_name; workers: how many batches
  it runs at once (more than one only for a predictor whose runs may be made from several
  threads)."""
  version = os.path.basename(predictor.export_dir.rstrip("/"))

  def error(status, text):
    return web.json_response({"error": text}, status=status, dumps=strict_json)

  @web.middleware
  async def errors_as_json(request, handler):
    """Any other refusal (no such path, a wrong method) in the same JSON shape."""
    try:
      return await handler(request)
    except web.HTTPException as e:
      if e.status < 400:
        raise
      answer = error(e.status, "%s: %s %s (this server answers GET /v1/models/%s and "
                     "POST /v1/models/%s:predict)" % (e.reason, request.method, request.path,
                                                      model_name, model_name))
      if "Allow" in e.headers:
        answer.headers["Allow"] = e.headers["Allow"]
      return answer

  @web.middleware
  async def one_log_line(request, handler):
    """Every request, however it ends, leaves one log line: its method, path, status, time
    and, for an error, its reason; a client that hangs up leaves one saying so."""
    started = asyncio.get_event_loop().time()
    def line(outcome):
      log.info("%s %s %s %.1f ms", request.method, request.path[:200], outcome,
               1000 * (asyncio.get_event_loop().time() - started))
    try:
      response = await handler(request)
    except (asyncio.CancelledError, ConnectionError):
      line("- the client hung up")
      raise
    reason = ""
    if response.status >= 400 and isinstance(getattr(response, "body", None), bytes):
      try:
        reason = ": " + json.loads(response.body.decode("utf-8"))["error"][:300]
      except (ValueError, KeyError, TypeError):
        pass
    line("%d%s" % (response.status, reason))
    return response

  app = web.Application(client_max_size=max_body_bytes,
                        middlewares=[one_log_line, errors_as_json])
  def known(request):
    name = request.match_info["name"]
    if name != model_name:
      return error(404, "no model named %r here: this server serves %r (POST "
                   "/v1/models/%s:predict)" % (name, model_name, model_name))
    return None

  async def status(request):
    refused = known(request)
    if refused is not None:  # (a response is a mapping: an empty one is false)
      return refused
    return web.json_response(dumps=strict_json, data={"model_version_status": [{
        "version": version, "state": "AVAILABLE",
        "status": {"error_code": "OK", "error_message": ""}}]})

  async def predict(request):
    refused = known(request)
    if refused is not None:
      return refused
    too_large = error(413, "the body is larger than %d bytes: send fewer instances per "
                      "request (or start the server with a larger --max_body_mb)"
                      % max_body_bytes)
    if (request.content_length or 0) > max_body_bytes:  # (said before it is sent)
      return too_large
    try:
      body = await request.read()
    except web.HTTPRequestEntityTooLarge:
      return too_large
    except (ConnectionError, asyncio.TimeoutError):  # (the client went while it sent:
      return error(499, "the client hung up while it sent its request")  # 499, as nginx)
    except Exception as e:  # (a body its headers misdescribe: gzip that is not, say)
      if request.transport is None or request.transport.is_closing():
        return error(499, "the client hung up while it sent its request")
      return error(400, "the body cannot be read as its headers say (%s): send plain JSON, "
                   "or gzip it as Content-Encoding says" % first_line(e))
    try:
      examples = examples_of(predictor, body, max_instances)
      if predictor.windowing is not None:  # (counted off the event loop: it tokenises)
        await asyncio.get_event_loop().run_in_executor(
            None, check_windows, predictor, examples, max_windows)
    except TooMany as e:
      return error(413, str(e))
    except ValueError as e:
      return error(400, str(e))
    try:
      results = await app["batcher"].predict(examples, lambda: (
          request.transport is None or request.transport.is_closing()))
    except asyncio.CancelledError:
      raise
    except ClientGone:  # (left out of its batch: 499, as nginx says it)
      return error(499, "the client hung up before its prediction ran")
    except Exception as e:  # (the model failed: the server's fault, said as one line)
      return error(500, "prediction failed: %s" % first_line(e))
    try:
      return web.json_response({"predictions": results}, dumps=strict_json)
    except ValueError as e:  # (a number that is not one: no JSON can hold it)
      return error(500, "prediction failed: the model's outputs are not numbers (%s)"
                   % first_line(e))

  async def start_batcher(app):
    app["batcher"] = Batcher(predictor, max_batch, wait_seconds, workers)
    app["batching"] = asyncio.get_event_loop().create_task(app["batcher"].run())

  async def stop_batcher(app):
    app["batching"].cancel()
    app["batcher"].threads.shutdown(wait=True)

  app.on_startup.append(start_batcher)
  app.on_cleanup.append(stop_batcher)
  app.router.add_get("/v1/models/{name:[^/:]+}", status)
  app.router.add_post("/v1/models/{name:[^/:]+}:predict", predict)
  return app


# JSON as every client parses it: NaN and infinity (which json.dumps would write as
# tokens no JSON parser takes) are a ValueError.
strict_json = functools.partial(json.dumps, allow_nan=False)


class TooMany(ValueError):
  """A request with more instances than the server takes at once."""


def check_windows(predictor, examples, max_windows):
  """TooMany when the texts of a request make more than max_windows windows (a model that
  reads long texts in windows): each window is a run of the model, so the request would
  hold the one prediction thread for as long as that many texts would."""
  count = predictor.count_windows(examples, max_windows)
  if count > max_windows:
    raise TooMany("the instances' texts make more than the %d windows this server "
                  "predicts for one request (the model reads long texts in windows of %d "
                  "tokens): send shorter texts or fewer of them (or start it with a larger "
                  "--max_windows)" % (max_windows, predictor.windowing.room))


def examples_of(predictor, body, max_instances=4096):
  """The InputExamples of a predict request's body, or ValueError saying what is wrong."""
  try:
    request = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
  except RecursionError:
    raise ValueError("the body nests too deeply to be read: send {\"instances\": [%s, ...]}"
                     % _wanted(predictor))
  except (UnicodeDecodeError, ValueError) as e:
    raise ValueError("the body is not JSON (%s): send {\"instances\": [%s, ...]}" % (
        e, _wanted(predictor)))
  if not isinstance(request, dict) or "instances" not in request:
    raise ValueError("the body must be a JSON object with \"instances\": a list of %s"
                     % _wanted(predictor, plural=True))
  instances = request["instances"]
  if not isinstance(instances, list):
    raise ValueError("\"instances\" must be a list of %s, not %s" % (
        _wanted(predictor, plural=True), type(instances).__name__))
  if not instances:
    raise ValueError("\"instances\" is empty: give at least one")
  if len(instances) > max_instances:
    raise TooMany("%d instances are more than the %d this server takes in one request: "
                  "split them (or start it with a larger --max_instances)"
                  % (len(instances), max_instances))
  try:
    examples = [predictor.example(i, item) for i, item in enumerate(instances)]
  except ValueError as e:
    raise ValueError("instances: %s" % e)
  for example in examples:
    for text in (example.text_a, example.text_b):
      try:
        (text or "").encode("utf-8")
      except UnicodeEncodeError as e:  # (a lone surrogate, as JSON's \ud800 gives)
        raise ValueError("instances: input %d holds %s, which is no Unicode character: "
                         "send text" % (example.guid, _escaped(text[e.start:e.end])))
  return examples


def _no_constant(name):
  """NaN, Infinity and -Infinity, which Python's json reads but JSON does not have."""
  raise ValueError("it holds %s, which is not JSON" % name)


def _escaped(text):
  return "".join("\\u%04x" % ord(c) for c in text)


def _wanted(predictor, plural=False):
  if predictor.reads_pairs:
    return "pairs of texts [\"text\", \"text_b\"]" if plural else "[\"text\", \"text_b\"]"
  return "texts" if plural else "\"a text\""


def _client_faults_said_once(record):
  """Leaves out aiohttp's own report (a traceback) of a request whose client sent a body
  its headers misdescribe or hung up: one_log_line has said it in one line."""
  error = record.exc_info[1] if record.exc_info else None
  while error is not None:
    if type(error).__name__ in ("RequestPayloadError", "ContentEncodingError",
                                "ConnectionResetError", "ClientConnectionResetError"):
      return False
    error = error.__cause__ or error.__context__
  return True


def load_predictor(args):
  """The predictor of the server's backend (its import after the arguments are checked:
  TensorFlow's takes seconds)."""
  if args.backend == "onnx":
    from serving.onnx_predictor import OnnxPredictor, int8_problem
    workers, threads = server_options.workers(args)  # (a runner for each worker)
    predictor = OnnxPredictor(args.path, int8=args.int8, batch_size=args.max_batch,
                              threads=threads, runs_at_once=workers)
    problem = args.int8 and int8_problem(predictor.export_dir)
    if problem:
      from spec.run_errors import FlagError
      raise FlagError(problem)
    return predictor
  from serving.predictor import Predictor
  return Predictor(args.path, batch_size=args.max_batch)


def main(argv=None):
  args = server_options.parse_args(argv)
  problem = server_options.problem(args)
  if problem:  # (every option checked before the model loads and the port is bound)
    sys.stderr.write("serve: %s\n" % problem)
    return 2
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
  logging.getLogger("aiohttp.server").addFilter(_client_faults_said_once)
  busy = server_options.port_problem(args.host, args.port)
  if busy:
    sys.stderr.write("serve: %s\n" % busy)
    return 2
  from data.data_error import DataError
  from spec.run_errors import FileFault, FlagError
  try:
    predictor = load_predictor(args)
  except (FlagError, DataError, FileFault) as e:  # (no export there; a damaged one)
    sys.stderr.write("serve: %s\n" % e)
    return 2
  except ImportError as e:  # (a backend's package missing from this environment)
    sys.stderr.write("serve: --backend=%s needs %s, which this Python lacks: run ./run.sh "
                     "serve, which builds the environment it needs\n" % (args.backend, e.name))
    return 2
  workers, threads = server_options.workers(args)
  app = make_app(predictor, args.model_name, args.max_batch, args.batch_wait_ms / 1000.0,
                 int(args.max_body_mb * (1 << 20)), args.max_instances, args.max_windows,
                 workers)
  if args.backend == "onnx" and threads is None:
    log.info("1 batch runs at a time, on onnxruntime's threads (every core)")
  elif args.backend == "onnx":
    log.info("%d batches run at once, each on %d thread%s", workers, threads,
             "" if threads == 1 else "s")
  listening = "serving %s as %r on http://%s:%d/v1/models/%s:predict (Ctrl-C stops)" % (
      os.path.abspath(predictor.export_dir), args.model_name, args.host, args.port,
      args.model_name)
  try:  # (the line is printed once the port is bound)
    web.run_app(app, host=args.host, port=args.port, access_log=None,  # (one_log_line's)
                print=lambda _: print(listening, flush=True))
  except OSError as e:
    sys.stderr.write("serve: cannot listen on %s:%d: %s\n" % (args.host, args.port,
                                                                e.strerror or e))
    return 2
  finally:
    predictor.close()
  return 0


if __name__ == "__main__":
  sys.exit(main())
