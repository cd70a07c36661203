"""The HTTP server: real requests on 127.0.0.1 to `python -m serving.server` serving the
shared fine-tuned model's export, answered as the in-process predictor answers; concurrent
requests batched together, each answer its own; bad requests refused with a 4xx; every
request, however it ends (a client that hangs up while it sends, or before it reads the
answer), leaves one log line."""

import asyncio
import csv
import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from conftest import JIGSAW, ROOT
from tools.bench_serve import free_port, serving

pytestmark = pytest.mark.slow


def _texts():
  with open(os.path.join(JIGSAW, "test.csv"), newline="", encoding="utf-8") as f:
    return [row["comment_text"] for row in csv.DictReader(f)]


@pytest.fixture(scope="module")
def reference(jigsaw_model):
  from serving.predictor import Predictor
  with Predictor(jigsaw_model.output_dir) as predictor:
    return predictor.export_dir, predictor.predict(_texts())


@pytest.fixture(scope="module")
def running(jigsaw_model, tmp_path_factory):
  """(its status URL, its port, its log's path) of a server running for this module."""
  port = free_port()
  log_path = str(tmp_path_factory.mktemp("server") / "server.log")
  process, url = serving(
      [sys.executable, "-m", "serving.server", jigsaw_model.output_dir, "--port", str(port),
       "--max_body_mb", "0.01", "--batch_wait_ms", "20", "--max_instances", "40"], ROOT,
      port, log_path)
  try:
    yield url, port, log_path
  finally:
    process.terminate()
    process.wait(30)


@pytest.fixture(scope="module")
def server(running):
  return running[0]


def _call(url, body=None):
  """(status, the JSON answer) of a GET, or a POST of body (bytes, or JSON-able)."""
  data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
  request = urllib.request.Request(url, data=data, headers={
      "Content-Type": "application/json"} if data is not None else {})
  try:
    with urllib.request.urlopen(request, timeout=60) as answer:
      return answer.status, json.loads(answer.read().decode())
  except urllib.error.HTTPError as error:
    return error.code, json.loads(error.read().decode())


def _same(results, expected):
  assert [r.get("label") for r in results] == [e.get("label") for e in expected]
  np.testing.assert_allclose([list(r["probabilities"].values()) for r in results],
                             [list(e["probabilities"].values()) for e in expected], atol=1e-6)


def test_status_and_predictions_as_the_predictor_gives_them(server, reference):
  export_dir, expected = reference
  assert _call(server) == (200, {"model_version_status": [{
      "version": os.path.basename(export_dir), "state": "AVAILABLE",
      "status": {"error_code": "OK", "error_message": ""}}]})
  status, answer = _call(server + ":predict", {"instances": _texts()})
  assert status == 200 and len(answer["predictions"]) == 33
  _same(answer["predictions"], expected)


def test_concurrent_requests_each_get_their_own_answers_in_order(server, reference):
  texts, expected = _texts(), reference[1]
  requests = [list(range(i, min(i + 1 + i % 3, len(texts)))) for i in range(len(texts))]
  answers = [None] * len(requests)

  def send(k):
    answers[k] = _call(server + ":predict", {"instances": [texts[i] for i in requests[k]]})
  threads = [threading.Thread(target=send, args=(k,)) for k in range(len(requests))]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  for rows, (status, answer) in zip(requests, answers):
    assert status == 200
    _same(answer["predictions"], [expected[i] for i in rows])


def test_a_bad_request_is_refused_with_a_4xx_and_what_is_wrong(server):
  predict = server + ":predict"
  assert _call(predict, b"{not json") == (400, {"error": (
      "the body is not JSON (Expecting property name enclosed in double quotes: line 1 "
      "column 2 (char 1)): send {\"instances\": [\"a text\", ...]}")})
  assert _call(predict, {"inputs": ["a"]}) == (400, {"error": (
      "the body must be a JSON object with \"instances\": a list of texts")})
  assert _call(predict, {"instances": "a text"}) == (400, {"error": (
      "\"instances\" must be a list of texts, not str")})
  assert _call(predict, {"instances": []}) == (400, {"error": (
      "\"instances\" is empty: give at least one")})
  assert _call(predict, {"instances": ["fine", ["a", "b"]]}) == (400, {"error": (
      "instances: input 1 is a pair of texts, but the model (task jigsaw_toxic) was "
      "trained on single texts: give a text (str)")})
  assert _call(predict, {"instances": ["x" * 20000]}) == (413, {"error": (
      "the body is larger than 10485 bytes: send fewer instances per request (or start "
      "the server with a larger --max_body_mb)")})
  assert _call(predict, {"instances": ["a"] * 41}) == (413, {"error": (
      "41 instances are more than the 40 this server takes in one request: split them (or "
      "start it with a larger --max_instances)")})
  assert _call(predict, b'{"instances": ["fine", "\\ud800 alone"]}') == (400, {"error": (
      "instances: input 1 holds \\ud800, which is no Unicode character: send text")})
  assert _call(predict, b"[" * 5000) == (400, {"error": (
      "the body nests too deeply to be read: send {\"instances\": [\"a text\", ...]}")})
  models = server.rsplit("/", 1)[0]
  assert _call(models + "/other") == (404, {"error": (
      "no model named 'other' here: this server serves 'model' (POST "
      "/v1/models/model:predict)")})
  assert _call(models + "/other:predict", {"instances": ["a"]}) == (
      404, {"error": "no model named 'other' here: this server serves 'model' (POST "
                     "/v1/models/model:predict)"})
  with pytest.raises(urllib.error.HTTPError) as refused:
    urllib.request.urlopen(predict, timeout=60)
  assert refused.value.headers["Allow"] == "POST"
  assert _call(predict) == (405, {"error": (
      "Method Not Allowed: GET /v1/models/model:predict (this server answers GET "
      "/v1/models/model and POST /v1/models/model:predict)")})
  assert _call(models) == (404, {"error": (
      "Not Found: GET /v1/models (this server answers GET /v1/models/model and POST "
      "/v1/models/model:predict)")})
  status, answer = _call(predict, {"instances": ["still served"]})
  assert status == 200 and len(answer["predictions"]) == 1


def test_every_request_leaves_one_log_line_whoever_hangs_up(running):
  _, port, log_path = running
  with open(log_path) as f:
    before = len(f.read())  # (this test reads the lines its requests add)
  body = b'{"instances": ["a comment"]}'
  head = (b"POST /v1/models/model:predict HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n")

  def whole(answer):
    head, _, body = answer.partition(b"\r\n\r\n")
    length = [int(l.split(b":", 1)[1]) for l in head.lower().split(b"\r\n")
              if l.startswith(b"content-length:")]
    return bool(length) and len(body) >= length[0]

  def send(data, wait=None):
    connection = socket.create_connection(("127.0.0.1", port))
    connection.sendall(data)
    answer = b""
    if wait is not None:
      time.sleep(wait)
    else:  # (until the answer is whole: a server may keep reading an over-long body)
      connection.settimeout(30)
      while not whole(answer):
        chunk = connection.recv(65536)
        if not chunk:
          break
        answer += chunk
    connection.close()
    return answer

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
  expected = 5 + 5 + 1 + 1 + 3
  deadline = time.time() + 30  # (the answers the clients left are logged when they end)
  while True:
    with open(log_path) as f:
      added = f.read()[before:]
    lines = [l for l in added.splitlines() if "/v1/models/" in l]
    if len(lines) >= expected or time.time() > deadline:
      break
    time.sleep(0.2)
  time.sleep(0.5)  # (and no more lines than that come)
  with open(log_path) as f:
    added = f.read()[before:]
  lines = [l for l in added.splitlines() if "/v1/models/" in l]
  hung_up = [l for l in lines if "499: the client hung up while it sent its request" in l]
  assert len(hung_up) == 5, lines
  # (a client that left before its batch ran was left out of it: 499; else predicted, 200)
  assert sum((" 200 " in l and ":predict" in l) or
             "499: the client hung up before its prediction ran" in l for l in lines) == 5, lines
  assert sum("400: the body is not JSON" in l for l in lines) == 2, lines
  assert sum("400: the body cannot be read as its headers say" in l for l in lines) == 1
  assert sum("413: the body is larger than" in l for l in lines) == 1
  assert len(lines) == expected, lines
  for answer, status in zip(answers, (b"400", b"413", b"400")):
    assert answer.split(b" ")[1] == status
    json.loads(answer.split(b"\r\n\r\n", 1)[1].decode())  # (a JSON body)
  assert "Traceback" not in added


def _ten_requests_of_three_texts(predictor, texts):
  """Ten requests of three texts each: texts 0-2, 3-5, ... 27-29."""
  return [[predictor.example(i, texts[i]) for i in range(k, k + 3)] for k in range(0, 30, 3)]


def _with_batcher(predictor, wait_seconds, send, workers=1):
  """What the coroutine send(batcher) returns, run on a new event loop beside a running
  Batcher of predictor (at most 32 texts a batch), which is stopped afterwards."""
  from serving.batcher import Batcher

  async def beside_a_batcher():
    batcher = Batcher(predictor, max_batch=32, wait_seconds=wait_seconds, workers=workers)
    task = asyncio.get_event_loop().create_task(batcher.run())
    try:
      return await send(batcher)
    finally:
      task.cancel()
      batcher.threads.shutdown(wait=True)
  loop = asyncio.new_event_loop()
  try:
    return loop.run_until_complete(beside_a_batcher())
  finally:
    loop.close()


def _first_then_nine(predictor, texts, running):
  """A send(batcher) of _with_batcher: the first of ten requests, then, once the event
  `running` is set (its run has begun), the nine others; their results in order."""
  async def send(batcher):
    requests = _ten_requests_of_three_texts(predictor, texts)
    first = asyncio.ensure_future(batcher.predict(requests[0]))
    while not running.is_set():
      await asyncio.sleep(0.005)
    rest = [asyncio.ensure_future(batcher.predict(r)) for r in requests[1:]]
    return await asyncio.gather(first, *rest)
  return send


def _first_run_slow(predictor, runs, running, record):
  """Makes the predictor's first run 0.3 s longer, setting the event `running` as it
  starts, so that requests sent meanwhile wait for the next run; appends record(examples)
  of every run to runs."""
  run_outputs = predictor.predict_outputs

  def slow_first_run(examples):
    runs.append(record(examples))
    if len(runs) == 1:
      running.set()
      time.sleep(0.3)
    return run_outputs(examples)
  predictor.predict_outputs = slow_first_run


def _counting_runs(predictor):
  """A list that each run of the predictor's model appends its number of examples to."""
  runs, run_outputs = [], predictor.predict_outputs
  predictor.predict_outputs = lambda examples: (runs.append(len(examples)),
                                                run_outputs(examples))[1]
  return runs


def test_the_batcher_predicts_waiting_requests_together(jigsaw_model, reference):
  """Ten requests at once: fewer runs of the model than requests, every text once, and
  each request's own results back."""
  from serving.predictor import Predictor
  texts, expected = _texts(), reference[1]
  with Predictor(jigsaw_model.output_dir) as predictor:
    runs = _counting_runs(predictor)

    async def ten_requests(batcher):
      return await asyncio.gather(*[batcher.predict(r)
                                    for r in _ten_requests_of_three_texts(predictor, texts)])
    answers = _with_batcher(predictor, 0.05, ten_requests)
  assert sum(runs) == 30 and len(runs) < 10
  for k, results in enumerate(answers):
    _same(results, expected[3 * k:3 * k + 3])


def test_without_a_wait_requests_that_come_during_a_run_make_the_next_batch(jigsaw_model,
                                                                           reference):
  """The default (no wait): the first request runs at once, alone; the nine sent while it
  runs are predicted together in the next run, each with its own results."""
  from serving.predictor import Predictor
  texts, expected = _texts(), reference[1]
  runs, running = [], threading.Event()
  with Predictor(jigsaw_model.output_dir) as predictor:
    _first_run_slow(predictor, runs, running, len)
    answers = _with_batcher(predictor, 0.0, _first_then_nine(predictor, texts, running))
  assert runs == [3, 27]
  for k, results in enumerate(answers):
    _same(results, expected[3 * k:3 * k + 3])


def test_with_two_workers_the_requests_waiting_run_beside_a_long_run(jigsaw_model,
                                                                    reference):
  """Two workers: while the first request's run is slow, the nine sent meanwhile are run
  by the other worker, a share of those waiting at a time, and each request gets its own
  results. (The first run lasts until two others have begun, or a minute: a batcher that
  ran nothing beside it would fail, and a loaded machine's slow start would not.)"""
  from serving.predictor import Predictor
  texts, expected = _texts(), reference[1]
  runs, running, begun = [], threading.Event(), threading.Condition()
  with Predictor(jigsaw_model.output_dir) as predictor:
    run_outputs = predictor.predict_outputs

    def timed(examples):
      with begun:
        first = not runs
        runs.append([len(examples), time.time(), None])
        record = runs[-1]
        begun.notify_all()
      if first:
        running.set()
        with begun:
          begun.wait_for(lambda: len(runs) >= 3, timeout=60)
      outputs = run_outputs(examples)
      record[2] = time.time()
      return outputs
    predictor.predict_outputs = timed
    answers = _with_batcher(predictor, 0.0, _first_then_nine(predictor, texts, running),
                            workers=2)
  (_, slow_start, slow_end), others = runs[0], runs[1:]
  assert runs[0][0] == 3 and sum(n for n, _, _ in others) == 27
  assert len(others) >= 2 and max(n for n, _, _ in others) <= 15  # (a share: 5 of 9 at most)
  assert all(slow_start < start < slow_end for _, start, _ in others[:2])
  for k, results in enumerate(answers):
    _same(results, expected[3 * k:3 * k + 3])


@pytest.mark.parametrize("workers", [1, 2])
def test_requests_that_come_within_the_wait_join_the_batch_of_any_number_of_workers(
    jigsaw_model, reference, workers):
  """--batch_wait_ms with one worker or several: ten requests sent 5 ms apart, within a
  wait of 0.4 s, are predicted in one run per worker (free workers with no request
  waiting take those that come while they wait, in turn), each with its own results."""
  from serving.predictor import Predictor
  texts, expected = _texts(), reference[1]
  with Predictor(jigsaw_model.output_dir) as predictor:
    runs = _counting_runs(predictor)

    async def one_every_5_ms(batcher):
      sent = []
      for request in _ten_requests_of_three_texts(predictor, texts):
        sent.append(asyncio.ensure_future(batcher.predict(request)))
        await asyncio.sleep(0.005)
      return await asyncio.gather(*sent)
    answers = _with_batcher(predictor, 0.4, one_every_5_ms, workers=workers)
  assert runs == [30 // workers] * workers
  for k, results in enumerate(answers):
    _same(results, expected[3 * k:3 * k + 3])


def test_a_request_whose_client_has_gone_is_left_out_of_its_batch(jigsaw_model, reference):
  """Three requests that wait for a run: the one whose client hangs up meanwhile gets
  ClientGone and is not predicted; the two others are, together, with their own results;
  a batch of gone requests alone runs nothing."""
  from serving.predictor import Predictor
  from serving.batcher import ClientGone
  texts, expected = _texts(), reference[1]
  runs, running = [], threading.Event()
  with Predictor(jigsaw_model.output_dir) as predictor:
    _first_run_slow(predictor, runs, running, lambda examples: [e.text_a for e in examples])

    async def first_then_three(batcher):
      requests = _ten_requests_of_three_texts(predictor, texts)
      hung_up = []
      first = asyncio.ensure_future(batcher.predict(requests[0]))
      while not running.is_set():
        await asyncio.sleep(0.005)
      rest = [asyncio.ensure_future(batcher.predict(r, gone)) for r, gone in (
          (requests[1], lambda: False), (requests[2], lambda: bool(hung_up.append(1)) or True),
          (requests[3], lambda: False))]
      answers = await asyncio.gather(first, *rest, return_exceptions=True)
      alone = await asyncio.gather(batcher.predict(requests[4], lambda: True),
                                   return_exceptions=True)
      return answers + alone, hung_up
    (first, second, gone, fourth, gone_alone), hung_up = _with_batcher(
        predictor, 0.0, first_then_three)
  assert runs == [texts[0:3], texts[3:6] + texts[9:12]]
  assert isinstance(gone, ClientGone) and isinstance(gone_alone, ClientGone) and hung_up
  for k, results in ((0, first), (1, second), (3, fourth)):
    _same(results, expected[3 * k:3 * k + 3])


def test_a_failing_batch_fails_only_the_request_at_fault(jigsaw_model, reference):
  from serving.predictor import Predictor
  texts, expected = _texts(), reference[1]
  with Predictor(jigsaw_model.output_dir) as predictor:
    run_outputs = predictor.predict_outputs

    def refusing_poison(examples):
      if any(example.text_a == "poison" for example in examples):
        raise ValueError("the model cannot take this")
      return run_outputs(examples)
    predictor.predict_outputs = refusing_poison

    async def three_requests(batcher):
      requests = [[predictor.example(0, texts[0])], [predictor.example(0, "poison")],
                  [predictor.example(0, texts[1])]]
      return await asyncio.gather(*[batcher.predict(r) for r in requests],
                                  return_exceptions=True)
    first, poisoned, last = _with_batcher(predictor, 0.05, three_requests)
  _same(first, expected[:1])
  _same(last, expected[1:2])
  assert isinstance(poisoned, ValueError) and str(poisoned) == "the model cannot take this"


@pytest.mark.one_runtime("tf2")
def test_run_sh_serve_takes_a_path_from_where_it_is_run(jigsaw_model, reference, tmp_path):
  """./run.sh serve from another folder, with a path relative to it; with its default
  options (no batch wait), twelve concurrent one-text requests each get their text's
  answer."""
  port = free_port()
  folder, name = os.path.split(jigsaw_model.output_dir)
  process, url = serving(["bash", os.path.join(ROOT, "run.sh"), "serve", name, "--port",
                           str(port)], folder, port, str(tmp_path / "serve.log"))
  texts, expected = _texts()[:12], reference[1][:12]
  answers = [None] * len(texts)

  def ask(i):
    answers[i] = _call(url + ":predict", {"instances": [texts[i]]})
  try:
    clients = [threading.Thread(target=ask, args=(i,)) for i in range(len(texts))]
    for client in clients:
      client.start()
    for client in clients:
      client.join()
    assert [status for status, _ in answers] == [200] * len(texts)
    _same([answer["predictions"][0] for _, answer in answers], expected)
  finally:
    process.terminate()
    process.wait(30)
  assert "serving %s/export/" % jigsaw_model.output_dir in open(str(tmp_path / "serve.log")).read()
