"""The options as documented: docs/reference/flags.md is what spec/option_docs.py makes of
spec/options.py, every option has an example where its format is not obvious, and
--help lists them by group in the page's order and words."""

import os

from conftest import ROOT
from spec import option_docs, option_index

PAGE = os.path.join(ROOT, "docs", "reference", "flags.md")


def test_the_reference_page_is_generated_from_the_options():
  with open(PAGE, encoding="utf-8") as f:
    assert f.read() == option_docs.reference_markdown(), (
        "docs/reference/flags.md is stale: python -m spec.option_docs > "
        "docs/reference/flags.md")


def test_every_option_is_on_the_page_once_in_its_group_with_an_example():
  page = option_docs.reference_markdown()
  for group, _, _, names in option_docs.groups():
    for name in names:
      assert option_index.group_of(name) == group
      assert page.count("\n| `--%s` |" % name) == 1, name
      assert option_docs.example(name).startswith(("--%s" % name, "--no%s" % name)), name
  documented = [n for _, _, _, names in option_docs.groups() for n in names]
  assert documented == option_index.option_names()
  for name in option_index.option_names():
    kind = option_index.base_type(option_index.option_field(name))
    if kind in (str, tuple) and not option_index.choices(name):
      assert name in option_docs.EXAMPLES or option_index.option_field(name).metadata[
          "example"], "give --%s an example" % name


def test_help_follows_the_page():
  text = option_docs.help_text()
  positions = [text.index("  --%s  (" % name) for name in option_index.option_names()]
  assert positions == sorted(positions)
  for _, title, purpose, _ in option_docs.groups():
    assert "\n%s: %s\n" % (title, purpose) in text
