"""`headstudy COMMAND [key=value ...]`: one command per DVC stage, plus count, config and reproduce.

A stage reads its config from a file that the configure stage wrote (`--config configs/...`,
as dvc.yaml runs it), or composes conf/ with params.yaml and the key=value overrides (Hydra
syntax) when run by hand: settings/compose.py does both the same way. Errors meant for the user
(ConfigError) print as one line; anything else is a bug and keeps its traceback."""

from __future__ import annotations

import difflib
import importlib
import sys
from pathlib import Path

# Each command and the conf/ groups it reads (for its --help).
COMMANDS = {
    "fingerprint": (),
    "configure": ("data", "model", "trainer", "optimizer", "baselines", "inspect"),
    "prepare": ("data",),
    "baselines": ("data", "baselines"),
    "train": ("data", "model", "trainer", "optimizer"),
    "evaluate": ("data", "model"),
    "inspect": ("data", "model", "inspect"),
    "report": (),
    "score": ("data", "model"),
    "spotlight": (),
    "count": ("data", "model"),
    "config": ("data", "model", "trainer", "optimizer", "baselines", "inspect"),
    "reproduce": (),
    "experiments": (),
}
ARGUMENTS = {
    "reproduce": "RUN_ID [trainer.devices=N trainer.num_nodes=N]",
    "configure": "",
    "fingerprint": "",
    "experiments": "[dvc exp show options]",
}
# Commands that run as DVC stages and so can read a file of configs/.
STAGES = ("prepare", "baselines", "train", "evaluate", "inspect", "report", "score", "spotlight")
CONFIG_HELP = """`headstudy config [key=value ...]`: print the resolved config that these overrides give,
as every command composes it, without doing any work."""
HELP_FLAGS = ("-h", "--help")


def description(command: str) -> str:
    """The command module's docstring, read without importing it (and torch with it)."""
    if command == "config":
        return CONFIG_HELP
    import ast

    source = (Path(__file__).parent / f"{command}.py").read_text()
    return ast.get_docstring(ast.parse(source)) or ""


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {summary(description(name))}" for name in COMMANDS]
    return (
        "usage: headstudy COMMAND [key=value ...]\n\ncommands:\n"
        + "\n".join(lines)
        + "\n\n`headstudy COMMAND --help` describes a command and the config groups it reads."
    )


def summary(text: str) -> str:
    """The first sentence of a docstring, without its `Stage NAME:` prefix."""
    first = " ".join(text.split("\n\n")[0].split()).split(". ")[0].rstrip(".")
    first = first.split(": ", 1)[1] if first.startswith(("Stage `", "`headstudy")) else first
    return first[0].upper() + first[1:] if first else ""


def command_help(command: str) -> str:
    from omegaconf import OmegaConf

    from headstudy.settings.compose import compose_config, conf_dir, default_options, group_options

    directory = conf_dir()
    arguments = ARGUMENTS.get(command, "[key=value ...]")
    lines = [f"usage: headstudy {command} {arguments}", "", description(command), ""]
    if command in STAGES:
        lines += [
            "Under `dvc repro` it reads `--config configs/...`, the file the configure stage wrote; "
            "by hand it composes the same settings from conf/, params.yaml and the overrides.",
            "",
        ]
    if not COMMANDS[command]:
        lines.append("It composes no config group.")
        return "\n".join(lines)
    defaults = default_options(directory)
    # The values a run by hand gets: conf/ with this folder's params.yaml, as `headstudy config` shows.
    composed = OmegaConf.to_container(compose_config([]))
    lines.append(
        f"Config groups it reads (from {directory}; choose a file with GROUP=OPTION, "
        "set a key with GROUP.KEY=VALUE; the values are those a run here gets):"
    )
    for group in COMMANDS[command]:
        options = [
            f"{option} (default)" if option == defaults.get(group) else option
            for option in group_options(directory, group)
        ]
        lines.append(f"  {group:<10} options: {', '.join(options)}")
        values = ", ".join(
            f"{key}={value}" for key, value in composed.get(group, {}).items() if not isinstance(value, dict)
        )
        lines.append(f"  {'':<10} keys: {values}")
    if "model" in COMMANDS[command]:
        lines.append(
            f"  {'variant':<10} a head count, or H-NAME for H heads and conf/variants/NAME.yaml: "
            f"{', '.join(group_options(directory, 'variants'))}"
        )
    top = ", ".join(
        f"{key}={value}" for key, value in composed.items() if not isinstance(value, dict) and key not in ("name",)
    )
    lines += ["", f"Other keys: {top}.", "`headstudy config [key=value ...]` prints the resolved config."]
    return "\n".join(lines)


def fail(message: str) -> None:
    print(f"headstudy: error: {message}", file=sys.stderr)
    sys.exit(2)


def load_config(command: str, args: list[str]):
    """The stage's config: the file after --config, or composed from conf/, params.yaml and args."""
    if args[:1] == ["--config"]:
        from headstudy.common.errors import ConfigError
        from headstudy.formats.runconfig import read_config

        if len(args) != 2:
            raise ConfigError(f"{command} --config takes one file and no overrides, got {' '.join(args[1:]) or 'none'}")
        from headstudy.configure import check_stage_file

        check_stage_file(args[1])  # before DVC's stage does any work: the file configure would write
        return read_config(args[1])
    from headstudy.settings.compose import compose_config, read_params, stage_config

    if command in ("inspect", "report", "spotlight"):  # the whole study's models: as configure resolves them
        from headstudy.configure import resolve

        return resolve(read_params(required=True), args)[f"{'report' if command == 'spotlight' else command}.yaml"]
    return stage_config(command, compose_config(args))


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(usage(), file=sys.stderr)
        sys.exit(2)
    if args[0] in (*HELP_FLAGS, "help"):
        print(usage())
        return
    if args[0] == "--version":
        from importlib.metadata import version

        print(f"headstudy {version('headstudy')}")
        return
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, COMMANDS, n=1)
        fail(
            f"unknown command {command!r}"
            + (f" (did you mean {close[0]}?)" if close else "")
            + f"; the commands are {', '.join(COMMANDS)}"
        )
    if any(arg in HELP_FLAGS for arg in rest):
        print(command_help(command))
        return
    from headstudy.common.errors import ConfigError

    try:
        # Hydra's own flags (--cfg job, --multirun): headstudy composes with Hydra but is no Hydra app.
        flags = [arg for arg in rest if arg.startswith("-") and arg != "--config"]
        if flags and command != "experiments":
            raise ConfigError(
                f"{flags[0]} is not an option of headstudy; settings are key=value, and "
                "`headstudy config [key=value ...]` prints the config they compose"
            )
        if command == "config":
            from omegaconf import OmegaConf

            from headstudy.settings.compose import compose_config

            print(OmegaConf.to_yaml(compose_config(rest)), end="")
        elif command in STAGES:
            config = load_config(command, rest)
            from headstudy.bookkeeping.guards import check_stage_outputs

            check_stage_outputs(command, config)
            if command == "train":
                from headstudy.bookkeeping.jobs import outliving_checkpoints

                config.paths.checkpoints = str(outliving_checkpoints(config))
            importlib.import_module(f"headstudy.{command}").main(config)
        else:
            importlib.import_module(f"headstudy.{command}").main(rest)
    except ConfigError as error:
        print(f"headstudy {command}: error: {error}", file=sys.stderr)
        sys.exit(2)
