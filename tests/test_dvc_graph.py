"""The DVC graph is exact: each stage's code deps are exactly the headstudy files its module can
import, bookkeeping left out, so a change reruns the stages that use the changed file and no
other. Config reaches a stage only through its file in configs/. Static: the imports are read with
`ast` (imports inside functions included), transitively, without running anything."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from headstudy.cli import STAGES

SOURCE = ROOT / "src"
DVC_FILES = [ROOT / "dvc.yaml", *sorted((ROOT / "studies").glob("*/dvc.yaml"))]
COMMAND = re.compile(r"\bheadstudy\s+([a-z]+)")
PACKAGE = SOURCE / "headstudy"
# Code no output depends on, and the entry point that only dispatches: never a dep.
NOT_DEPS = [PACKAGE / "bookkeeping", PACKAGE / "cli.py"]


def module_file(name: str) -> Path | None:
    """The source file of a headstudy module or package; None for any other module."""
    path = SOURCE.joinpath(*name.split("."))
    if name.split(".")[0] != "headstudy":
        return None
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return None


def package_of(path: Path) -> list[str]:
    parts = list(path.relative_to(SOURCE).with_suffix("").parts)
    return parts[:-1]  # for __init__.py: the package itself; for a module: its package


def imported_names(path: Path) -> set[str]:
    """Every module an import in this file can load: `import a.b`, `from a import b` (b may be a
    module), relative imports resolved."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = package_of(path)[: len(package_of(path)) - node.level + 1]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


def reachable_files(*modules: str, stop: tuple[Path, ...] = ()) -> set[Path]:
    """The source files of these modules and of everything they import, transitively
    (importing a.b.c runs a/__init__.py and a/b/__init__.py too); the imports of files under
    `stop` are not followed."""
    seen: set[Path] = set()
    todo = list(modules)
    while todo:
        parts = todo.pop().split(".")
        for depth in range(1, len(parts) + 1):
            path = module_file(".".join(parts[:depth]))
            if path is not None and path not in seen:
                seen.add(path)
                if not covered(path, list(stop)):
                    todo.extend(imported_names(path))
    return seen


def stages() -> list[tuple[Path, str, dict]]:
    return [
        (dvc_file, name, stage)
        for dvc_file in DVC_FILES
        for name, stage in yaml.safe_load(dvc_file.read_text())["stages"].items()
    ]


def covered(path: Path, deps: list[Path]) -> bool:
    return any(path == dep or dep in path.parents for dep in deps)


def package_markers() -> list[Path]:
    return sorted(PACKAGE.rglob("__init__.py"))


def needed_code(command: str) -> set[Path]:
    """The files a stage's command runs, less bookkeeping (and what only bookkeeping runs) and the
    docstring-only package markers."""
    files = reachable_files(f"headstudy.{command}", stop=tuple(NOT_DEPS))
    return {path for path in files if not covered(path, NOT_DEPS) and path.name != "__init__.py"}


def declared_code(dvc_file: Path, stage: dict) -> set[Path]:
    """Every file of the stage's code deps (a folder stands for all its .py files)."""
    files = set()
    for dep in stage.get("deps", []):
        path = (dvc_file.parent / dep).resolve()
        if covered(path, [SOURCE]):
            found = sorted(path.rglob("*.py")) if path.is_dir() else [path]
            files |= {file for file in found if file.name != "__init__.py"}
    return files


@pytest.mark.parametrize("dvc_file, name, stage", stages(), ids=[f"{f.relative_to(ROOT)}:{n}" for f, n, _ in stages()])
def test_stage_code_deps_are_exactly_what_its_command_imports(dvc_file, name, stage):
    cmd = " ".join(stage["cmd"]) if isinstance(stage["cmd"], list) else stage["cmd"]
    [command] = COMMAND.findall(cmd)
    assert command in (*STAGES, "configure"), f"stage {name}: headstudy {command} is no stage command"
    needed, declared = needed_code(command), declared_code(dvc_file, stage)
    missing = sorted(str(path.relative_to(ROOT)) for path in needed - declared)
    extra = sorted(str(path.relative_to(ROOT)) for path in declared - needed)
    assert not missing, f"stage {name} ({dvc_file.relative_to(ROOT)}) runs code not in its deps: {missing}"
    assert not extra, f"stage {name} ({dvc_file.relative_to(ROOT)}) depends on code it never runs: {extra}"


@pytest.mark.parametrize("dvc_file, name, stage", stages(), ids=[f"{f.relative_to(ROOT)}:{n}" for f, n, _ in stages()])
def test_stage_reads_config_only_through_its_file_in_configs(dvc_file, name, stage):
    deps = [str(dep) for dep in stage.get("deps", [])]
    conf = [dep for dep in deps if dep.rstrip("/").endswith("conf") or "/conf/" in f"/{dep}"]
    if name == "configure":
        assert conf and stage["outs"][0]["configs"] == {"cache": False, "persist": True}
        return
    assert not conf, f"stage {name} depends on {conf}: it reads configs/, which configure writes"
    assert "--config configs/" in stage["cmd"]
    config_file = stage["cmd"].split("--config ")[1].split()[0]
    assert config_file in deps, f"stage {name} reads {config_file} but does not depend on it"


def test_weights_code_never_imports_bookkeeping_analysis_or_settings():
    for path in sorted((PACKAGE / "weights").rglob("*.py")):
        for imported in imported_names(path):
            assert not imported.startswith(("headstudy.bookkeeping", "headstudy.analysis", "headstudy.settings")), (
                f"{path.relative_to(ROOT)} imports {imported}"
            )
            assert imported.split(".")[0] not in ("mlflow", "hydra"), f"{path.relative_to(ROOT)} imports {imported}"


def test_package_markers_hold_only_a_docstring():
    """They are run by every import of their package and so stand outside the deps: code in one
    would shape outputs unseen."""
    for path in package_markers():
        body = ast.parse(path.read_text()).body
        assert all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body), path


def test_the_walk_sees_imports_inside_functions():
    """reproduce imports train and evaluate only inside a function."""
    files = reachable_files("headstudy.reproduce")
    assert PACKAGE / "train.py" in files and PACKAGE / "evaluate.py" in files
    assert PACKAGE / "weights" / "training.py" in files
