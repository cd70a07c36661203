"""The wall-time table of several runs, from their run_summary.json files: the figures of
the 2019 Jigsaw GPU-against-TPU comparison, one row per run, as Markdown and PNG.

  ./run.sh benchmark table gpu_run/run_summary.json tpu_run/run_summary.json \
      --out_dir docs/wall_time

Each row: the device, the runtime, the model's shape, max_seq_length, the batch, the
steps, the start-up time, the training wall time, examples/sec and the run's total.
"""

import argparse
import json
import os
import sys

COLUMNS = [  # (header, formatter of a summary)
    ("run", lambda s: s["name"]),
    ("device", lambda s: s["device"]["description"]),
    ("runtime", lambda s: "TF %s, Python %s" % (s["versions"]["tensorflow"],
                                                 s["versions"]["python"])),
    ("model", lambda s: s["model"]),
    ("seq", lambda s: str(s["flags"]["max_seq_length"])),
    ("batch", lambda s: str(s["training"]["batch_size"])),
    ("steps", lambda s: str(s["training"]["steps"])),
    ("start-up s", lambda s: "%.1f" % s["training"]["startup_seconds"]),
    ("training s", lambda s: "%.1f" % s["training"]["wall_seconds"]),
    # None when no step came after the first of a train() call (e.g. a TPU run whose
    # every call was one loop): no steady window was measured.
    ("examples/s", lambda s: _one_decimal(s["training"]["examples_per_second"])),
    ("run total s", lambda s: "%.1f" % s["total_seconds"]),
]


def _one_decimal(value):
  return "n/a" if value is None else "%.1f" % value


def load(paths):
  """The summaries of paths (a run_summary.json, or an output_dir holding one), each named
  by its folder; a summary without training is refused with the file's name."""
  summaries = []
  for path in paths:
    if os.path.isdir(path):
      path = os.path.join(path, "run_summary.json")
    try:
      with open(path) as f:
        summary = json.load(f)
    except (OSError, ValueError) as e:
      raise SystemExit("%s: cannot be read as a run summary (%s)" % (path, e))
    if not summary.get("training"):
      raise SystemExit("%s: that run did not train (no training figures): pass the summaries "
                       "of --do_train runs" % path)
    summary["name"] = os.path.basename(os.path.dirname(os.path.abspath(path)))
    summaries.append(summary)
  return summaries


def markdown(summaries):
  lines = ["| %s |" % " | ".join(h for h, _ in COLUMNS),
           "|%s|" % "|".join("---" if i < 4 else "---:" for i in range(len(COLUMNS)))]
  for summary in summaries:
    lines.append("| %s |" % " | ".join(cell(summary) for _, cell in COLUMNS))
  return "\n".join(lines) + "\n"


def plot(summaries, path):
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure
  names = ["%s\n%s" % (s["name"], s["device"]["kind"]) for s in summaries]
  figure = Figure(figsize=(4 + 1.6 * len(summaries), 4))
  FigureCanvasAgg(figure)
  wall, rate = figure.subplots(1, 2)
  startup = [s["training"]["startup_seconds"] for s in summaries]
  steady = [s["training"]["wall_seconds"] - s["training"]["startup_seconds"]
            for s in summaries]
  wall.bar(names, startup, label="start-up", color="#bbbbbb")
  wall.bar(names, steady, bottom=startup, label="training steps", color="#3b75af")
  wall.set_ylabel("training wall time (s)")
  wall.legend()
  rate.bar(names, [s["training"]["examples_per_second"] or 0.0 for s in summaries],
           color="#3b75af")
  rate.set_ylabel("examples/sec (after start-up)")
  figure.tight_layout()
  figure.savefig(path, dpi=100)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("summaries", nargs="+", help="run_summary.json files or output_dirs")
  parser.add_argument("--out_dir", default=".", help="where wall_time.md and wall_time.png go")
  args = parser.parse_args(argv)
  summaries = load(args.summaries)
  os.makedirs(args.out_dir, exist_ok=True)
  table = markdown(summaries)
  with open(os.path.join(args.out_dir, "wall_time.md"), "w") as f:
    f.write(table)
  plot(summaries, os.path.join(args.out_dir, "wall_time.png"))
  sys.stdout.write(table)
  print("wrote %s and %s" % tuple(os.path.join(args.out_dir, "wall_time." + e)
                                  for e in ("md", "png")))


if __name__ == "__main__":
  main()
