"""The DVC graph is right by construction: every headstudy module that a stage's command can
import lies inside the stage's deps, and so does every conf/ group that the command reads. So a
change to any code or config a stage uses reruns that stage. Static: the imports are read with
`ast` (imports inside functions included), transitively, without running anything."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from headstudy.cli import COMMANDS

SOURCE = ROOT / "src"
DVC_FILES = [ROOT / "dvc.yaml", *sorted((ROOT / "studies").glob("*/dvc.yaml"))]
COMMAND = re.compile(r"\bheadstudy\s+([a-z]+)")


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


def reachable_files(*modules: str) -> set[Path]:
    """The source files of these modules and of everything they import, transitively
    (importing a.b.c runs a/__init__.py and a/b/__init__.py too)."""
    seen: set[Path] = set()
    todo = list(modules)
    while todo:
        parts = todo.pop().split(".")
        for depth in range(1, len(parts) + 1):
            path = module_file(".".join(parts[:depth]))
            if path is not None and path not in seen:
                seen.add(path)
                todo.extend(imported_names(path))
    return seen


def stages() -> list[tuple[Path, str, dict]]:
    return [(dvc_file, name, stage) for dvc_file in DVC_FILES
            for name, stage in yaml.safe_load(dvc_file.read_text())["stages"].items()]


def covered(path: Path, deps: list[Path]) -> bool:
    return any(path == dep or dep in path.parents for dep in deps)


@pytest.mark.parametrize("dvc_file, name, stage", stages(),
                         ids=[f"{f.relative_to(ROOT)}:{n}" for f, n, _ in stages()])
def test_stage_deps_cover_every_module_and_conf_group_its_command_reads(dvc_file, name, stage):
    cmd = " ".join(stage["cmd"]) if isinstance(stage["cmd"], list) else stage["cmd"]
    commands = COMMAND.findall(cmd)
    assert commands, f"stage {name}: its cmd runs no headstudy command: {cmd}"
    deps = [(dvc_file.parent / dep).resolve() for dep in stage.get("deps", [])]
    for command in commands:
        assert command in COMMANDS, f"stage {name}: unknown command headstudy {command}"
        # cli.py imports the command's module by name, at run time.
        files = reachable_files("headstudy.cli", f"headstudy.{command}")
        missing = sorted(str(path.relative_to(ROOT)) for path in files if not covered(path, deps))
        assert not missing, f"stage {name} ({dvc_file.relative_to(ROOT)}) runs `headstudy {command}`, " \
                            f"which imports {missing}: not in its deps"

        conf = ROOT / "conf"
        needed = [conf / group for group in COMMANDS[command]] + ([conf / "config.yaml"] if COMMANDS[command] else [])
        missing = sorted(str(path.relative_to(ROOT)) for path in needed if not covered(path, deps))
        assert not missing, f"stage {name}: `headstudy {command}` reads {missing}: not in its deps"

        passed = {override.split("=")[0] for override in cmd.split() if "=" in override}
        groups = {path.name for path in conf.iterdir() if path.is_dir()}
        unread = sorted((passed & groups) - set(COMMANDS[command]))
        assert not unread, f"stage {name} passes {unread} to `headstudy {command}`, " \
                           "which cli.COMMANDS says it does not read"


def test_the_walk_sees_imports_inside_functions():
    """reproduce imports train and evaluate only inside a function."""
    files = reachable_files("headstudy.reproduce")
    assert SOURCE / "headstudy" / "train.py" in files and SOURCE / "headstudy" / "evaluate.py" in files
    assert SOURCE / "headstudy" / "core" / "training.py" in files
