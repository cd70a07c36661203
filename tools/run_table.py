"""The wall-time table of the 2019 Jigsaw GPU-against-TPU comparison, with its two 2019 rows
and one row per run_summary.json given, as Markdown and PNG.

  ./run.sh benchmark table gpu_run/run_summary.json tpu_run/ --out_dir comparison \
      --price gpu_run=0.35 --price tpu_run=1.35

Each row: the device, the runtime, the model, max_seq_length, the steps, the batch, the
examples seen, the start-up time, the training wall time, examples/sec, the projected
training time of one epoch of the full Jigsaw train.csv (1,804,874 rows) and, for a row
given a price per hour (--price NAME=USD), what the training and that epoch cost.
"""

import argparse
import json
import os
import sys

FULL_EPOCH_ROWS = 1804874  # the rows of Jigsaw Unintended Bias train.csv

# The two runs of 2019, as their notebooks ran them (docs/reproduce/jigsaw2019.md): the wall
# time of Estimator.train() or TPUEstimator.train(), start-up included (not reported apart).
ROWS_2019 = [
    {"name": "2019 GPU", "device": "Tesla K80 (Colab)", "runtime": "TF 1.14",
     "model": "BERT-Base uncased (TF-Hub)", "seq": 220, "steps": 12500, "batch": "8",
     "examples": 100000, "startup": None, "training": 6036.0, "rate": None},
    {"name": "2019 TPU", "device": "TPU v2-8 (Colab TPU node)", "runtime": "TF 1.14",
     "model": "BERT-Base uncased (TF-Hub)", "seq": 220, "steps": 3125,
     # PER_HOST_V2: the input_fn's batches of 8 went to each of the 8 cores every step.
     "batch": "64 (32 asked; 8 a core)", "examples": 200000, "startup": None,
     "training": 850.0, "rate": None},
]
for _row in ROWS_2019:  # (start-up included: the rate over the whole call)
  _row["rate"] = _row["examples"] / _row["training"]

HEADERS = ["run", "device", "runtime", "model", "seq", "steps", "batch", "examples seen",
           "start-up s", "training s", "examples/s", "1.8M-row epoch", "cost"]
RIGHT_ALIGNED = {"seq", "steps", "examples seen", "start-up s", "training s", "examples/s",
                 "1.8M-row epoch", "cost"}


def load(paths):
  """The summaries of paths (a run_summary.json, or an output_dir holding one), each named
  by its folder; a summary without training is refused with the file's name."""
  summaries = []
  for path in paths:
    if not path.endswith(".json"):
      path = path.rstrip("/") + "/run_summary.json"
    try:
      summary = json.loads(read_text(path))
    except (OSError, ValueError) as e:
      raise SystemExit("%s: cannot be read as a run summary (%s)" % (path, e))
    if not isinstance(summary, dict) or not summary.get("training"):
      raise SystemExit("%s: that run did not train (no training figures): pass the summaries "
                       "of --do_train runs" % path)
    missing = [".".join(keys) for keys in NEEDED if not _has(summary, keys)]
    if missing:
      raise SystemExit("%s: not a run summary this table reads: it lacks %s (a summary "
                       "written by this project's run_classifier.py has them)"
                       % (path, ", ".join(missing)))
    summary["name"] = run_name(os.path.dirname(path))
    summaries.append(summary)
  return summaries


# The entries of a summary the table reads.
NEEDED = [("device", "description"), ("versions", "tensorflow"), ("versions", "python"),
          ("model",), ("flags", "max_seq_length")] + [
              ("training", name) for name in ("steps", "batch_size", "startup_seconds",
                                              "wall_seconds", "examples_per_second")]


def _has(summary, keys):
  value = summary
  for key in keys:
    if not isinstance(value, dict) or key not in value:
      return False
    value = value[key]
  return True


def run_name(folder):
  """A run's name in the table: its folder's."""
  return os.path.basename(folder.rstrip("/") if "://" in folder else os.path.abspath(folder))


def read_text(path):
  """A local file's text, or a remote one's (gs://, through TensorFlow)."""
  if "://" in path:
    import tensorflow.compat.v1 as tf
    try:
      with tf.io.gfile.GFile(path) as f:
        return f.read()
    except tf.errors.OpError as e:
      raise OSError(e.message)
  with open(path) as f:
    return f.read()


def row_of(summary):
  """A table row of a run's summary."""
  training, flags = summary["training"], summary["flags"]
  steps = training.get("steps_trained")  # (a resumed run's own; older summaries: the plan's)
  steps = training["steps"] if steps is None else steps
  return {"name": summary["name"], "device": summary["device"]["description"],
          "runtime": "TF %s, Python %s" % (summary["versions"]["tensorflow"],
                                           summary["versions"]["python"]),
          "model": summary["model"], "seq": flags["max_seq_length"],
          "steps": steps, "batch": str(training["batch_size"]),
          "examples": steps * training["batch_size"],
          "startup": training["startup_seconds"], "training": training["wall_seconds"],
          "rate": training["examples_per_second"], "why_no_rate": why_no_rate(summary)}


def why_no_rate(summary):
  """Why a run has no examples/sec, or None when it has one."""
  training, flags = summary["training"], summary["flags"]
  if training["examples_per_second"] is not None:
    return None
  if training.get("steps_trained") == 0:
    return "it trained no step: the model in its folder had its steps already"
  if summary["device"].get("kind") == "TPU" or flags.get("use_tpu"):
    return ("its %d steps ran in one TPU loop (--iterations_per_loop=%s), whose time holds "
            "the graph's compilation: train more steps than a loop, or lower "
            "--iterations_per_loop, for a steady rate" % (
                training["steps"], flags.get("iterations_per_loop", "1000")))
  return "it trained one step only: the first step's time is the start-up"


def projected_epoch(row):
  """Seconds to train one epoch of the full train.csv at the row's rate (after its start-up),
  or None without a rate."""
  if row["rate"] is None:
    return None
  return (row["startup"] or 0.0) + FULL_EPOCH_ROWS / row["rate"]


def format_duration(seconds):
  if seconds is None:
    return "n/a"
  if seconds >= 3600:
    return "%.1f h" % (seconds / 3600.0)
  return "%.0f min" % (seconds / 60.0) if seconds >= 60 else "%.0f s" % seconds


def cost_text(row, prices):
  price = prices.get(row["name"])
  if price is None:
    return ""
  epoch = projected_epoch(row)
  return "$%.2f (epoch $%s)" % (row["training"] * price / 3600.0,
                                "n/a" if epoch is None else "%.2f" % (epoch * price / 3600.0))


def cells(row, prices):
  return [row["name"], row["device"], row["runtime"], row["model"], str(row["seq"]),
          str(row["steps"]), row["batch"], "{:,}".format(row["examples"]),
          "n/a" if row["startup"] is None else "%.1f" % row["startup"],
          "%.1f" % row["training"], "n/a" if row["rate"] is None else "%.1f" % row["rate"],
          format_duration(projected_epoch(row)), cost_text(row, prices)]


def table_rows(summaries):
  """The 2019 rows, then one row per summary."""
  return [dict(row, why_no_rate=None) for row in ROWS_2019] + [row_of(s) for s in summaries]


def markdown(rows, prices=None):
  prices = prices or {}
  lines = ["| %s |" % " | ".join(HEADERS),
           "|%s|" % "|".join("---:" if h in RIGHT_ALIGNED else "---" for h in HEADERS)]
  for row in rows:
    lines.append("| %s |" % " | ".join(cells(row, prices)))
  notes = ["", "The 2019 rows' times include their start-up (not reported apart), and so do "
           "their examples/s; the 2019 TPU run fed 8 rows to each core a step, 64 in all."]
  notes += ["%s: no examples/s: %s." % (row["name"], row["why_no_rate"])
            for row in rows if row.get("why_no_rate")]
  return "\n".join(lines + notes) + "\n"


def plot(rows, path):
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure
  names = [row["name"] for row in rows]
  figure = Figure(figsize=(4 + 1.8 * len(rows), 4.5))
  FigureCanvasAgg(figure)
  wall, rate = figure.subplots(1, 2)
  startup = [row["startup"] or 0.0 for row in rows]
  steady = [row["training"] - (row["startup"] or 0.0) for row in rows]
  colours = ["#999999" if name.startswith("2019") else "#3b75af" for name in names]
  wall.bar(names, startup, label="start-up", color="#dddddd")
  wall.bar(names, steady, bottom=startup, label="training (2019: with start-up)",
           color=colours)
  wall.set_ylabel("training wall time (s)")
  wall.set_yscale("log")
  wall.legend(fontsize=8)
  rate.bar(names, [row["rate"] or 0.0 for row in rows], color=colours)
  rate.set_ylabel("examples/sec")
  for axes in (wall, rate):
    axes.tick_params(axis="x", labelrotation=30, labelsize=8)
  figure.tight_layout()
  figure.savefig(path, dpi=100)


def parse_prices(values, rows):
  """{row name: USD per hour} of --price NAME=USD values; a name no row has is refused."""
  prices, names = {}, [row["name"] for row in rows]
  for value in values or ():
    name, _, price = value.rpartition("=")
    try:
      prices[name] = float(price)
    except ValueError:
      raise SystemExit("--price %s: give NAME=USD_PER_HOUR, e.g. --price '%s=1.35'"
                       % (value, names[-1]))
    if name not in names or prices[name] < 0:
      raise SystemExit("--price %s: the rows are %s; give one of them and a price >= 0"
                       % (value, ", ".join(names)))
  return prices


def write_table(summaries, out_dir, prices=(), stem="wall_time"):
  """Writes <stem>.md and <stem>.png into out_dir. Returns the Markdown."""
  rows = table_rows(summaries)
  table = markdown(rows, parse_prices(prices, rows))
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, stem + ".md"), "w") as f:
    f.write(table)
  plot(rows, os.path.join(out_dir, stem + ".png"))
  return table


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("summaries", nargs="+", help="run_summary.json files or output_dirs")
  parser.add_argument("--out_dir", default=".", help="where wall_time.md and wall_time.png go")
  parser.add_argument("--price", action="append", metavar="NAME=USD",
                      help="a row's price per hour, e.g. --price gpu_run=0.35 (repeat for "
                           "more rows; 2019's rows are '2019 GPU' and '2019 TPU')")
  args = parser.parse_args(argv)
  table = write_table(load(args.summaries), args.out_dir, args.price)
  sys.stdout.write(table)
  print("wrote %s and %s" % tuple(os.path.join(args.out_dir, "wall_time." + e)
                                  for e in ("md", "png")))


if __name__ == "__main__":
  main()
