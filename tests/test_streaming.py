"""Files read as a stream: the train split is featurised as its rows are read, in bounded
memory, into the same records as the in-memory path; a cached split is not read again."""

import csv
import io
import logging
import os

import pytest
import tensorflow.compat.v1 as tf

from conftest import SAMPLES, TINY_VOCAB
from data import table as table_module
from data.features import convert_examples, padding_features
from data.record_format import ExampleSerializer
from data.table import Table
from data.text_lines import BLOCK_BYTES

BIAS = os.path.join(SAMPLES, "jigsaw_bias_davidson")
SST2 = os.path.join(SAMPLES, "glue", "SST-2")
COLA = os.path.join(SAMPLES, "glue", "CoLA")


def _config(tmp_path, *flags):
  from run_classifier import parse_flags
  return parse_flags(["run_classifier.py", "--do_train", "--vocab_file=" + TINY_VOCAB,
                      "--output_dir=%s" % (tmp_path / "out"), "--max_seq_length=24"] +
                     list(flags))


def _train_split(c, own_shards=None):
  from pipeline.build import make_processor, make_tokenizer
  from pipeline.splits import prepare_splits
  from pipeline.task_extras import task_of
  tokenizer, vocab_file = make_tokenizer(c.model)
  task = task_of(make_processor(c.data))
  return (prepare_splits(c, task, tokenizer, vocab_file, own_shards=own_shards).train, task,
          tokenizer)


def _in_memory_records(c, task, tokenizer):
  """The train records as the whole-file path makes them: every example in a list, the
  fraction taken, weighed and put in training order, then serialised whole."""
  from pipeline.training_order import (in_training_order, take_fraction, training_weights,
                               weight_inputs)
  training, spec = c.training, task.processor.label_spec
  examples = take_fraction(task.processor.get_examples("train"), training.train_fraction,
                           training.seed)
  weights = (training_weights(training, task, weight_inputs(training, task, examples)) if (
      training.class_weights or training.identity_weights or
      training.sample_weight_column is not None) else None)
  examples, weights = in_training_order(examples, weights, training.seed)
  serialize = ExampleSerializer(spec, weighted=weights is not None)
  return [serialize(f, weights[f.example_id] if weights else 1.0)
          for f in convert_examples(examples, spec, c.model.max_seq_length, tokenizer)]


@pytest.mark.parametrize("flags", [
    ("--task_name=jigsaw_bias", "--data_dir=" + BIAS, "--identity_weights",
     "--train_fraction=0.7"),
    ("--task_name=sst-2", "--data_dir=" + SST2, "--class_weights=balanced",
     "--num_record_shards=3"),
    ("--task_name=cola", "--data_dir=" + COLA, "--train_fraction=0.5"),
], ids=["jigsaw_bias", "sst2", "cola"])
@pytest.mark.parametrize("workers", [1, 2])
def test_streamed_train_records_equal_the_in_memory_path(tmp_path, flags, workers):
  c = _config(tmp_path, "--featurise_workers=%d" % workers, *flags)
  train, task, tokenizer = _train_split(c)
  written = [record for path in train.record_files
             for record in tf.io.tf_record_iterator(path)]
  expected = _in_memory_records(c, task, tokenizer)
  assert train.examples is None and train.num_examples == len(expected)
  assert written == expected  # every record, byte for byte, in the same order


def test_dev_records_keep_file_order_and_padding(tmp_path):
  from pipeline.build import make_processor, make_tokenizer
  from pipeline.splits import Featuriser
  c = _config(tmp_path, "--task_name=sst-2", "--data_dir=" + SST2, "--featurise_workers=2")
  tokenizer, vocab_file = make_tokenizer(c.model)
  processor = make_processor(c.data)
  dev = Featuriser(c, processor, tokenizer, vocab_file)("dev", processor.get_examples("dev"),
                                                        8)
  spec = processor.label_spec
  serialize = ExampleSerializer(spec)
  expected = [serialize(f) for f in convert_examples(dev.examples, spec, 24, tokenizer)]
  expected += [serialize(padding_features(24, spec.unlabelled_value()), 0.0)] * (
      -len(expected) % 8)
  assert list(tf.io.tf_record_iterator(dev.record_files[0])) == expected


def _shipped_tables():
  for folder, name, delimiter, has_header, quoting in (
      ("jigsaw_toxic_sample", "train.csv", ",", True, csv.QUOTE_MINIMAL),
      ("jigsaw_bias_davidson", "train.csv", ",", True, csv.QUOTE_MINIMAL),
      ("jigsaw_toxic_balanced", "comments.csv", ",", False, csv.QUOTE_MINIMAL),
      ("davidson_hate_offensive", "labeled_data.csv", ",", True, csv.QUOTE_MINIMAL),
      (os.path.join("glue", "SST-2"), "train.tsv", "\t", True, csv.QUOTE_NONE),
      (os.path.join("glue", "MRPC"), "msr_paraphrase_train.txt", "\t", True, csv.QUOTE_NONE),
      (os.path.join("glue", "CoLA"), "train.tsv", "\t", False, csv.QUOTE_NONE)):
    yield os.path.join(SAMPLES, folder, name), delimiter, has_header, quoting


@pytest.mark.parametrize("path,delimiter,has_header,quoting", list(_shipped_tables()),
                         ids=lambda v: os.path.basename(str(v)))
def test_every_shipped_row_comes_back_as_the_csv_module_reads_it(path, delimiter,
                                                                 has_header, quoting):
  with io.open(path, encoding="utf-8-sig", newline="") as f:
    kwargs = ({"quoting": csv.QUOTE_NONE, "quotechar": None} if quoting == csv.QUOTE_NONE
              else {})
    expected = [row for row in csv.reader(f, delimiter=delimiter, **kwargs) if row]
  table = Table(path, delimiter, has_header, quoting)
  rows = [fields for _, fields in table]
  if has_header:
    assert table.header == [name.strip() for name in expected[0]]
    expected = expected[1:]
  assert rows == expected
  assert table.records == len(expected)


def test_a_file_is_read_a_block_at_a_time(tmp_path, monkeypatch):
  path = str(tmp_path / "big.csv")
  with io.open(path, "w", encoding="utf-8", newline="") as f:
    csv.writer(f).writerows([["text", "label"]] + [["comment %d \U0001F602" % i, str(i % 2)]
                                                   for i in range(300000)])
  assert os.path.getsize(path) > 6 * BLOCK_BYTES
  reads = []

  class Spy(io.FileIO):
    def read(self, size=-1):
      data = super(Spy, self).read(size)
      reads.append(len(data))
      return data

  monkeypatch.setattr(table_module, "open_binary", lambda p: Spy(p, "rb"))
  records = iter(Table(path, ",", True))
  assert next(records) == (2, ["comment 0 \U0001F602", "0"])
  assert sum(reads) <= BLOCK_BYTES and max(reads) <= BLOCK_BYTES  # one block so far
  assert sum(1 for _ in records) == 299999
  assert max(reads) <= BLOCK_BYTES


def test_a_cached_train_split_is_not_read_again_and_a_changed_file_is(tmp_path, monkeypatch,
                                                                      caplog):
  data_dir = tmp_path / "data"
  data_dir.mkdir()
  train = data_dir / "train.tsv"
  rows = ["sentence\tlabel"] + ["a sentence number %d\t%d" % (i, i % 2) for i in range(50)]
  rows[7] = "a row without its label\t"
  train.write_text(u"\n".join(rows) + u"\n")
  flags = ("--task_name=sst-2", "--data_dir=%s" % data_dir, "--skip_malformed_rows")
  first, _, _ = _train_split(_config(tmp_path, *flags))
  assert first.num_examples == 49

  def no_reading(*args, **kwargs):
    raise AssertionError("the train file was read again")

  caplog.set_level(logging.INFO)
  with monkeypatch.context() as patched:
    patched.setattr(Table, "__init__", no_reading)
    again, _, _ = _train_split(_config(tmp_path, *flags))
  assert again.metadata == first.metadata
  assert "reusing cached features" in caplog.text
  # The rows skipped when the records were made are reported on each run that uses them.
  assert "had 1 rows with a missing label skipped (--skip_malformed_rows)" in caplog.text

  # One byte changed, the size and modification time kept: the records are made again.
  stat = os.stat(str(train))
  train.write_text(u"\n".join(rows).replace(u"number 3\t1", u"number 3\t0") + u"\n")
  os.utime(str(train), ns=(stat.st_atime_ns, stat.st_mtime_ns))
  assert os.stat(str(train)).st_size == stat.st_size
  changed, _, _ = _train_split(_config(tmp_path, *flags))
  assert changed.metadata["source_sha256"] != first.metadata["source_sha256"]
  assert changed.metadata["file_checks"] != first.metadata["file_checks"]


def test_one_featurisation_process_per_core_by_default():
  from pipeline.splits import featurise_workers
  from spec.config import RunConfig
  assert RunConfig().device.featurise_workers == 0
  assert featurise_workers(0) == len(os.sched_getaffinity(0))
  assert featurise_workers(3) == 3


def test_a_rate_report_says_rows_per_second_and_time_left():
  from pipeline.progress import RateReport
  now, lines = [100.0], []
  report = RateReport("predicted", 1000, every=30.0, clock=lambda: now[0],
                      report=lines.append)
  for done, at in ((100, 110.0), (200, 131.0), (300, 140.0), (600, 162.0), (1000, 200.0)):
    now[0] = at
    report(done)
  # Every 30 s at most, none at the end (the caller logs the result).
  assert lines == ["predicted 200/1000 rows (6 rows/s, about 2m04s left)",
                   "predicted 600/1000 rows (10 rows/s, about 41s left)"]


def _split_sst2(folder, parts):
  """The SST-2 sample's train file cut into `parts` files (each with the header)."""
  with io.open(os.path.join(SST2, "train.tsv"), encoding="utf-8") as f:
    lines = f.read().splitlines(True)
  header, rows = lines[0], lines[1:]
  size = -(-len(rows) // parts)
  paths = []
  for i in range(parts):
    path = os.path.join(str(folder), "train-%d.tsv" % i)
    with io.open(path, "w", encoding="utf-8") as f:
      f.write(header + "".join(rows[i * size:(i + 1) * size]))
    paths.append(path)
  return paths, len(rows)


@pytest.mark.parametrize("spelling", ["list", "glob"])
def test_several_files_are_one_split(tmp_path, caplog, spelling):
  paths, num_rows = _split_sst2(tmp_path, 3)
  value = ",".join(paths) if spelling == "list" else str(tmp_path / "train-*.tsv")
  caplog.set_level(logging.INFO)
  several, _, _ = _train_split(_config(tmp_path, "--task_name=sst-2",
                                       "--train_file=" + value))
  one, _, _ = _train_split(_config(tmp_path / "one", "--task_name=sst-2",
                                   "--data_dir=" + SST2))
  assert several.num_examples == one.num_examples == num_rows
  # The same rows in the same order: the same records.
  assert [list(tf.io.tf_record_iterator(p)) for p in several.record_files] == [
      list(tf.io.tf_record_iterator(p)) for p in one.record_files]
  read = several.metadata["read"]
  assert [account["examples"] for account in read["files"]] == [
      -(-num_rows // 3), -(-num_rows // 3), num_rows - 2 * -(-num_rows // 3)]
  assert read["examples"] == read["records"] == num_rows
  for path in paths:  # each file's rows counted in the log
    assert "%s: " % path in caplog.text


def test_an_error_in_one_of_several_files_names_it(tmp_path):
  from data.data_error import DataError
  from data.processors import get_processor
  paths, _ = _split_sst2(tmp_path, 2)
  with io.open(paths[1], "a", encoding="utf-8") as f:
    f.write(u"a row with a label of its own\tmaybe\n")
  processor = get_processor("sst-2", files={"train": ",".join(paths)})
  with pytest.raises(DataError) as error:
    processor.get_examples("train")
  lines = sum(1 for _ in io.open(paths[1], encoding="utf-8"))
  assert str(error.value).startswith("%s, line %d, column 'label': " % (paths[1], lines))
  for value, problem in (
      (str(tmp_path / "nothing-*.tsv"), "no file matches this pattern"),
      ("%s,%s" % (paths[0], paths[0]), "the file is named 2 times")):
    processor = get_processor("sst-2", files={"train": value})
    with pytest.raises(DataError, match=problem):
      processor.get_examples("train")


def test_identity_columns_are_those_of_any_row(tmp_path):
  """A row cut short before its last identity columns (its cells count as empty) does not
  hide those columns from the identity weights of the rows after it."""
  from data.processors import get_processor
  from pipeline import task_extras, training_order
  from spec.config import RunConfig
  with io.open(os.path.join(BIAS, "train.csv"), encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f))
  header = rows[0]
  short = header.index("muslim") + 1
  path = str(tmp_path / "train.csv")
  with io.open(path, "w", encoding="utf-8", newline="") as f:
    csv.writer(f).writerows([header, rows[1][:short]] + rows[2:])
  processor = get_processor("jigsaw_bias", files={"train": path})
  training = RunConfig(identity_weights=True).training
  task = task_extras.task_of(processor)
  inputs = training_order.weight_inputs(training, task, processor.get_examples("train"))
  assert {"black", "white", "psychiatric_or_mental_illness"} <= inputs.present
  assert len(inputs.mentions) == len(rows) - 1


def test_a_killed_featurisation_leaves_no_scratch_behind(tmp_path):
  from data.tfrecord import build_records
  from test_features import _examples, _settings
  from data import tokenization
  stale = tmp_path / "train.tf_record.featurise-dead1234"
  stale.mkdir()
  (stale / "bodies-00").write_bytes(b"x" * 100)
  (tmp_path / "train.tf_record.tmp-999-deadbeef").write_bytes(b"half a shard")
  (tmp_path / "dev.tf_record.tmp-999-deadbeef").write_bytes(b"another split's: kept")
  tokenizer = tokenization.FullTokenizer(TINY_VOCAB, do_lower_case=True)
  build_records(_examples(5), str(tmp_path / "train.tf_record"), _settings(TINY_VOCAB),
                tokenizer, num_workers=2)
  assert sorted(os.listdir(str(tmp_path))) == [
      "dev.tf_record.tmp-999-deadbeef", "train.tf_record", "train.tf_record.lock",
      "train.tf_record.meta.json"]


def test_a_train_file_that_is_also_the_eval_file_is_refused(tmp_path):
  from spec.run_errors import FlagError
  paths, _ = _split_sst2(tmp_path, 2)
  with pytest.raises(FlagError) as error:
    _train_split(_config(tmp_path, "--task_name=sst-2", "--do_eval",
                         "--train_file=%s" % (tmp_path / "train-*.tsv"),
                         "--eval_file=%s/./train-1.tsv" % tmp_path))
  assert str(error.value).startswith(
      "%s/./train-1.tsv is both a train file (--train_file=%s/train-*.tsv) and the eval "
      "file: the evaluation would score rows the model trained on" % (tmp_path, tmp_path))


def test_one_file_named_as_train_and_eval_file_is_said(tmp_path, caplog):
  from pipeline.build import make_processor
  from pipeline.splits import check_files_of_splits
  paths, _ = _split_sst2(tmp_path, 2)
  c = _config(tmp_path, "--task_name=sst-2", "--do_eval", "--train_file=" + paths[0],
              "--eval_file=" + paths[0])
  check_files_of_splits(make_processor(c.data), c.modes)
  assert ("the eval file is the train file, %s: the evaluation scores rows the model "
          "trained on" % paths[0]) in caplog.text


def test_one_file_named_twice_by_two_spellings_is_refused(tmp_path):
  from data.data_error import DataError
  from data.processors import get_processor
  paths, _ = _split_sst2(tmp_path, 2)
  value = "%s,%s/../%s/train-*.tsv" % (paths[0], tmp_path, tmp_path.name)
  with pytest.raises(DataError, match="the file is named 2 times"):
    get_processor("sst-2", files={"train": value}).get_examples("train")


def test_a_file_that_changes_while_it_is_read_is_refused(tmp_path):
  """Its records would be cached under the name (sha256) of bytes they were not made of."""
  from data.data_error import DataError
  from pipeline.build import make_processor, make_tokenizer
  from pipeline.splits import Featuriser
  dev = tmp_path / "dev.tsv"
  dev.write_text(u"sentence\tlabel\n" + u"".join(u"row %d\t%d\n" % (i, i % 2)
                                                 for i in range(20)))
  c = _config(tmp_path, "--task_name=sst-2", "--eval_file=%s" % dev,
              "--data_dir=" + SST2)
  tokenizer, vocab_file = make_tokenizer(c.model)
  processor = make_processor(c.data)
  examples = processor.get_examples("dev")  # read, then the file grows
  with io.open(str(dev), "a", encoding="utf-8") as f:
    f.write(u"a row written late\t1\n")
  with pytest.raises(DataError, match="the file changed while it was read"):
    Featuriser(c, processor, tokenizer, vocab_file)("dev", examples, 8)
  assert not [n for n in os.listdir(str(tmp_path / "out" / "features"))
              if not n.endswith(".lock")]


def test_bad_bytes_in_a_file_of_carriage_returns_name_their_line(tmp_path):
  """A file whose lines end only at \r (old Mac files), past its first block."""
  from data.data_error import DataError
  path = tmp_path / "mac.csv"
  lines = [b"text,label"] + [b"row number %d,%d" % (i, i % 2) for i in range(100000)]
  lines[70001] = b"caf\xe9,1"
  path.write_bytes(b"\r".join(lines) + b"\r")
  assert path.stat().st_size > BLOCK_BYTES
  with pytest.raises(DataError, match="line 70002: invalid UTF-8 .byte 0xe9 at byte 4 of "
                     "the line."):
    list(Table(str(path), ",", True))


def test_a_headerless_file_whose_layout_changes_after_its_first_records_is_refused(tmp_path):
  """Its width is taken from the first 1,000 records; with most rows of another width,
  the rows checked against it were not the usual ones."""
  from data.data_error import DataError
  from data.processors import get_processor
  path = tmp_path / "layout.csv"
  path.write_text(u"".join(u"text %d,%d\n" % (i, i % 2) for i in range(1000)) +
                  u"".join(u"text %d,%d,source\n" % (i, i % 2) for i in range(3000)))
  processor = get_processor("csv", files={"train": str(path)}, text_column="0",
                            label_columns=["1"], has_header=False, skip_malformed_rows=True)
  with pytest.raises(DataError) as error:
    processor.get_examples("train")
  assert str(error.value) == (
      "%s: most rows have 3 fields, but the first 1000 records mostly have 2: the file's rows "
      "change their layout. Fix: give every row the same columns (files of two layouts "
      "joined?)" % path)


def test_predictions_are_written_as_the_predict_file_is_read_again(tmp_path, caplog):
  """The predict rows are not held: test_results.tsv is written as the file is read once
  more, quietly, each line from its row and the outputs' row; a file that changed since
  its records were made is refused, and the earlier results stay whole."""
  import numpy as np
  from data.data_error import DataError
  from data.files import file_sha256
  from pipeline.build import make_processor
  from data.reread import read_again
  from pipeline.outputs import paired, write_test_results
  predict = tmp_path / "test.tsv"
  with open(os.path.join(SST2, "test.tsv"), "rb") as f:
    predict.write_bytes(f.read())
  processor = make_processor(_config(tmp_path, "--task_name=sst-2", "--data_dir=" + SST2,
                                     "--predict_file=%s" % predict, "--do_predict").data)
  ids = [example.guid for example in processor.get_examples("test")]
  outputs = np.arange(2 * len(ids), dtype=np.float32).reshape(-1, 2) / 7
  out = tmp_path / "results"
  out.mkdir()

  def write(sha256=file_sha256(str(predict))):
    return write_test_results(str(out), processor, paired(
        read_again(processor, "test", sha256), outputs), {"checkpoint": None})

  caplog.clear()
  with caplog.at_level(logging.INFO):
    path = write()
  assert not [r for r in caplog.records if r.name.startswith("data")]
  with open(path) as f:
    lines = [line.rstrip("\n").split("\t") for line in f]
  assert lines[0] == ["id", "probability_0", "probability_1", "prediction"]
  assert [line[0] for line in lines[1:]] == ids
  assert np.array_equal(np.array([line[1:3] for line in lines[1:]], np.float32), outputs)
  written = open(path, "rb").read()

  predict.write_bytes(predict.read_bytes().replace(b"charming", b"charmine"))
  with pytest.raises(DataError) as error:
    write()
  assert str(error.value) == (
      "%s: the file changed after its rows were featurised (its sha256 then and now "
      "differ): its predictions would be written beside other rows. Fix: run again once "
      "nothing writes to it" % predict)
  with open(predict, "a") as f:  # (a row more: still the file's change that is said)
    f.write("one more row .\t1\n")
  with pytest.raises(DataError, match="the file changed after its rows were featurised"):
    write()
  with pytest.raises(RuntimeError, match="the predict file has %d rows, but %d were "
                     "predicted" % (len(ids) + 1, len(ids))):
    write(file_sha256(str(predict)))
  assert open(path, "rb").read() == written
  assert sorted(os.listdir(str(out))) == ["test_results.json", "test_results.tsv"]


def test_a_file_read_twice_must_be_a_regular_file_and_one_read_once_is_checked(tmp_path):
  """The run's splits are hashed, then read: a pipe (or FIFO), a folder or a missing file
  is one line, not a traceback. --saved_model reads its file once, hashed first when it is
  a regular file: a file that changed while it was read is refused. The k-fold mean
  refuses folds that predicted other bytes."""
  import numpy as np
  from data.data_error import DataError
  from data.reread import read_checked
  from pipeline.build import make_processor, make_tokenizer
  from pipeline.cross_validation import write_fold_mean_predictions
  from pipeline.outputs import ModelRun
  from pipeline.splits import Featuriser
  fifo = str(tmp_path / "rows.tsv")
  os.mkfifo(fifo)
  for path, problem in ((fifo, "this is a pipe or another stream, which can be read only "
                         "once, and it is read twice: hashed first, to find its records in "
                         "the cache, then read for its rows. Fix: save it to a file first "
                         "and pass that file"),
                        (str(tmp_path), "this is a folder, not a file"),
                        (str(tmp_path / "none.tsv"), "the file does not exist")):
    c = _config(tmp_path, "--task_name=sst-2", "--data_dir=" + SST2, "--do_predict",
                "--predict_file=" + path)
    tokenizer, vocab_file = make_tokenizer(c.model)
    processor = make_processor(c.data)
    with pytest.raises(DataError) as error:
      Featuriser(c, processor, tokenizer, vocab_file).settings("test", None)
    assert str(error.value).startswith("%s: %s" % (path, problem))

  # Checked before any file is read: an eval file or a folds run's train file that is a
  # FIFO no one writes to is refused, not read for ever.
  from pipeline.cross_validation import run_folds
  from pipeline.splits import prepare_splits
  from pipeline.task_extras import task_of
  eval_fifo = _config(tmp_path, "--task_name=sst-2", "--data_dir=" + SST2, "--do_eval",
                      "--eval_file=" + fifo)
  with pytest.raises(DataError, match="this is a pipe or another stream"):
    prepare_splits(eval_fifo, task_of(make_processor(eval_fifo.data)), tokenizer, vocab_file)
  with pytest.raises(DataError, match="this is a pipe or another stream"):
    run_folds(_config(tmp_path, "--task_name=sst-2", "--data_dir=" + SST2, "--num_folds=2",
                      "--train_file=" + fifo), None)

  predict = tmp_path / "test.tsv"
  missing = make_processor(_config(tmp_path, "--task_name=sst-2", "--data_dir=" + SST2,
                                   "--predict_file=%s" % (tmp_path / "no.tsv"),
                                   "--do_predict").data)
  with pytest.raises(DataError, match="the file does not exist"):
    read_checked(missing, "test")
  predict.write_bytes(open(os.path.join(SST2, "test.tsv"), "rb").read())
  processor = make_processor(_config(tmp_path, "--task_name=sst-2", "--data_dir=" + SST2,
                                     "--predict_file=%s" % predict, "--do_predict").data)
  assert len(list(read_checked(processor, "test"))) == 100
  rows = read_checked(processor, "test")  # (hashed now, read below)
  predict.write_bytes(predict.read_bytes().replace(b"charming", b"charmine"))
  with pytest.raises(DataError, match="the file changed while it was read"):
    list(rows)

  runs = [ModelRun(test_outputs=np.zeros((100, 2), np.float32), test_sha256=sha256)
          for sha256 in ("a" * 64, "b" * 64)]
  with pytest.raises(DataError, match="the file changed between the folds' predictions"):
    write_fold_mean_predictions(str(tmp_path), processor, runs)
