"""The HTTP server as a public door: every start-up option is checked before the model loads
and the port is bound (one line, exit 2); every request, however it ends (a client that
hangs up while it sends, or before it reads the answer), leaves one log line; a body is
always JSON, never NaN."""

import asyncio
import json
import math
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import ROOT, TINY_VOCAB
from tools.bench_serve import free_port, serving


def serve(*args):
  return subprocess.run([sys.executable, "-m", "serving.server"] + list(args), cwd=ROOT,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        universal_newlines=True, timeout=120)


@pytest.mark.parametrize("option, problem", [
    (["--model_name", "a/b"], "--model_name='a/b' cannot be part of the URL"),
    (["--model_name", ".."], "--model_name='..' cannot be part of the URL"),
    (["--model_name", ""], "--model_name='' cannot be part of the URL"),
    (["--model_name", "my model"], "--model_name='my model' cannot be part of the URL"),
    (["--port", "0"], "--port=0 is not a TCP port: give one from 1 to 65535"),
    (["--port", "99999"], "--port=99999 is not a TCP port"),
    (["--max_batch", "0"], "--max_batch=0 must be 1 or more"),
    (["--batch_wait_ms", "nan"], "--batch_wait_ms=nan must be a number of milliseconds"),
    (["--max_body_mb", "inf"], "--max_body_mb=inf must be a number of megabytes above 0"),
    (["--host", "no-such-host.invalid"], "--host=no-such-host.invalid is not an address of "
                                         "this machine"),
])
def test_options_are_checked_before_the_model_loads(tmp_path, option, problem):
  started = time.time()
  done = serve(str(tmp_path / "no_export_here"), *option)
  assert done.returncode == 2
  assert done.stderr.startswith("serve: " + problem) and done.stderr.count("\n") == 1
  assert time.time() - started < 30  # (no TensorFlow was imported, no model read)


def test_a_port_in_use_is_one_line_before_the_model_loads(tmp_path):
  with socket.socket() as taken:
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    done = serve(str(tmp_path / "no_export_here"), "--port", str(port))
  assert done.returncode == 2
  assert done.stderr.strip() == ("serve: cannot listen on 127.0.0.1:%d: Address already in use "
                                 "(another server there? pass another --port)" % port)


@pytest.mark.slow
def test_every_request_leaves_one_log_line_whoever_hangs_up(jigsaw_model, tmp_path):
  port = free_port()
  log_path = str(tmp_path / "server.log")
  process, url = serving([sys.executable, "-m", "serving.server", jigsaw_model.output_dir,
                          "--port", str(port)], ROOT, port, log_path)
  body = b'{"instances": ["a comment"]}'
  head = (b"POST /v1/models/model:predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n")

  def send(data, wait=None):
    connection = socket.create_connection(("127.0.0.1", port))
    connection.sendall(data)
    answer = b""
    if wait is not None:
      time.sleep(wait)
    else:
      connection.settimeout(30)
      while True:
        chunk = connection.recv(65536)
        if not chunk:
          break
        answer += chunk
    connection.close()
    return answer

  try:
    for _ in range(5):  # a client that hangs up while it sends its body
      send(head % 1000 + body[:10], wait=0.2)
    for _ in range(5):  # one that sends it all and goes before the answer
      send(head % len(body) + body, wait=0.0)
    send(b"POST /v1/models/model:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
         b"Connection: close\r\n\r\n{x}")  # a body that is not JSON
    send(b"GET /v1/models/model HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    # A body its headers misdescribe, one declared too large, one with a NaN literal.
    answers = [
        send(head.replace(b"\r\n\r\n", b"\r\nContent-Encoding: gzip\r\nConnection: "
                                        b"close\r\n\r\n") % len(body) + body),
        send(head.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n") % 10 ** 11 +
             body[:4]),
        send(head.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n") % 25 +
             b'{"instances":["a"],"x":NaN}'[:25])]
    time.sleep(2)
  finally:
    process.terminate()
    process.wait(30)
  with open(log_path) as f:
    lines = [l for l in f.read().splitlines() if "/v1/models/" in l and "serving " not in l]
  hung_up = [l for l in lines if "499: the client hung up while it sent its request" in l]
  assert len(hung_up) == 5, lines
  assert sum(" 200 " in l and ":predict" in l for l in lines) == 5, lines
  assert sum("400: the body is not JSON" in l for l in lines) == 2, lines
  assert sum("400: the body cannot be read as its headers say" in l for l in lines) == 1
  assert sum("413: the body is larger than" in l for l in lines) == 1
  assert len(lines) == 1 + 5 + 5 + 1 + 1 + 3  # (the readiness probe's GET, then ours)
  for answer, status in zip(answers, (b"400", b"413", b"400")):
    assert answer.split(b" ")[1] == status
    json.loads(answer.split(b"\r\n\r\n", 1)[1].decode())  # (a JSON body)
  with open(log_path) as f:
    assert "Traceback" not in f.read()


class NaNBackend(object):
  """An export's predictor whose model gives NaN for one input (a diverged model)."""

  def __new__(cls, card_path):
    from serving.predicting import ExportPredictor

    class Backend(ExportPredictor):
      export_dir = "/exports/diverged/1"

      def run_batch(self, batch):
        values = np.full((len(batch["input_ids"]), 2), 0.5, np.float32)
        values[0, 0] = np.nan
        return values
    with open(card_path) as f:
      card = json.load(f)
    return Backend(dict(card, vocab_file=TINY_VOCAB))


@pytest.mark.slow
def test_outputs_that_are_not_numbers_are_a_500_in_json(jigsaw_model):
  from aiohttp.test_utils import TestClient, TestServer
  from serving.server import make_app, strict_json
  with pytest.raises(ValueError):
    strict_json({"p": float("nan")})
  app = make_app(NaNBackend(os.path.join(jigsaw_model.output_dir, "model_card.json")))

  async def ask():
    async with TestClient(TestServer(app)) as client:
      answer = await client.post("/v1/models/model:predict", json={"instances": ["a", "b"]})
      return answer.status, await answer.text()
  status, text = asyncio.get_event_loop().run_until_complete(ask()) if sys.version_info < (
      3, 10) else asyncio.run(ask())
  assert status == 500
  body = json.loads(text)  # (valid JSON: no NaN token)
  assert body["error"].startswith("prediction failed: the model's outputs for input 0 are "
                                  "[nan, 0.5], not numbers")
  assert not any(isinstance(v, float) and math.isnan(v) for v in body.values())
