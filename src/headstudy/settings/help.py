"""`headstudy --help` and `headstudy COMMAND --help`: each command's description (its module's
docstring, read without importing it), the config groups it reads, and the value of every key
those compose, with what conf/'s comments say of it."""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path

from headstudy.fingerprint import CONFIGURED_STAGES as STAGES

# Each command and the conf/ groups it reads (for its --help).
COMMANDS = {
    "fingerprint": (),
    "configure": ("data", "model", "trainer", "optimizer", "baselines", "inspect", "diagnose"),
    "prepare": ("data",),
    "baselines": ("data", "baselines"),
    "train": ("data", "model", "trainer", "optimizer"),
    "evaluate": ("data", "model"),
    "inspect": ("data", "model", "inspect"),
    "report": (),
    "score": ("data", "model"),
    "ablate": ("data", "model"),
    "answers": ("data", "model"),
    "spotlight": (),
    "diagnose": ("data", "model", "trainer", "optimizer", "diagnose"),
    "cliff": (),
    "count": ("data", "model"),
    "config": ("data", "model", "trainer", "optimizer", "baselines", "inspect", "diagnose"),
    "reproduce": (),
    "experiments": (),
    "lanes": (),
    "verify": (),
}
ARGUMENTS = {
    "reproduce": "RUN_ID [trainer.devices=N trainer.num_nodes=N]",
    "configure": "",
    "fingerprint": "",
    "experiments": "[dvc exp show options]",
    "lanes": "[-j N] [TARGET ...]",
    "verify": "[STUDY] [-n N | MODEL ...]",
}
CONFIG_HELP = """`headstudy config [key=value ...]`: print the resolved config that these overrides give,
as every command composes it, without doing any work."""
HELP_FLAGS = ("-h", "--help")


def description(command: str) -> str:
    """The command module's docstring, read without importing it (and torch with it)."""
    if command == "config":
        return CONFIG_HELP
    import ast

    source = (Path(__file__).parents[1] / f"{command}.py").read_text()
    return ast.get_docstring(ast.parse(source)) or ""


def terminal_width() -> int:
    """Help is wrapped to the terminal (COLUMNS where set; 100 off a terminal), 60 to 120 wide."""
    return max(60, min(120, shutil.get_terminal_size((100, 24)).columns))


def wrapped(text: str, indent: str = "", hanging: str | None = None) -> list[str]:
    """Each paragraph of text (a docstring's hard line breaks joined) filled to the terminal."""
    lines = []
    for paragraph in text.split("\n\n"):
        joined = " ".join(paragraph.split())
        lines += textwrap.wrap(
            joined,
            width=terminal_width(),
            initial_indent=indent,
            subsequent_indent=indent if hanging is None else hanging,
            break_on_hyphens=False,
        ) or [""]
        lines.append("")
    return lines[:-1]


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [
        line
        for name in COMMANDS
        for line in wrapped(summary(description(name)), f"  {name:<{width}}  ", " " * (width + 4))
    ]
    closing = wrapped(
        "`headstudy COMMAND --help [key=value ...]` describes a command, the config groups it reads "
        "and the value of each key that those overrides compose."
    )
    return "usage: headstudy COMMAND [key=value ...]\n\ncommands:\n" + "\n".join([*lines, "", *closing])


def summary(text: str) -> str:
    """The first sentence of a docstring, without its `Stage NAME:` prefix."""
    first = " ".join(text.split("\n\n")[0].split()).split(". ")[0].rstrip(".")
    first = first.split(": ", 1)[1] if first.startswith(("Stage `", "`headstudy")) else first
    return first[0].upper() + first[1:] if first else ""


def key_comments(path: Path) -> dict[str, str]:
    """What conf/'s comments say of each key of a YAML file (dotted for nested keys): the comment
    lines just above the key, and the comment after its value. A comment above several keys
    describes the first of them; the comment that opens the file describes the file (key "")."""
    found: dict[str, str] = {}
    above: list[str] = []
    parents: list[tuple[int, str]] = []
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not stripped:
            if above and not found and not parents:
                found[""] = " ".join(above)
            above = []
            continue
        if stripped.startswith("#"):
            above.append(stripped.lstrip("#").strip())
            continue
        match = re.match(r"^(\s*)([A-Za-z_][\w-]*):(.*)$", line)
        if not match:
            above = []
            continue
        indent, key, rest = len(match.group(1)), match.group(2), match.group(3)
        while parents and parents[-1][0] >= indent:
            parents.pop()
        dotted = ".".join([*(name for _, name in parents), key])
        parents.append((indent, key))
        inline = rest.split(" #", 1)[1].strip() if " #" in rest else ""
        if above and not found and len(parents) == 1 and path.parent.name != "conf":
            found[""], above = " ".join(above), []  # a group file's opening comment: the file's
        text = " ".join([*above, inline]).strip()
        if text:
            found[dotted] = text
        above = []
    return found


def chosen_options(overrides: list[str], defaults: dict[str, str]) -> dict[str, str]:
    """The file of each config group that these overrides choose (GROUP=OPTION), else the default."""
    chosen = dict(defaults)
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key in chosen and value:
            chosen[key] = value
    return chosen


def key_lines(values: dict, comments: dict[str, str], prefix: str = "") -> list[str]:
    """One entry per key: `key=value`, then what conf/ says of it, wrapped under itself."""
    lines = []
    column = 28
    for key, value in values.items():
        if isinstance(value, dict):
            lines += key_lines(value, comments, f"{prefix}{key}.")
            continue
        setting = f"{prefix}{key}={'null' if value is None else value}"
        comment = comments.get(f"{prefix}{key}", "")
        if not comment:
            lines += wrapped(setting, "    ", "      ")
        elif len(setting) < column - 2:
            lines += wrapped(comment, f"    {setting:<{column - 2}}", " " * (column + 2))
        else:
            lines += wrapped(setting, "    ", "      ") + wrapped(comment, " " * (column + 2))
    return lines


def command_help(command: str, overrides: list[str] | None = None) -> str:
    """The command's description, and for the config groups it reads their options and the value
    of every key that conf/, this folder's params.yaml and the overrides compose, each with what
    conf/'s comments say of it."""
    from omegaconf import OmegaConf

    from headstudy.settings.compose import compose_config, conf_dir, default_options, group_options

    overrides = overrides or []
    directory = conf_dir()
    arguments = ARGUMENTS.get(command, "[key=value ...]")
    lines = [f"usage: headstudy {command} {arguments}", "", *wrapped(description(command)), ""]
    if command in STAGES:
        lines += [
            *wrapped(
                "Under `dvc repro` it reads `--config configs/...`, the file the configure stage wrote; "
                "by hand it composes the same settings from conf/, params.yaml and the overrides."
            ),
            "",
        ]
    if not COMMANDS[command]:
        lines.append("It composes no config group.")
        return "\n".join(lines)
    defaults = default_options(directory)
    chosen = chosen_options(overrides, defaults)
    # The values a run by hand gets: conf/ with this folder's params.yaml and the overrides, as
    # `headstudy config` shows.
    composed = OmegaConf.to_container(compose_config(overrides), resolve=True)
    given = f" with {' '.join(overrides)}" if overrides else ""
    lines += wrapped(
        f"Config groups it reads (from {directory}; choose a file with GROUP=OPTION, set a key with "
        f"GROUP.KEY=VALUE). The values are those a run here gets{given}; `headstudy {command} --help "
        "key=value ...` shows those that overrides compose:"
    )
    for group in COMMANDS[command]:
        options = [
            f"{option} (default)" if option == defaults.get(group) else option
            for option in group_options(directory, group)
        ]
        lines += wrapped(f"options: {', '.join(options)}", f"  {group:<10} ", " " * 13)
        option_file = directory / group / f"{chosen.get(group)}.yaml"
        comments = key_comments(option_file) if option_file.is_file() else {}
        about = f": {comments['']}" if comments.get("") else ""
        lines += wrapped(f"{group}/{chosen.get(group)}.yaml{about}", " " * 13)
        lines += key_lines(composed.get(group, {}), comments)
    if "model" in COMMANDS[command]:
        lines += wrapped(
            f"a head count, or H-NAME for H heads and conf/variants/NAME.yaml: "
            f"{', '.join(group_options(directory, 'variants'))}",
            f"  {'variant':<10} ",
            " " * 13,
        )
    top = {key: value for key, value in composed.items() if key not in COMMANDS["config"] and key != "name"}
    lines += ["", "Other keys:", *key_lines(top, key_comments(directory / "config.yaml"))]
    lines += ["", "`headstudy config [key=value ...]` prints the resolved config."]
    return "\n".join(lines)
