"""`headstudy COMMAND [key=value ...]`: one command per DVC stage, plus count, config and reproduce.

A stage reads its config from a file that the configure stage wrote (`--config configs/...`,
as dvc.yaml runs it), or composes conf/ with params.yaml and the key=value overrides (Hydra
syntax) when run by hand: settings/compose.py does both the same way. Errors meant for the user
(ConfigError) print as one line; anything else is a bug and keeps its traceback."""

from __future__ import annotations

import atexit
import difflib
import gc
import importlib
import os
import sys
import time

from headstudy.fingerprint import CONFIGURED_STAGES as STAGES
from headstudy.settings.help import COMMANDS, HELP_FLAGS, command_help, usage

STARTED = time.monotonic()  # a stage's time counts its imports: the wait a user sees
# The status a command in a process of its own ends with: set when it returns or exits with a
# number; None while it runs and after an exception, which Python reports and exits on as usual.
exit_status: int | None = None


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

    if command in ("inspect", "report", "spotlight", "cliff"):  # the whole study's models: as configure resolves them
        from headstudy.configure import resolve

        return resolve(read_params(required=True), args)[f"{'inspect' if command == 'inspect' else 'report'}.yaml"]
    return stage_config(command, compose_config(args))


def command_module(command: str):
    """The command's module. In a process of its own (main turned the collector off) the
    collector comes back on after the import, without the imported objects, which live to the
    end anyway (gc.freeze): no later collection scans them again."""
    module = importlib.import_module(f"headstudy.{command}")
    if not gc.isenabled():
        gc.freeze()
        gc.enable()
    return module


def main(argv: list[str] | None = None) -> None:
    global exit_status
    if argv is None:
        # A command in a process of its own: Python's cyclic collector would scan the libraries'
        # objects again and again while they import and while the command runs, a quarter of a
        # tiny training's CPU (benchmarks/command_start.py); it stays off until the command's
        # module is imported (command_module). A caller's own collector (a test calling main with
        # its arguments) is left alone.
        gc.disable()
        atexit.register(end_without_teardown)  # the first exit handler registered runs last
    try:
        dispatch(sys.argv[1:] if argv is None else argv)
        sys.stdout.flush()  # a short output meets a closed pipe only here, not at exit
        exit_status = 0
    except BrokenPipeError:
        # The reader has gone (`headstudy train --help | head`): stop quietly, as other tools do,
        # with stdout pointed at /dev/null so that the interpreter's last flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        exit_status = 1
        sys.exit(1)
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            exit_status = stop.code or 0
        raise
    finally:
        if argv is None:
            drop_unlogged_compile_times()


def drop_unlogged_compile_times() -> None:
    """torch._dynamo, which Lightning imports, formats a table of compile times at exit for a log
    level nobody asked for (INFO, shown with TORCH_LOGS=dynamo), importing `tabulate` and `wcwidth`
    for it: about 0.7 CPU-seconds of every command that imports Lightning, on an Intel Xeon at
    2.1 GHz. Left alone when its logger would show it."""
    import logging

    dynamo = sys.modules.get("torch._dynamo.utils")
    if dynamo is not None and not logging.getLogger(dynamo.__name__).isEnabledFor(logging.INFO):
        atexit.unregister(dynamo.dump_compile_times)


def end_without_teardown() -> None:
    """The last exit handler of a command in a process of its own. By now the interpreter has
    joined the command's threads and run every other exit handler (MLflow's end of its run,
    logging's flush and close, multiprocessing's clean-up); what remains is its teardown of every
    module's objects, torch's, Lightning's and MLflow's, which frees memory that the process's end
    frees anyway. With drop_unlogged_compile_times, 1.4 of the 11.4 CPU-seconds of a tiny training
    on an Intel Xeon at 2.1 GHz, at the end of every stage (benchmarks/command_start.py). The
    standard streams flushed, the process ends with its status; after an exception, or where a
    stream cannot be flushed, Python's exit goes on."""
    if exit_status is None:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(exit_status)


def dispatch(args: list[str]) -> None:
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
    from headstudy.common.errors import ConfigError

    if any(arg in HELP_FLAGS for arg in rest):
        try:  # `headstudy train --help variant=4`: the values these overrides compose
            print(command_help(command, [arg for arg in rest if arg not in HELP_FLAGS and "=" in arg]))
        except ConfigError as error:
            print(f"headstudy {command}: error: {error}", file=sys.stderr)
            sys.exit(2)
        return

    try:
        # Hydra's own flags (--cfg job, --multirun): headstudy composes with Hydra but is no Hydra app.
        flags = [arg for arg in rest if arg.startswith("-") and arg != "--config"]
        if flags and command not in ("experiments", "lanes"):
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
            from headstudy.execution import kernels

            kernels.select(kernels.chosen(config))  # before the command's module imports torch
            from headstudy.execution.guards import check_stage_outputs

            check_stage_outputs(command, config)
            if command == "train":
                from headstudy.execution.jobs import outliving_checkpoints

                config.paths.checkpoints = str(outliving_checkpoints(config))
            command_module(command).main(config)
            if command == "train":
                from headstudy.bookkeeping import machines

                machines.record_trained_model(config)
            from headstudy.bookkeeping import stage_times

            stage_times.record(command, time.monotonic() - STARTED)
        else:
            command_module(command).main(rest)
    except ConfigError as error:
        print(f"headstudy {command}: error: {error}", file=sys.stderr)
        sys.exit(2)
    except Exception as error:
        # Only a command that tracks has imported MLflow; asking it otherwise would import it.
        if "mlflow" not in sys.modules:
            raise
        failure = importlib.import_module("headstudy.bookkeeping.store").store_failure(error)
        if not failure:
            raise
        print(f"headstudy {command}: error: {failure}", file=sys.stderr)
        sys.exit(2)
    except SystemExit as stop:
        # Lightning ends a fit stopped by SIGTERM in a SystemExit of status 0 (SIGTERMException),
        # which would let a stage that wrote nothing (diagnose) look done: 143 (128 + SIGTERM), as
        # train exits. Told by name: importing Lightning here would slow every command.
        if type(stop).__name__ != "SIGTERMException":
            raise
        print(f"headstudy {command}: stopped by SIGTERM before it finished", file=sys.stderr)
        sys.exit(143)
