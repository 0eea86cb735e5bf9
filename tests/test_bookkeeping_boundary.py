"""Bookkeeping (tracking, provenance, progress, ...) is no dependency of any output: its modules
are left out of every stage's code fingerprint (common/code.py), so a value it defines must not
reach an output. Stages may call its functions (a training logs to MLflow through tracking); no
module outside bookkeeping/ may read one of its constants (an UPPER_CASE name). What an output
says about bookkeeping (the MLflow experiment the report names) comes from conf/ through the
stage's config instead, and must agree with what bookkeeping does."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from headstudy.bookkeeping import store
from headstudy.configure import resolve
from headstudy.settings.compose import read_params

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "headstudy"
BOOKKEEPING = "headstudy.bookkeeping"


def is_constant(name: str) -> bool:
    return name.isupper()


def module_of(path: Path, package: Path) -> list[str]:
    """`headstudy.a.b` for src/headstudy/a/b.py, as parts (a package's __init__ is the package)."""
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def absolute(node: ast.ImportFrom, path: Path, package: Path) -> str:
    if not node.level:
        return node.module or ""
    parts = module_of(path, package) if path.name == "__init__.py" else module_of(path, package)[:-1]
    base = parts[: len(parts) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def in_bookkeeping(module: str) -> bool:
    return module == BOOKKEEPING or module.startswith(BOOKKEEPING + ".")


def bookkeeping_constants_read(path: Path, package: Path = PACKAGE) -> list[str]:
    """`file:line name` for every bookkeeping constant the module imports or reads as an attribute
    of a bookkeeping module it imported."""
    tree = ast.parse(path.read_text())
    modules: set[str] = set()  # local names bound to a bookkeeping module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if in_bookkeeping(alias.name):
                    # `import headstudy.bookkeeping.tracking` binds `headstudy`; reads go through
                    # the dotted attribute chain, checked below.
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.ImportFrom):
            source = absolute(node, path, package)
            for alias in node.names:
                if in_bookkeeping(source) and is_constant(alias.name):
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno} {source}.{alias.name}")
                elif in_bookkeeping(f"{source}.{alias.name}"):
                    modules.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_constant(node.attr) and ast.unparse(node.value) in modules:
            found.append(f"{path.relative_to(package.parent)}:{node.lineno} {ast.unparse(node)}")
    return found


def outside_bookkeeping() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if "bookkeeping" not in path.relative_to(PACKAGE).parts)


def test_no_module_outside_bookkeeping_reads_a_bookkeeping_constant():
    found = [hit for path in outside_bookkeeping() for hit in bookkeeping_constants_read(path)]
    assert found == [], "bookkeeping constants read outside bookkeeping/: " + "; ".join(found)


def test_the_check_finds_each_way_of_reading_a_constant(tmp_path):
    package = tmp_path / "headstudy"
    (package / "stages").mkdir(parents=True)
    cases = {
        "attribute.py": "from headstudy.bookkeeping import tracking\nname = tracking.EXPERIMENT\n",
        "aliased.py": "from headstudy.bookkeeping import tracking as t\nname = t.EXPERIMENT\n",
        "direct.py": "from headstudy.bookkeeping.tracking import EXPERIMENT\n",
        "dotted.py": "import headstudy.bookkeeping.tracking\nname = headstudy.bookkeeping.tracking.EXPERIMENT\n",
        "stages/relative.py": "from ..bookkeeping.tracking import EXPERIMENT\n",
    }
    allowed = {
        "calls.py": "from headstudy.bookkeeping import progress, tracking\ntracking.log_metrics(1, {})\n",
        "classes.py": "from headstudy.bookkeeping.training_bar import Throughput\n",
        "own.py": "from headstudy.weights import model\nsize = model.VOCAB\n",
    }
    for name, text in {**cases, **allowed}.items():
        (package / name).write_text(text)
    for name in cases:
        assert bookkeeping_constants_read(package / name, package), name
    for name in allowed:
        assert bookkeeping_constants_read(package / name, package) == [], name


def test_the_report_names_the_experiment_that_tracking_logs_to(monkeypatch):
    conf = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())
    assert conf["tracking"]["experiment"] == store.EXPERIMENT
    monkeypatch.chdir(ROOT)
    files = resolve(read_params(ROOT / "params.yaml", required=True))
    assert files["report.yaml"].tracking.experiment == store.EXPERIMENT
    assert all("tracking" not in config for name, config in files.items() if name != "report.yaml")
