"""How the package hangs together, read from its source with `ast` (every import, those inside functions too):
no import circle, floors that read downward, and the simulator behind one seam.

Floors, bottom up: the vocabulary (model, the metric family helpers, the child environment), config parsing, the
fault catalogue, sources, rules, outputs, services, the whole config (settings), the simulator, then the daemon,
fleet and the terminal view, and the command line on top. A module imports only from its own floor or below.
"""

import ast
import os
import re
from collections import defaultdict
from typing import Dict, List, Set, Tuple

PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "npumon")

FLOORS = (
    ("npumon", "npumon.model", "npumon.childenv", "npumon.outputs.families"),
    ("npumon.config",),
    ("npumon.faults",),
    ("npumon.sources",),
    ("npumon.rules",),
    ("npumon.outputs",),
    ("npumon.services",),
    ("npumon.settings",),
    ("npumon.sim",),
    ("npumon.daemon", "npumon.fleet", "npumon.tui", "npumon.diag"),
    ("npumon.cli",),
)
# The command line chooses the Target: only these modules of it may use the simulator (`--simulate` builds the
# simulated Target, `--sim-state` its config; the scenario and product lists; `fleet-sim`).
SIM_USERS = ("npumon.cli.common", "npumon.cli.events", "npumon.cli.run", "npumon.cli.completion", "npumon.cli.parser")
SIM_IDENTIFIER = re.compile(r"(^|_)simulated($|_)|sim_state_dir")

Edge = Tuple[str, str, int]  # importer, imported, line


def modules(package_dir: str = PACKAGE_DIR) -> Dict[str, str]:
    """Dotted module name -> file, for every module of the package."""
    found = {}
    parent = os.path.dirname(package_dir)
    for directory, _, files in os.walk(package_dir):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                dotted = os.path.relpath(path, parent)[:-3].replace(os.sep, ".")
                found[dotted[:-len(".__init__")] if dotted.endswith(".__init__") else dotted] = path
    return found


def _is_package(path: str) -> bool:
    return os.path.basename(path) == "__init__.py"


def _resolve(name: str, known: Dict[str, str]) -> str:
    """The module an imported name lives in: the longest known prefix of `name` ('' if none: not ours)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def imports(known: Dict[str, str]) -> List[Edge]:
    """Every import of one of the package's modules by another, with its line. A module's own packages are
    left out: Python has imported them before the module, whatever it says."""
    edges = []
    for module, path in known.items():
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), path)
        package = module if _is_package(path) else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    anchor = ".".join(parts[:len(parts) - (node.level - 1)])
                    base = anchor + ("." + node.module if node.module else "")
                names = [base] + [base + "." + alias.name for alias in node.names]  # `from pkg import submodule`
            else:
                continue
            for name in names:
                target = _resolve(name, known)
                if target and target != module and not module.startswith(target + "."):
                    edges.append((module, target, node.lineno))
    return edges


def circles(edges: List[Edge]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, without recursion)."""
    graph: Dict[str, Set[str]] = defaultdict(set)
    for importer, imported, _ in edges:
        graph[importer].add(imported)
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def floor(module: str) -> int:
    """The floor of a module: that of the longest FLOORS entry it is or lies under."""
    best, level = "", -1
    for number, names in enumerate(FLOORS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best):
                best, level = name, number
    return level


def _describe(component: List[str], edges: List[Edge]) -> str:
    inside = set(component)
    arrows = ["{} -> {} (line {})".format(a, b, line) for a, b, line in sorted(set(edges))
              if a in inside and b in inside]
    return "{} modules: {}\n    ".format(len(component), ", ".join(component)) + "\n    ".join(arrows)


def test_no_module_of_npumon_is_in_an_import_circle():
    edges = imports(modules())
    found = circles(edges)
    assert not found, "import circles:\n" + "\n".join(_describe(component, edges) for component in found)


def test_the_check_finds_a_circle_made_by_a_late_import(tmp_path):
    """The check itself: a circle closed by an import inside a function, through a relative import."""
    package = tmp_path / "npumon"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("")
    (package / "low" / "a.py").write_text("def f():\n    from ..high import b\n")
    (package / "high.py").write_text("from npumon.low.a import f\n")
    (package / "free.py").write_text("from . import high\n")
    found = circles(imports(modules(str(package))))
    assert found == [["npumon.high", "npumon.low.a"]]


def test_every_module_has_a_floor_and_imports_only_from_its_floor_or_below():
    known = modules()
    assert [module for module in known if floor(module) < 0] == []
    upward = ["{} (floor {}) -> {} (floor {}), line {}".format(a, floor(a), b, floor(b), line)
              for a, b, line in imports(known) if floor(b) > floor(a)]
    assert upward == []


def test_production_code_neither_imports_the_simulator_nor_asks_whether_a_host_is_simulated():
    known = modules()
    sim_imports = ["{}:{} imports {}".format(a, line, b) for a, b, line in imports(known)
                   if floor(b) == floor("npumon.sim") and floor(a) != floor("npumon.sim")
                   and a not in SIM_USERS]
    assert sim_imports == []
    branches = []
    for module, path in known.items():
        if floor(module) == floor("npumon.sim") or module in SIM_USERS:
            continue
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), path)
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Name):
                names = [node.id]
            elif isinstance(node, ast.Attribute):
                names = [node.attr]
            elif isinstance(node, ast.arg):
                names = [node.arg]
            elif isinstance(node, ast.keyword) and node.arg:
                names = [node.arg]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            branches += ["{}:{} {}".format(module, node.lineno, name) for name in names if SIM_IDENTIFIER.search(name)]
    assert branches == []


def test_the_identifier_check_matches_what_it_is_meant_to():
    assert all(SIM_IDENTIFIER.search(name) for name in ("simulated", "sim_state_dir", "simulated_url", "is_simulated"))
    assert not any(SIM_IDENTIFIER.search(name) for name in ("simulate", "simulation", "simulation_config"))
