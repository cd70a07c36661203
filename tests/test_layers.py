"""The packages' layering, read from the source: every import arrow points down, spec/ is a
plain-Python leaf, no module imports itself back through others, and the sizes the
redesign keeps (a short entry script, no module over 400 lines)."""

import ast
import os

from conftest import ROOT

PACKAGES = ("spec", "data", "modeling", "serving", "pipeline", "tools")
# What each package may import of the project (besides itself).
MAY_IMPORT = {
    "spec": set(),
    "data": {"spec"},
    "modeling": {"spec"},
    "serving": {"data", "spec"},
    "pipeline": {"data", "modeling", "serving", "spec"},
    "tools": {"data", "modeling", "pipeline", "serving", "spec"},
    "run_classifier": {"data", "modeling", "pipeline", "serving", "spec"},
}


def _modules():
  """{module name: path} of the project's source (tests aside)."""
  found = {"run_classifier": os.path.join(ROOT, "run_classifier.py")}
  for package in PACKAGES:
    for folder, dirs, names in os.walk(os.path.join(ROOT, package)):
      dirs[:] = sorted(d for d in dirs if os.path.exists(os.path.join(folder, d, "__init__.py")))
      parent = os.path.relpath(folder, ROOT).replace(os.sep, ".")
      for name in sorted(names):
        if name.endswith(".py"):
          module = parent if name == "__init__.py" else "%s.%s" % (parent, name[:-3])
          found[module] = os.path.join(folder, name)
  return found


def _imports(path, top_level_only=False):
  """The modules a file imports (at any depth of its code, or only at its top level)."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  nodes = tree.body if top_level_only else ast.walk(tree)
  names = set()
  for node in nodes:
    if isinstance(node, ast.Import):
      names.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      names.add(node.module)
      names.update("%s.%s" % (node.module, alias.name) for alias in node.names)
  return names


def test_every_import_points_down():
  wrong = []
  for module, path in _modules().items():
    package = module.split(".")[0]
    allowed = MAY_IMPORT[package] | {package}
    for name in _imports(path):
      top = name.split(".")[0]
      if top in MAY_IMPORT and top not in allowed:
        wrong.append("%s imports %s" % (module, name))
  assert wrong == []


def test_spec_is_plain_python_and_only_the_pipeline_sees_the_whole_config():
  for module, path in _modules().items():
    imported = _imports(path)
    if module.startswith("spec"):
      assert not [n for n in imported if n.split(".")[0] in ("tensorflow", "numpy")], module
    if not module.startswith(("pipeline", "run_classifier", "spec")):
      assert "spec.config" not in imported, module  # RunConfig: the groups go further down


def test_no_module_imports_itself_back():
  """No import cycles between the project's modules (top-level imports)."""
  modules = _modules()
  graph = {m: {n for n in _imports(p, top_level_only=True) if n in modules and n != m}
           for m, p in modules.items()}
  seen, on_path = set(), []

  def visit(module):
    if module in on_path:
      raise AssertionError("import cycle: %s" % " -> ".join(
          on_path[on_path.index(module):] + [module]))
    if module in seen:
      return
    on_path.append(module)
    for name in sorted(graph[module]):
      visit(name)
    on_path.pop()
    seen.add(module)

  for module in sorted(graph):
    visit(module)


def test_the_entry_script_is_short_and_no_module_is_long():
  def lines(path):
    with open(path) as f:
      return len(f.read().splitlines())
  assert lines(os.path.join(ROOT, "run_classifier.py")) <= 300
  long_ones = {m: lines(p) for m, p in _modules().items()
               if not m.startswith("tools") and lines(p) > 400}
  assert long_ones == {}
