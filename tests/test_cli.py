"""The `headstudy` command explains itself: help, the resolved config, and suggestions for a
mistyped key, option or command. Run as a user runs it, through the installed command."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT

from headstudy import cli
from headstudy.cli import COMMANDS, main


def headstudy(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["headstudy", *args], cwd=ROOT, capture_output=True, text=True)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    return line


def test_help_exits_zero_and_lists_every_command():
    result = headstudy("--help")
    assert result.returncode == 0
    listed = [
        line.split()[0]
        for line in result.stdout.split("commands:\n")[1].splitlines()
        if line.startswith("  ") and not line.startswith("   ")  # not a wrapped summary's next line
    ]
    assert listed == list(COMMANDS)


def test_command_help_describes_it_and_names_its_config_groups_and_their_options():
    result = headstudy("train", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())  # as read, whatever the wrapping
    assert text.startswith("usage: headstudy train [key=value ...]")
    assert "one model of the study" in text
    groups = {line.split()[0]: line for line in result.stdout.splitlines() if "options:" in line}
    assert set(groups) == {"data", "model", "trainer", "optimizer"}
    assert "course (default), tiny" in groups["model"] and "ptb (default), textdir" in groups["data"]
    assert "conf/variants/NAME.yaml: avx2, mix, nomix" in text
    assert "max_steps=3000" in text and "lr=0.003" in text  # each key with the value a run here gets


def test_command_help_shows_what_the_given_overrides_compose_and_what_conf_says_of_each_key():
    result = headstudy("train", "--help", "variant=4", "model=tiny")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.split() == ["n_heads=4"] for line in lines)  # model=tiny with variant=4
    assert any(line.split() == ["width=32"] for line in lines)
    assert any(line.split() == ["lr=0.006"] for line in lines)  # variant 4's own rate, from params.yaml
    text = " ".join(result.stdout.split())
    assert "with variant=4 model=tiny" in text and "model/tiny.yaml: For tests and quick looks" in text
    assert any(line.split()[:1] == ["val_every_steps=300"] and "resume checkpoint" in line for line in lines)


@pytest.mark.slow
def test_help_is_wrapped_to_the_terminal():
    for columns in (70, 120):
        result = subprocess.run(
            ["headstudy", "train", "--help"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "COLUMNS": str(columns)},
        )
        assert result.returncode == 0
        assert max(map(len, result.stdout.splitlines())) <= columns, result.stdout
    assert max(map(len, headstudy("--help").stdout.splitlines())) <= 100  # off a terminal


def test_help_refuses_overrides_it_cannot_compose_in_one_line():
    assert "model.n_head" in one_error_line(headstudy("train", "--help", "model.n_head=4"))


def test_every_command_has_help(capsys, monkeypatch):
    """Through headstudy.cli.main in this process, as `headstudy COMMAND --help` would run it: a
    process per command took a second each; the tests above run the installed command."""
    monkeypatch.chdir(ROOT)
    for command in COMMANDS:
        main([command, "--help"])  # returns: help is no error
        assert capsys.readouterr().out.startswith(f"usage: headstudy {command}"), command


def test_config_prints_the_resolved_config():
    result = headstudy("config", "model=tiny", "variant=1-mix", "seed=3")
    assert result.returncode == 0
    config = yaml.safe_load(result.stdout)
    assert config["model"]["width"] == 32 and config["model"]["n_heads"] == 1
    assert config["model"]["mix_heads"] is True and config["seed"] == 3
    assert config["model"]["vocab_size"] == config["data"]["vocab_size"]  # resolved, not ${...}


def test_mistyped_key_gets_a_did_you_mean_from_the_real_keys():
    line = one_error_line(headstudy("config", "model.n_head=4"))
    assert line == "headstudy config: error: model.n_head is not a config key (did you mean model.n_heads?)"
    assert "did you mean optimizer.lr?" in one_error_line(headstudy("count", "optimzer.lr=1"))


def test_several_unknown_keys_are_named_in_one_line_that_points_to_config_once():
    line = one_error_line(headstudy("config", "foo=1", "bar=2"))
    assert line == (
        "headstudy config: error: foo is not a config key; bar is not a config key; `headstudy config` prints every key"
    )


def test_a_hydra_flag_is_refused_once_with_the_way_to_print_the_config():
    line = one_error_line(headstudy("train", "--cfg", "job"))
    assert line == (
        "headstudy train: error: --cfg is not an option of headstudy; settings are key=value, "
        "and `headstudy config [key=value ...]` prints the config they compose"
    )


def test_mistyped_option_gets_a_did_you_mean_from_the_real_options():
    line = one_error_line(headstudy("config", "model=tinny"))
    assert "conf/model/ has no option 'tinny' (did you mean model=tiny?)" in line
    assert "did you mean variant=1-mix?" in one_error_line(headstudy("config", "variant=1-mx"))


def test_unknown_command_is_named_as_unknown():
    line = one_error_line(headstudy("trian", "model=tiny"))
    assert line.startswith("headstudy: error: unknown command 'trian' (did you mean train?)")


def test_no_command_prints_usage_and_fails():
    result = headstudy()
    assert result.returncode == 2 and "usage: headstudy COMMAND" in result.stderr


def test_help_into_a_closed_pipe_stops_quietly(monkeypatch, capsys):
    """`headstudy --help | head -1`: the reader has gone before the help is written. The command
    stops with status 1 and no traceback instead of a BrokenPipeError."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    closed_pipe = os.fdopen(write_end, "w")
    monkeypatch.setattr("sys.stdout", closed_pipe)
    try:
        with pytest.raises(SystemExit) as stopped:
            main(["--help"])
    finally:
        closed_pipe.close()
    assert stopped.value.code == 1
    assert "Traceback" not in capsys.readouterr().err


def test_a_command_in_its_own_process_collects_garbage_again_once_its_imports_are_frozen():
    """The collector is off while a command's libraries import (cli.main), then back on for the
    command's own work, which may run for hours: without it, cycles would never be freed."""
    code = (
        "import gc, sys; from headstudy.cli import main; sys.argv = ['headstudy', 'count']; main(); "
        "print('collector on:', gc.isenabled(), 'frozen:', gc.get_freeze_count() > 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "collector on: True frozen: True"


def test_a_command_called_in_process_leaves_the_callers_collector_alone(capsys):
    frozen = gc.get_freeze_count()
    main(["count"])
    assert '"params": 328704' in capsys.readouterr().out
    # Nothing frozen: a freeze would move every object of the process there (objects freed since
    # only leave it).
    assert gc.isenabled() and gc.get_freeze_count() <= frozen


# `headstudy ARGS` whose command, as it runs, registers an exit handler (as MLflow and logging
# register theirs) and leaves an object that says when Python's teardown frees it.
WITH_A_HANDLER_AND_A_FINALISER = """
import atexit, sys
from headstudy import cli

class SaysWhenFreed:
    def __del__(self):
        print("torn down", flush=True)

def dispatch(args, command=cli.dispatch):
    atexit.register(print, "handler ran", flush=True)
    cli.freed_at_teardown = SaysWhenFreed()
    command(args)

if sys.argv[1] == "teardown":
    cli.end_without_teardown = lambda: None
cli.dispatch = dispatch
sys.argv = ["headstudy", *sys.argv[2:]]
sys.exit(cli.main())
"""


@pytest.mark.parametrize(
    ("args", "status"), [(["config", "model=tiny"], 0), (["config", "model.d_model=64"], 2)], ids=["done", "refused"]
)
def test_a_command_in_its_own_process_runs_every_exit_handler_and_ends_with_its_status_without_teardown(args, status):
    """What the interpreter's teardown would free, the process's end frees (cli.end_without_teardown):
    the command's output and status, and the exit handlers its libraries registered, are as they
    were. The same command with the teardown shows that the finaliser would have run."""

    def command(exit: str) -> subprocess.CompletedProcess:
        script = [sys.executable, "-c", WITH_A_HANDLER_AND_A_FINALISER, exit, *args]
        return subprocess.run(script, cwd=ROOT, capture_output=True, text=True)

    fast, torn_down = command("fast"), command("teardown")
    assert fast.returncode == torn_down.returncode == status, fast.stderr
    assert fast.stderr == torn_down.stderr
    assert torn_down.stdout == fast.stdout + "torn down\n"
    assert fast.stdout.endswith("handler ran\n")
    if status == 0:
        assert yaml.safe_load(fast.stdout.removesuffix("handler ran\n"))["model"]["width"] == 32


@pytest.mark.parametrize(("level", "dropped"), [("WARNING", True), ("INFO", False)])
def test_torchs_table_of_compile_times_is_dropped_at_exit_only_where_its_logger_would_not_show_it(
    monkeypatch, level, dropped
):
    """TORCH_LOGS=dynamo sets that logger to INFO: the table is then what the user asked for."""
    import logging

    import torch._dynamo.utils

    unregistered = []
    monkeypatch.setattr("atexit.unregister", unregistered.append)
    logger = logging.getLogger(torch._dynamo.utils.__name__)
    previous = logger.level
    logger.setLevel(level)
    try:
        cli.drop_unlogged_compile_times()
    finally:
        logger.setLevel(previous)
    assert unregistered == ([torch._dynamo.utils.dump_compile_times] if dropped else [])
