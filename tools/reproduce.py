"""Reproduce a published comparison with one command: its recipe's flag files, checked
inputs, run_classifier.py, and the table with the published rows beside this run's.

  ./run.sh reproduce jigsaw2019 --device=gpu --data_dir=/data/jigsaw-bias \
      --model_dir=/models/uncased_L-12_H-768_A-12 --output_dir=/runs/gpu

jigsaw2019 is the 2019 Kaggle Jigsaw GPU-against-TPU comparison
(docs/reproduce/jigsaw2019.md): BERT-Base uncased fine-tuned for one epoch on the first
100,000 rows of the Unintended Bias train.csv, at max_seq_length 220; rows 100,000 to
109,999 are held out and evaluated. --device picks the run: gpu (batches of 8), tpu (a
global batch of 32 on 8 cores) or cpu (the GPU run's settings). --rows and --held_out
scale it down; run_classifier flags after -- are added last (they win).
"""

import argparse
import csv
import io
import os
import subprocess
import sys
import time

from tools import run_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = os.path.join(ROOT, "tools", "recipes")
DEVICES = ("cpu", "gpu", "tpu")
NEEDED_COLUMNS = ("comment_text", "target")  # (jigsaw_bias reads these two)
# What the command itself sets: run_classifier flags after -- may not change them, or the
# table would be another run's.
OWN_FLAGS = ("output_dir", "data_dir", "train_file", "eval_file", "train_rows", "eval_rows",
             "do_train", "do_eval")


class InputError(Exception):
  """An input of the command that cannot work: one line, naming it and the fix."""


def recipe_flag_files(recipe, device):
  folder = os.path.join(RECIPES, recipe)
  return [os.path.join(folder, "common.flags"), os.path.join(folder, device + ".flags")]


def check_train_csv(data_dir):
  """The path of data_dir's train.csv, whose header must name the columns the recipe reads."""
  if data_dir.startswith("gs://"):
    return data_dir.rstrip("/") + "/train.csv"  # (run_classifier reads and checks it)
  path = os.path.join(data_dir, "train.csv")
  if not os.path.isfile(path):
    raise InputError("--data_dir=%s has no train.csv: give the folder of the Jigsaw "
                     "Unintended Bias data (Kaggle's jigsaw-unintended-bias-in-toxicity-"
                     "classification, whose train.csv has comment_text and target)" % data_dir)
  try:
    with io.open(path, encoding="utf-8", newline="") as f:
      header = next(csv.reader(f), [])
  except (OSError, UnicodeDecodeError, csv.Error) as e:
    raise InputError("%s: its header cannot be read (%s): give the Unintended Bias train.csv"
                     % (path, e))
  missing = [name for name in NEEDED_COLUMNS if name not in header]
  if missing:
    raise InputError("%s, line 1: no column %s (its header has %s). Fix: give the Unintended "
                     "Bias train.csv, whose columns include comment_text and target"
                     % (path, " or ".join(missing), ", ".join(header[:8]) or "nothing"))
  return path


def model_flags(args):
  """run_classifier's flags for the pre-trained model: a hub module or Google's checkpoint."""
  if bool(args.hub) == bool(args.model_dir):
    raise InputError("give the pre-trained model: --hub=HANDLE_OR_PATH (a TF-Hub BERT) or "
                     "--model_dir=DIR (Google's uncased_L-12_H-768_A-12: bert_config.json, "
                     "vocab.txt, bert_model.ckpt), one of them")
  if args.hub:
    if "://" not in args.hub and not os.path.isdir(args.hub):
      raise InputError("--hub=%s is not a folder here, nor a URL: give a TF-Hub handle or "
                       "the folder of a downloaded module" % args.hub)
    return ["--bert_hub_module_handle=" + args.hub]
  names = {"bert_config_file": "bert_config.json", "vocab_file": "vocab.txt",
           "init_checkpoint": "bert_model.ckpt"}
  if "://" not in args.model_dir:
    missing = [name for name in ("bert_config.json", "vocab.txt", "bert_model.ckpt.index")
               if not os.path.isfile(os.path.join(args.model_dir, name))]
    if missing:
      raise InputError("--model_dir=%s lacks %s: give the folder of Google's BERT checkpoint "
                       "(uncased_L-12_H-768_A-12)" % (args.model_dir, ", ".join(missing)))
  return ["--%s=%s" % (flag, os.path.join(args.model_dir, name))
          for flag, name in sorted(names.items())]


def device_flags(args):
  """The device's own flags and checks: a GPU that TensorFlow sees; a TPU's name."""
  flags = []
  if args.device == "gpu":
    import tensorflow as tf
    if not tf.config.experimental.list_physical_devices("GPU"):
      raise InputError("--device=gpu: TensorFlow %s sees no GPU here. Fix: on TF 2.15, "
                       "./run.sh setup --cuda (and check nvidia-smi), or --device=cpu"
                       % tf.__version__)
    if args.mixed_precision:
      flags.append("--use_fp16")
  elif args.device == "tpu":
    if not (args.tpu_name or os.environ.get("TPU_NAME") or os.environ.get("COLAB_TPU_ADDR")
            or os.path.exists("/dev/accel0") or os.path.exists("/dev/vfio/0")):
      raise InputError("--device=tpu: no TPU named and none on this machine. Fix: "
                       "--tpu_name=NAME (or --tpu_name=local on a TPU VM)")
    if args.tpu_name:
      flags.append("--tpu_name=" + args.tpu_name)
    if args.mixed_precision:
      flags.append("--use_bf16")
  elif args.mixed_precision:
    raise InputError("--mixed_precision is fp16 on a GPU and bf16 on a TPU: the CPU's row "
                     "trains in float32, as the recipe; drop it")
  else:  # (float32 on any CPU: never bfloat16 chosen for it)
    flags.append("--use_bf16=false")
  return flags


def check_output_dir(output_dir):
  """A reproduction is one fresh run: a folder that holds a run already is refused (its
  summary would be the earlier run's, or a rerun's that trained nothing)."""
  if "://" in output_dir:
    import tensorflow.compat.v1 as tf
    held = tf.io.gfile.exists(output_dir) and tf.io.gfile.listdir(output_dir)
  else:
    held = os.path.isdir(output_dir) and os.listdir(output_dir)
  if held:
    raise InputError("--output_dir=%s already holds a run: give a new folder for each "
                     "run (./run.sh benchmark table makes the table of runs already done)"
                     % output_dir)


def check_extra(extra):
  for word in extra:
    name = word.lstrip("-").split("=", 1)[0]
    if name.startswith("no") and name[2:] in OWN_FLAGS:
      name = name[2:]
    if word.startswith("-") and name in OWN_FLAGS:
      raise InputError("%s after -- would change what this command runs and tables: give "
                       "it as this command's own option (see --help), or drop it" % word)


def command_of(args, extra):
  """The run_classifier command of the recipe on args' device, data and model."""
  check_extra(extra)
  check_output_dir(args.output_dir)
  train_csv = check_train_csv(args.data_dir)
  command = [sys.executable, os.path.join(ROOT, "run_classifier.py")]
  command += ["--flagfile=" + path for path in recipe_flag_files(args.recipe, args.device)]
  command += ["--data_dir=" + args.data_dir, "--train_file=" + train_csv,
              "--eval_file=" + train_csv, "--output_dir=" + args.output_dir]
  command += model_flags(args) + device_flags(args)
  if args.rows is not None:
    command.append("--train_rows=%d" % args.rows)
  if args.rows is not None or args.held_out is not None:
    start = 100000 if args.rows is None else args.rows
    command.append("--eval_rows=%d:%d" % (start, start + (args.held_out or 10000)))
  return command + list(extra)


def parse_args(argv):
  """(the command's arguments, the run_classifier flags after --)."""
  argv = list(argv)
  extra = argv[argv.index("--") + 1:] if "--" in argv else []
  argv = argv[:argv.index("--")] if "--" in argv else argv
  parser = argparse.ArgumentParser(
      prog="./run.sh reproduce", description=__doc__.split("\n")[0],
      epilog="Flags after -- go to run_classifier.py, e.g. -- --max_seq_length=64")
  parser.add_argument("recipe", choices=sorted(os.listdir(RECIPES)),
                      help="what to reproduce (docs/reproduce/<recipe>.md)")
  parser.add_argument("--device", required=True, choices=DEVICES)
  parser.add_argument("--data_dir", required=True, help="the folder of train.csv")
  parser.add_argument("--output_dir", required=True,
                      help="the run's folder (gs://... for a TPU node)")
  parser.add_argument("--hub", help="a TF-Hub BERT: its handle (a URL) or a local folder")
  parser.add_argument("--model_dir", help="Google's BERT checkpoint folder (the same weights "
                                          "as the hub module)")
  parser.add_argument("--tpu_name", help="the Cloud TPU (local on a TPU VM)")
  parser.add_argument("--mixed_precision", action="store_true",
                      help="fp16 on a GPU, bf16 on a TPU: today's rows of the table")
  parser.add_argument("--rows", type=int,
                      help="train on the first N rows instead of 100,000 (a scaled run)")
  parser.add_argument("--held_out", type=int,
                      help="evaluate on the N rows after those instead of 10,000")
  parser.add_argument("--price", action="append", metavar="NAME=USD",
                      help="a table row's price per hour, e.g. --price gpu=0.35 (this run's "
                           "row is named by its --output_dir's folder)")
  parser.add_argument("--compare", nargs="*", default=[],
                      help="other runs' run_summary.json (or folders) to add to the table")
  args = parser.parse_args(argv)
  for name in ("rows", "held_out"):
    if getattr(args, name) is not None and getattr(args, name) < 1:
      parser.error("--%s must be 1 or more" % name)
  return args, extra


def main(argv=None):
  args, extra = parse_args(sys.argv[1:] if argv is None else argv)
  # The table goes beside the run, or, for a run on Cloud Storage, here.
  table_dir = (args.output_dir if "://" not in args.output_dir else
               "comparison_" + run_table.run_name(args.output_dir))
  try:
    compared = run_table.load(args.compare)  # (read now: a bad one stops before the run)
    command = command_of(args, extra)
    run_table.parse_prices(args.price, run_table.ROWS_2019 + [
        {"name": run_table.run_name(args.output_dir)}] + compared)
  except InputError as e:
    sys.exit("input error: %s" % e)
  print("reproducing %s on %s:\n  %s" % (args.recipe, args.device, " \\\n    ".join(command[1:])))
  sys.stdout.flush()
  start = time.time()
  env = dict(os.environ)
  if args.device == "cpu":  # (a GPU this machine has stays out of a CPU run)
    env["CUDA_VISIBLE_DEVICES"] = ""
  result = subprocess.run(command, env=env)
  if result.returncode != 0:
    sys.exit(result.returncode)
  summaries = run_table.load([args.output_dir]) + compared
  table = run_table.write_table(summaries, table_dir, args.price, stem="comparison")
  sys.stdout.write("\n" + table)
  print("wrote %s and %s (%.0f s in all)" % (
      os.path.join(table_dir, "comparison.md"), os.path.join(table_dir, "comparison.png"),
      time.time() - start))


if __name__ == "__main__":
  main()
