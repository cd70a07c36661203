"""The HTTP server as a public door: every start-up option is checked before the model loads
and the port is bound (one line, exit 2); every request, however it ends (a client that
hangs up while it sends, or before it reads the answer), leaves one log line; a body is
always JSON, never NaN. (That every request leaves one log line, whoever hangs up, is
tested on test_server.py's running server.)"""

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
    (["--batch_wait_ms", "nan"], "--batch_wait_ms=nan must be a number of milliseconds "
                                 "from 0 to 1000"),
    (["--batch_wait_ms", "-1"], "--batch_wait_ms=-1.0 must be a number of milliseconds"),
    (["--batch_wait_ms", "1e300"], "--batch_wait_ms=1e+300 must be a number of milliseconds "
                                   "from 0 to 1000 (a lone request waits that long for "
                                   "others)"),
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
