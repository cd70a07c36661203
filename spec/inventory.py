"""The inventory of everything a run reads, writes or talks to, and the faults each may
meet: the one list the fault matrix (tests/test_fault_matrix.py) is generated from.

Every file a run leaves behind matches one ARTEFACTS pattern (tests/test_inventory.py runs
the pipeline's modes and checks it), so a new artefact kind joins the matrix the day it
is written: it has no pattern until it is listed here, and once listed, every fault its
role allows is a cell of the matrix.

An artefact's role says what is expected of it:
  input      the user's (data, vocabulary, config, checkpoint): checked when read, a bad
             one refused in one line naming the file and the fix;
  state      written by a run for later runs to read back (the card, checkpoints, records,
             the eval history, exports): verified before every reuse, and refused in one
             line, or rebuilt with a warning (on_fault "rebuild"), never used as it is;
  output     for the user and their tools (results, predictions, summaries): written
             whole, checked before it leaves (finite numbers, read back as its readers
             read it), and never read back by the run;
  transient  staging and scratch that exist while a run writes (removed on any way out).
Every pattern is relative to its root: output_dir, cache_dir (the records), export (one
export's folder), or the project's own .cache.
"""

import collections
import fnmatch

Artefact = collections.namedtuple(
    "Artefact", "name root pattern role verified_by on_fault faults")
Peer = collections.namedtuple("Peer", "name reached_by faults")
Output = collections.namedtuple("Output", "name checked_by faults")

# The faults of a file, and what each does to one.
FILE_FAULTS = collections.OrderedDict([
    ("missing", "removed"),
    ("empty", "cut to 0 bytes"),
    ("truncated", "cut to half its bytes"),
    ("flipped", "a run of bytes in its middle inverted (its size kept)"),
    ("folder", "a folder in its place"),
    ("fifo", "a named pipe in its place (a read would wait for ever)"),
    ("other_run", "replaced by the same file of another run"),
    ("unreadable", "a link that loops in its place (open fails; root ignores permissions)"),
])
# Faults of the place a file is written to (tests/test_fault_matrix.py's writer cells).
WRITE_FAULTS = ("disk_full", "second_writer", "signal")
ALL_FILE_FAULTS = tuple(FILE_FAULTS)
CONTENT_FAULTS = ("empty", "truncated", "flipped", "folder", "fifo", "unreadable")

ARTEFACTS = (
    # --- the run's folder ---------------------------------------------------------------
    Artefact("model card", "output_dir", "model_card.json", "state",
             "pipeline.card.read_model_card", "refuse", CONTENT_FAULTS),
    Artefact("checkpoint state", "output_dir", "checkpoint", "state",
             "modeling.checkpoint.newest_checkpoint", "refuse", ALL_FILE_FAULTS),
    Artefact("checkpoint index", "output_dir", "model.ckpt-*.index", "state",
             "pipeline.evaluation.head_checkpoint", "refuse",
             ("missing", "empty", "truncated", "flipped", "folder", "unreadable")),
    Artefact("checkpoint data", "output_dir", "model.ckpt-*.data-*-of-*", "state",
             "pipeline.evaluation.head_checkpoint", "refuse",
             ("missing", "empty", "truncated", "flipped", "folder", "unreadable")),
    Artefact("checkpoint graph", "output_dir", "model.ckpt-*.meta", "output", None, None, ()),
    Artefact("training lock", "output_dir", "training.lock", "transient", None, None, ()),
    Artefact("eval history", "output_dir", "eval_history.csv", "state",
             "pipeline.eval_history.EvalHistory.load", "refuse", CONTENT_FAULTS),
    Artefact("best record", "output_dir", "best/best_checkpoint.json", "state",
             "pipeline.eval_history.read_best", "refuse", CONTENT_FAULTS + ("missing",)),
    Artefact("best checkpoint", "output_dir", "best/model.ckpt-*", "state",
             "pipeline.eval_history.read_best", "refuse",
             ("missing", "empty", "truncated", "flipped", "folder", "unreadable")),
    Artefact("learning curve", "output_dir", "learning_curve.png", "output", None, None, ()),
    Artefact("eval results", "output_dir", "eval_results.*", "output",
             "pipeline.evaluation.Evaluator.evaluate", None, ()),
    Artefact("predictions", "output_dir", "test_results.tsv", "output",
             "pipeline.outputs.check_tsv", None, ()),
    Artefact("predictions' provenance", "output_dir", "test_results.json", "output", None,
             None, ()),
    Artefact("run summary", "output_dir", "run_summary.json", "output", None, None, ()),
    # (./run.sh reproduce's table, written beside the run's summary)
    Artefact("comparison table", "output_dir", "comparison.*", "output", None, None, ()),
    Artefact("bias report", "output_dir", "bias_metrics.*", "output", None, None, ()),
    Artefact("TensorBoard events", "output_dir", "events.out.tfevents.*", "output",
             "modeling.summaries.scalar_events", None, ()),
    Artefact("TensorBoard graph", "output_dir", "graph.pbtxt", "output", None, None, ()),
    Artefact("eval events", "output_dir", "eval*/events.out.tfevents.*", "output", None,
             None, ()),
    Artefact("out-of-fold predictions", "output_dir", "oof_predictions.tsv", "output",
             "pipeline.outputs.check_tsv", None, ()),
    Artefact("folds summary", "output_dir", "folds_summary.json", "output", None, None, ()),
    Artefact("a fold's folder", "output_dir", "fold_*/*", "output", None, None, ()),
    # --- the records (cache_dir: --cache_dir or <output_dir>/features) ------------------
    Artefact("records' metadata", "cache_dir", "*.tf_record.meta.json", "state",
             "data.tfrecord.read_metadata", "rebuild", ALL_FILE_FAULTS),
    Artefact("records' lock", "cache_dir", "*.tf_record.lock", "transient", None, None, ()),
    Artefact("records", "cache_dir", "*.tf_record*", "state",
             "data.tfrecord.files_problem", "rebuild",
             ("missing", "empty", "truncated", "flipped", "folder", "unreadable")),
    # --- an export ------------------------------------------------------------------------
    Artefact("export manifest", "export", "files.json", "state",
             "serving.predicting.check_export_files", "refuse", CONTENT_FAULTS + ("missing",)),
    Artefact("SavedModel", "export", "saved_model.pb", "state",
             "serving.predicting.check_export_files", "refuse", CONTENT_FAULTS + ("missing",)),
    Artefact("SavedModel variables", "export", "variables/variables.*", "state",
             "serving.predicting.check_export_files", "refuse", CONTENT_FAULTS + ("missing",)),
    Artefact("export card", "export", "assets/model_card.json", "state",
             "serving.predicting.check_export_files", "refuse", CONTENT_FAULTS + ("missing",)),
    Artefact("export vocabulary", "export", "assets/vocab.txt", "state",
             "serving.predicting.check_export_files", "refuse", CONTENT_FAULTS + ("missing",)),
    Artefact("transformers folder", "export", "hf/*", "output", None, None, ()),
    Artefact("ONNX folder", "export", "onnx/*", "state",
             "serving.predicting.check_export_files", "refuse", CONTENT_FAULTS + ("missing",)),
    # --- the project's own cache ------------------------------------------------------------
    Artefact("fused kernels", "project_cache", "kernels/fused_ops-*.so", "state",
             "modeling.fused.library", "rebuild", ()),
    # --- staging and scratch: gone once a run ends, whichever way --------------------------
    Artefact("staging file", "any", "*.tmp-*", "transient", None, None, ()),
    Artefact("export staging", "any", ".partial-*", "transient", None, None, ()),
    Artefact("featurisation scratch", "cache_dir", "*.featurise-*", "transient", None, None,
             ()),
    Artefact("partial checkpoint", "output_dir", "model.ckpt-*_temp*", "transient", None,
             None, ()),
)

# The user's own files a run reads: checked when read (tests/test_fault_matrix.py).
INPUTS = (
    Artefact("data file", "input", "--train_file/--eval_file/--predict_file", "input",
             "data.examples.DataProcessor.iter_examples", "refuse",
             ("missing", "empty", "truncated", "folder", "fifo", "unreadable")),
    Artefact("vocabulary", "input", "--vocab_file", "input",
             "data.vocabulary.load_vocab", "refuse", CONTENT_FAULTS + ("missing",)),
    Artefact("BERT config", "input", "--bert_config_file", "input",
             "pipeline.build.read_bert_config", "refuse", CONTENT_FAULTS + ("missing",)),
    Artefact("pre-trained checkpoint", "input", "--init_checkpoint", "input",
             "pipeline.checks.check_model_inputs", "refuse",
             ("missing", "empty", "truncated", "flipped", "folder", "unreadable")),
    # (safetensors carries no checksum: bytes changed in place cannot be told from others,
    # beyond values that are not numbers, which are refused)
    Artefact("Hugging Face weights", "input", "convert_hf_checkpoint HF_DIR/model.safetensors",
             "input", "modeling.convert_hf.convert", "refuse",
             ("missing", "empty", "truncated", "folder", "unreadable")),
    Artefact("Hugging Face config", "input", "convert_hf_checkpoint HF_DIR/config.json",
             "input", "modeling.convert_hf.convert", "refuse",
             ("missing", "empty", "truncated", "folder", "unreadable")),
)

# Whom a run talks to, and how each can fail it.
PEERS = (
    Peer("TF_CONFIG tasks", "TF_CONFIG (spec/cluster.py)",
         ("malformed", "no_worker", "no_port", "bad_port", "busy_port", "absent", "slow")),
    Peer("Cloud Storage", "gs:// paths (--output_dir, --data_dir, --vocab_file, "
         "--init_checkpoint, --bert_config_file)", ("unreachable",)),
    Peer("Cloud TPU", "--tpu_name, TPU_NAME, COLAB_TPU_ADDR", ("absent", "unreachable")),
    Peer("HTTP clients", "serving/server.py", ("hang_up", "malformed", "oversized",
                                               "wrong_path", "wrong_method")),
    Peer("featurisation workers", "data/forked.py", ("killed",)),
)

# What leaves the project for a user or a tool, and how each is checked before it leaves.
OUTPUTS = (
    Output("predictions (test_results.tsv)", "pipeline.outputs.write_predictions",
           ("non_finite", "unicode_cells")),
    Output("out-of-fold predictions", "pipeline.outputs.write_fold_predictions",
           ("non_finite", "unicode_cells")),
    Output("eval metrics", "pipeline.evaluation.Evaluator.evaluate",
           ("non_finite", "undefined")),
    Output("k-fold means", "pipeline.cross_validation.fold_summary", ("undefined",)),
    Output("best checkpoint choice", "pipeline.training.refuse_undefined_goal",
           ("undefined",)),
    Output("HTTP bodies", "serving.server.make_app", ("non_finite", "unicode_cells")),
    Output("Predictor results", "serving.predicting.ExportPredictor.predict_outputs",
           ("non_finite",)),
    Output("an export", "pipeline.evaluation.check_values", ("non_finite",)),
)

# The phases a run passes through (pipeline.stopping names them), each of which a signal
# may strike.
PHASES = ("featurisation", "training", "eval", "predict", "export")
SIGNALS = ("SIGTERM", "SIGINT")


def artefact_of(relative_path, root):
  """The ARTEFACTS entry of a file under root (output_dir, cache_dir, export, or any: its
  name alone), or None. Staging and scratch files (root "any") are told first: a staged
  eval_results.json is a staging file, not eval results."""
  name = relative_path.replace("\\", "/")
  for artefact in ARTEFACTS:
    if artefact.root == "any" and fnmatch.fnmatch(name.rsplit("/", 1)[-1], artefact.pattern):
      return artefact
  for artefact in ARTEFACTS:
    if artefact.root == root and fnmatch.fnmatch(name, artefact.pattern):
      return artefact
  return None


def matrix(artefacts=ARTEFACTS + INPUTS):
  """[(artefact, fault)]: every cell of the file fault matrix (artefacts that are read
  back, each with the faults its entry lists)."""
  return [(artefact, fault) for artefact in artefacts if artefact.verified_by
          for fault in artefact.faults]


def markdown_table():
  """The fault matrix as docs/reference/checks.md shows it: one row per artefact or input read back, its
  role, the faults its cells apply, and what a fault leads to (tests/test_inventory.py
  checks that the page holds this table as it is)."""
  outcome = {"refuse": "the same result, or one line naming it, the reason and the fix "
                       "(non-zero exit)",
             "rebuild": "the same result, or rebuilt with a warning naming the file and why"}
  lines = ["| artefact or input | where | role | faults (cells) | a fault leads to |",
           "|---|---|---|---|---|"]
  for artefact in ARTEFACTS + INPUTS:
    if not (artefact.verified_by and artefact.faults):
      continue
    where = artefact.pattern if artefact.root == "input" else "%s/%s" % (
        {"output_dir": "<output_dir>", "cache_dir": "<cache_dir>", "export": "<export>",
         "project_cache": ".cache"}[artefact.root], artefact.pattern)
    lines.append("| %s | `%s` | %s | %s | %s |" % (
        artefact.name, where, artefact.role,
        ", ".join(f.replace("_", " ") for f in artefact.faults), outcome[artefact.on_fault]))
  lines.append("")
  lines.append("Cells: %d (`tests/test_fault_matrix.py`, generated from `spec/inventory.py`). "
               "Outputs checked before they leave: %s. Peers: %s. Signals: %s in %s."
               % (len(matrix()), "; ".join(o.name for o in OUTPUTS),
                  "; ".join(p.name for p in PEERS), " and ".join(SIGNALS), ", ".join(PHASES)))
  return "\n".join(lines)
