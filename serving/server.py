"""An HTTP server around the predictor, in TF Serving's REST shape, on aiohttp.

  POST /v1/models/<name>:predict   {"instances": ["a text", ...]}   (pairs: [["a", "b"], ...])
                                   -> {"predictions": [<the predictor's result>, ...]}
  GET  /v1/models/<name>           the model's status, as TF Serving gives it

Requests that arrive together are predicted together: a batcher gathers the instances of
the requests waiting (up to max_batch texts, or until wait_seconds have passed since the
first), runs the predictor once in its own thread, and gives each request its own results
back, in its order. A bad request is answered with a 4xx and {"error": "<what is wrong>"};
it never reaches the batch.

  python -m serving.server OUTPUT_OR_EXPORT_DIR [--port 8501] [--host 127.0.0.1]
"""

import argparse
import asyncio
import concurrent.futures
import json
import logging
import os
import sys

from aiohttp import web

log = logging.getLogger(__name__)

DEFAULT_PORT = 8501  # (TF Serving's REST port)


class Batcher(object):
  """Gathers the examples of concurrent requests into batches of at most max_batch
  examples, each run once by predictor.predict_outputs in one worker thread (the
  predictor's session is not shared between threads)."""

  def __init__(self, predictor, max_batch, wait_seconds):
    self.predictor, self.max_batch, self.wait_seconds = predictor, max_batch, wait_seconds
    self.queue = asyncio.Queue()
    self.thread = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    self.batches = 0

  async def predict(self, examples):
    """The predictor's results for examples (one request's), in their order."""
    done = asyncio.get_event_loop().create_future()
    await self.queue.put((examples, done))
    return await done

  async def run(self):
    while True:
      waiting = [await self.queue.get()]
      await self._gather(waiting)
      await self._predict(waiting)

  async def _gather(self, waiting):
    loop = asyncio.get_event_loop()
    deadline = loop.time() + self.wait_seconds
    rows = len(waiting[0][0])
    while rows < self.max_batch:
      try:
        item = self.queue.get_nowait() if self.queue.qsize() else await asyncio.wait_for(
            self.queue.get(), max(0.0, deadline - loop.time()))
      except asyncio.TimeoutError:
        return
      waiting.append(item)
      rows += len(item[0])

  async def _predict(self, waiting):
    examples = [example for request, _ in waiting for example in request]
    try:
      outputs = await asyncio.get_event_loop().run_in_executor(
          self.thread, self.predictor.predict_outputs, examples)
    except Exception as error:  # (each waiting request is answered with it)
      for _, done in waiting:
        if not done.done():
          done.set_exception(error)
      return
    self.batches += 1
    start = 0
    for request, done in waiting:
      if not done.done():  # (a client that went away is not answered)
        done.set_result([self.predictor.result(values)
                         for values in outputs[start:start + len(request)]])
      start += len(request)


def make_app(predictor, model_name="model", max_batch=32, wait_seconds=0.002,
             max_body_bytes=8 << 20):
  """The aiohttp application serving predictor as model_name."""
  version = os.path.basename(predictor.export_dir.rstrip("/"))

  def error(status, text):
    return web.json_response({"error": text}, status=status)

  @web.middleware
  async def errors_as_json(request, handler):
    """Any other refusal (no such path, a wrong method) in the same JSON shape."""
    try:
      return await handler(request)
    except web.HTTPException as e:
      if e.status < 400:
        raise
      return error(e.status, "%s: %s %s (this server answers GET /v1/models/%s and POST "
                   "/v1/models/%s:predict)" % (e.reason, request.method, request.path,
                                               model_name, model_name))

  app = web.Application(client_max_size=max_body_bytes, middlewares=[errors_as_json])
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
    return web.json_response({"model_version_status": [{
        "version": version, "state": "AVAILABLE",
        "status": {"error_code": "OK", "error_message": ""}}]})

  async def predict(request):
    refused = known(request)
    if refused is not None:
      return refused
    try:
      body = await request.read()
    except web.HTTPRequestEntityTooLarge:
      return error(413, "the body is larger than %d bytes: send fewer instances per request "
                   "(or start the server with a larger --max_body_mb)" % max_body_bytes)
    try:
      examples = examples_of(predictor, body)
    except ValueError as e:
      return error(400, str(e))
    try:
      results = await app["batcher"].predict(examples)
    except Exception as e:  # (the model failed: the server's fault, said as one line)
      log.exception("prediction failed")
      return error(500, "prediction failed: %s" % str(e).splitlines()[0])
    return web.json_response({"predictions": results})

  async def start_batcher(app):
    app["batcher"] = Batcher(predictor, max_batch, wait_seconds)
    app["batching"] = asyncio.get_event_loop().create_task(app["batcher"].run())

  async def stop_batcher(app):
    app["batching"].cancel()
    app["batcher"].thread.shutdown(wait=True)

  app.on_startup.append(start_batcher)
  app.on_cleanup.append(stop_batcher)
  app.router.add_get("/v1/models/{name:[^/:]+}", status)
  app.router.add_post("/v1/models/{name:[^/:]+}:predict", predict)
  return app


def examples_of(predictor, body):
  """The InputExamples of a predict request's body, or ValueError saying what is wrong."""
  try:
    request = json.loads(body.decode("utf-8"))
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
  try:
    return [predictor.example(i, item) for i, item in enumerate(instances)]
  except ValueError as e:
    raise ValueError("instances: %s" % e)


def _wanted(predictor, plural=False):
  if predictor.reads_pairs:
    return "pairs of texts [\"text\", \"text_b\"]" if plural else "[\"text\", \"text_b\"]"
  return "texts" if plural else "\"a text\""


def main(argv=None):
  parser = argparse.ArgumentParser(prog="./run.sh serve", description=(
      "Serve a fine-tuned model over HTTP in TF Serving's REST shape."))
  parser.add_argument("path", help="an export, or a run's --output_dir (its newest export)")
  parser.add_argument("--port", type=int, default=DEFAULT_PORT)
  parser.add_argument("--host", default="127.0.0.1",
                      help="the address to listen on (0.0.0.0: every interface)")
  parser.add_argument("--model_name", default="model", help="the <name> of the URLs")
  parser.add_argument("--max_batch", type=int, default=32,
                      help="the most texts predicted at once from waiting requests")
  parser.add_argument("--batch_wait_ms", type=float, default=2.0,
                      help="how long a batch waits for more requests after its first")
  parser.add_argument("--max_body_mb", type=float, default=8.0,
                      help="the largest request body taken")
  args = parser.parse_args(argv)
  if args.max_batch < 1 or args.batch_wait_ms < 0 or args.max_body_mb <= 0:
    parser.error("--max_batch must be 1 or more, --batch_wait_ms 0 or more and "
                 "--max_body_mb above 0")
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
  from serving.predictor import Predictor  # (TensorFlow's import: after the arguments)
  from spec.errors import FlagError
  try:
    predictor = Predictor(args.path, batch_size=args.max_batch)
  except FlagError as e:
    sys.stderr.write("serve: %s\n" % e)
    return 2
  app = make_app(predictor, args.model_name, args.max_batch, args.batch_wait_ms / 1000.0,
                 int(args.max_body_mb * (1 << 20)))
  print("serving %s as %r on http://%s:%d/v1/models/%s:predict" % (
      predictor.export_dir, args.model_name, args.host, args.port, args.model_name),
        flush=True)
  try:
    web.run_app(app, host=args.host, port=args.port, print=None)
  except OSError as e:
    sys.stderr.write("serve: cannot listen on %s:%d: %s\n" % (args.host, args.port,
                                                                e.strerror or e))
    return 2
  finally:
    predictor.close()
  return 0


if __name__ == "__main__":
  sys.exit(main())
