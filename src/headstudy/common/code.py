"""The code a stage runs, found statically, and its fingerprint: what the stage's output can
depend on, with what cannot (docstrings, comments, layout, and where the code lives) left out.

The unit is a definition (a function, a class, a module-level value), not a module. From the
stage's entry point every name is followed to the definition it means, through imports and
re-exports, and only definitions so reached are in the fingerprint: a function that the stage
never reaches may sit in a module the stage imports. A definition's digest is the sha256 of its
syntax tree with docstrings removed and written back out by `ast.unparse`, in which its own name
is blanked and every name that means another definition of the package is replaced by that
definition's digest. So a comment, a reformat, moving a definition to another module, or renaming
a module, function or class changes nothing, while a changed statement, constant or call changes
the digest of its definition and of every definition that reaches it. A function's local names
(what it assigns, its loop and comprehension targets, its nested definitions) are numbered in the
order they first appear, so renaming one consistently changes nothing either. Method, parameter
and attribute names stay in the digest: Lightning and PyTorch call methods by name, and a caller
passes a parameter by its name.

A module-level statement that fills in a table defined above it (`STAGE_KEYS["evaluate"] = ...`)
belongs to that table's definition, reached with it, not to every use of the module.

bookkeeping/ is not followed, since no output depends on it: a call into it counts as a call,
whatever it calls. Names bound in a function (its parameters, locals) are never resolved."""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "headstudy"
SOURCE = Path(__file__).resolve().parents[2]  # src/, which holds the package
# Code no output depends on: never followed into a fingerprint.
NOT_OUTPUT_CODE = ("headstudy.bookkeeping",)
BOOKKEEPING = "§bookkeeping"


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


def package_of(path: Path, source: Path) -> list[str]:
    """The package a file's relative imports start from: for __init__.py the package itself."""
    return list(Path(path).relative_to(source).with_suffix("").parts)[:-1]


def absolute_module(node: ast.ImportFrom, package: list[str]) -> str:
    if not node.level:
        return node.module or ""
    return ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))


def imported_names(path: Path, source: Path = SOURCE) -> set[str]:
    """Every module an import in this file can load: `import a.b`, `from a import b` (b may be a
    module), relative imports resolved."""
    package = package_of(path, source)
    names: set[str] = set()
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = absolute_module(node, package)
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


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


def bindings(node: ast.Import | ast.ImportFrom, package: list[str]) -> dict[str, tuple[str, str | None]]:
    """What an import statement binds: name -> (module, None) for a module, (module, attribute)
    for `from module import attribute`. `import a.b` binds `a`."""
    if isinstance(node, ast.Import):
        return {
            alias.asname or alias.name.split(".")[0]: (alias.name if alias.asname else alias.name.split(".")[0], None)
            for alias in node.names
        }
    base = absolute_module(node, package)
    return {alias.asname or alias.name: (base, alias.name) for alias in node.names if alias.name != "*"}


@dataclass
class Module:
    """A module's top level: what each name binds to, and the statements that run on import."""

    name: str
    package: list[str]
    definitions: dict[str, ast.AST] = field(default_factory=dict)  # def, class, or assigned value
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # name -> (module, attribute)
    effects: list[ast.stmt] = field(default_factory=list)
    extensions: dict[str, list[ast.stmt]] = field(default_factory=dict)  # table name -> statements filling it


@functools.lru_cache(maxsize=1024)
def read_module(name: str, text: str, package: tuple[str, ...]) -> Module:
    """Cached by the text: the fingerprint stage reads every module once for each command it
    fingerprints. Nothing changes a Module once read."""
    module = Module(name, list(package))
    for node in without_docstrings(ast.parse(text)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            module.definitions[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            filled = {filled_table(target) for target in targets}
            if len(filled) == 1 and None not in filled and filled <= module.definitions.keys():
                module.extensions.setdefault(filled.pop(), []).append(node)
                continue
            names = [target.id for target in targets if isinstance(target, ast.Name)]
            if len(names) != len(targets):
                module.effects.append(node)
            for bound in names:
                module.definitions[bound] = node.value
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            module.imports |= bindings(node, package)
        else:
            module.effects.append(node)
    return module


def filled_table(target: ast.AST) -> str | None:
    """`TABLE` for a target `TABLE[key]` (or `TABLE[a][b]`): a statement that fills in a table."""
    if not isinstance(target, ast.Subscript):
        return None
    while isinstance(target, ast.Subscript):
        target = target.value
    return target.id if isinstance(target, ast.Name) else None


def numbered_locals(function: ast.AST) -> ast.AST:
    """The function with each local name (bound in its body, not a parameter of it or of a function
    inside it, not declared global or nonlocal) replaced by its number of first appearance: a
    consistent rename of a local leaves the same tree."""
    parameters = {node.arg for node in ast.walk(function) if isinstance(node, ast.arg)}
    declared = {
        name for node in ast.walk(function) if isinstance(node, (ast.Global, ast.Nonlocal)) for name in node.names
    }
    local = bound_names(function) - parameters - declared
    numbers: dict[str, str] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id in local:
            node.id = numbers.setdefault(node.id, f"§local{len(numbers)}")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not function:
            if node.name in local:
                node.name = numbers.setdefault(node.name, f"§local{len(numbers)}")
        elif isinstance(node, ast.ExceptHandler) and node.name in local:
            node.name = numbers.setdefault(node.name, f"§local{len(numbers)}")
    return function


def bound_names(function: ast.AST) -> set[str]:
    """The names a function or lambda binds for itself: parameters, assignments, loop and
    comprehension targets, nested definitions, `except ... as` names. Imports are not among
    them: what an import binds is resolved as at the top level."""
    arguments = function.args
    names = {
        argument.arg
        for argument in (
            *arguments.posonlyargs,
            *arguments.args,
            *arguments.kwonlyargs,
            arguments.vararg,
            arguments.kwarg,
        )
        if argument is not None
    }
    body = function.body if isinstance(function.body, list) else [function.body]
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                names.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return names


def function_imports(function: ast.AST, package: list[str]) -> dict[str, tuple[str, str | None]]:
    """What the imports inside a function bind: name -> (module, attribute or None)."""
    imports: dict[str, tuple[str, str | None]] = {}
    body = function.body if isinstance(function.body, list) else [function.body]
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                imports |= bindings(node, package)
    return imports


class CodeIndex:
    """The package's modules, read once, and the digest of every definition reached from them."""

    def __init__(self, source: Path = SOURCE):
        self.source = Path(source)
        self.modules: dict[str, Module | None] = {}
        self.digests: dict[tuple, str] = {}
        self.in_progress: list[tuple] = []
        self.reached: dict[tuple, str] = {}  # target -> digest, for every definition reached

    def module(self, name: str) -> Module | None:
        if name not in self.modules:
            path = module_file(name, self.source)
            self.modules[name] = (
                None if path is None else read_module(name, path.read_text(), tuple(package_of(path, self.source)))
            )
        return self.modules[name]

    def resolve(self, module_name: str, name: str, seen: frozenset = frozenset()) -> tuple | None:
        """What `name` means at the top level of a headstudy module: ("definition", module, name),
        ("module", module), ("bookkeeping",), or None for anything outside the package."""
        if module_name == NOT_OUTPUT_CODE[0] or module_name.startswith(NOT_OUTPUT_CODE[0] + "."):
            return ("bookkeeping",)
        module = self.module(module_name)
        if module is None or (module_name, name) in seen:
            return None
        if name in module.definitions:
            return ("definition", module_name, name)
        if name not in module.imports:
            return None
        imported, attribute = module.imports[name]
        if attribute is None:
            return self.module_target(imported)
        return self.member(imported, attribute, seen | {(module_name, name)})

    def module_target(self, name: str) -> tuple | None:
        if name.split(".")[0] != PACKAGE:
            return None
        if name == NOT_OUTPUT_CODE[0] or name.startswith(NOT_OUTPUT_CODE[0] + "."):
            return ("bookkeeping",)
        return ("module", name) if module_file(name, self.source) else None

    def member(self, module_name: str, attribute: str, seen: frozenset = frozenset()) -> tuple | None:
        """`module.attribute`: a submodule, or what the name means in the module."""
        submodule = self.module_target(f"{module_name}.{attribute}")
        if submodule is not None:
            return submodule
        return self.resolve(module_name, attribute, seen)

    def digest(self, target: tuple) -> str:
        if target == ("bookkeeping",):
            return BOOKKEEPING
        if target in self.in_progress:  # recursion: named by how far up it is, not by its name
            return f"§cycle{len(self.in_progress) - self.in_progress.index(target)}"
        if target not in self.digests:
            self.in_progress.append(target)
            try:
                text = self.module_text(target[1]) if target[0] == "module" else self.definition_text(*target[1:])
            finally:
                self.in_progress.pop()
            self.digests[target] = hashlib.sha256(text.encode()).hexdigest()
            if target[0] == "definition":
                self.reached[target] = self.digests[target]
                self.reach_effects(target[1])
        return self.digests[target]

    def reach_effects(self, module_name: str) -> None:
        """What a module runs on import (matplotlib.use(...)) counts once its code is reached."""
        for statement in self.module(module_name).effects:
            key = ("effect", module_name, ast.dump(statement))
            if key not in self.reached:
                self.reached[key] = hashlib.sha256(self.rewritten(module_name, statement).encode()).hexdigest()

    def definition_text(self, module_name: str, name: str) -> str:
        module = self.module(module_name)
        node = module.definitions[name]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            node = copy.copy(node)  # rewritten() copies the rest: the name is the only change here
            node.name = "_"
        filling = [self.rewritten(module_name, statement) for statement in module.extensions.get(name, [])]
        return "\n".join([self.rewritten(module_name, node), *filling])

    def module_text(self, module_name: str) -> str:
        """A module used as a value: everything in it."""
        module = self.module(module_name)
        return "\n".join(sorted(self.digest(("definition", module_name, name)) for name in module.definitions))

    def rewritten(self, module_name: str, node: ast.AST) -> str:
        tree = Resolver(self, module_name).visit(copied(node))
        for function in outermost_functions(tree):
            numbered_locals(function)
        return ast.unparse(tree)


def outermost_functions(tree: ast.AST) -> list[ast.AST]:
    """The functions and lambdas of a tree that no other function of it holds (a class's methods)."""
    if isinstance(tree, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return [tree]
    return [function for child in ast.iter_child_nodes(tree) for function in outermost_functions(child)]


def copied(node):
    """A copy of a syntax tree for Resolver to rewrite: its nodes and lists new, their leaves
    (names, constants, positions) shared, as they are never changed. copy.deepcopy's generic
    walk took half of the fingerprint stage's time."""
    if isinstance(node, list):
        return [copied(item) for item in node]
    if not isinstance(node, ast.AST):
        return node
    new = node.__class__()
    for name, value in ast.iter_fields(node):
        setattr(new, name, copied(value))
    for name in node._attributes:
        if hasattr(node, name):
            setattr(new, name, getattr(node, name))
    return new


class Resolver(ast.NodeTransformer):
    """Replaces every name that means a definition of the package by that definition's digest."""

    def __init__(self, index: CodeIndex, module_name: str):
        self.index, self.module_name = index, module_name
        self.local_scopes: list[set[str]] = []
        self.local_imports: list[dict[str, tuple[str, str | None]]] = []

    def visit_function(self, node):
        self.local_scopes.append(bound_names(node))
        self.local_imports.append(function_imports(node, self.index.module(self.module_name).package))
        try:
            return self.generic_visit(node)
        finally:
            self.local_scopes.pop()
            self.local_imports.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = visit_function

    def is_local(self, name: str) -> bool:
        return any(name in scope for scope in self.local_scopes)

    def target_of(self, node: ast.AST) -> tuple | None:
        if isinstance(node, ast.Name):
            for imports in reversed(self.local_imports):
                if node.id in imports:
                    imported, attribute = imports[node.id]
                    if attribute is None:
                        return self.index.module_target(imported)
                    return self.index.member(imported, attribute)
            if not self.is_local(node.id):
                return self.index.resolve(self.module_name, node.id)
        if isinstance(node, ast.Attribute):
            base = self.target_of(node.value)
            if base is not None and base[0] == "module":
                return self.index.member(base[1], node.attr)
            if base == ("bookkeeping",):
                return base
        return None

    def visit_Name(self, node: ast.Name):
        target = self.target_of(node) if isinstance(node.ctx, ast.Load) else None
        return node if target is None else ast.Name(id=self.index.digest(target), ctx=node.ctx)

    def visit_Attribute(self, node: ast.Attribute):
        target = self.target_of(node) if isinstance(node.ctx, ast.Load) else None
        if target is None:
            return self.generic_visit(node)
        return ast.Name(id=self.index.digest(target), ctx=node.ctx)

    def visit_Import(self, _node):  # what a name bound by an import means is in its uses, not here
        return ast.Pass()

    visit_ImportFrom = visit_Import


def stage_entry(command: str) -> tuple[str, str]:
    """The module and function that `headstudy COMMAND` runs."""
    return f"{PACKAGE}.{command}", "main"


def reached_definitions(entry: tuple[str, str], source: Path = SOURCE) -> dict[tuple, str]:
    """Every definition (and module effect) reached from the entry function, with its digest."""
    index = CodeIndex(source)
    target = index.resolve(*entry)
    if target is None or target[0] != "definition":
        raise ValueError(f"{entry[0]}.{entry[1]} is not a function of {source}")
    index.digest(target)
    return index.reached


def fingerprint_text(command: str, source: Path = SOURCE, entry: tuple[str, str] | None = None) -> str:
    """One line per definition the stage runs, its digest, in digest order: the file changes only
    when code the stage runs changes, and says how many definitions changed."""
    digests = sorted(set(reached_definitions(entry or stage_entry(command), source).values()))
    return (
        f"# Written by `headstudy fingerprint`: the code `headstudy {command}` runs, one digest per\n"
        "# definition it reaches, blind to docstrings, comments, layout and where code lives\n"
        "# (src/headstudy/common/code.py). Stages depend on this file.\n" + "\n".join(digests) + "\n"
    )


def named_digests(command: str, source: Path = SOURCE) -> list[str]:
    """`DIGEST module.name` for each definition of the stage's fingerprint: what a changed line
    of fingerprints/COMMAND.txt is."""
    reached = reached_definitions(stage_entry(command), source)
    return sorted(f"{digest} {'.'.join(target[1:3])}" for target, digest in reached.items())
