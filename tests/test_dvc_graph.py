"""The DVC graph is exact: each stage depends on its config file, the data it reads and
fingerprints/COMMAND.txt, the fingerprint of the code `headstudy COMMAND` runs, and on no source
file; the fingerprint stage depends on the whole package. Config reaches a stage only through its
file in configs/. The import walk is static (`ast`, imports inside functions included)."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from headstudy.cli import STAGES
from headstudy.common.code import fingerprint_text, imported_names, reached_definitions, stage_entry
from headstudy.fingerprint import COMMANDS

SOURCE = ROOT / "src"
PACKAGE = SOURCE / "headstudy"
DVC_FILES = [ROOT / "dvc.yaml", *sorted((ROOT / "studies").rglob("dvc.yaml"))]
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


# The commands that write a study's report: whatever they refuse, the last report stays.
REPORT_COMMANDS = {"report", "cliff", "spotlight"}


REPORT_STAGES = [(dvc_file, name, stage) for dvc_file, name, stage in stages() if command_of(stage) in REPORT_COMMANDS]


@pytest.mark.parametrize(
    "dvc_file, name, stage",
    REPORT_STAGES,
    ids=[f"{dvc_file.relative_to(ROOT)}:{name}" for dvc_file, name, _ in REPORT_STAGES],
)
def test_a_report_stage_keeps_its_last_outputs_until_it_writes_new_ones(dvc_file, name, stage):
    outputs = [entry for key in ("outs", "metrics") for entry in stage.get(key, [])]
    assert outputs and all(isinstance(entry, dict) for entry in outputs), outputs
    assert all(flags.get("persist") is True for entry in outputs for flags in entry.values()), outputs


def test_every_stage_command_has_a_fingerprint():
    assert set(COMMANDS) == {*STAGES, "configure"}


@pytest.mark.slow
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


def reached(command: str) -> set[str]:
    return {".".join(target[1:3]) for target in reached_definitions(stage_entry(command)) if target[0] == "definition"}


def test_the_code_of_a_stage_is_what_it_reaches_without_bookkeeping():
    train = reached("train")
    assert {
        "headstudy.train.main",
        "headstudy.weights.model.Decoder",
        "headstudy.weights.recipe.prepare_training",
        # The thread count can change a weight's last bits; a check can stop a training.
        "headstudy.execution.jobs.torch_threads",
        "headstudy.weights.training.ResumeStepsAgree",
    } <= train
    assert not [name for name in train if name.startswith(("headstudy.bookkeeping", "headstudy.cli"))]
    # Readers in modules that train imports, which train never calls:
    assert not {"headstudy.formats.trained.load_trained", "headstudy.formats.trained.check_saved_config"} & train
    assert "headstudy.bookkeeping.tracking.log_model" not in reached("report")


def test_the_walk_sees_imports_inside_functions():
    """reproduce imports train and evaluate only inside a function."""
    assert {"headstudy.train.train", "headstudy.evaluate.evaluate"} <= reached("reproduce")


def write_package(root: Path, files: dict[str, str]) -> Path:
    for name, text in {"headstudy/__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


STAGE = """\"\"\"A stage.\"\"\"
from headstudy.maths import double


def main(config):
    \"\"\"Doc.\"\"\"
    return double(config)
"""
MATHS = '"""Maths."""\nSCALE = 2\n\n\ndef double(x):\n    return x * SCALE\n\n\ndef unused(x):\n    return x\n'


ARITH = "from headstudy.lib.constants import FACTOR\n\n\ndef twice(x):\n    return x*FACTOR\n"


def test_a_fingerprint_ignores_layout_moves_renames_and_unreached_code_but_not_arithmetic(tmp_path):
    original = write_package(tmp_path / "original", {"headstudy/stage.py": STAGE, "headstudy/maths.py": MATHS})
    cosmetic = write_package(
        tmp_path / "cosmetic",
        {
            "headstudy/stage.py": STAGE.replace("Doc.", "Other words.").replace(
                "double(config)", "double( config )  # why"
            ),
            "headstudy/maths.py": MATHS.replace("def unused(x):\n    return x", "def unused(x):\n    return -x"),
        },
    )
    moved = write_package(  # double renamed and moved into a subpackage; SCALE beside it; a re-export on the way
        tmp_path / "moved",
        {
            "headstudy/stage.py": STAGE.replace(
                "from headstudy.maths import double", "from headstudy import lib"
            ).replace("double(config)", "lib.twice(config)"),
            "headstudy/lib/__init__.py": "from headstudy.lib.arith import twice\n",
            "headstudy/lib/arith.py": ARITH,
            "headstudy/lib/constants.py": "FACTOR = 2\n",
        },
    )
    changed = write_package(
        tmp_path / "changed",
        {"headstudy/stage.py": STAGE, "headstudy/maths.py": MATHS.replace("SCALE = 2", "SCALE = 3")},
    )
    text = {tree.name: fingerprint_text("stage", tree) for tree in (original, cosmetic, moved, changed)}
    assert text["original"] == text["cosmetic"] == text["moved"]
    assert text["changed"] != text["original"]


@pytest.mark.slow
def test_moving_train_into_another_folder_changes_no_fingerprint(tmp_path):
    """train.py moved into a package of its own (its one importer, reproduce.py, follows)."""
    source = tmp_path / "src"
    shutil.copytree(SOURCE / "headstudy", source / "headstudy", ignore=shutil.ignore_patterns("__pycache__"))
    (source / "headstudy/stages").mkdir()
    (source / "headstudy/stages/__init__.py").write_text('"""The stages."""\n')
    (source / "headstudy/train.py").rename(source / "headstudy/stages/train.py")
    reproduce = source / "headstudy/reproduce.py"
    assert "from headstudy.train import train" in reproduce.read_text()
    reproduce.write_text(
        reproduce.read_text().replace("from headstudy.train import", "from headstudy.stages.train import")
    )
    assert fingerprint_text("train", source, entry=("headstudy.stages.train", "main")) == fingerprint_text("train")
    for command in COMMANDS:
        if command != "train":
            assert fingerprint_text(command, source) == fingerprint_text(command), command


def test_a_name_bound_in_a_function_is_not_the_definition_of_the_same_name(tmp_path):
    stage = "from headstudy.maths import double\n\n\ndef main(config):\n    double = 3\n    return double\n"
    tree = write_package(tmp_path / "shadow", {"headstudy/stage.py": stage, "headstudy/maths.py": MATHS})
    assert [target[2] for target in reached_definitions(("headstudy.stage", "main"), tree)] == ["main"]


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
