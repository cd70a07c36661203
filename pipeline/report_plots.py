"""The plots of --eval_report (pipeline/eval_report.py) as PNG bytes: the confusion matrix,
the ROC and precision-recall curves (a line per class or column), and the reliability
diagram. matplotlib without a display."""

import io

PLOTS = ("confusion.png", "roc.png", "pr.png", "reliability.png")
MAX_ANNOTATED = 30  # classes whose confusion cells show their counts (more: colour alone)
MAX_LEGEND = 20  # curves a plot names in its legend (more: the lines alone, and a note)


def _text(name):
  """A name as matplotlib draws it: as written ($ would start mathematics), tabs and line
  breaks as spaces."""
  return " ".join(str(name).replace("$", r"\$").split())


def pngs(label_spec, report):
  """{file name: PNG bytes} of a report (eval_report.class_report or column_report)."""
  return {"confusion.png": _confusion(label_spec, report),
          "roc.png": _curves(report, "roc", "false positive rate", "true positive rate",
                             "ROC curves", "roc_auc", "AUC"),
          "pr.png": _curves(report, "pr", "recall", "precision", "precision-recall curves",
                            "average_precision", "AP"),
          "reliability.png": _reliability(report)}


def _figure(size=(6, 5)):
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure
  figure = Figure(figsize=size)
  FigureCanvasAgg(figure)
  return figure, figure.add_subplot(1, 1, 1)


def _png(figure):
  figure.tight_layout()
  out = io.BytesIO()
  figure.savefig(out, format="png", dpi=100)
  return out.getvalue()


def _confusion(label_spec, report):
  """A classification head's matrix of counts; a column head's counts per column (rows:
  the columns; columns: tp, fp, fn, tn)."""
  if report["kind"] == "classes":
    counts, rows, columns = report["confusion"], label_spec.classes, label_spec.classes
    xlabel, ylabel = "decided class", "true class"
  else:
    counts = [[r["tp"], r["fp"], r["fn"], r["tn"]] for r in report["per_class"]]
    rows, columns = [r["name"] for r in report["per_class"]], ["tp", "fp", "fn", "tn"]
    xlabel, ylabel = "count", "label column"
  # (at most 16 x 14 inches, whatever the classes: more of them get smaller cells)
  figure, axes = _figure((min(16, 1.5 + 0.9 * len(columns)), min(14, 1.2 + 0.6 * len(rows))))
  axes.imshow(counts, cmap="Blues", aspect="auto")
  top = max(max(row) for row in counts) or 1
  if len(rows) <= MAX_ANNOTATED and len(columns) <= MAX_ANNOTATED:
    for i, row in enumerate(counts):
      for j, value in enumerate(row):
        axes.text(j, i, str(value), ha="center", va="center",
                  color="white" if value > top / 2 else "black")
  small = "small" if len(rows) <= MAX_ANNOTATED else 4
  axes.set_xticks(range(len(columns)))
  axes.set_xticklabels([_text(c) for c in columns], rotation=30, ha="right", fontsize=small)
  axes.set_yticks(range(len(rows)))
  axes.set_yticklabels([_text(r) for r in rows], fontsize=small)
  axes.set_xlabel(xlabel)
  axes.set_ylabel(ylabel)
  axes.set_title("confusion")
  return _png(figure)


def _curves(report, kind, xlabel, ylabel, title, figure_name, short):
  figure, axes = _figure()
  drawn = [(name, curve) for name, curve in sorted(report["curves"].items())
           if curve[kind] is not None]
  for name, curve in drawn:
    x, y = curve[kind]
    axes.plot(x, y, label="%s (%s %.3f)" % (_text(name), short, curve[figure_name]),
              drawstyle="steps-post" if kind == "pr" else "default")
  if kind == "roc":
    axes.plot([0, 1], [0, 1], ":", color="grey")
  axes.set_xlim(0, 1)
  axes.set_ylim(0, 1.02)
  axes.set_xlabel(xlabel)
  axes.set_ylabel(ylabel)
  axes.set_title(title if len(drawn) <= MAX_LEGEND else
                 "%s: %d classes (report.md names each's figures)" % (title, len(drawn)))
  axes.grid(alpha=0.3)
  if drawn and len(drawn) <= MAX_LEGEND:
    axes.legend(loc="lower right" if kind == "roc" else "lower left", fontsize="small")
  return _png(figure)


def _reliability(report):
  figure, axes = _figure()
  tables = ({report["calibration"]["of"]: report["calibration"]}
            if report["kind"] == "classes" else report["calibration"])
  for name, table in sorted(tables.items()):
    bins = table["bins"]
    axes.plot([b["mean_predicted"] for b in bins], [b["mean_observed"] for b in bins], "o-",
              label="%s (ECE %.3f)" % (_text(name), table["expected_calibration_error"]))
  axes.plot([0, 1], [0, 1], ":", color="grey")
  axes.set_xlim(0, 1)
  axes.set_ylim(0, 1)
  axes.set_xlabel("mean predicted probability")
  axes.set_ylabel("observed frequency")
  axes.set_title("reliability")
  axes.grid(alpha=0.3)
  if len(tables) <= MAX_LEGEND:
    axes.legend(loc="upper left", fontsize="small")
  return _png(figure)
