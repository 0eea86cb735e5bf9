"""`headstudy lanes`: `dvc repro` in N lanes writes what a plain sequential `dvc repro` writes (the
lock file byte for byte, every output), stops cleanly on a failing stage or a signal, and a rerun
continues to the same result."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml
from conftest import assert_nothing_half_written, default_signals
from tinyproject import REPRODUCED, copy_project, edit_params, environment, make_project, ran_stages, run

from headstudy.analysis.rendering.render import headline_of, to_markdown
from headstudy.bookkeeping import stage_times
from headstudy.common.errors import ConfigError
from headstudy.execution import lanes
from headstudy.lanes import answer, parse


def test_lock_order_keeps_the_last_commits_entries_then_follows_dvcs_plan():
    planned = ["fingerprint", "configure", "prepare", "train@1-0", "train@4-0", "report"]
    # A new study: DVC's plan order, whatever order the lanes finished in.
    assert lanes.canonical_order(["configure", "fingerprint", "train@4-0", "prepare", "train@1-0"], [], planned) == [
        "fingerprint",
        "configure",
        "prepare",
        "train@1-0",
        "train@4-0",
    ]
    # Entries of the last commit keep their places, as a plain `dvc repro` keeps them; new ones follow.
    committed = ["prepare", "train@4-0", "fingerprint", "configure", "gone@1"]
    current = ["prepare", "train@4-0", "report", "fingerprint", "configure", "train@1-0"]
    assert lanes.canonical_order(current, committed, planned) == [
        "prepare",
        "train@4-0",
        "fingerprint",
        "configure",
        "train@1-0",
        "report",
    ]


def test_lane_count_and_targets_from_the_command_line():
    assert parse(["-j", "3"]) == (3, ["dvc.yaml"])
    assert parse(["-j2", "studies/lr-tuning/dvc.yaml"]) == (2, ["studies/lr-tuning/dvc.yaml"])
    assert parse(["--jobs=1"])[0] == 1
    for bad in (["-j", "0"], ["-j", "two"], ["--fast"], ["-j"]):
        with pytest.raises(ConfigError):
            parse(bad)


class FakeLane:
    """A stage that finishes at once with the given exit code, recording what ran beside it."""

    codes: dict[str, int] = {}
    ran_command = True
    started: list[str] = []
    running: set[str] = set()
    most = 0
    seen_done: dict[str, set[str]] = {}

    def __init__(self, stage, root, say, finished):
        cls = type(self)
        self.stage = stage
        cls.started.append(stage)
        cls.running.add(stage)
        cls.most = max(cls.most, len(cls.running))
        finished.put((self, cls.codes.get(stage, 0)))

    def wait_for_commands(self):
        type(self).running.discard(self.stage)

    def interrupt(self, number):
        pass

    def error_line(self):
        return f"headstudy {self.stage}: error: it broke"


def fake_plan() -> lanes.Plan:
    """fingerprint, then prepare, then four trainings, each evaluated, then the report."""
    trains = [f"train@{n}" for n in range(4)]
    evaluates = [f"evaluate@{n}" for n in range(4)]
    upstream = {"fingerprint": [], "prepare": ["fingerprint"], "report": evaluates}
    upstream |= {train: ["prepare"] for train in trains}
    upstream |= {evaluate: [train] for evaluate, train in zip(evaluates, trains, strict=True)}
    order = ["fingerprint", "prepare", *trains, *evaluates, "report"]
    return lanes.Plan(order, upstream, [stage for stage in order if stage != "fingerprint"], {})


def run_fake(count: int, codes: dict[str, int]):
    FakeLane.codes, FakeLane.started, FakeLane.running, FakeLane.most = codes, [], set(), 0
    said = []
    plan = fake_plan()
    try:
        with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as root:  # no stage timed before
            patch.setenv("COLUMNS", "200")  # a wide terminal: the progress lines whole
            return lanes.run(Path(root), [], count, say=said.append, start=FakeLane, plan=plan, order_locks=False), said
    finally:
        assert not FakeLane.running


def test_the_lanes_end_on_the_reports_headline_read_back_from_its_markdown(tmp_path, monkeypatch):
    lines = ["4 heads against 1 head: perplexity -3.5% per token, 95% CI [-3.8%, -3.3%]", "1-mix against 1: +0.1%"]
    (tmp_path / "studies/s/reports").mkdir(parents=True)
    markdown = to_markdown([("title", "A study"), ("headline", lines), ("text", "> **not the headline**")], tmp_path)
    (tmp_path / "studies/s/reports/results.md").write_text(markdown)
    assert headline_of(markdown) == lines  # not a bold quote further down
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "40")
    said = answer("studies/s/dvc.yaml")
    assert said[0] == "lanes: the answer, from studies/s/reports/results.md:"
    assert all(len(line) <= 40 for line in said[1:]), said
    assert " ".join(said[1:]).split() == " ".join(lines).split()
    assert answer("studies/s/dvc.yaml:train@1-1") == [] and answer("dvc.yaml") == []  # a stage; no report here


def test_the_stages_find_headstudy_beside_the_lanes_interpreter_and_know_the_lane_count(monkeypatch):
    """As when the lanes start as .venv/bin/headstudy from a shell that never activated .venv."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    environment = lanes.dvc_environment(3)
    found = subprocess.run(["sh", "-c", "command -v headstudy"], env=environment, capture_output=True, text=True)
    assert Path(found.stdout.strip()).parent == Path(sys.executable).parent, found
    assert environment[lanes.LANES_VARIABLE] == "3"


def test_each_stage_starts_after_those_it_depends_on_and_at_most_n_at_a_time():
    code, said = run_fake(3, {})
    assert code == 0
    plan = fake_plan()
    started = FakeLane.started
    assert sorted(started) == sorted(plan.stale)  # fingerprint was up to date: not run
    for stage in started:
        assert all(started.index(above) < started.index(stage) for above in plan.upstream[stage] if above in started)
    assert FakeLane.most == 3
    assert said[-1] == "lanes: all 10 stages done"
    # One line per change: what ended, what started, how far, and what runs.
    assert said[1].startswith("lanes: start prepare (0 of 10 done; running: prepare)"), said
    assert said[2].startswith("lanes: done prepare, start train@0, train@1, train@2 (1 of 10 done"), said
    assert any(line.startswith("lanes: done train@") and "of 10 done" in line and "running: " in line for line in said)
    run_fake(1, {})
    assert FakeLane.most == 1


def test_the_first_line_counts_the_times_that_earlier_runs_of_the_pipeline_kept(tmp_path, monkeypatch):
    """A study run before on this machine: its stages' times (bookkeeping/stage_times.py) give the
    time left from the first line, every kind timed; another pipeline's times are not its own."""
    kept = {".": {"prepare": [5], "train": [50, 70], "evaluate": [10], "report": [30]}, "studies/x": {"report": [999]}}
    (tmp_path / stage_times.FILE).parent.mkdir(parents=True)
    (tmp_path / stage_times.FILE).write_text(json.dumps(kept))
    assert lanes.earlier_times(tmp_path, ["prepare", "train@0", "studies/x/dvc.yaml:report"]) == {
        "prepare": [5],
        "train": [50, 70],
        "evaluate": [10],
        "report": [30, 999],
    }
    FakeLane.codes, FakeLane.started, FakeLane.running, FakeLane.most = {}, [], set(), 0
    said: list[str] = []
    monkeypatch.setenv("COLUMNS", "200")
    lanes.run(tmp_path, [], 2, say=said.append, start=FakeLane, plan=fake_plan(), order_locks=False)
    # prepare 5 s, four trainings of 60 s two at a time, their evaluations, the report: about 3 min.
    assert said[1] == "lanes: start prepare (0 of 10 done, about 3 min left; running: prepare)", said[1]


def test_the_time_left_gives_waiting_stages_to_the_first_free_lane_at_the_time_their_kind_took():
    """fake_plan: four trainings, each evaluated, then the report; two lanes."""
    plan = fake_plan()
    took = {"train": [60.0], "evaluate": [10.0]}
    # train@0 done; train@1 has run 20 of its 60 s; train@2 and 3, the evaluations and the report wait.
    waiting = ["train@2", "train@3", "evaluate@0", "evaluate@1", "evaluate@2", "evaluate@3", "report"]
    left, untimed = lanes.time_left(plan, waiting, {"train@1": 100.0}, took, 2, now=120.0)
    # Lane A: train@1 until 40, train@3 until 100. Lane B: train@2 until 60, then evaluate@0, 1
    # and 2 until 90, and evaluate@3 from 100, when train@3 ends, until 110; the report, untimed.
    assert untimed == ["report"]
    assert left == pytest.approx(110.0)
    # One lane: everything in a row.
    assert lanes.time_left(plan, waiting, {"train@1": 100.0}, took, 1, now=120.0)[0] == pytest.approx(40 + 120 + 40)
    # Nothing timed yet: no estimate, and the line says none.
    assert lanes.time_left(plan, waiting, {}, {}, 2, now=0.0) == (0.0, ["train", "evaluate", "report"])
    line = lanes.progress(
        "s/dvc.yaml:train@0", ["s/dvc.yaml:train@2"], 1, 10, ["s/dvc.yaml:train@1"], (110.0, ["report"]), width=120
    )
    assert line == (
        "lanes: done train@0, start train@2 (1 of 10 done, about 2 min left + report (not timed yet); running: train@1)"
    )
    assert lanes.progress(None, ["prepare"], 0, 10, ["prepare"], (0.0, ["prepare"]), width=120) == (
        "lanes: start prepare (0 of 10 done; running: prepare)"
    )


def test_the_progress_line_fits_the_terminal_and_always_gives_the_count_and_the_time_left():
    """As the quick look's lines were, 148 to 161 columns, in a terminal of 120."""
    changes = ("s/dvc.yaml:evaluate@4-1", ["s/dvc.yaml:evaluate@4-2"], 10, 15)
    running = ["s/dvc.yaml:train@4-3", "s/dvc.yaml:evaluate@4-2"]
    left = (20.0, ["evaluate", "baselines", "report"])
    assert lanes.progress(*changes, running, left, width=1000) == (
        "lanes: done evaluate@4-1, start evaluate@4-2 (10 of 15 done, under a minute left + evaluate, baselines, "
        "report (not timed yet); running: train@4-3, evaluate@4-2)"
    )
    assert lanes.progress(*changes, running, left, width=130) == (
        "lanes: done evaluate@4-1, start evaluate@4-2 (10 of 15 done, under a minute left + evaluate, baselines, "
        "report (not timed yet))"
    )
    assert lanes.progress(*changes, running, left, width=120) == (
        "lanes: done evaluate@4-1, start evaluate@4-2 (10 of 15 done, under a minute left + 3 kinds not timed yet)"
    )
    assert lanes.progress(*changes, running, left, width=80) == (
        "lanes: 10 of 15 done, under a minute left + 3 kinds not timed yet"
    )
    narrow = lanes.progress(*changes, running, left, width=40)  # too narrow for any: the shortest
    assert narrow == "lanes: 10 of 15 done, under a minute left + 3 kinds not timed yet"


def test_a_stage_is_named_by_its_folder_too_where_another_pipeline_has_a_stage_of_that_name():
    """The quick look: the project's configure and prepare, and the study's own configure."""
    stages = ["configure", "prepare", "studies/quick-look/dvc.yaml:configure", "studies/quick-look/dvc.yaml:train@1-1"]
    names = lanes.display_names(stages)
    assert list(names.values()) == ["configure", "prepare", "quick-look:configure", "train@1-1"]
    line = lanes.progress("configure", stages[2:], 1, 4, stages[2:], (0.0, []), width=200, names=names)
    assert line == (
        "lanes: done configure, start quick-look:configure, train@1-1 "
        "(1 of 4 done; running: quick-look:configure, train@1-1)"
    )


def test_the_lanes_echo_a_stages_own_lines_but_not_dvcs_routine_ones_or_a_bars_redraws():
    for line in (
        "Running stage 'train@1-0':",
        "> headstudy train --config configs/train/h1-s0.yaml",
        "Updating lock file 'dvc.lock'",
        "Use `dvc push` to send your updates to remote storage.",
        "Stage 'prepare' didn't change, skipping",
        "Training:  20%|██        | 300/1500 [00:43<02:52,  6.97step/s, val/ppl=49.50]",
    ):
        assert lanes.routine(line), line
    for line in (
        "Validation at step 300/1500: val/ppl=49.50 (1.5 s); study left: about 5 min",
        "train: h4-s3: 29,333 tokens/s, weights be397e293181, model in models/h4-s3",
        "headstudy train: error: trainer.max_steps must be positive",
        "ERROR: failed to reproduce 'train@1-0'",
    ):
        assert not lanes.routine(line), line


def test_stages_that_dvc_found_up_to_date_give_no_estimate_of_the_time_left(monkeypatch):
    """Every stage takes a minute of the lanes' clock, but DVC ran none of their commands: a
    skipped stage's few seconds would make any estimate too short, so none is given."""
    clock = iter(range(0, 10**6, 60))
    monkeypatch.setattr(lanes.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(FakeLane, "ran_command", False)
    _, said = run_fake(2, {})
    assert not any(" left" in line for line in said), said
    monkeypatch.setattr(FakeLane, "ran_command", True)
    _, said = run_fake(2, {})
    assert any(" left" in line for line in said), said


def test_a_failing_stage_starts_nothing_new_lets_the_running_finish_and_is_named_in_one_line():
    with pytest.raises(ConfigError) as raised:
        run_fake(2, {"train@0": 1})
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("stage train@0 failed: headstudy train@0: error: it broke")
    # train@1 was running beside it and finished; nothing after the failure started.
    assert FakeLane.started == ["prepare", "train@0", "train@1"]
    assert "(2 of 10 stages done and recorded;" in message


def tree_digests(project: Path) -> dict[str, str]:
    """Every output file of the study, by its sha256."""
    found = {}
    for folder in ("models", "metrics", "reports", "configs", "fingerprints", "data/prepared"):
        for path in sorted((project / folder).rglob("*")):
            if path.is_file():
                found[str(path.relative_to(project))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture
def plain_repro(reproduced_study) -> Path:
    """tinyproject.REPRODUCED after a plain sequential `dvc repro` with Python's hash seed fixed
    (conftest's, built once per test run; read-only)."""
    return reproduced_study[0]


@pytest.mark.slow
def test_one_lane_writes_the_lock_and_outputs_of_a_plain_dvc_repro_byte_for_byte(plain_repro, tmp_path):
    """The same change to two copies of a reproduced study, which reruns some of its stages and
    keeps the rest (configure and the report rerun after a new title): one lane writes the lock and
    every output of a plain `dvc repro`, byte for byte. From scratch, in two lanes, stopped and
    rerun: test_lanes_stopped_mid_study_by_ctrl_c_then_rerun_give_the_same_result."""
    plain, project = copy_project(plain_repro, tmp_path / "plain"), copy_project(plain_repro, tmp_path / "lanes")
    for folder in (plain, project):
        edit_params(folder, "report", title="A tiny study, retitled")
    rerun = ran_stages(run(plain, "dvc", "repro", env={**environment(), "PYTHONHASHSEED": "0"}).stdout)
    assert rerun == {"configure", "report"}
    result = run(project, "headstudy", "lanes", "-j", "1")
    kept = ("prepare", "baselines", "train@1-0", "train@1-mix-0", "evaluate@1-0", "evaluate@1-mix-0", "inspect")
    for stage in kept:  # each checked in its turn, and found up to date
        assert f"[{stage}] Data and pipelines are up to date." in result.stdout, stage
    # It ends on the report's answer where the report has one; this one compares no pair (the
    # answer itself: test_the_lanes_end_on_the_reports_headline_read_back_from_its_markdown).
    assert headline_of((project / "reports/results.md").read_text()) == []
    assert result.stdout.splitlines()[-1] == "lanes: all 9 stages done", result.stdout[-500:]
    assert "A tiny study, retitled" in (project / "reports/results.md").read_text()
    assert (project / "dvc.lock").read_text() == (plain / "dvc.lock").read_text()
    assert tree_digests(project) == tree_digests(plain)
    assert "lanes: all 10 stages are up to date" in run(project, "headstudy", "lanes").stdout
    assert "Data and pipelines are up to date" in run(project, "dvc", "status").stdout


def wait_for(condition, what: str, process: subprocess.Popen, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert process.poll() is None, f"lanes ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.05)


def read_output(process: subprocess.Popen, lines: list[str]) -> threading.Thread:
    def read():
        for line in process.stdout:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader


@pytest.mark.slow
def test_lanes_stopped_mid_study_by_ctrl_c_then_rerun_give_the_same_result(plain_repro, tmp_path):
    project = make_project(tmp_path / "project", REPRODUCED)
    # Ctrl-C at a terminal: SIGINT to the lanes' process group, while a training runs.
    lines: list[str] = []
    stopped = subprocess.Popen(
        ["headstudy", "lanes", "-j", "2"],
        cwd=project,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=default_signals,
    )
    reader = read_output(stopped, lines)
    checkpoints = project / "checkpoints"
    wait_for(lambda: list(checkpoints.glob("h*-s0-*/last.ckpt")), "a training's checkpoint", stopped)
    os.killpg(stopped.pid, signal.SIGINT)
    assert stopped.wait(timeout=120) == 128 + signal.SIGINT
    reader.join(timeout=10)
    output = "".join(lines)
    assert "lanes: stopped by SIGINT: " in output, output[-3000:]
    kept = {folder.parent.name.rsplit("-", 1)[0] for folder in checkpoints.glob("h*-s0-*/last.ckpt")}
    assert_nothing_half_written(project)
    recorded = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    assert {"fingerprint", "configure", "prepare"} <= set(recorded) and "report" not in recorded
    assert kept, "no training was stopped after its checkpoint"

    result = run(project, "headstudy", "lanes", "-j", "2")
    for name in kept:  # a training stopped after its checkpoint resumes from it
        assert f"resuming {name}" in result.stdout, name
    assert re.fullmatch(r"lanes: all \d+ stages done", result.stdout.splitlines()[-1]), result.stdout[-500:]
    # Two trainings side by side may finish in either order: see same_result_but_gitignore_order.
    same_result_but_gitignore_order(project, plain_repro)
    assert_nothing_half_written(project)
    assert "lanes: all 10 stages are up to date" in run(project, "headstudy", "lanes").stdout
    assert "Data and pipelines are up to date" in run(project, "dvc", "status").stdout


def same_result_but_gitignore_order(project: Path, plain_repro: Path) -> None:
    """DVC appends a model's line to models/.gitignore when its stage finishes, so where two
    trainings run side by side, or after a stop and a rerun (as after a plain `dvc repro` stopped
    and rerun), the lines follow the order the trainings finished in; so does the md5 of the
    `models` folder inspect depends on. The lines must be the same; every other byte of the lock
    and of the outputs identical."""
    ignored = [sorted((folder / "models" / ".gitignore").read_text().splitlines()) for folder in (project, plain_repro)]
    assert ignored[0] == ignored[1]
    assert without_models_folder_md5(project) == without_models_folder_md5(plain_repro)
    digests = [tree_digests(folder) for folder in (project, plain_repro)]
    for found in digests:
        del found["models/.gitignore"]
    assert digests[0] == digests[1]


def without_models_folder_md5(project: Path) -> str:
    lock = (project / "dvc.lock").read_text()
    return re.sub(r"(- path: models\n\s+hash: md5\n\s+md5: )\w+\.dir", r"\1(order of finishing)", lock)


@pytest.mark.slow
def test_a_refused_stage_stops_the_lanes_in_one_line_and_a_rerun_continues(tmp_path):
    project = make_project(tmp_path / "project", REPRODUCED)
    edit_params(project, "trainer", max_steps=-5)
    result = run(project, "headstudy", "lanes", "-j", "2", check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("headstudy lanes: error: stage configure failed: headstudy configure: error: "), line
    assert "trainer.max_steps" in line and "(1 of 10 stages done and recorded;" in line
    assert list(yaml.safe_load((project / "dvc.lock").read_text())["stages"]) == ["fingerprint"]
    assert "start prepare" not in result.stdout
    # Fixed, the same command continues: fingerprint is not run again.
    edit_params(project, "trainer", max_steps=200)
    result = run(project, "headstudy", "lanes", "-j", "2", "configure")
    assert "lanes: 1 of 2 stages to check or run, in 2 lanes" in result.stdout
    assert "lanes: all 1 stages done" in result.stdout
    assert list(yaml.safe_load((project / "dvc.lock").read_text())["stages"]) == ["fingerprint", "configure"]
