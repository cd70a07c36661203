"""The server's batcher: the examples of concurrent requests, gathered into batches that
worker threads predict (serving/server.py makes one per app)."""

import asyncio
import concurrent.futures


class ClientGone(Exception):
  """The client hung up before the run its request would have joined: it was left out."""


class Batcher(object):
  """Gathers the examples of concurrent requests into batches, each run once by
  predictor.predict_outputs in a worker thread (which runs the model on at most its
  batch_size examples at a time); a batch takes no more requests once it holds max_batch
  examples (its last request may take it past them). workers: how many batches run at
  once, each in its own thread (1 for a predictor whose session must not be shared
  between threads); with more than one, a free worker takes its share of the requests
  waiting (those left over are the next free worker's), and, within wait_seconds of its
  first, those that come while it waits. A request whose client has hung up by the time
  its batch is about to run is left out of it (ClientGone): no answer could reach it."""

  def __init__(self, predictor, max_batch, wait_seconds, workers=1):
    self.predictor, self.max_batch, self.wait_seconds = predictor, max_batch, wait_seconds
    self.workers = workers
    self.queue = asyncio.Queue()
    self.threads = concurrent.futures.ThreadPoolExecutor(max_workers=workers)

  async def predict(self, examples, gone=lambda: False):
    """The predictor's results for examples (one request's), in their order.
    gone: whether its client has hung up (then ClientGone, and the model never runs it)."""
    done = asyncio.get_event_loop().create_future()
    await self.queue.put((examples, done, gone))
    return await done

  async def run(self):
    """Runs the workers until cancelled."""
    workers = [asyncio.ensure_future(self._worker()) for _ in range(self.workers)]
    try:
      await asyncio.gather(*workers)
    finally:
      for worker in workers:
        worker.cancel()

  async def _worker(self):
    while True:
      waiting = [await self.queue.get()]
      try:
        await self._gather(waiting)
        waiting = _still_wanted(waiting)
        if waiting:
          await self._answer(waiting)
      except asyncio.CancelledError:  # (an Exception on Python 3.7: let it end the task)
        raise
      except Exception as error:  # (the batcher lives on; this batch is answered with it:
        _fail(waiting, error)      # each request's log line says why it failed)

  async def _gather(self, waiting):
    loop = asyncio.get_event_loop()
    deadline = loop.time() + self.wait_seconds
    rows = len(waiting[0][0])
    # (a worker's share of the requests waiting now, which the free workers divide; all of
    # them when it is the only one. Requests that come while it waits are its own.)
    share = -(-(1 + self.queue.qsize()) // self.workers) if self.workers > 1 else None
    while rows < self.max_batch:
      if self.queue.qsize():
        if share is not None and len(waiting) >= share:
          return
        item = self.queue.get_nowait()
      else:
        try:
          item = await asyncio.wait_for(self.queue.get(), max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
          return
        share = None  # (from now on, what comes is its own)
      waiting.append(item)
      rows += len(item[0])

  async def _answer(self, waiting):
    """Answers the waiting requests from one run of the model; if it fails, from a run per
    request, so that one request's fault is its own."""
    try:
      self._give(waiting, await self._outputs(waiting))
    except asyncio.CancelledError:
      raise
    except Exception:
      if len(waiting) == 1:
        raise
      for request in waiting:  # (each request's own log line says how it ended)
        try:
          self._give([request], await self._outputs([request]))
        except asyncio.CancelledError:
          raise
        except Exception as error:
          _fail([request], error)

  async def _outputs(self, waiting):
    examples = [example for request, _, _ in waiting for example in request]
    return await asyncio.get_event_loop().run_in_executor(
        self.threads, self.predictor.predict_outputs, examples)

  def _give(self, waiting, outputs):
    start = 0
    for request, done, _ in waiting:
      if not done.done():  # (a request whose handler was cancelled is not answered)
        done.set_result([self.predictor.result(values)
                         for values in outputs[start:start + len(request)]])
      start += len(request)


def _fail(waiting, error):
  for _, done, _ in waiting:
    if not done.done():
      done.set_exception(error)


def _still_wanted(waiting):
  """The waiting requests whose answer someone still waits for: not those whose handler
  was cancelled, nor those whose client has hung up (told so with ClientGone)."""
  wanted = []
  for item in waiting:
    _, done, gone = item
    if done.done():
      continue
    if gone():
      done.set_exception(ClientGone())
    else:
      wanted.append(item)
  return wanted
