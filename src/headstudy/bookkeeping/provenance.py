"""Where a run comes from, as its MLflow run records it: the git commit and what differs from it,
the DVC experiment and the prepared data's md5 in dvc.lock, the machine and the packages, and the
identity of the study execution it belongs to. No MLflow here: tracking.py logs what this finds."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

PARAMS_FILE = "params.yaml"


def git(*args: str, index: str | None = None) -> str:
    env = None if index is None else {**os.environ, "GIT_INDEX_FILE": index}
    result = subprocess.run(["git", *args], capture_output=True, text=True, env=env)
    return result.stdout if result.returncode == 0 else ""


def git_state() -> dict[str, str]:
    """The commit, and what differs from it anywhere in the repository: code and conf (`dirty`:
    the diff, and files in src/ or conf/ that git does not track yet) apart from params.yaml
    files (`params_changed`), whose values a run records as params anyway. The pipeline's own
    results, and the .gitignore entries DVC adds for new outputs, never count."""
    from headstudy.settings.compose import conf_dir, project_root

    commit = git("rev-parse", "HEAD").strip()
    if not commit:
        return {
            "commit": "unknown",
            "dirty": "unknown",
            "params_changed": "unknown",
            "diff": "",
            "untracked": "",
            "params_diff": "",
        }
    params = f":(top,glob)**/{PARAMS_FILE}"
    # configs/ and fingerprints/ are written by the pipeline's first stages (configure, fingerprint)
    # from params.yaml and the code: generated, so no change of their own.
    not_code = (PARAMS_FILE, ".gitignore", "dvc.lock", "metrics/**", "reports/**", "configs/**", "fingerprints/**")
    code = [":(top)", *(f":(top,glob,exclude)**/{path}" for path in not_code)]
    # Against a fresh index of HEAD, not the repository's own: under `dvc exp run` that one can
    # say unchanged for a file DVC has just rewritten (params.yaml after `-S`).
    with tempfile.TemporaryDirectory(prefix="headstudy-git-") as scratch:
        index = str(Path(scratch) / "index")
        git("read-tree", "HEAD", index=index)
        diff = git("diff", "--", *code, index=index)
        untracked = git(
            "ls-files",
            "--others",
            "--exclude-standard",
            "--full-name",
            "--",
            str(conf_dir()),
            str(project_root() / "src"),
            index=index,
        )
        params_diff = git("diff", "--", params, index=index)
        new_params = git("ls-files", "--others", "--exclude-standard", "--", params, index=index)
    return {
        "commit": commit,
        "dirty": str(bool(diff or untracked)).lower(),
        "params_changed": str(bool(params_diff or new_params)).lower(),
        "diff": diff,
        "untracked": untracked,
        "params_diff": params_diff,
    }


def dvc_experiment() -> dict[str, str]:
    """The DVC experiment this command runs in, as `dvc exp run` tells its stages."""
    variables = {"dvc.exp_name": "DVC_EXP_NAME", "dvc.exp_baseline_rev": "DVC_EXP_BASELINE_REV"}
    return {tag: os.environ[name] for tag, name in variables.items() if os.environ.get(name)}


def in_pipeline() -> bool:
    """Run as a stage by `dvc repro` or `dvc exp run` (DVC sets DVC_STAGE), not by hand."""
    return "DVC_STAGE" in os.environ


def cpu_info() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty where there is none): the one reader
    of that file for the runs' provenance, the throughput benchmark and the golden test's skip."""
    try:
        block = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    except OSError:
        return {}
    return {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in block.splitlines())}


def cpu_model() -> str:
    model = cpu_info().get("model name")
    return model if model is not None else platform.processor() or "unknown"


def environment() -> dict[str, str]:
    """What decides whether a rerun can be bit-identical."""
    import torch  # here, not at the top: the report stage needs no torch

    cpu = cpu_info()
    return {
        "env.python": platform.python_version(),
        "env.torch": torch.__version__,
        "env.lightning": metadata.version("lightning"),
        "env.cpu": cpu_model(),
        "env.cpu_kind": " ".join(
            (cpu.get("vendor_id", "?"), "family", cpu.get("cpu family", "?"), "model", cpu.get("model", "?"))
        ),
        "env.cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "env.kernels": kernels_in_force(),
        "env.threads": str(torch.get_num_threads()),
    }


def kernels_in_force() -> str:
    """The kernel choice of execution/kernels.py that this process's environment puts in force."""
    from headstudy.execution.kernels import PINNED, missing_settings

    return next((choice for choice in PINNED if PINNED[choice] and not missing_settings(choice)), "default")


def installed_packages() -> str:
    lines = {f"{dist.metadata['Name']}=={dist.version}" for dist in metadata.distributions()}
    return "\n".join(sorted(lines, key=str.lower)) + "\n"


def study_identity() -> dict[str, str]:
    """What tells one execution of a study from another: the study's folder (where DVC runs its
    stages) and params.yaml, the commit, and the DVC experiment under `dvc exp run`. Every stage
    of one execution finds the same. The folder is the user's repository's, also when DVC runs
    the stages in a temporary copy of it (the queue, --temp), which it deletes afterwards."""
    from headstudy.execution.jobs import in_users_repository

    folder = Path.cwd().resolve()
    params = folder / PARAMS_FILE
    return {
        "study.folder": str(in_users_repository(folder)),
        "study.params_sha256": hashlib.sha256(params.read_bytes()).hexdigest() if params.is_file() else "none",
        "git.commit": git("rev-parse", "HEAD").strip() or "unknown",
        **{key: value for key, value in dvc_experiment().items() if key == "dvc.exp_name"},
    }


def study_folder_name() -> str:
    """The study this folder holds, as the project names it: `default` for the project root,
    `studies/NAME` for one of its studies (the folder's path from the project root, or from
    the git repository's root when the project's conf/ lies elsewhere)."""
    from headstudy.settings.compose import project_root

    here = Path.cwd().resolve()
    try:
        folder = here.relative_to(project_root().resolve()).as_posix()
    except ValueError:
        prefix = git("rev-parse", "--show-prefix").strip().rstrip("/")
        folder = prefix if prefix or git("rev-parse", "--show-toplevel").strip() else here.name
    return "default" if folder in ("", ".") else folder


def dvc_locked_md5(prepared: Path) -> str:
    """The prepared data's md5 as the dvc.lock of the pipeline that writes it records it, if
    that pipeline has run: this folder's, or for a study under studies/ that trains on the
    project's data, the project's."""
    target = prepared.resolve()
    for folder in (Path.cwd(), *Path.cwd().parents):
        lock = folder / "dvc.lock"
        if lock.is_file():
            for stage in (yaml.safe_load(lock.read_text()) or {}).get("stages", {}).values():
                for out in stage.get("outs", []):
                    if (folder / out["path"]).resolve() == target:
                        return out.get("md5", "none")
        if (folder / ".dvc").is_dir():  # the repository's root: no pipeline above it
            break
    return "none"


def flatten(tree) -> dict[str, str]:
    """A config, or any nested dict such as params.yaml, as `model.n_heads`-style keys: the params
    of a run, and the settings `headstudy experiments` compares."""
    if isinstance(tree, DictConfig):
        tree = OmegaConf.to_container(tree, resolve=True)
    flat: dict[str, str] = {}

    def walk(node, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            flat[prefix[:-1]] = str(node)

    walk(tree, "")
    return flat
