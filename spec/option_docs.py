"""The options as a person reads them: `--help` by group and docs/reference/flags.md, both
generated from spec/options.py (tests/test_option_docs.py fails when the page and the
code disagree), each option with its type, default, choices and an example.

  python -m spec.option_docs > docs/reference/flags.md
"""

import dataclasses
import sys

from spec import option_index, options

# Each group's heading and what it is for.
GROUP_TITLES = {
    "modes": ("Modes", "what to run"),
    "data": ("Data", "the task, its files, how they are laid out, and their labels"),
    "model": ("Model", "the pre-trained model (or an export), and how texts become its "
                       "inputs"),
    "training": ("Training", "the optimiser, its schedule, checkpoints, evaluation during "
                             "training, weights and cross-validation"),
    "device": ("Device", "where the graph runs and how fast: TPU, GPUs, clusters, "
                         "precision, padding, record files"),
    "outputs": ("Outputs", "where results, records and exports go, and logging"),
    "heads": ("Heads", "the options a head declares in its own module (spec/heads/), each "
                       "for the heads its help names"),
}

# An example of every option whose format a name and a type do not make obvious (the
# others' are made from their type: a switch, a number; a head's option gives its own as
# option(example=...)). tests/test_option_docs.py checks
# that every text and list option has one.
EXAMPLES = {
    "task_name": "--task_name=csv",
    "head": "--head=multi_label",
    "xnli_language": "--xnli_language=de",
    "data_dir": "--data_dir=/data/jigsaw",
    "train_file": "--train_file='train-*.csv'",
    "eval_file": "--eval_file=dev.csv",
    "predict_file": "--predict_file=new_comments.csv,more.csv",
    "text_column": "--text_column=comment_text (or --text_column=0 with --nohas_header)",
    "text_b_column": "--text_b_column=sentence2",
    "label_column": "--label_column=toxic,insult (several: multi_label)",
    "id_column": "--id_column=id",
    "delimiter": "--delimiter=';' (or --delimiter=tab)",
    "labels": "--labels=negative,positive",
    "train_rows": "--train_rows=100000 (or --train_rows=5000:105000)",
    "eval_rows": "--eval_rows=100000:110000",
    "classifier_dropout": "--classifier_dropout=0.4",
    "bert_config_file": "--bert_config_file=uncased_L-12_H-768_A-12/bert_config.json",
    "vocab_file": "--vocab_file=uncased_L-12_H-768_A-12/vocab.txt",
    "init_checkpoint": "--init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt",
    "bert_hub_module_handle": "--bert_hub_module_handle=/models/bert_en_uncased_L-12_H-768_A-12",
    "saved_model": "--saved_model=/tmp/out/export/1700000000",
    "best_metric": "--best_metric=auc",
    "class_weights": "--class_weights=1,4 (or --class_weights=balanced)",
    "tune_thresholds": "--tune_thresholds=f1 (or --tune_thresholds=precision@0.9)",
    "sample_weight_column": "--sample_weight_column=weight",
    "tpu_name": "--tpu_name=my-tpu (or grpc://10.0.0.2:8470, or local on a TPU VM)",
    "tpu_zone": "--tpu_zone=us-central1-f",
    "gcp_project": "--gcp_project=my-project",
    "master": "--master=grpc://10.0.0.2:8470",
    "output_dir": "--output_dir=/tmp/jigsaw_out (gs://bucket/out on a TPU node)",
    "cache_dir": "--cache_dir=/fast_disk/features",
    "export_dir": "--export_dir=/models/toxicity/1",
    "export_format": "--export_format=saved_model,onnx",
}


def example(name):
  """An example of the option on a command line."""
  field = option_index.option_field(name)
  if name in EXAMPLES or field.metadata.get("example"):
    return EXAMPLES.get(name) or field.metadata["example"]
  kind, default = option_index.base_type(field), field.default
  if kind is bool:
    return "--no%s" % name if default else "--%s" % name
  choices = option_index.choices(name)
  if choices:
    return "--%s=%s" % (name, next((c for c in choices if c != default), choices[0]))
  if kind is int:
    return "--%s=%d" % (name, (default or 0) * 2 or 2)
  if kind is float:
    return "--%s=%s" % (name, {"learning_rate": "2e-5"}.get(name, repr((default or 1) / 2)))
  raise KeyError("option %s has no example: add one to spec/option_docs.EXAMPLES" % name)


def type_name(name):
  field = option_index.option_field(name)
  if option_index.choices(name):
    return "one of " + ", ".join(option_index.choices(name))
  return {bool: "switch", int: "whole number", float: "number", str: "text",
          tuple: "comma-separated list"}[option_index.base_type(field)]


def default_text(name):
  default = option_index.option_field(name).default
  if default is None:
    return "unset"
  if isinstance(default, tuple):
    return ",".join(default)
  if isinstance(default, bool):
    return "true" if default else "false"
  return str(default)


def groups():
  """[(group, title, purpose, [option names])] in definition order; a group with no
  options (the heads' while no head declares one) is left out."""
  found = []
  for group, cls in options.GROUPS:
    title, purpose = GROUP_TITLES[group]
    names = [f.name for f in dataclasses.fields(cls)]
    if names:
      found.append((group, title, purpose, names))
  return found


def reference_markdown():
  """docs/reference/flags.md: every option by group, with its type, default and example."""
  lines = ["# Flags of run_classifier.py", "",
           "Every option, in the groups `--help` shows them, generated from "
           "`spec/options.py` and the heads' own options (`spec/heads/`) by "
           "`python -m spec.option_docs` (a test fails when this page and the code "
           "disagree). A switch is given as `--name` or `--noname`; any flag "
           "may come from a file with `--flagfile=FILE` (one flag a line, a later flag "
           "wins).", ""]
  for _, title, purpose, names in groups():
    lines += ["## %s: %s" % (title, purpose), "",
              "| flag | type | default | example | what it does |", "|---|---|---|---|---|"]
    for name in names:
      lines.append("| `--%s` | %s | `%s` | `%s` | %s |" % (
          name, type_name(name), default_text(name), example(name),
          option_index.help_of(name).replace("|", "\\|").replace("\n", " ")))
    lines.append("")
  return "\n".join(lines)


def help_text(width=100):
  """`run_classifier.py --help`: the options by group, in the order and with the words of
  the reference page."""
  import textwrap
  out = ["Fine-tune BERT for text classification with (TPU)Estimator.", "",
         "usage: python run_classifier.py --task_name=... --output_dir=... --do_train ...",
         "       (or --flagfile=FILE; the reference: docs/reference/flags.md)", ""]
  for _, title, purpose, names in groups():
    out += ["%s: %s" % (title, purpose)]
    for name in names:
      out.append("  --%s  (%s; default %s)" % (name, type_name(name), default_text(name)))
      plain = option_index.base_type(option_index.option_field(name)) is bool  # (no example needed)
      body = option_index.help_of(name) + ("" if plain else " Example: %s" % example(name))
      out += textwrap.wrap(body, width, initial_indent="      ", subsequent_indent="      ")
    out.append("")
  return "\n".join(out)


if __name__ == "__main__":
  sys.stdout.write(reference_markdown())
