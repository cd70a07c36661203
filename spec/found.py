"""Classes found in a package rather than listed: the tasks (data/tasks/) and the heads
(spec/heads/) are each a module that defines one, and nothing else names them."""

import importlib
import pkgutil


def classes_in(package, base, attribute):
  """The subclasses of base defined in the modules of package (a module object), module by
  module in the order of their names, that carry attribute (not None: a base class that
  carries none is left out)."""
  classes = []
  for module_info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
    module = importlib.import_module("%s.%s" % (package.__name__, module_info.name))
    for value in vars(module).values():
      if (isinstance(value, type) and issubclass(value, base) and
          value.__module__ == module.__name__ and getattr(value, attribute) is not None):
        classes.append(value)
  return classes
