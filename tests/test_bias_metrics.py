"""The Jigsaw Unintended Bias metric against an independent brute-force reference.

The reference below counts every (positive, negative) pair for each AUC and picks each
AUC's rows with explicit loops; it shares no code with pipeline/bias_metrics.py.
"""

import csv
import io
import math
import re
import struct
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT, pairwise_auc, sample_path
from pipeline import bias_metrics
from pipeline.bias_metrics import IDENTITY_COLUMNS, bias_report, bias_report_files
from pipeline.outputs import write_files

NAN = float("nan")
METRICS_LIST = list(bias_metrics.METRICS)


# --- the reference ---------------------------------------------------------------------

def reference(scores, targets, identities, power=-5, weight=0.25):
  """{identity: (size, subgroup, bpsn, bnsp)} (None = undefined), overall, power means,
  final (None when undefined)."""
  toxic = [t >= 0.5 for t in targets]
  per_identity = {}
  for name, values in identities.items():
    member = [v == v and v >= 0.5 for v in values]  # v == v is False for NaN
    subgroup, bpsn, bnsp = ([], []), ([], []), ([], [])
    for s, t, m in zip(scores, toxic, member):
      if m:
        subgroup[0].append(s)
        subgroup[1].append(t)
      if (m and not t) or (not m and t):
        bpsn[0].append(s)
        bpsn[1].append(t)
      if (m and t) or (not m and not t):
        bnsp[0].append(s)
        bnsp[1].append(t)
    per_identity[name] = (sum(member), pairwise_auc(*subgroup), pairwise_auc(*bpsn), pairwise_auc(*bnsp))
  overall = pairwise_auc(scores, toxic)
  means = []
  for k in (1, 2, 3):
    defined = [row[k] for row in per_identity.values() if row[k] is not None]
    if not defined:
      means.append(None)
    elif power < 0 and 0.0 in defined:
      means.append(0.0)  # the limit: x ** p -> infinity as x -> 0
    else:
      means.append((sum(x ** power for x in defined) / len(defined)) ** (1.0 / power))
  final = None
  if overall is not None and None not in means:
    final = weight * overall + (1 - weight) * sum(means) / 3.0
  return per_identity, overall, means, final


def assert_matches_reference(table, summary, expected, tolerance=1e-9):
  per_identity, overall, means, final = expected
  assert summary["identities_scored"] == table["identity"].tolist()
  assert sorted(table["identity"]) == sorted(per_identity)
  for row in table.itertuples(index=False):
    size, subgroup, bpsn, bnsp = per_identity[row.identity]
    assert row.subgroup_size == size, row.identity
    for got, want in ((row.subgroup_auc, subgroup), (row.bpsn_auc, bpsn),
                      (row.bnsp_auc, bnsp)):
      if want is None:
        assert math.isnan(got), row.identity
      else:
        assert got == pytest.approx(want, abs=tolerance), row.identity
  for metric, want in zip(bias_metrics.METRICS, means):
    undefined = [n for n in table["identity"]
                 if per_identity[n][1 + bias_metrics.METRICS.index(metric)] is None]
    assert summary["undefined"][metric] == undefined
    got = summary["power_mean_" + metric]
    assert math.isnan(got) if want is None else got == pytest.approx(want, abs=tolerance)
  assert (math.isnan(summary["overall_auc"]) if overall is None else
          summary["overall_auc"] == pytest.approx(overall, abs=tolerance))
  if final is None:
    assert math.isnan(summary["final_metric"]) and summary["note"]
  else:
    assert summary["final_metric"] == pytest.approx(final, abs=tolerance)
    assert summary["note"] is None


# --- real data: the committed Davidson-derived dev set ----------------------------------

# A transparent scoring rule: offensive words counted, saturating, plus a per-row jitter
# of 0..6 hundredths that leaves many ties (the AUCs must count ties half).
OFFENSIVE = re.compile(r"\b(?:bitch|bitches|hoe|hoes|pussy|fuck|fucking|shit|ass|nigga|niggas"
                       r"|fag|faggot|trash|cunt|dick)\b", re.IGNORECASE)


def rule_score(row_id, text):
  hits = len(OFFENSIVE.findall(text))
  return hits / (hits + 1.0) + (int(row_id) % 7) * 0.01


def read_jigsaw_bias(split):
  with io.open(sample_path("jigsaw_bias_davidson", split + ".csv"), encoding="utf-8",
               newline="") as f:
    rows = list(csv.DictReader(f))
  scores = [rule_score(r["id"], r["comment_text"]) for r in rows]
  targets = [float(r["target"]) for r in rows]
  identities = {name: [float(r[name]) if r[name] else NAN for r in rows]
                for name in IDENTITY_COLUMNS}
  return rows, scores, targets, identities


def test_committed_files_have_kaggle_layout():
  header = ("id,comment_text,target,severe_toxicity,obscene,identity_attack,insult,threat,"
            "sexual_explicit,male,female,homosexual_gay_or_lesbian,christian,jewish,muslim,"
            "black,white,psychiatric_or_mental_illness").split(",")
  seen = set()
  for split, size in (("train", 600), ("dev", 400), ("test", 100)):
    with io.open(sample_path("jigsaw_bias_davidson", split + ".csv"), encoding="utf-8",
                 newline="") as f:
      rows = list(csv.reader(f))
    assert rows[0] == header and len(rows) == size + 1
    ids = {r[0] for r in rows[1:]}
    assert len(ids) == size and not ids & seen  # no row in two splits
    seen |= ids
    toxic = [float(r[2]) >= 0.5 for r in rows[1:]]
    for column, name in enumerate(header[9:], start=9):
      member = [float(r[column]) >= 0.5 for r in rows[1:]]
      both = {t for t, m in zip(toxic, member) if m}
      assert both == {True, False}, (split, name)  # every subgroup has both classes
    assert any("\n" in r[1] for r in rows[1:])  # multi-line records survive


def test_matches_brute_force_on_real_dev_set():
  _, scores, targets, identities = read_jigsaw_bias("dev")
  assert len(set(scores)) < len(scores) / 4  # ties are common
  table, summary = bias_report(np.array(scores), np.array(targets),
                               {k: np.array(v) for k, v in identities.items()})
  assert table.columns.tolist() == ["identity", "subgroup_size", "subgroup_auc", "bpsn_auc",
                                    "bnsp_auc"]
  assert table["identity"].tolist() == list(IDENTITY_COLUMNS)
  expected = reference(scores, targets, identities)
  assert_matches_reference(table, summary, expected)
  assert summary["undefined"] == {m: [] for m in bias_metrics.METRICS}
  assert 0.5 < summary["final_metric"] < 1.0
  # Other parameters are used, not Kaggle's constants; lists work as inputs too.
  table2, summary2 = bias_report(scores, targets, identities, power=-2, overall_weight=0.5)
  assert_matches_reference(table2, summary2,
                           reference(scores, targets, identities, power=-2, weight=0.5))
  pd.testing.assert_frame_equal(table, table2)


def test_random_cases_with_ties_and_unannotated_rows():
  rng = np.random.RandomState(7)
  for _ in range(5):
    n = 80
    scores = np.round(rng.rand(n), 1)
    targets = np.round(rng.rand(n) ** 2, 2)
    identities = {}
    for name in ("jewish", "my_extra", "male"):
      values = np.round(rng.rand(n), 2)
      values[rng.rand(n) < 0.3] = np.nan
      identities[name] = values
    table, summary = bias_report(scores, targets, identities)
    assert table["identity"].tolist() == ["male", "jewish", "my_extra"]
    assert_matches_reference(table, summary, reference(list(scores), list(targets),
                                                       {k: list(v) for k, v in
                                                        identities.items()}))


# --- a case on paper ---------------------------------------------------------------------

# row:        r1    r2    r3    r4    r5    r6
TINY_SCORES = [0.9, 0.8, 0.2, 0.7, 0.1, 0.8]
TINY_TARGETS = [1.0, 0.49, 0.0, 0.5, 0.0, 0.6]  # toxic: r1, r4 (0.5 counts), r6
TINY_IDENTITIES = {
    "female": [0.0, 0.0, 0.49, 1.0, 0.5, NAN],  # subgroup r4, r5
    "male": [1.0, 1.0, 0.5, 0.0, 0.0, NAN],  # subgroup r1, r2, r3; NaN = not in it
}
# Positives r1 .9, r4 .7, r6 .8; negatives r2 .8, r3 .2, r5 .1.
# overall: r1 beats 3, r4 beats 2 (loses to r2), r6 beats 2 and ties r2: 7.5 / 9 = 5/6.
# male   subgroup {r1 | r2, r3}: 2/2 = 1.  BPSN {r4, r6 | r2, r3}: (1 + 1.5) / 4 = 0.625.
#        BNSP {r1 | r5}: 1.
# female subgroup {r4 | r5}: 1.  BPSN {r1, r6 | r5}: 1.  BNSP {r4 | r2, r3}: 1/2.
# Power means (p = -5): subgroup 1, BPSN ((1.6^5 + 1) / 2)^(-1/5), BNSP ((1 + 2^5) / 2)^(-1/5)
# final = 0.25 * 5/6 + 0.75 * (1 + BPSN + BNSP) / 3 = 0.7772...
PAPER_BPSN = ((1.6 ** 5 + 1) / 2.0) ** -0.2
PAPER_BNSP = (33 / 2.0) ** -0.2
PAPER_FINAL = 0.25 * 5 / 6.0 + 0.75 * (1 + PAPER_BPSN + PAPER_BNSP) / 3


def test_tiny_case_computed_on_paper():
  table, summary = bias_report(TINY_SCORES, TINY_TARGETS, TINY_IDENTITIES)
  assert table.values.tolist() == [["male", 3, 1.0, 0.625, 1.0], ["female", 2, 1.0, 1.0, 0.5]]
  assert summary["overall_auc"] == pytest.approx(5 / 6.0, abs=1e-12)
  assert summary["power_mean_subgroup_auc"] == pytest.approx(1.0, abs=1e-12)
  assert summary["power_mean_bpsn_auc"] == pytest.approx(PAPER_BPSN, abs=1e-12)
  assert summary["power_mean_bnsp_auc"] == pytest.approx(PAPER_BNSP, abs=1e-12)
  assert summary["final_metric"] == pytest.approx(PAPER_FINAL, abs=1e-12)
  assert round(PAPER_FINAL, 4) == 0.7773
  assert summary["identities_scored"] == ["male", "female"]
  assert summary["note"] is None
  assert_matches_reference(table, summary,
                           reference(TINY_SCORES, TINY_TARGETS, TINY_IDENTITIES), 1e-12)


def test_undefined_aucs_are_listed_and_left_out_of_the_power_means():
  identities = dict(TINY_IDENTITIES)
  identities["christian"] = [0.0, 0.0, 1.0, 0.0, 1.0, 0.0]  # r3, r5: no toxic mention
  identities["muslim"] = [NAN] * 6  # nobody annotated: an empty subgroup
  table, summary = bias_report(TINY_SCORES, TINY_TARGETS, identities)
  rows = table.set_index("identity")
  assert rows.loc["christian", "subgroup_size"] == 2
  assert math.isnan(rows.loc["christian", "subgroup_auc"])
  assert rows.loc["christian", "bpsn_auc"] == 1.0  # {r1, r4, r6 | r3, r5}
  assert math.isnan(rows.loc["christian", "bnsp_auc"])
  assert rows.loc["muslim", "subgroup_size"] == 0
  assert rows.loc["muslim", METRICS_LIST].isna().all()
  assert summary["undefined"] == {"subgroup_auc": ["christian", "muslim"],
                                  "bpsn_auc": ["muslim"],
                                  "bnsp_auc": ["christian", "muslim"]}
  # Means over the defined values only: subgroup and BNSP as before, BPSN gains a 1.
  assert summary["power_mean_subgroup_auc"] == pytest.approx(1.0, abs=1e-12)
  assert summary["power_mean_bnsp_auc"] == pytest.approx(PAPER_BNSP, abs=1e-12)
  bpsn = ((1.6 ** 5 + 1 + 1) / 3.0) ** -0.2
  assert summary["power_mean_bpsn_auc"] == pytest.approx(bpsn, abs=1e-12)
  assert summary["final_metric"] == pytest.approx(
      0.25 * 5 / 6.0 + 0.75 * (1 + bpsn + PAPER_BNSP) / 3, abs=1e-12)
  assert_matches_reference(table, summary, reference(TINY_SCORES, TINY_TARGETS, identities))


def test_final_metric_is_nan_with_a_reason_when_nothing_is_defined():
  table, summary = bias_report(TINY_SCORES, TINY_TARGETS, {"male": [NAN] * 6})
  assert table["subgroup_size"].tolist() == [0]
  assert math.isnan(summary["final_metric"])
  assert summary["overall_auc"] == pytest.approx(5 / 6.0)
  assert all(math.isnan(summary["power_mean_" + m]) for m in METRICS_LIST)
  assert summary["note"] == ("final_metric is NaN: no identity has a defined subgroup_auc; "
                             "no identity has a defined bpsn_auc; no identity has a "
                             "defined bnsp_auc")
  assert summary["undefined"] == {m: ["male"] for m in METRICS_LIST}

  table, summary = bias_report([0.1, 0.2, 0.3], [0.0, 0.2, 0.4], {"male": [1.0, 0.0, 1.0]})
  assert math.isnan(summary["overall_auc"]) and math.isnan(summary["final_metric"])
  assert summary["note"].startswith("final_metric is NaN: the overall AUC is undefined: "
                                    "every row is non-toxic")


def test_power_mean_of_a_zero_auc_is_zero():
  # A perfectly wrong BNSP (0) must pull its power mean to 0, not warn or give NaN.
  table, summary = bias_report([0.9, 0.1, 0.5, 0.6], [0.0, 1.0, 1.0, 0.0],
                               {"male": [1.0, 1.0, 0.0, 0.0]})
  assert table["subgroup_auc"].tolist() == [0.0]
  assert summary["power_mean_subgroup_auc"] == 0.0
  assert_matches_reference(table, summary, reference([0.9, 0.1, 0.5, 0.6],
                                                     [0.0, 1.0, 1.0, 0.0],
                                                     {"male": [1.0, 1.0, 0.0, 0.0]}))


@pytest.mark.parametrize("kwargs, message", [
    (dict(targets=[0.0, 1.0, 0.5]), r"targets has 3 values but scores has 4"),
    (dict(targets=[0.0, 1.2, 0.5, 1.0]),
     r"targets must be in \[0, 1\]; 1 value\(s\) are not, the first at row 1: 1.2"),
    (dict(targets=[0.0, NAN, 0.5, 1.0]), r"targets must be in \[0, 1\].* row 1: nan"),
    (dict(scores=[0.1, NAN, 0.3, 0.4]), r"scores must be finite; row 1 is nan"),
    (dict(scores=[[0.1, 0.2], [0.3, 0.4]]), r"scores must be one-dimensional"),
    (dict(identities={"male": [1.0, 0.0, 1.0]}), r"identity 'male' has 3 values but scores has 4"),
    (dict(identities={"male": [1.0, 0.0, -0.5, NAN]}),
     r"identity 'male' must be in \[0, 1\] or NaN; 1 value\(s\) are not, the first at row 2"),
    (dict(identities={}), r"identities must be a non-empty dict .* got an empty dict"),
    (dict(identities=[0.0, 1.0, 0.0, 1.0]), r"identities must be a non-empty dict .* got list"),
    (dict(power=0), r"power must be a finite non-zero number"),
    (dict(overall_weight=1.5), r"overall_weight must be in \[0, 1\]"),
])
def test_bad_input_is_named(kwargs, message):
  arguments = dict(scores=[0.1, 0.2, 0.3, 0.4], targets=[0.0, 1.0, 0.5, 0.2],
                   identities={"male": [1.0, 0.0, 1.0, NAN]})
  arguments.update(kwargs)
  with pytest.raises(ValueError, match=message):
    bias_report(**arguments)


# --- the report files --------------------------------------------------------------------

def _write_report(folder, table, summary):
  """The report's files as a run writes them (pipeline.task_extras, with
  pipeline.outputs.write_files)."""
  folder.mkdir(exist_ok=True)
  return tuple(write_files(str(folder), bias_report_files(table, summary)))


def test_the_report_csv_reads_back_and_its_png_is_valid(tmp_path):
  _, scores, targets, identities = read_jigsaw_bias("dev")
  identities["my_extra"] = [NAN] * len(scores)  # undefined AUCs: empty cells
  table, summary = bias_report(scores, targets, identities)
  assert table["subgroup_auc"].map(lambda x: len(repr(x))).max() >= 17  # many digits
  pyplot_before = "matplotlib.pyplot" in sys.modules
  csv_path, png_path = _write_report(tmp_path / "report", table, summary)
  assert ("matplotlib.pyplot" in sys.modules) == pyplot_before  # no global pyplot state
  assert (csv_path, png_path) == (str(tmp_path / "report" / "bias_metrics.csv"),
                                  str(tmp_path / "report" / "bias_metrics.png"))
  pd.testing.assert_frame_equal(pd.read_csv(csv_path, float_precision="round_trip"), table,
                                check_exact=True)
  pd.testing.assert_frame_equal(pd.read_csv(csv_path), table, check_exact=False, rtol=1e-15,
                                atol=0)
  with open(csv_path) as f:
    assert f.readline() == "identity,subgroup_size,subgroup_auc,bpsn_auc,bnsp_auc\n"
    assert len(f.readlines()) == len(table)
  with open(png_path, "rb") as f:
    data = f.read()
  assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
  width, height = struct.unpack(">II", data[16:24])
  assert width > 0 and height > 0

  # Every identity undefined: the chart still draws and its title says so.
  table, summary = bias_report(TINY_SCORES, TINY_TARGETS, {"male": [NAN] * 6})
  csv_path, png_path = _write_report(tmp_path / "report", table, summary)
  pd.testing.assert_frame_equal(pd.read_csv(csv_path), table, check_exact=True)
  with open(csv_path) as f:
    assert f.read() == "identity,subgroup_size,subgroup_auc,bpsn_auc,bnsp_auc\nmale,0,,,\n"
  with open(png_path, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_module_imports_no_tensorflow():
  code = ("import sys; import pipeline.bias_metrics as b; "
          "b.bias_report([0.1, 0.9], [0, 1], {'male': [1, 1]}); "
          "assert not [m for m in sys.modules if m.split('.')[0] == 'tensorflow'], 'tf'")
  subprocess.check_call([sys.executable, "-c", code], cwd=ROOT)
