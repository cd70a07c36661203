"""The run's options, each defined once: name, type, default, choices and help.

run_classifier.py makes its absl flags from these; spec/config.py's RunConfig holds their
values in these groups, so a function's signature shows which options it reads:

  modes     what to run
  data      the task, its files and its labels
  model     the pre-trained model, and how texts become its inputs
  training  the optimisation and its schedule, checkpoints, evaluation during training,
            training weights and cross-validation
  device    where and how fast: TPU, GPUs, precision, XLA, padding, record files
  outputs   where the results go, and logging
  heads     the options a head declares in its own module (spec/heads/: its class's
            `Options`), collected here; each acts on the heads that declare it
"""

import dataclasses
import os
from typing import Optional, Tuple

from spec.run_errors import FlagError
from spec.heads import HEAD_KINDS, HeadOptions
from spec.model_card import POOLINGS, TRUNCATION_MODES, WINDOW_AGGREGATIONS
from spec.option_checks import delimiter_problem, export_format_problem
from spec.option_field import option
from spec.rows import rows_problem
from spec.task_names import (JIGSAW_BIAS_AUXILIARY_COLUMNS, JIGSAW_BIAS_TARGET,
                             JIGSAW_TOXIC_LABEL_COLUMNS, XNLI_DEFAULT_LANGUAGE, XNLI_LANGUAGES)

TOKENIZERS = ("auto", "fast", "python")
QUOTINGS = ("auto", "csv", "none")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FUSED_KERNEL_MODES = ("auto", "on", "off")


def _has_header_help(split):
  return ("csv task: whether the %s file's first row is a header, where it differs from "
          "the other files (default: --has_header)" % split)


@dataclasses.dataclass(frozen=True)
class Modes(object):
  """What to run."""
  do_train: bool = option(False, "Fine-tune on the train split.")
  do_eval: bool = option(False, "Evaluate on the dev split.")
  do_predict: bool = option(False, "Predict the test split into test_results.tsv.")
  do_export: bool = option(
      False, "Export the fine-tuned model into --export_dir: a SavedModel that takes text "
      "(its default signature tokenises in the graph) or token ids (signature 'ids'), with "
      "the model card and vocabulary as assets; --export_format adds other formats.")
  allow_untrained_head: bool = option(
      False, "Evaluate or predict even when the classifier head comes from no checkpoint "
      "(random predictions; refused without this flag).")


@dataclasses.dataclass(frozen=True)
class DataOptions(object):
  """The task, its files, how they are read, and its labels."""
  task_name: Optional[str] = option(
      None, "The task: a name from the table of tasks in docs/guide/data.md (sst-2, mrpc, "
      "jigsaw_toxic, csv, ...); an unknown name is refused with the list.")
  xnli_language: Optional[str] = option(
      None, "xnli: the language trained on (multinli/multinli.train.<it>.tsv) and evaluated "
      "and predicted (its rows of xnli.dev.tsv and xnli.test.tsv; the other languages' rows "
      "are counted and left aside). Default: %s, as Google's run_classifier, or the model "
      "card's." % XNLI_DEFAULT_LANGUAGE, XNLI_LANGUAGES)
  data_dir: Optional[str] = option(
      None, "Folder with the task's files (docs/guide/data.md names each task's files).")
  train_file: Optional[str] = option(
      None, "Train file; overrides the one found in --data_dir. Several files read as one "
      "split: a comma-separated list, or glob patterns (e.g. 'train-*.csv').")
  eval_file: Optional[str] = option(
      None, "Eval file (or files, as for --train_file); overrides the one found in "
      "--data_dir.")
  predict_file: Optional[str] = option(
      None, "Predict file (or files, as for --train_file); overrides the one found in "
      "--data_dir. Results are written in the files' order.")
  text_column: Optional[str] = option(
      None, "csv task: text column (name or 0-based position).")
  text_b_column: Optional[str] = option(None, "csv task: optional second text for pairs.")
  label_column: Optional[str] = option(
      None, "Label column(s): a name or 0-based position, or several separated by commas "
      "for a multi-label, soft-target or regression head with one output each "
      "(jigsaw_toxic: default %s, e.g. %s; jigsaw_bias: default %s; csv: required)." % (
          JIGSAW_TOXIC_LABEL_COLUMNS[0], ",".join(JIGSAW_TOXIC_LABEL_COLUMNS),
          JIGSAW_BIAS_TARGET))
  id_column: Optional[str] = option(None, "csv task: optional id column for the outputs.")
  has_header: bool = option(True, "csv task: the first row of each file is a header.")
  train_has_header: Optional[bool] = option(None, _has_header_help("train"))
  eval_has_header: Optional[bool] = option(None, _has_header_help("eval"))
  predict_has_header: Optional[bool] = option(None, _has_header_help("predict"))
  quoting: str = option(
      "auto", "How double quotes are read: 'csv' (they enclose fields, which may then hold "
      "delimiters and newlines), 'none' (a quote is a plain character, as in Google's "
      "_read_tsv), or 'auto': csv for .csv files, none for .tsv/.txt files.", QUOTINGS)
  delimiter: Optional[str] = option(
      None, "csv task: field delimiter (default: tab for .tsv/.txt, else comma).",
      check=delimiter_problem)
  labels: Optional[Tuple[str, ...]] = option(
      None, "The classes in order, for a task whose files may not name them: csv's label "
      "values (default: the sorted distinct values of the train file), TweetEval's indices "
      "(default: mapping.txt's names).")
  train_rows: Optional[str] = option(
      None, "Train on these data rows of the train file(s), by place: N (the first N), "
      "START:END (0-based, END excluded) or START:. The others are counted and left aside.",
      check=rows_problem)
  eval_rows: Optional[str] = option(
      None, "Evaluate on these data rows of the eval file(s), as --train_rows (of the train "
      "file: a held-out slice).", check=rows_problem)
  skip_malformed_rows: bool = option(
      False, "Skip rows with too few or too many fields or a missing label, count them by "
      "cause and report the counts, instead of stopping with an error.")
  head: str = option(
      "auto", "What the labels are: a head from the table of heads in docs/guide/heads.md "
      "(classification, multi_label, soft_target, regression, ...), or 'auto': the task's "
      "own (csv and jigsaw_toxic: classification for one label column, multi_label for "
      "several; jigsaw_bias: soft_target; sts-b: regression); an unknown head is refused "
      "with the list.", check=lambda value: None if value in ("auto",) + HEAD_KINDS else
      "is no head; the heads: auto, %s" % ", ".join(HEAD_KINDS))
  auxiliary_targets: bool = option(
      False, "jigsaw_bias: add soft-target outputs for the auxiliary toxicity columns "
      "(%s) that the train file fills on every row." % ", ".join(JIGSAW_BIAS_AUXILIARY_COLUMNS))

  def label_columns(self):
    """--label_column's columns (one, or several separated by commas), or None."""
    if self.label_column is None:
      return None
    columns = [column.strip() for column in str(self.label_column).split(",")]
    if not all(columns):
      raise FlagError("--label_column=%s has an empty column name: separate the columns "
                      "with single commas, e.g. --label_column=toxic,insult"
                      % self.label_column)
    return columns

  def split_headers(self):
    """{split: whether its file has a header} where a --<split>_has_header flag says."""
    return {"train": self.train_has_header, "dev": self.eval_has_header,
            "test": self.predict_has_header}

  def files(self):
    """{split: the file named by its flag, or None}."""
    return {"train": self.train_file, "dev": self.eval_file, "test": self.predict_file}


@dataclasses.dataclass(frozen=True)
class ModelOptions(object):
  """The pre-trained model (or an export to predict with), and how texts become its
  inputs."""
  bert_config_file: Optional[str] = option(None, "bert_config.json of the pre-trained model.")
  vocab_file: Optional[str] = option(None, "vocab.txt of the pre-trained model.")
  init_checkpoint: Optional[str] = option(
      None, "Checkpoint to start from (e.g. .../bert_model.ckpt).")
  bert_hub_module_handle: Optional[str] = option(
      None, "A BERT from TF-Hub (path or URL) to use instead of "
      "--bert_config_file/--init_checkpoint: a TF1-format hub module, or on TF 2.15 a TF2 "
      "SavedModel encoder (input_word_ids, input_mask, input_type_ids -> pooled_output, "
      "sequence_output).")
  saved_model: Optional[str] = option(
      None, "Predict with this export alone (a --do_export folder, or an output_dir whose "
      "export/ holds one; the newest is taken): with --do_predict, --predict_file and "
      "--output_dir, and no model or training flag.")
  do_lower_case: bool = option(True, "Lower-case the text (True for uncased models).")
  max_seq_length: int = option(
      128, "Tokens per example after WordPiece, with [CLS]/[SEP]. Longer texts are "
      "truncated, shorter ones padded.")
  truncation: str = option(
      "head", "Which tokens of a text longer than --max_seq_length are kept: the first "
      "(head, Google's), the last (tail), or the first --truncation_head_tokens and the "
      "last that still fit (head_tail, as the Jigsaw winners kept the start and the end of "
      "long comments).", TRUNCATION_MODES)
  truncation_head_tokens: Optional[int] = option(
      None, "head_tail: how many of the kept tokens come from the start of the text "
      "(default: a quarter of the room, e.g. 127 of 510).")
  doc_stride: int = option(
      0, "Windows for texts longer than --max_seq_length instead of truncating them: each "
      "such text is split into windows of whole words, of up to max_seq_length - 2 tokens, "
      "one starting every doc_stride tokens; every window trains with its text's label and "
      "1/k of its weight, and eval and predict aggregate the windows' outputs into one row "
      "per text (--window_aggregation). A pair of texts keeps its shorter text in every "
      "window and splits the longer. 0: no windows.",
      check=lambda value: None if value >= 0 else "must be 0 (no windows) or more")
  window_aggregation: str = option(
      "mean", "How a text's windows' outputs become its own (--doc_stride): their mean, "
      "their max (per column; for a two-class softmax head the window most likely of the "
      "second class), or the first window's.", WINDOW_AGGREGATIONS)
  tokenizer: str = option(
      "auto", "Tokenizer for the rare texts the exact shortcut declines: 'fast' (Hugging "
      "Face tokenizers, Rust, all cores), 'python' (this project's), or 'auto' (fast when "
      "installed). All give Google's FullTokenizer ids.", TOKENIZERS)
  pooling: str = option(
      "cls", "What the head reads: 'cls' (BERT's pooled [CLS] output, as Google's "
      "classifier) or 'mean' (the last layer averaged over the real tokens).", POOLINGS)
  classifier_dropout: Optional[float] = option(
      None, "Dropout rate in training on what the head reads (default: the config's "
      "hidden_dropout_prob, 0.1 for Google's BERTs, as Google's classifier).",
      check=lambda value: None if 0.0 <= value < 1.0 else "must be in [0, 1), e.g. 0.4")
  freeze_encoder: bool = option(
      False, "Train the head alone: the encoder (a checkpoint's, or a hub model's) keeps "
      "its pre-trained weights and runs without dropout.")


@dataclasses.dataclass(frozen=True)
class TrainingOptions(object):
  """Batches, the optimiser and its schedule, checkpoints, evaluation during training,
  training weights and cross-validation."""
  train_batch_size: int = option(32, "Global training batch size.")
  eval_batch_size: int = option(8, "Global eval batch size.")
  predict_batch_size: int = option(8, "Global predict batch size.")
  learning_rate: float = option(5e-5, "Peak learning rate of AdamWeightDecay.")
  num_train_epochs: float = option(3.0, "Epochs over the (fraction of the) train split.")
  num_train_steps: int = option(
      0, "If > 0, train exactly this many steps instead of --num_train_epochs.")
  gradient_accumulation_steps: int = option(
      1, "Apply the mean gradient of this many batches per update: an effective batch of "
      "train_batch_size times this, in the memory of one batch. Not with --use_tpu.")
  warmup_proportion: float = option(0.1, "Fraction of the steps with linear warm-up.")
  train_fraction: float = option(
      1.0, "Train on this fraction (0, 1] of the train split, a seeded random subset.")
  seed: int = option(12345, "Seed for initialisation, dropout, shuffling and "
                            "--train_fraction.")
  save_checkpoints_steps: int = option(1000, "Steps between checkpoints.")
  save_summary_steps: int = option(
      100, "Steps between TensorBoard summaries of training (loss, learning rate, "
      "examples/sec, the loss scale with --use_fp16) in --output_dir.")
  log_every_steps: int = option(10, "Steps between progress lines in training.")
  eval_every_steps: int = option(
      0, "With --do_train and --do_eval: evaluate the dev split every this many steps "
      "during training (and at its end), each evaluation a row of eval_history.csv; the "
      "learning curve is drawn into learning_curve.png. On a TPU training and evaluation "
      "alternate.")
  best_metric: Optional[str] = option(
      None, "With --eval_every_steps: keep the checkpoint with the best value of this eval "
      "metric (e.g. auc, accuracy, mean_auc, loss; losses and mse lower, others higher) in "
      "<output_dir>/best; eval, predict and export then use it.")
  early_stopping_patience: int = option(
      0, "With --best_metric: stop training when that many evaluations in a row have not "
      "improved on the best.")
  class_weights: Optional[Tuple[str, ...]] = option(
      None, "Training: a classification head's loss weighs each row by its class (one "
      "positive number per class, in the head's class order, or 'balanced': n / (classes * "
      "rows of the class)); a multi-label or soft-target head's weighs each label column's "
      "positives (one number per column, in order, or 'balanced': the column's negatives / "
      "positives in the train rows). The model card records the weights.")
  tune_thresholds: Optional[str] = option(
      None, "With --do_eval, on a binary classification or multi-label head: choose on the "
      "dev split (per column, multi-label) the decision threshold that maximises 'f1', or "
      "gives the highest recall at a precision of at least P ('precision@P') or the highest "
      "precision at a recall of at least R ('recall@R'). eval_results.json gets the dev "
      "figures at 0.5 and at the threshold, the model card keeps the thresholds, and every "
      "predictor decides labels by them. With --num_folds: tuned on the out-of-fold "
      "predictions, kept by every fold's card.")
  calibrate: bool = option(
      False, "With --do_eval, on a head with probabilities: fit a temperature on the dev "
      "split (one for a classification head, one per column for a multi-label or "
      "soft-target head) that divides the logits so that the probabilities match how often "
      "they come true (temperature scaling). eval_results.json gets the temperature and "
      "the dev split's log-loss and expected calibration error uncalibrated and "
      "calibrated; the model card keeps it, and every later eval, prediction and export "
      "uses it. Fitted before --tune_thresholds, which then tunes on the calibrated probabilities.")
  sample_weight_column: Optional[str] = option(
      None, "Training: a train-file column (name or 0-based position) of per-row weights "
      ">= 0 that multiply each row's loss.")
  identity_weights: bool = option(
      False, "jigsaw_bias training: weight rows as the top public solutions did (more "
      "weight for non-toxic rows that mention an identity and toxic rows that mention none; "
      "docs/guide/heads.md), normalised to mean 1.")
  num_folds: int = option(
      0, "k > 1: k-fold cross-validation on the train file (stratified by label, seeded by "
      "--seed): each fold trains on the other folds' rows and is evaluated and predicted on "
      "its own, into <output_dir>/fold_<i>; all folds give out-of-fold predictions for "
      "every train row and the mean and std of each metric; with --do_predict, "
      "test_results.tsv averages the folds' predictions.")
  fold: int = option(
      -1, "With --num_folds: run only this fold (0-based), e.g. one per machine; -1 runs "
      "them all in one command.")
  continue_on_new_data: bool = option(
      False, "With --do_train into an --output_dir whose model was trained on another train "
      "file (its model card says which): go on training that model on this run's file, "
      "from its last checkpoint, instead of stopping; the card then lists both files.")

  def per_update(self):
    """The examples one optimizer update trains on."""
    return self.train_batch_size * self.gradient_accumulation_steps


@dataclasses.dataclass(frozen=True)
class DeviceOptions(object):
  """Where the graph runs and how fast: a Cloud TPU, GPUs, precision, XLA, padding, and
  the record files that feed it."""
  use_tpu: bool = option(False, "Run on a Cloud TPU instead of the local CPU/GPU.")
  tpu_name: Optional[str] = option(
      None, "Cloud TPU name, grpc:// address, or local (a TPU VM's own TPU). Unset with "
      "--use_tpu: TPU_NAME, then COLAB_TPU_ADDR (a Colab TPU), then this machine's TPU if it "
      "is a TPU VM.")
  tpu_zone: Optional[str] = option(
      None, "GCE zone of the TPU (found from metadata if unset).")
  gcp_project: Optional[str] = option(
      None, "GCP project of the TPU (found from metadata if unset).")
  master: Optional[str] = option(None, "TensorFlow master URL (alternative to --tpu_name).")
  num_tpu_cores: int = option(8, "TPU cores to use, with --use_tpu.")
  iterations_per_loop: int = option(1000, "Steps per TPU loop (host round trip).")
  cluster_wait_seconds: int = option(
      300, "TF_CONFIG's cluster: how long a task waits for the other training tasks to "
      "answer on their addresses before it stops, naming the first that did not.",
      check=lambda value: None if value >= 1 else "must be 1 or more (seconds)")
  num_gpus: int = option(
      0, "Train data-parallel on this many GPUs of this machine with TensorFlow's "
      "MirroredStrategy; --train_batch_size stays the global batch, split evenly over the "
      "GPUs. 0 or 1: one device.")
  use_fp16: bool = option(
      False, "GPU: run the encoder in float16 (float32 master weights, dynamic loss "
      "scaling). Not with --use_tpu (use --use_bf16 there).")
  use_bf16: bool = option(
      False, "Run the encoder in bfloat16 (float32 master weights and loss): on a TPU, or "
      "on a CPU whose matmul units take bfloat16 (AVX512_BF16 or AMX; on TF 1.15 with the "
      "fused kernels), where it is chosen when this flag is not given; the log says which precision and why. "
      "--use_bf16=false keeps float32.")
  use_xla: bool = option(
      False, "Compile the graph with XLA JIT (CPU/GPU). Measure it with ./run.sh benchmark "
      "before relying on it: compilation takes seconds.")
  fused_kernels: str = option(
      "auto", "CPU: run the encoder's elementwise work (bias and GELU; dropout, residual "
      "and layer norm; the attention's mask, softmax and dropout) in this project's fused "
      "kernels, built with g++ on first use (never in exports). auto: when running in "
      "float32 or bfloat16 on this machine's CPU alone (no TPU, GPU, float16, XLA, cluster, "
      "several replicas or gradient accumulation) and they build; on: the same, refusing "
      "the run where they cannot be used; off: TensorFlow's own ops.",
      choices=FUSED_KERNEL_MODES)
  dynamic_padding: bool = option(
      False, "CPU/GPU: compute each batch only as long as its longest example, and make "
      "training batches of examples of similar length (each group of 50 batches sorted by "
      "length). Faster when texts are shorter than --max_seq_length; not with --use_tpu.")
  num_record_shards: int = option(
      1, "Split each split's TFRecords into this many files (helps parallel reads on TPU "
      "hosts and parallel writing). When not given, a cluster or a pod slice gets one per "
      "machine or host.")
  featurise_workers: int = option(
      0, "Processes that tokenise and serialise examples in parallel while this one reads "
      "the file; 0: one per core this process may use.")

  def precision(self):
    """The encoder's compute type."""
    return "float16" if self.use_fp16 else "bfloat16" if self.use_bf16 else "float32"


@dataclasses.dataclass(frozen=True)
class OutputOptions(object):
  """Where checkpoints, records, results and exports go, and logging."""
  output_dir: Optional[str] = option(None, "Where checkpoints, features and results go.")
  cache_dir: Optional[str] = option(
      None, "Where featurised TFRecords are cached. Default: <output_dir>/features.")
  export_dir: Optional[str] = option(
      None, "Where --do_export writes the SavedModel (must not exist). Default: "
      "<output_dir>/export/<unix seconds>, a version folder as TF Serving reads.")
  export_format: Tuple[str, ...] = option(
      ("saved_model",), "What --do_export writes, comma-separated: saved_model (always: the "
      "SavedModel that TF Serving, the predictor and the server read) and hf (a Hugging Face "
      "transformers folder, hf/ inside the export: config.json, model.safetensors and "
      "tokenizer files) and onnx (onnx/ inside the export: model.onnx, model.int8.onnx and "
      "the tokenizer, for onnxruntime without TensorFlow; converted on TF 2.15).",
      check=export_format_problem)
  eval_report: bool = option(
      False, "With --do_eval (or --num_folds), a classification or 0/1-column head: "
      "<output_dir>/eval_report/ (report.md: per-class figures, confusion, calibration; "
      "ROC, precision-recall and reliability plots).")
  tf_log_level: str = option(
      "ERROR", "How much of TensorFlow's own logging to show. This program's progress "
      "lines are always shown.", LOG_LEVELS)

  def features_dir(self):
    """Where the split's records are cached."""
    return self.cache_dir or os.path.join(self.output_dir, "features")


GROUPS = (("modes", Modes), ("data", DataOptions), ("model", ModelOptions),
          ("training", TrainingOptions), ("device", DeviceOptions), ("outputs", OutputOptions),
          ("heads", HeadOptions))
