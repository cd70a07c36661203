"""The feature cache: each split's record files, with a metadata JSON beside them.

A later run whose inputs have the same fingerprint (source files, vocabulary, lengths,
labels, padding) reuses the records, once each file is checked against what was written
(its size, sha256 and record count, in the metadata); any change of the inputs, and any
file that is not what was written, rebuilds them, and the log says why. Runs sharing a
cache at once take turns through a lock per split: records are never rewritten under a
run that reads them (one that would have to is refused), and two runs that need the same
records write them once.
"""

import hashlib
import json
import logging
import random
import struct
import time

import tensorflow.compat.v1 as tf

from data.features import num_padding_rows
from data.files import (file_check, file_sha256, hold, not_a_file_problem, read_written,
                        release, remove_quietly, staging_path, write_whole)
from data.featurise import (Featurisation, existing_objects_frozen, scratch_folder, stage,
                            truncation_of, write_shards)
from data.record_format import SCHEMA_VERSION
from spec.run_errors import ArtefactFault, FlagError

log = logging.getLogger(__name__)

# Tries to take the records' lock for writing while other processes read them (about 3 s
# in all), before a run is refused.
WRITE_ATTEMPTS = 12


def fingerprint(settings):
  """A short stable hash of everything that determines the records' content."""
  blob = json.dumps(dict(settings, schema_version=SCHEMA_VERSION), sort_keys=True)
  return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def metadata_path(record_path):
  return record_path + ".meta.json"


def lock_path(record_path):
  """The lock of a split's records: held shared by each process that reads them (for its
  whole life), exclusive by one that writes them, so records are never replaced under a
  run that reads them (local caches; Cloud Storage has no locks)."""
  return record_path + ".lock"


# A folder, pipe or loop where the records or their metadata go is removed by no run: the
# way forward from one.
CACHE_FIX = ("remove it (the cache holds nothing else there), or pass another --cache_dir")


def read_metadata(record_path):
  """The metadata of a split's records, or None when there is none or it cannot be used
  (not JSON, or not the metadata this program writes: the log says so, and the records
  are rebuilt). Its files are named beside record_path (a cache copied or moved
  elsewhere reads its own files, never those of the folder it came from). ArtefactFault
  for what no rebuild could replace: a folder or a pipe in its place."""
  path = metadata_path(record_path)
  text = read_written(path, CACHE_FIX)
  if text is None:
    return None
  try:
    metadata = json.loads(text)
  except ValueError as e:
    log.warning("%s cannot be read (%s): rebuilding its records", path, e)
    return None
  problem = metadata_problem(metadata) or checksum_problem(metadata)
  if problem:
    log.warning("%s is not the metadata this program writes (%s): rebuilding its records",
                path, problem)
    return None
  folder = record_path.rsplit("/", 1)[0]
  metadata["files"] = ["%s/%s" % (folder, name.rsplit("/", 1)[-1])
                       for name in metadata["files"]]
  return metadata


def with_checksum(metadata):
  """metadata with its own sha256 (of its other entries), so that an edit is seen."""
  body = dict(metadata)
  body.pop("checksum", None)
  return dict(body, checksum=hashlib.sha256(json.dumps(
      body, sort_keys=True).encode("utf-8")).hexdigest())


def checksum_problem(metadata):
  """None when metadata holds the checksum of its entries as written, else what differs
  (an entry edited by hand: counts that no longer match the records, say)."""
  if metadata.get("checksum") is None:
    return "it has no checksum of its entries (an earlier version wrote it)"
  if with_checksum(metadata)["checksum"] != metadata["checksum"]:
    return "its entries are not those written (their checksum differs: edited?)"
  return None


# The metadata's entries that reuse reads, and what each holds.
METADATA_FIELDS = {"fingerprint": str, "files": list, "file_checks": list,
                   "num_examples": int, "num_padding": int, "num_records": int}


def metadata_problem(metadata):
  """What makes metadata other than this program's (a missing entry, a wrong kind, file
  checks that do not match its files), or None."""
  if not isinstance(metadata, dict):
    return "it is not a JSON object"
  for name, kind in sorted(METADATA_FIELDS.items()):
    if not isinstance(metadata.get(name), kind) or isinstance(metadata.get(name), bool):
      return "its entry %s is %r" % (name, metadata.get(name))
  if len(metadata["files"]) != len(metadata["file_checks"]) or not all(
      isinstance(f, str) for f in metadata["files"]):
    return "its files and file checks do not pair up"
  for check in metadata["file_checks"]:
    if check is not None and not (isinstance(check, dict) and
                                  isinstance(check.get("bytes"), int) and
                                  isinstance(check.get("sha256"), str) and
                                  isinstance(check.get("records"), int)):
      return "a file check is %r" % (check,)
  return None


def shard_paths(record_path, num_shards):
  if num_shards <= 1:
    return [record_path]
  return ["%s-%05d-of-%05d" % (record_path, i, num_shards) for i in range(num_shards)]


def shard_sizes(num_examples, num_shards):
  """The examples in each of num_shards shards (the last ones may be empty)."""
  return [end - start for start, end in _shard_ranges(num_examples, num_shards)]


def _shard_ranges(num_examples, num_shards):
  """Contiguous [start, end) ranges, so shards read in order give the examples in order."""
  size = -(-num_examples // num_shards) if num_examples else 0
  return [(min(i * size, num_examples), min((i + 1) * size, num_examples))
          for i in range(num_shards)]


def build_records(examples, record_path, settings, tokenizer, pad_to_multiple=0, num_shards=1,
                  num_workers=1, order=None, accounts=None):
  """Writes (or reuses) the records of one split. Returns the metadata dict.

  examples is an iterable, read only when the records are written: a cached copy is
  found from settings alone, which must hold everything that shapes the records: the
  source files' identity (sha256), label_spec (its card entry), truncation
  (Truncation.as_dict(); head when absent), max_seq_length, vocab and casing, the options
  that read the rows (and, for a train split, that order and weigh them).
  pad_to_multiple > 0 appends padding rows (is_real_example=0) so the files hold whole
  batches. With num_shards > 1 the records are split into that many contiguous files
  (metadata["files"], in order); num_workers > 1 featurises in that many processes.
  order (pipeline/splits.py: the training order, or prediction's length order) sees each
  example as it is read, then gives the records' order from the staged examples
  (arrange(staged) -> the examples' indices in order, and their weights or None: the
  sample_weight field, padding rows weighing 0; then recorded() -> what the metadata
  keeps of it, such as the class weights); its file_ids says whether each record's
  example_id is its row's place in the file (else its place in the records). Without
  it the records keep the file's order. Counts (truncated and empty texts) are of the
  examples written. accounts() is what reading found (lines, skips), recorded in the
  metadata once the examples are read (it may refuse them: nothing is written then).
  settings["own_shards"] (a list of shard numbers; a training order only) writes only
  those shards, featurising only their examples: one task of a cluster, which reads no
  other. examples is then a callable that gives them afresh: a first pass reads them for
  the order, a second featurises the shards' rows. The metadata lists every shard's file
  (the others' checks are None), and its counts of truncated and empty texts are of the
  rows written.
  """
  if settings.get("own_shards") is not None and (order is None or order.file_ids):
    raise ValueError("own_shards writes some shards of a training order")
  num_shards = max(1, num_shards)
  settings = dict(settings, pad_to_multiple=pad_to_multiple, num_shards=num_shards,
                  weighted=bool(order is not None and order.weighted))
  key = fingerprint(settings)
  tf.io.gfile.makedirs(record_path.rsplit("/", 1)[0])
  lock = lock_path(record_path)
  for attempt in range(WRITE_ATTEMPTS):
    _hold_to_read(lock, record_path)
    existing = _reusable(record_path, key, quiet=attempt > 0)
    if existing:
      return existing
    if hold(lock, exclusive=True, wait=False):
      try:
        return _write_records(examples, record_path, settings, key, tokenizer,
                              pad_to_multiple, num_shards, num_workers, order, accounts)
      finally:
        hold(lock)  # written (or not): read from now on, like any reader's
    # Another process reads them: a run with other settings, or one about to write these
    # same records (it goes first; this one then finds them made).
    release(lock)
    time.sleep(random.SystemRandom().uniform(0.05, 0.5))  # (not the run's seeded random)
  raise FlagError(
      "%s: another run is reading this cache's %s records, made with other settings or "
      "files, and rewriting them would change its input: wait for it to end, or pass this "
      "run another --cache_dir" % (record_path.rsplit("/", 1)[0],
                                   record_path.rsplit("/", 1)[-1]))


def _hold_to_read(lock, record_path):
  """Holds the records' lock shared, waiting (and saying so) while another process writes
  them."""
  if not hold(lock, wait=False):
    log.info("waiting for another run to finish writing %s", record_path)
    hold(lock)


def _reusable(record_path, key, quiet=False):
  """The metadata of a split's cached records when they were made with fingerprint key and
  every file is what was written, else None (the log says why, unless quiet)."""
  existing = read_metadata(record_path)
  if existing is not None and existing.get("fingerprint") == key:
    problem = files_problem(existing)
    if problem is None:
      log.info("reusing cached features %s (%d examples + %d padding)", record_path,
               existing["num_examples"], existing["num_padding"])
      report_reading(record_path, existing)
      report_changes(record_path, existing)
      return existing
    if not quiet:
      log.warning("cached features %s are not what was written (%s): rebuilding",
                  record_path, problem)
  elif existing is not None and not quiet:
    log.info("cached features %s are stale (inputs changed): rebuilding", record_path)
  return None


def _write_records(examples, record_path, settings, key, tokenizer, pad_to_multiple,
                   num_shards, num_workers, order, accounts):
  """Featurises examples into the split's record files and metadata (see build_records)."""
  paths = shard_paths(record_path, num_shards)
  own = settings.get("own_shards")
  here = [path for shard, path in enumerate(paths) if own is None or shard in own]
  for path in here + [metadata_path(record_path)]:
    problem = tf.io.gfile.exists(path) and not_a_file_problem(path)
    if problem:  # (a rename over it would fail after all the featurisation)
      raise ArtefactFault("%s: %s, where this run writes its records. Fix: %s" % (
          path, problem, CACHE_FIX))
  job = Featurisation(settings, tokenizer, weighted=settings["weighted"])
  staging = {path: staging_path(path) for path in here}
  try:
    with scratch_folder(record_path) as scratch, existing_objects_frozen():
      arranged = keep = None
      if own is not None:  # the order first, from a pass that only reads the rows
        arranged = _arrange_unstaged(examples(), order, accounts)
        keep = _rows_of_shards(arranged[0], num_shards, own)
        examples = examples() if own else ()  # (a task with no shard only counts)
      staged = stage(examples, job, scratch, num_workers, keep=keep,
                     observe=order.observe if order is not None and own is None else None)
      try:
        read = accounts() if accounts else None  # (which may refuse what was read)
        positions, weights = arranged or (order.arrange(staged) if order is not None
                                          else (None, None))
        written = positions if positions is not None else range(staged.num_examples)
        num_examples = len(written)
        num_padding = num_padding_rows(num_examples, pad_to_multiple)
        sizes = _records_per_shard(num_examples, num_shards, num_padding)
        log.info("writing %d examples + %d padding rows into %d file(s)%s", num_examples,
                 num_padding, len(paths), "" if own is None else
                 ", of which this task writes %s" % _shard_names(own, num_shards))
        write_shards(job, staged, positions, weights, [staging.get(p) for p in paths],
                     shard_sizes(num_examples, num_shards), num_padding,
                     file_ids=bool(order is not None and order.file_ids))
        here_rows = (lambda: written) if keep is None else (
            lambda: (i for i in written if keep[i]))
        truncation = truncation_of(staged.lengths(here_rows()), settings["max_seq_length"])
        empty_texts = sum(staged.empty[i] for i in here_rows())
      finally:
        staged.close()
    checks = [_file_check(staging[path], records) if path in staging else None
              for path, records in zip(paths, sizes)]
    for path in here:
      tf.io.gfile.rename(staging[path], path, overwrite=True)
  finally:
    for path in here:
      remove_quietly(staging[path])

  metadata = dict(settings, fingerprint=key, schema_version=SCHEMA_VERSION, files=paths,
                  file_checks=checks, num_examples=num_examples, num_padding=num_padding,
                  num_records=num_examples + num_padding, read=read,
                  weights_sha256=_weights_sha256(weights), empty_texts=empty_texts,
                  **dict(truncation.as_dict(), **(order.recorded() if order else {})))
  metadata = with_checksum(metadata)  # (returned as a later run reads it back)
  write_whole(metadata_path(record_path), json.dumps(metadata, indent=2, sort_keys=True))
  log.info("wrote %s: %d examples + %d padding rows in %d file(s)", record_path, num_examples,
           num_padding, len(here))
  report_changes(record_path, metadata)
  return metadata


class _Counted(object):
  """What an order's arrange reads of examples counted but not staged."""

  def __init__(self, num_examples):
    self.num_examples = num_examples


def _arrange_unstaged(examples, order, accounts):
  """(positions, weights) of a training order from one pass that reads the examples
  without featurising them (what reading found is checked at once: accounts())."""
  count = 0
  for example in examples:
    order.observe(example)
    count += 1
  if accounts:
    accounts()
  return order.arrange(_Counted(count))


def _rows_of_shards(positions, num_shards, own):
  """A flag per example: whether one of the shards own holds it."""
  keep = bytearray(max(positions, default=-1) + 1)
  for shard, (start, end) in enumerate(_shard_ranges(len(positions), num_shards)):
    if shard in own:
      for p in range(start, end):
        keep[positions[p]] = 1
  return keep


def _shard_names(own, num_shards):
  if not own:
    return "none (it only counts the rows)"
  return "shard%s %s of %d" % ("" if len(own) == 1 else "s",
                               ", ".join(str(s) for s in sorted(own)), num_shards)


def _records_per_shard(num_examples, num_shards, num_padding):
  """The records of each shard: its examples, and the padding rows in the last one."""
  sizes = shard_sizes(num_examples, num_shards)
  sizes[-1] += num_padding
  return sizes


def _file_check(path, records):
  return dict(file_check(path), records=records)


def files_problem(metadata):
  """None when every record file is what the metadata says was written (its size and
  sha256), else what is wrong with the first one that is not."""
  checks = metadata.get("file_checks")
  if not checks or len(checks) != len(metadata.get("files", ())):
    return "the metadata lists no sizes and checksums"
  own = metadata.get("own_shards")
  for shard, (path, check) in enumerate(zip(metadata["files"], checks)):
    if check is None and own is not None and shard not in own:  # (another task's shard)
      continue
    if check is None:
      return "the metadata lists no size and checksum of %s" % path
    if not tf.io.gfile.exists(path):
      return "%s is missing" % path
    problem = not_a_file_problem(path)
    if problem:
      return "%s: %s" % (path, problem)
    size = tf.io.gfile.stat(path).length
    if size != check["bytes"]:
      return "%s has %d bytes, %d were written (%d records)" % (path, size, check["bytes"],
                                                                check["records"])
    if file_sha256(path) != check["sha256"]:
      return "%s has other bytes than were written (its sha256 differs)" % path
  return None


def _weights_sha256(weights):
  if weights is None:
    return None
  return hashlib.sha256(struct.pack("<%dd" % len(weights), *weights)).hexdigest()


def report_reading(record_path, metadata):
  """Logs what reading the source file found, for records reused without reading it: the
  rows skipped (--skip_malformed_rows) are reported on every run that uses them."""
  read = metadata.get("read") or {}
  skipped = read.get("skipped") or {}
  if skipped:
    log.warning("%s: made from %s, which had %s skipped (--skip_malformed_rows)", record_path,
                metadata.get("source_file"), ", ".join(
                    "%d rows with %s" % (n, cause) for cause, n in sorted(skipped.items())))
  for what, n in sorted((read.get("left_aside") or {}).items()):
    log.info("%s: made from %s, leaving aside %d %s", record_path,
             metadata.get("source_file"), n, what)


def report_changes(record_path, metadata):
  """Logs what featurisation changed or found: empty texts, truncated texts."""
  if metadata.get("empty_texts"):
    log.warning("%s: %d examples have an empty or whitespace-only text; they are kept and "
                "featurised as [CLS] [SEP]", record_path, metadata["empty_texts"])
  if metadata.get("truncated"):
    max_len = metadata["max_seq_length"]
    log.info("%s: %d examples were longer than max_seq_length=%d and were truncated (the "
             "longest has %s%d tokens)", record_path, metadata["truncated"], max_len,
             "" if metadata.get("longest_tokens_exact") else "at least ",
             metadata["longest_tokens"])
