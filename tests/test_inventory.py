"""The inventory (spec/inventory.py) is the whole truth: every file the pipeline's modes
leave in a run's folder, its records and its exports is of a kind it lists (so a new kind
of file cannot be written without joining the fault matrix), and every function it names
as a verifier exists."""

import importlib
import os

import pytest

from spec import inventory


def files_under(folder):
  for root, _, names in os.walk(folder):
    for name in names:
      yield os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/")


def kind_of(relative):
  """(the inventory root, the path under it) of a file under a run's output_dir."""
  parts = relative.split("/")
  if parts[0] == "features":
    return "cache_dir", "/".join(parts[1:])
  if parts[0] == "export" and len(parts) > 2:
    return "export", "/".join(parts[2:])
  return "output_dir", relative


@pytest.mark.slow
def test_every_file_a_run_leaves_is_in_the_inventory(jigsaw_model, best_run):
  unlisted, seen = [], set()
  for run in (jigsaw_model, best_run):
    for relative in files_under(run.output_dir):
      root, path = kind_of(relative)
      artefact = inventory.artefact_of(path, root)
      if artefact is None:
        unlisted.append("%s (%s)" % (relative, root))
      else:
        seen.add(artefact.name)
  assert not unlisted, "files of no inventory kind: add them to spec/inventory.py: %s" % (
      ", ".join(sorted(unlisted)))
  # The runs leave every kind their modes write (a pattern that matches nothing is stale).
  expected = {"model card", "checkpoint state", "checkpoint index", "checkpoint data",
              "eval history", "best record", "best checkpoint", "learning curve",
              "eval results", "predictions", "predictions' provenance", "run summary",
              "TensorBoard events", "records", "records' metadata", "export manifest",
              "SavedModel", "SavedModel variables", "export card", "export vocabulary",
              "transformers folder"}
  assert expected <= seen, sorted(expected - seen)


@pytest.mark.slow
def test_no_staging_or_lock_is_left_after_a_run(jigsaw_model, best_run):
  for run in (jigsaw_model, best_run):
    left = [p for p in files_under(run.output_dir)
            if inventory.artefact_of(p.rsplit("/", 1)[-1], "any") is not None and
            inventory.artefact_of(p.rsplit("/", 1)[-1], "any").role == "transient"]
    assert left == [] and not os.path.exists(os.path.join(run.output_dir, "training.lock"))


def test_every_verifier_the_inventory_names_exists():
  for artefact in inventory.ARTEFACTS + inventory.INPUTS:
    assert artefact.role in ("input", "state", "output", "transient"), artefact
    assert set(artefact.faults) <= set(inventory.FILE_FAULTS), artefact
    if artefact.role == "state":
      assert artefact.verified_by and artefact.on_fault in ("refuse", "rebuild"), artefact
    if artefact.verified_by:
      module, _, name = artefact.verified_by.rpartition(".")
      try:
        owner = importlib.import_module(module)
      except ImportError:  # (a class's method: module.Class.method)
        module, _, cls = module.rpartition(".")
        owner = getattr(importlib.import_module(module), cls)
      assert callable(getattr(owner, name)), artefact.verified_by
  names = [a.name for a in inventory.ARTEFACTS + inventory.INPUTS]
  assert len(names) == len(set(names))


def test_patterns_sort_files_into_their_kinds():
  assert inventory.artefact_of("model.ckpt-6.index", "output_dir").name == "checkpoint index"
  assert inventory.artefact_of("model.ckpt-6.data-00000-of-00001",
                               "output_dir").name == "checkpoint data"
  assert inventory.artefact_of("best/model.ckpt-3.index", "output_dir").name == \
      "best checkpoint"
  assert inventory.artefact_of("train.tf_record.meta.json", "cache_dir").name == \
      "records' metadata"
  assert inventory.artefact_of("train.tf_record-00001-of-00002", "cache_dir").name == \
      "records"
  assert inventory.artefact_of("eval_results.json.tmp-12-abcdef12", "output_dir").name == \
      "staging file"
  assert inventory.artefact_of("notes.txt", "output_dir") is None


def test_the_checks_page_shows_the_matrix_as_the_inventory_has_it():
  from conftest import ROOT
  with open(os.path.join(ROOT, "docs", "reference", "checks.md"), encoding="utf-8") as f:
    assert inventory.markdown_table() in f.read(), (
        "docs/reference/checks.md's fault matrix is not spec/inventory.py's: paste "
        "spec.inventory.markdown_table() there")
