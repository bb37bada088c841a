"""The shape of gmp's code, checked by parsing ``gmp/`` and ``cli/`` (no imports executed).

* No import cycle between modules of ``gmp/`` and ``cli/``, nor between packages
  (``gmp.train``, ``gmp.partition``, ... and the top-level modules); imports
  inside functions count, so a cycle cannot hide behind a late import, and so
  do imports of the package root (``from gmp import __version__`` depends on
  ``gmp/__init__``, which imports :mod:`gmp.api` and through it every stage:
  the version lives in the leaf ``gmp/_version.py``).
* No ``_private`` name of one module used by another: not imported
  (``from .cache import _compact``), not read through a module
  (``graph._min_max``), not read or written on another module's objects
  (``store._dirty``). A package's private implementation modules (``_io.py``,
  ``partition/_common.py``) may be imported inside that package.
* No ``try/except ImportError`` around an import of gmp's own modules.
* No module but ``gmp/train/trainer.py`` reads or writes an attribute of a
  :class:`~gmp.train.trainer.Trainer`; others call its public methods only
  (protocols and step helpers get a :class:`~gmp.train.context.StepContext`).
* No library error message names a command-line ``--flag``: it names the parameter between
  backticks (```max_bad_lines` N``), and every such name has its flag in ``cli/_flags.py``'s
  ``FLAGS`` (the CLI prints the flag). A command line the message suggests
  (``'gmp data import ... --extend'``) and another tool's flags (torchrun's, pip's) may name flags.
* No count's noun made plural inline (``step{'s' if n != 1 else ''}``, ``"" if n == 1 else "s"``): messages
  word a count with :func:`gmp.wording.plural`, in one place.

Each check is also run on a small hand-made package (``tmp_path``) that has
the fault, so a check that cannot fail would fail here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GMP = REPO / "gmp"
CLI = REPO / "cli"
#: attributes with a leading underscore that are public API (namedtuple methods, dunders)
PUBLIC_UNDERSCORE = {"_replace", "_fields", "_asdict", "_make", "_field_defaults"}


# ----------------------------------------------------------------------------- parsing
def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def parse_package(*roots: Path) -> dict[str, tuple[Path, ast.Module]]:
    return {module_name(root, p): (p, ast.parse(p.read_text(encoding="utf-8"), str(p)))
            for root in roots for p in sorted(root.rglob("*.py"))}


def is_package(mods, name: str, root: Path) -> bool:
    return mods.get(name, (Path(""),))[0].name == "__init__.py"


def resolve_from(importer: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    """The absolute module name of ``from <node.module> import ...`` in ``importer``."""
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(mods):
    """Yield (importer, imported module, imported names or None, node) for every import in ``mods`` of a
    package ``mods`` holds."""
    tops = {name.split(".")[0] for name in mods}

    def ours(target: str) -> bool:
        return target.split(".")[0] in tops

    for name, (path, tree) in mods.items():
        pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if ours(a.name):
                        yield name, a.name, None, node
            elif isinstance(node, ast.ImportFrom):
                target = resolve_from(name, pkg, node)
                if not ours(target):
                    continue
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    if sub in mods:  # ``from . import seeds``: the submodule
                        yield name, sub, None, node
                    else:
                        yield name, target, [a.name], node


def dependency_edges(mods) -> set[tuple[str, str]]:
    """(importer, imported) for every import between modules of ``mods``; ``from gmp import __version__``
    is an edge to the package root (importing it runs ``gmp/__init__``)."""
    edges = set()
    for importer, target, names, _ in imports_of(mods):
        if target not in mods:
            continue
        if target != importer:
            edges.add((importer, target))
    return edges


def find_cycle(edges: set[tuple[str, str]]) -> list[str] | None:
    graph: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        graph.setdefault(a, []).append(b)
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in graph.get(n, []):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                cyc = visit(m)
                if cyc:
                    return cyc
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            cyc = visit(n)
            if cyc:
                return cyc
    return None


def package_of(name: str, mods) -> str:
    """The unit of the package-level check: ``gmp.train`` for anything under gmp/train/, a
    top-level module (``gmp.manifest``) for itself."""
    parts = name.split(".")
    if len(parts) >= 2 and f"{parts[0]}.{parts[1]}" in mods and \
            mods[f"{parts[0]}.{parts[1]}"][0].name == "__init__.py":
        return f"{parts[0]}.{parts[1]}"
    return name if len(parts) <= 2 else ".".join(parts[:2])


def import_cycles(*roots: Path) -> tuple[list[str] | None, list[str] | None]:
    mods = parse_package(*roots)
    edges = dependency_edges(mods)
    pkg_edges = {(package_of(a, mods), package_of(b, mods)) for a, b in edges}
    pkg_edges = {(a, b) for a, b in pkg_edges if a != b}
    return find_cycle(edges), find_cycle(pkg_edges)


def private_uses(*roots: Path) -> list[str]:
    mods = parse_package(*roots)
    out = []
    module_aliases: dict[str, dict[str, str]] = {name: {} for name in mods}
    for importer, target, names, node in imports_of(mods):
        if names is None:  # ``import gmp.x as m`` / ``from gmp import x``
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        module_aliases[importer][a.asname] = a.name
            else:
                for a in node.names:
                    module_aliases[importer][a.asname or a.name] = target
            last = target.rsplit(".", 1)[-1]
            if last.startswith("_") and not last.startswith("__"):
                owner = target.rsplit(".", 1)[0]  # a private module may be used inside its package
                if not (importer == owner or importer.startswith(owner + ".")):
                    out.append(f"{importer} imports the private module {target}")
            continue
        for n in names:
            if n.startswith("_") and not n.startswith("__") and target != importer:
                out.append(f"{importer} imports {n} from {target}")
        last = target.rsplit(".", 1)[-1]
        if last.startswith("_") and not last.startswith("__"):
            owner = target.rsplit(".", 1)[0]
            if not (importer == owner or importer.startswith(owner + ".")):
                out.append(f"{importer} imports from the private module {target}")
    for name, (path, tree) in mods.items():
        own = set()  # private names this module defines (its own classes' attributes included)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                own.add(node.target.id)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")):
                continue
            attr = node.attr
            if attr.startswith("__") or attr in PUBLIC_UNDERSCORE:
                continue
            base = node.value
            if isinstance(base, ast.Name) and base.id in module_aliases[name]:
                out.append(f"{name}:{node.lineno} reads {attr} of module {module_aliases[name][base.id]}")
            elif isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            elif attr not in own:
                out.append(f"{name}:{node.lineno} uses {ast.unparse(node)}, another module's private attribute")
    return out


def import_error_shims(root: Path) -> list[str]:
    """``try: from gmp... import ...`` guarded by ``except ImportError``/``ModuleNotFoundError``."""
    mods = parse_package(root)
    out = []
    for name, (path, tree) in mods.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Try):
                continue
            catches = set()
            for h in node.handlers:
                types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
                catches |= {t.id for t in types if isinstance(t, ast.Name)}
            if not catches & {"ImportError", "ModuleNotFoundError"}:
                continue
            for stmt in node.body:
                for sub in ast.walk(stmt):
                    if isinstance(sub, ast.ImportFrom) and (sub.level > 0 or (sub.module or "").startswith(root.name)):
                        out.append(f"{name}:{sub.lineno} guards an import of gmp's own module with except ImportError")
    return out


def strongly_connected(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The groups of two or more modules that all import each other, directly or not (Tarjan), sorted."""
    graph: dict[str, list[str]] = {}
    for a, b in sorted(edges):
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(n: str) -> None:
        index[n] = low[n] = len(index)
        stack.append(n)
        on.add(n)
        for m in graph[n]:
            if m not in index:
                visit(m)
                low[n] = min(low[n], low[m])
            elif m in on:
                low[n] = min(low[n], index[m])
        if low[n] == index[n]:
            group = []
            while True:
                m = stack.pop()
                on.discard(m)
                group.append(m)
                if m == n:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for n in sorted(graph):
        if n not in index:
            visit(n)
    return sorted(out)


#: names that hold a Trainer outside trainer.py (besides parameters annotated ``Trainer``)
TRAINER_NAMES = {"trainer", "tr"}


def trainer_methods(trainer_py: Path) -> set[str]:
    """The public methods of class ``Trainer`` in ``trainer_py`` (properties are attributes, not methods)."""
    tree = ast.parse(trainer_py.read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Trainer")
    return {f.name for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            and not f.name.startswith("_") and not any(ast.unparse(d).endswith(("property", "setter"))
                                                       for d in f.decorator_list)}


def _is_trainer_annotation(node) -> bool:
    return node is not None and ast.unparse(node).strip("'\"").split(".")[-1] == "Trainer"


def trainer_attribute_uses(*roots: Path) -> list[str]:
    """Every use of a Trainer's attribute outside ``<gmp>/train/trainer.py`` other than a call of one of
    its public methods: ``trainer.stores``, ``tr.acc = ...``, ``self.trainer.config``. A Trainer is a name
    in :data:`TRAINER_NAMES`, a parameter annotated ``Trainer``, a name assigned ``Trainer(...)``, or an
    attribute called ``trainer``."""
    mods = parse_package(*roots)
    owner = next(p for p, _ in mods.values() if p.parts[-3:] == ("gmp", "train", "trainer.py"))
    methods = trainer_methods(owner)
    out = []
    for name, (path, tree) in mods.items():
        if path == owner:
            continue
        holders = set(TRAINER_NAMES)
        for node in ast.walk(tree):
            if isinstance(node, ast.arg) and _is_trainer_annotation(node.annotation):
                holders.add(node.arg)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                    ast.unparse(node.value.func).split(".")[-1] == "Trainer":
                holders |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            base = node.value
            if not ((isinstance(base, ast.Name) and base.id in holders)
                    or (isinstance(base, ast.Attribute) and base.attr in TRAINER_NAMES)):
                continue
            if node.attr in methods and id(node) in called and isinstance(node.ctx, ast.Load):
                continue
            verb = "writes" if isinstance(node.ctx, (ast.Store, ast.Del)) else "reads"
            out.append(f"{name}:{node.lineno} {verb} {ast.unparse(node)}, an attribute of the Trainer")
    return out


# ----------------------------------------------------------------------------- error messages name parameters
FLAG = re.compile(r"(?<![\w`-])--[a-z][a-z0-9-]*")
#: a command line a message suggests (quoted, or up to the end of its clause): its flags are the command's
COMMAND_LINE = re.compile(r"(?:gmp (?:data|partition|train|report|export|simulate|compare)\b|torchrun |pip install )"
                          r"[^';]*")
#: other tools' flags a message may tell the person to pass to that tool
OTHER_TOOLS_FLAGS = {"--nproc-per-node", "--nnodes", "--no-deps"}
#: a parameter named in a message: `name` or `name=value` (single backticks, not reST's ``literal``)
NAMED_PARAM = re.compile(r"(?<!`)`([a-z][a-z0-9_]*)(?:=[^`]*)?`(?!`)")


def _text(node) -> str | None:
    """The text of a string constant or f-string, each ``{...}`` as ``{}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def _message_nodes(tree: ast.Module):
    """The string expressions that end up in an error message: those inside ``raise ...``, inside a call of a
    class named ``*Error``, and the ``what=``/``fix=`` words of a call (``check_memory``)."""
    for node in ast.walk(tree):
        parts = []
        if isinstance(node, ast.Raise) and node.exc is not None:
            parts = [node.exc]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            parts = [node] if name.endswith("Error") else [k.value for k in node.keywords if k.arg in ("what", "fix")]
        for part in parts:
            subs = list(ast.walk(part))
            pieces = {id(v) for n in subs if isinstance(n, ast.JoinedStr) for v in n.values}
            yield from (n for n in subs if id(n) not in pieces)  # an f-string whole, not its pieces


def flags_in_library_errors(root: Path) -> list[str]:
    """``module:line --flag`` for every command-line flag named by an error message of the library ``root``."""
    out = set()
    for name, (path, tree) in parse_package(root).items():
        for sub in _message_nodes(tree):
            text = _text(sub)
            if text is None:
                continue
            for flag in FLAG.findall(COMMAND_LINE.sub("", text)):
                if flag not in OTHER_TOOLS_FLAGS:
                    out.add(f"{name}:{sub.lineno} {flag}")
    return sorted(out)


def params_named_in_strings(root: Path) -> set[str]:
    """Every name a string of ``root`` (docstrings aside) writes between single backticks."""
    names = set()
    for name, (path, tree) in parse_package(root).items():
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr)}
        for sub in ast.walk(tree):
            text = _text(sub)
            if text is not None and id(sub) not in docs:
                names |= set(NAMED_PARAM.findall(text))
    return names


def cli_flag_table(flags_py: Path) -> dict[str, str]:
    """``FLAGS`` of cli/_flags.py, read from its source (nothing imported)."""
    for node in ast.parse(flags_py.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["FLAGS"]:
            return ast.literal_eval(node.value)
    raise AssertionError(f"{flags_py} has no FLAGS table")


# ----------------------------------------------------------------------------- counts are worded in one place
#: a noun's plural ending chosen inline: ``'s' if n != 1`` (or ``> 1``), ``'' if n == 1 else 's'`` (a verb's
#: singular ending, ``do{'es' if n == 1 else ''}``, is not a plural)
INLINE_PLURAL = re.compile(r"""['"](?:s|es)['"]\s+if\s+[^'"\n]*?(?:!=|>)\s*1\b"""
                           r"""|['"]{2}\s+if\s+[^\n]*?\belse\s+['"](?:s|es)['"]""")


def inline_plurals(*roots: Path) -> list[str]:
    """``path:line`` of every line of ``roots`` that makes a noun plural inline rather than by
    :func:`gmp.wording.plural`."""
    return [f"{p.relative_to(root.parent).as_posix()}:{i}" for root in roots for p in sorted(root.rglob("*.py"))
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if INLINE_PLURAL.search(line)]


# ----------------------------------------------------------------------------- the checks on gmp/ and cli/
def test_no_import_cycle_between_modules_or_packages():
    groups = strongly_connected(dependency_edges(parse_package(GMP, CLI)))
    assert groups == [], "modules that import each other: " + "; ".join(", ".join(g) for g in groups)
    module_cycle, package_cycle = import_cycles(GMP, CLI)
    assert module_cycle is None, "import cycle: " + " -> ".join(module_cycle)
    assert package_cycle is None, "package import cycle: " + " -> ".join(package_cycle)


def test_no_private_name_used_across_modules():
    assert private_uses(GMP) == []


def test_no_module_but_the_trainer_uses_its_attributes():
    """Protocols get a StepContext; checkpoints, migrations and the run loop call the Trainer's public
    methods (issue 34: the Trainer is no blackboard)."""
    assert trainer_attribute_uses(GMP, CLI) == []


def test_no_import_error_shim_around_gmp_modules():
    assert import_error_shims(GMP) == []


def test_train_modules_stay_small():
    """No module of gmp/train over about 500 lines (issue 10)."""
    sizes = {p.relative_to(GMP).as_posix(): len(p.read_text().splitlines()) for p in (GMP / "train").rglob("*.py")}
    assert {k: v for k, v in sizes.items() if v > 520} == {}


#: modules that score with hybrid's objective (and its Options): they take it from
#: gmp/partition/_objective.py, not from the hybrid algorithm's module
OBJECTIVE_USERS = ("gmp.partition.incremental", "gmp.partition._incremental_onepass",
                   "gmp.partition.distributed.state", "gmp.partition.distributed.core")


def test_incremental_and_distributed_partitioning_do_not_import_hybrid():
    edges = dependency_edges(parse_package(GMP))
    users = {a for a, _ in edges if a.startswith(("gmp.partition.incremental", "gmp.partition._incremental_onepass",
                                                  "gmp.partition.distributed"))}
    assert sorted(a for a in users if (a, "gmp.partition.hybrid") in edges) == []
    assert [a for a in OBJECTIVE_USERS if (a, "gmp.partition._objective") not in edges] == []


def test_the_train_module_map_names_every_module():
    """The map in gmp/train/__init__.py lists every module and subpackage of gmp/train."""
    train = GMP / "train"
    doc = ast.get_docstring(ast.parse((train / "__init__.py").read_text(encoding="utf-8")))
    names = [p.name for p in sorted(train.glob("*.py")) if p.name != "__init__.py"]
    names += [f"{d.name}/" for d in sorted(train.iterdir()) if (d / "__init__.py").is_file()]
    assert [n for n in names if n not in doc] == []


def test_the_version_is_written_once():
    """pyproject.toml takes the version from gmp/_version.py (setuptools reads the assignment without
    importing gmp), so a release changes one line."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "gmp._version.__version__"}
    tree = ast.parse((GMP / "_version.py").read_text(encoding="utf-8"))
    assigned = [n.targets[0].id for n in tree.body if isinstance(n, ast.Assign)]
    assert assigned == ["__version__"]  # a literal setuptools can read statically, nothing else

def test_train_functions_stay_short_or_say_why():
    """No function of gmp/train over about 100 lines without a ``# long function: <reason>`` line above it."""
    long = []
    for p in sorted((GMP / "train").rglob("*.py")):
        lines = p.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 100:
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                above = "\n".join(lines[max(0, first - 4):first - 1])
                if "# long function:" not in above:
                    long.append(f"{p.relative_to(GMP)}:{node.name}")
    assert long == []


def test_library_errors_name_parameters_not_flags():
    """Issue 34: a library error names the parameter (`max_bad_lines`); cli/_flags.py maps it to --max-bad-lines."""
    assert flags_in_library_errors(GMP) == []


def test_every_parameter_a_message_names_has_its_flag():
    """The CLI's table is complete: a backticked name in a gmp/ message without a flag would reach the person
    as `name`."""
    table = cli_flag_table(CLI / "_flags.py")
    assert sorted(params_named_in_strings(GMP) - set(table)) == []
    assert {k: v for k, v in table.items() if not v.startswith("--")} == {}


def test_counts_are_worded_by_the_one_plural_helper():
    """Each inline ending was its own rule (``!= 1`` here, ``> 1`` there) and one slip prints '1 rows';
    gmp.wording.plural is the one rule."""
    assert inline_plurals(GMP, CLI) == []


# ----------------------------------------------------------------------------- the checks can fail
def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "gmp"
    for rel, text in files.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return root


def test_a_cycle_through_a_late_import_is_found(tmp_path):
    root = _package(tmp_path, {"__init__.py": "", "a.py": "from .b import f\n",
                               "b.py": "def f():\n    from .a import g\n"})
    assert import_cycles(root)[0] == ["gmp.a", "gmp.b", "gmp.a"]


def test_a_cycle_between_packages_is_found(tmp_path):
    root = _package(tmp_path, {"__init__.py": "", "p/__init__.py": "", "q/__init__.py": "",
                               "p/x.py": "from ..q import y\n", "q/y.py": "from ..p.z import h\n",
                               "p/z.py": "h = 1\n"})
    module_cycle, package_cycle = import_cycles(root)
    assert module_cycle is None and package_cycle == ["gmp.p", "gmp.q", "gmp.p"]


@pytest.mark.parametrize("files,expected", [
    ({"a.py": "_x = 1\n", "b.py": "from .a import _x\n"}, "gmp.b imports _x from gmp.a"),
    ({"a.py": "def _f(): pass\n", "b.py": "from . import a\ny = a._f\n"}, "gmp.b:2 reads _f of module gmp.a"),
    ({"a.py": "class S:\n    def __init__(self):\n        self._d = 1\n",
      "b.py": "def g(s):\n    return s._d\n"}, "gmp.b:2 uses s._d, another module's private attribute"),
    ({"p/__init__.py": "", "p/_k.py": "def f(): pass\n", "c.py": "from .p._k import f\n"},
     "gmp.c imports from the private module gmp.p._k"),
])
def test_private_uses_are_found(tmp_path, files, expected):
    root = _package(tmp_path, {"__init__.py": "", **files})
    assert expected in private_uses(root)


def test_private_module_inside_its_package_and_own_attributes_are_allowed(tmp_path):
    root = _package(tmp_path, {"__init__.py": "", "_io.py": "def f(): pass\n", "a.py": "from ._io import f\n",
                               "b.py": "class T:\n    def __init__(self):\n        self._n = 0\n"
                                       "    def same(self, other):\n        return other._n\n"})
    assert private_uses(root) == []


def test_a_cycle_through_the_package_root_is_found(tmp_path):
    """``from . import __version__`` in a module that ``gmp/__init__`` reaches is a cycle through the root."""
    root = _package(tmp_path, {"__init__.py": "__version__ = '1'\nfrom .api import run\n",
                               "api.py": "from .m import run\n", "m.py": "from . import __version__\nrun = 1\n"})
    assert import_cycles(root)[0] == ["gmp", "gmp.api", "gmp.m", "gmp"]
    assert strongly_connected(dependency_edges(parse_package(root))) == [["gmp", "gmp.api", "gmp.m"]]


def test_a_cycle_between_two_roots_is_found(tmp_path):
    gmp = _package(tmp_path, {"__init__.py": "", "a.py": "x = 1\n"})
    cli = tmp_path / "cli"
    cli.mkdir()
    (cli / "__init__.py").write_text("")
    (cli / "p.py").write_text("from gmp.a import x\nfrom cli.q import y\n")
    (cli / "q.py").write_text("y = 1\ndef f():\n    from cli.p import x\n")
    assert import_cycles(gmp)[0] is None
    assert import_cycles(gmp, cli)[0] == ["cli.p", "cli.q", "cli.p"]


_TRAINER = ("class Trainer:\n    def __init__(self):\n        self.stores = []\n        self.epoch = 0\n"
            "    def position(self):\n        return self.epoch\n    @property\n    def engine(self):\n"
            "        return 1\n")


@pytest.mark.parametrize("text,expected", [
    ("def save(trainer):\n    return trainer.stores\n", "gmp.c:2 reads trainer.stores"),
    ("def load(tr):\n    tr.epoch = 3\n", "gmp.c:2 writes tr.epoch"),
    ("class P:\n    def __init__(self, trainer):\n        self.trainer = trainer\n"
     "    def go(self):\n        return self.trainer.epoch\n", "gmp.c:5 reads self.trainer.epoch"),
    ("def f(t: 'Trainer'):\n    return t.engine\n", "gmp.c:2 reads t.engine"),  # a property is an attribute
    ("from .train.trainer import Trainer\nx = Trainer()\nn = x.position\n", "gmp.c:3 reads x.position"),
])
def test_trainer_attribute_uses_are_found(tmp_path, text, expected):
    root = _package(tmp_path, {"__init__.py": "", "train/__init__.py": "", "train/trainer.py": _TRAINER,
                               "c.py": text})
    found = trainer_attribute_uses(root)
    assert len(found) == 1 and found[0].startswith(expected), found


def test_calls_of_the_trainers_public_methods_are_allowed(tmp_path):
    root = _package(tmp_path, {"__init__.py": "", "train/__init__.py": "", "train/trainer.py": _TRAINER,
                               "c.py": "def f(trainer, other):\n    other.stores = 1\n"
                                       "    return trainer.position(), other.epoch\n"})
    assert trainer_attribute_uses(root) == []


def test_import_error_shims_are_found(tmp_path):
    root = _package(tmp_path, {"__init__.py": "", "a.py": "try:\n    from .b import x\nexcept ImportError:\n"
                                                          "    x = None\n", "b.py": "x = 1\n"})
    assert import_error_shims(root) == ["gmp.a:2 guards an import of gmp's own module with except ImportError"]


def test_flags_in_library_errors_are_found(tmp_path):
    root = _package(tmp_path, {"a.py": (
        "from .errors import GmpError\n"
        "def f(n):\n"
        "    if n: raise GmpError(f'more than --max-bad-lines {n}; pass --max-bad-lines N.')\n"
        "    raise ValueError('x')\n"
        "def g(n):\n"
        "    return GmpError('no checkpoint; run without `resume=True` first')\n"
        "def h(n):\n"
        "    check_memory(n, what='--chunk-mb 4', fix='lower it')\n"
        "def i(n):\n"
        "    raise GmpError(f\"import with 'gmp data import ... --extend {n}' or torchrun --nproc-per-node 2\")\n")})
    assert flags_in_library_errors(root) == ["gmp.a:3 --max-bad-lines", "gmp.a:8 --chunk-mb"]
    assert params_named_in_strings(root) == {"resume"}


def test_inline_plurals_are_found(tmp_path):
    root = _package(tmp_path, {"a.py": (
        "def f(n, one, machines):\n"
        "    a = f\"{n} step{'s' if n != 1 else ''}, {n} process{'es' if n > 1 else ''}\"\n"
        "    b = f\"option{'' if one else 's'}\"\n"
        "    c = \"\" if machines == \"1\" else \"s\"\n"
        "    d = f\"{n} it do{'es' if n == 1 else ''} appl{'ies' if one else 'y'}, {'it' if one else 'them'}\"\n"
        "    return plural('step', n)\n")})
    assert inline_plurals(root) == ["gmp/a.py:2", "gmp/a.py:3", "gmp/a.py:4"]
