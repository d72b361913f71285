"""The house rules of docs/architecture.md, checked on the package's own imports (AST, no import).

- no import circle between modules, counting imports inside functions too;
- no `from bert_tf.x import _private` from another module;
- no import from a lower floor to a higher one, except lazy (inside a function) imports whose line
  or the line above says `registration` (they register Keras classes for deserialization).
"""
import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "bert_tf"

# Floors, bottom to top: a module may import from its own floor and the floors below it.
FLOORS = [
    ("base", ["bert_tf.errors", "bert_tf.io_utils", "bert_tf.progress", "bert_tf.options",
              "bert_tf.plotting", "bert_tf.corpora", "bert_tf.moved_modules", "bert_tf.tfds_io",
              "bert_tf.config_io", "bert_tf.cpu_setup"]),
    ("text -> ids", ["bert_tf.tokenization"]),
    ("models", ["bert_tf.modeling", "bert_tf.gpt"]),
    ("weights, data, metrics", ["bert_tf.checkpoints", "bert_tf.presets", "bert_tf.pretraining_data",
                                "bert_tf.evaluation"]),
    ("loading", ["bert_tf.pretrained", "bert_tf.hub_module"]),
    ("training", ["bert_tf.training"]),
    ("the original's Python API", ["bert_tf.original"]),
    ("export", ["bert_tf.export"]),
    ("drivers", ["bert_tf.tasks", "bert_tf.runs"]),
    ("jobs", ["bert_tf.studies", "bert_tf.quickstart"]),
    ("command line", ["bert_tf.cli"]),
]


def module_names():
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        names[name] = path
    return names


MODULES = module_names()


def floor_of(module):
    if module == "bert_tf":
        return None  # the package's lazy top-level names
    for index, (_, prefixes) in enumerate(FLOORS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    raise AssertionError(f"{module} is on no floor of FLOORS: add it to the table and to "
                         "docs/architecture.md")


def imports_of(module):
    """-> [(target module, imported name or None, line, lazy, source lines)]."""
    path = MODULES[module]
    source = path.read_text()
    tree = ast.parse(source)
    lines = source.splitlines()
    lazy_nodes = {id(n) for top in tree.body
                  if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  for n in ast.walk(top)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if path.name != "__init__.py":
                    base = base[:-1]
                base = base[:len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            targets = [(f"{prefix}.{a.name}", None) if f"{prefix}.{a.name}" in MODULES
                       else (prefix, a.name) for a in node.names]
        else:
            continue
        for target, name in targets:
            if not target.startswith("bert_tf"):
                continue
            while target not in MODULES and "." in target:
                target = target.rsplit(".", 1)[0]
            if target != module:
                context = "\n".join(lines[max(0, node.lineno - 2):node.end_lineno])
                found.append((target, name, node.lineno, id(node) in lazy_nodes, context))
    return found


def test_no_private_names_imported_across_modules():
    bad = [f"{m}:{line} imports {name} from {target}"
           for m in MODULES for target, name, line, _, _ in imports_of(m)
           if name and name.startswith("_") and not name.startswith("__")]
    assert not bad, "\n".join(bad)


def test_no_import_circles():
    graph = {m: {t for t, *_ in imports_of(m)} for m in MODULES}
    circles = strongly_connected(graph)
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(sorted(c)) for c in circles)


def test_no_import_from_a_lower_floor_to_a_higher_one():
    bad = []
    for module in MODULES:
        here = floor_of(module)
        if here is None:
            continue
        for target, _, line, lazy, context in imports_of(module):
            there = floor_of(target)
            if there is not None and there > here and not (lazy and "registration" in context):
                bad.append(f"{module}:{line} ({FLOORS[here][0]}) imports {target} "
                           f"({FLOORS[there][0]})")
    assert not bad, "\n".join(bad)


def strongly_connected(graph):
    """Tarjan's algorithm: the components of more than one node (the circles)."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


@pytest.mark.parametrize("graph, circles", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [{"a", "b", "c"}]),
    ({"a": {"b"}, "b": set(), "c": {"b"}}, []),
])
def test_the_circle_finder_finds_circles(graph, circles):
    assert [set(c) for c in strongly_connected(graph)] == circles
