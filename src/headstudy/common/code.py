"""The code a stage runs, found statically, and its fingerprint: what the stage's output can
depend on, with what cannot (docstrings, comments, layout) left out.

A module's fingerprint is the sha256 of its syntax tree with every docstring removed, written
back out by `ast.unparse`: comments and formatting are not in the tree, so an edit of them
leaves the fingerprint as it was, while any change of a statement, a name or a constant changes
it. The imports are read from the tree too (those inside functions included), transitively;
the imports of bookkeeping/ are not followed, since no output depends on it, and the entry point
cli.py only dispatches."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

PACKAGE = "headstudy"
SOURCE = Path(__file__).resolve().parents[2]  # src/, which holds the package
# Code no output depends on, and the entry point that only dispatches: never in a fingerprint.
NOT_OUTPUT_CODE = ("headstudy.bookkeeping", "headstudy.cli")


def module_file(name: str, source: Path = SOURCE) -> Path | None:
    """The source file of a headstudy module or package; None for any other module."""
    if name.split(".")[0] != PACKAGE:
        return None
    path = source.joinpath(*name.split("."))
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return None


def module_name(path: Path, source: Path = SOURCE) -> str:
    parts = list(Path(path).relative_to(source).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path, source: Path = SOURCE) -> set[str]:
    """Every module an import in this file can load: `import a.b`, `from a import b` (b may be a
    module), relative imports resolved."""
    parts = list(Path(path).relative_to(source).with_suffix("").parts)
    package = parts[:-1]  # for __init__.py: the package itself; for a module: its package
    names: set[str] = set()
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


def is_output_code(name: str) -> bool:
    return not any(name == excluded or name.startswith(excluded + ".") for excluded in NOT_OUTPUT_CODE)


def stage_code(command: str, source: Path = SOURCE) -> list[Path]:
    """The files `headstudy COMMAND` runs (importing a.b.c runs a/__init__.py and a/b/__init__.py
    too), bookkeeping and cli.py left out, in a stable order."""
    seen: dict[Path, None] = {}
    todo = [f"{PACKAGE}.{command}"]
    while todo:
        parts = todo.pop().split(".")
        for depth in range(1, len(parts) + 1):
            name = ".".join(parts[:depth])
            path = module_file(name, source)
            if path is not None and path not in seen and is_output_code(name):
                seen[path] = None
                todo.extend(imported_names(path, source))
    return sorted(seen)


def without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return tree


def module_fingerprint(path: Path) -> str:
    """sha256 of the module's code: its syntax tree without docstrings, written back out."""
    code = ast.unparse(without_docstrings(ast.parse(Path(path).read_text())))
    return hashlib.sha256(code.encode()).hexdigest()


def fingerprint_text(command: str, source: Path = SOURCE) -> str:
    """One line per module the stage runs, `MODULE SHA256`: a change of code shows in a diff as
    the module it changed, and only such a change alters the file."""
    lines = [f"{module_name(path, source)} {module_fingerprint(path)}" for path in stage_code(command, source)]
    return (
        f"# Written by `headstudy fingerprint`: the code `headstudy {command}` runs, each module's syntax\n"
        "# tree without docstrings (comments and layout are not in it). Stages depend on this file.\n"
        + "\n".join(lines)
        + "\n"
    )
