"""The DVC graph is exact: each stage depends on its config file, the data it reads and
fingerprints/COMMAND.txt, the fingerprint of the code `headstudy COMMAND` runs, and on no source
file; the fingerprint stage depends on the whole package. Config reaches a stage only through its
file in configs/. The import walk is static (`ast`, imports inside functions included)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from headstudy.cli import STAGES
from headstudy.common.code import fingerprint_text, imported_names, module_fingerprint, stage_code
from headstudy.fingerprint import COMMANDS

SOURCE = ROOT / "src"
PACKAGE = SOURCE / "headstudy"
DVC_FILES = [ROOT / "dvc.yaml", *sorted((ROOT / "studies").glob("*/dvc.yaml"))]
COMMAND = re.compile(r"\bheadstudy\s+([a-z]+)")


def stages() -> list[tuple[Path, str, dict]]:
    return [
        (dvc_file, name, stage)
        for dvc_file in DVC_FILES
        for name, stage in yaml.safe_load(dvc_file.read_text())["stages"].items()
    ]


def stage_ids() -> list[str]:
    return [f"{dvc_file.relative_to(ROOT)}:{name}" for dvc_file, name, _ in stages()]


def command_of(stage: dict) -> str:
    [command] = COMMAND.findall(stage["cmd"])
    return command


def resolved_deps(dvc_file: Path, stage: dict) -> list[Path]:
    return [(dvc_file.parent / dep).resolve() for dep in stage.get("deps", [])]


@pytest.mark.parametrize("dvc_file, name, stage", stages(), ids=stage_ids())
def test_stage_depends_on_the_fingerprint_of_its_command_and_on_no_source_file(dvc_file, name, stage):
    command = command_of(stage)
    deps = resolved_deps(dvc_file, stage)
    if command == "fingerprint":
        assert dvc_file == ROOT / "dvc.yaml" and deps == [PACKAGE], f"{name}: the fingerprint stage reads src/headstudy"
        return
    assert command in COMMANDS, f"stage {name}: headstudy {command} has no fingerprint (headstudy.fingerprint.COMMANDS)"
    sources = [dep for dep in deps if SOURCE in dep.parents or dep == SOURCE]
    assert not sources, f"stage {name} ({dvc_file.relative_to(ROOT)}) depends on source files: {sources}"
    assert ROOT / "fingerprints" / f"{command}.txt" in deps, f"stage {name} does not depend on its code's fingerprint"


def test_every_stage_command_has_a_fingerprint():
    assert set(COMMANDS) == {*STAGES, "configure"}


def test_committed_fingerprints_are_those_of_the_committed_code():
    for command in COMMANDS:
        path = ROOT / "fingerprints" / f"{command}.txt"
        assert path.read_text() == fingerprint_text(command), f"{path}: run `dvc repro fingerprint`"


@pytest.mark.parametrize("dvc_file, name, stage", stages(), ids=stage_ids())
def test_stage_reads_config_only_through_its_file_in_configs(dvc_file, name, stage):
    deps = [str(dep) for dep in stage.get("deps", [])]
    conf = [dep for dep in deps if dep.rstrip("/").endswith("conf") or "/conf/" in f"/{dep}"]
    if name == "configure":
        assert conf and stage["outs"][0]["configs"] == {"cache": False, "persist": True}
        assert stage["params"] == [{"params.yaml": None}], "configure tracks its params.yaml whole"
        return
    assert not conf, f"stage {name} depends on {conf}: it reads configs/, which configure writes"
    if name == "fingerprint":
        return
    assert "--config configs/" in stage["cmd"]
    config_file = stage["cmd"].split("--config ")[1].split()[0]
    assert config_file in deps, f"stage {name} reads {config_file} but does not depend on it"


def test_the_code_of_a_stage_leaves_out_bookkeeping_and_the_entry_point():
    train = stage_code("train")
    assert PACKAGE / "train.py" in train and PACKAGE / "weights" / "model.py" in train
    assert not [path for path in train if "bookkeeping" in path.parts or path.name == "cli.py"]
    assert PACKAGE / "bookkeeping" / "tracking.py" not in stage_code("report")


def test_the_walk_sees_imports_inside_functions():
    """reproduce imports train and evaluate only inside a function."""
    files = stage_code("reproduce")
    assert PACKAGE / "train.py" in files and PACKAGE / "evaluate.py" in files
    assert PACKAGE / "weights" / "training.py" in files


def test_a_module_fingerprint_ignores_docstrings_comments_and_layout_but_not_code(tmp_path):
    original = tmp_path / "original.py"
    original.write_text('"""Doc."""\n\ndef f(x):\n    """Doc."""\n    return x * 2  # double\n')
    cosmetic = tmp_path / "cosmetic.py"
    cosmetic.write_text('"""Other words."""\n\n\ndef f( x ):\n    # a comment\n    return (x*2)\n')
    changed = tmp_path / "changed.py"
    changed.write_text('"""Doc."""\n\ndef f(x):\n    """Doc."""\n    return x * 3\n')
    assert module_fingerprint(original) == module_fingerprint(cosmetic)
    assert module_fingerprint(original) != module_fingerprint(changed)


def test_weights_code_imports_only_common_and_itself():
    """The package arrows run one way: common <- weights <- formats <- stages; weights knows
    nothing of Hydra or MLflow."""
    for path in sorted((PACKAGE / "weights").rglob("*.py")):
        for imported in imported_names(path):
            if imported.startswith("headstudy."):
                assert imported.startswith(("headstudy.weights", "headstudy.common")), f"{path.name} imports {imported}"
            assert imported.split(".")[0] not in ("mlflow", "hydra"), f"{path.name} imports {imported}"


def test_common_imports_nothing_else_of_headstudy():
    for path in sorted((PACKAGE / "common").rglob("*.py")):
        for imported in imported_names(path):
            assert not imported.startswith("headstudy.") or imported.startswith("headstudy.common"), (
                f"{path.name} imports {imported}"
            )


def test_package_markers_hold_only_a_docstring():
    """Every import of their package runs them: code in one would belong in a module."""
    for path in sorted(PACKAGE.rglob("__init__.py")):
        body = ast.parse(path.read_text()).body
        assert all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body), path
