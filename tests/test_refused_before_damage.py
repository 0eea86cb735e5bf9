"""Bad input is refused before anything is written, in one line that names the key or file:
checked through the real command line (`headstudy.cli.main`, in this process), each case in a
scratch copy of the project's conf/ with a small params.yaml."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from headstudy.cli import main

SMALL = {
    "study": {"variants": [1, 4], "seeds": [0]},
    "model": {"preset": "tiny"},
    "trainer": {"max_steps": 20, "val_every_steps": 10},
    "threads": 1,
    "report": {"title": "t", "compare": [[1, 4]]},
}


def project(folder: Path, params: dict, conf: Path = ROOT / "conf") -> Path:
    """A study folder: conf/ and params.yaml, nothing else."""
    shutil.copytree(conf, folder / "conf")
    (folder / "params.yaml").write_text(yaml.safe_dump(params))
    return folder


def files_in(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def refused(capsys, *args: str) -> str:
    """The one line a refusal prints; exit status 2, no traceback."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        main(list(args))
    assert stopped.value.code == 2
    errors = capsys.readouterr().err
    assert "Traceback" not in errors, errors
    [line] = errors.strip().splitlines()
    assert line.startswith(f"headstudy {args[0]}: error: "), line
    return line


@pytest.fixture
def study(tmp_path, monkeypatch):
    """Make a study folder with these params and run in it; its files before any command."""
    monkeypatch.delenv("HEADSTUDY_CONF", raising=False)
    monkeypatch.delenv("DVC_STAGE", raising=False)

    def make(params: dict, conf: Path = ROOT / "conf") -> dict[str, bytes]:
        project(tmp_path, params, conf)
        monkeypatch.chdir(tmp_path)
        return files_in(tmp_path)

    return make


def with_study(**changes) -> dict:
    params = yaml.safe_load(yaml.safe_dump(SMALL))
    params["study"].update(changes)
    return params


def assert_configure_refuses(study, capsys, params: dict, named: str, conf: Path = ROOT / "conf") -> None:
    """configure on a study of these params refuses in one line naming `named`, writing nothing."""
    before = study(params, conf)
    assert named in refused(capsys, "configure")
    assert files_in(Path.cwd()) == before


@pytest.mark.parametrize(
    "overrides, named",
    [
        ({"x": ["optimizer.lr=0.01"]}, ["study.variant_overrides", "variant=x"]),
        ({"4-nope": ["optimizer.lr=0.01"]}, ["study.variant_overrides.4-nope", "conf/variants/ has no option 'nope'"]),
        ({"4": ["model.n_heads=1"]}, ["study.variant_overrides.4", "model.n_heads", "the variant itself chooses"]),
        ({"4": ["seed=5"]}, ["study.variant_overrides.4", "seed", "the study chooses"]),
        ({"8": ["seed=5"]}, ["study.variant_overrides.8", "seed"]),  # a variant the study leaves out
    ],
)
def test_configure_refuses_variant_overrides_it_would_drop_or_that_name_no_variant(study, capsys, overrides, named):
    before = study(with_study(variant_overrides=overrides))
    line = refused(capsys, "configure")
    for name in named:
        assert name in line, line
    assert files_in(Path.cwd()) == before  # no configs/ written


def test_a_run_by_hand_refuses_the_variant_override_that_configure_refuses(study, capsys):
    study(with_study(variant_overrides={"4": ["seed=5"]}))
    assert "study.variant_overrides.4 in params.yaml sets seed" in refused(capsys, "config", "variant=4")


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"rates": "lr-tunign"}, ["study.rates in params.yaml must name an entry of", "lr-tuning", "'lr-tunign'"]),
        ({"rates": "lr-tuning", "lrs": [0.001, 0.002]}, ["study.rates", "study.lrs", "keep one"]),
        ({"rates": -0.003}, ["study.rates in params.yaml", "one learning rate > 0 for every variant", "-0.003"]),
        ({"rates": True}, ["study.rates in params.yaml", "one learning rate > 0 for every variant", "True"]),
    ],
)
def test_configure_refuses_selected_rates_it_cannot_take(study, capsys, changes, named):
    before = study(with_study(**changes))
    line = refused(capsys, "configure")
    for name in named:
        assert name in line, line
    assert files_in(Path.cwd()) == before


def test_a_variant_trains_at_the_rate_its_study_selected_unless_its_own_settings_set_another(study, capsys):
    study(with_study(rates="lr-tuning", variant_overrides={"1": ["optimizer.lr=0.001"]}))
    rates = yaml.safe_load((ROOT / "conf" / "selected_rates.yaml").read_text())["lr-tuning"]
    for variant, lr in (("4", rates["4"]), ("1-mix", rates["1-mix"]), ("1", 0.001)):
        capsys.readouterr()
        main(["config", f"variant={variant}"])
        assert yaml.safe_load(capsys.readouterr().out)["optimizer"]["lr"] == lr, variant


def test_configure_refuses_a_compare_pair_naming_a_variant_outside_the_study(study, capsys):
    params = with_study()
    params["report"]["compare"] = [[1, 4], [1, 8]]
    before = study(params)
    line = refused(capsys, "configure")
    assert "report.compare" in line and "[1, 8]" in line and "has no 8" in line
    assert files_in(Path.cwd()) == before


def test_configure_names_a_variant_that_cannot_be_built_before_the_pairs_that_name_it(study, capsys):
    params = with_study(variants=[1, 3])
    before = study(params)
    line = refused(capsys, "configure")
    assert "n_heads" in line and "3" in line and "report.compare" not in line, line
    assert files_in(Path.cwd()) == before


SPOTLIGHT = yaml.safe_load((ROOT / "studies/spotlight/params.yaml").read_text())


@pytest.mark.parametrize(
    "data, named",
    [
        ({"values": 1}, "data.values must be an integer in [2, 10], got 1"),
        ({"segment_max": 2}, "data.segment_max must be an integer in [4, inf], got 2"),
        ({"clue_types": 0}, "data.clue_types must be an integer in [1, 8], got 0"),
        ({"segment_max": 40}, "data.segment_max=40 must be below model.context=32"),
    ],
)
def test_configure_refuses_task_settings_that_prepare_or_the_context_would_refuse(study, capsys, data, named):
    params = yaml.safe_load(yaml.safe_dump(SPOTLIGHT))
    params["data"].update(data)
    assert_configure_refuses(study, capsys, params, named)


@pytest.mark.parametrize(
    "override, named",
    [
        ("data.test_fraction=abc", "data.test_fraction must be a number in (0, 0.5), got 'abc'"),
        ("data.test_fraction=nan", "data.test_fraction must be a number in (0, 0.5), got nan"),
        ("trainer.devices=abc", "trainer.devices must be a number of devices"),
        ("trainer.devices=0", "trainer.devices must be a number of devices"),
    ],
)
@pytest.mark.parametrize("command", ["config", "train"])
def test_bad_fractions_and_devices_are_one_line_naming_the_key(study, capsys, tmp_path, command, override, named):
    before = study(SMALL)
    hand = [f"paths.{key}={tmp_path / 'hand' / key}" for key in ("models", "metrics", "checkpoints", "prepared")]
    line = refused(capsys, command, "data=textdir", override, *hand)
    assert named in line, line
    assert files_in(Path.cwd()) == before


@pytest.mark.parametrize(
    "section, values, named",
    [
        ("inspect", {"batch_size": "abc"}, "inspect.batch_size must be an integer >= 1, got 'abc'"),
        ("inspect", {"roles": {"self": {"above": 2}}}, "inspect.roles.self.above must be a number in [0, 1]"),
        ("inspect", {"spotlight": {"fair_null": {"alpha": 0}}}, "inspect.spotlight.fair_null.alpha must be a number"),
        ("diagnose", {"probe_every": 0}, "diagnose.probe_every must be an integer >= 1, got 0"),
        ("diagnose", {"clip_grad_norm": "off"}, "diagnose.clip_grad_norm must be null (no clipping) or a finite"),
        ("baselines", {"add_k": -1}, "baselines.add_k must be a finite positive number (add-k smoothing), got -1"),
        ("trainer", {"max_steps": 20, "compile": "yes"}, "trainer.compile must be true or false, got 'yes'"),
        ("trainer", {"max_steps": 20, "accelerator": "cpuu"}, "trainer.accelerator must be cpu, gpu, cuda, mps or"),
        ("optimizer", {"betas": [0.9]}, "optimizer.betas must be two numbers in [0, 1), got [0.9]"),
    ],
)
def test_configure_refuses_a_setting_of_the_wrong_type_or_range_in_any_section_naming_it(
    study, capsys, section, values, named
):
    params = with_study()
    params[section] = values
    assert_configure_refuses(study, capsys, params, named)


@pytest.mark.parametrize(
    "study_changes, named",
    [
        ({"seeds": [-1]}, "study.seeds in params.yaml must be a non-empty list of seeds (integers >= 0), got [-1]"),
        ({"seeds": "0"}, "study.seeds in params.yaml must be a non-empty list of seeds"),
        ({"lrs": [0.003, 0]}, "study.lrs in params.yaml must be a non-empty list of learning rates"),
        ({"variant_overrides": {"4": "optimizer.lr=0.01"}}, "study.variant_overrides in params.yaml must be a map"),
        ({"varients": [1, 4]}, "study.varients in params.yaml is not a setting"),
    ],
)
def test_configure_refuses_a_study_setting_of_the_wrong_type_or_name_naming_it(study, capsys, study_changes, named):
    assert_configure_refuses(study, capsys, with_study(**study_changes), named)


@pytest.mark.parametrize(
    "report, named",
    [
        ({"success_accuracy": 1.5}, "report.success_accuracy in params.yaml must be a number in (0, 1], the test"),
        ({"success_accuracy": "0.9"}, "report.success_accuracy in params.yaml must be a number in (0, 1]"),
        ({"extra": "lr-check/metrics"}, "report.extra in params.yaml must be a list of {title, metrics: FOLDER"),
        ({"extra": [{"title": "x", "metrics": "m", "notes": "typo"}]}, "report.extra.0.notes in params.yaml is not"),
        ({"compar": [[1, 4]]}, "report.compar in params.yaml is not a setting"),
        ({"compare": [[1, 4, 1]]}, "report.compare in params.yaml must be a list of pairs [A, B] of variants"),
        ({"labels": {"4": 4}}, "report.labels in params.yaml must be a label for each variant it names"),
        ({"budget": {"evidence": "e", "beat_bigram_by": 10, "max_gap_drift": 0.02}}, "report.budget.beat_bigram_by"),
    ],
)
def test_configure_refuses_a_report_setting_of_the_wrong_type_or_name_naming_it(study, capsys, report, named):
    params = with_study()
    params["report"].update(report)
    assert_configure_refuses(study, capsys, params, named)


@pytest.mark.parametrize(
    "conf_file, text, named",
    [
        ("variants/qk.yaml", "# @package _global_\nmodel:\n  qk_nrom: true\n", "model.qk_nrom is not a setting"),
        ("variants/qk.yaml", "model:\n  qk_norm: true\n", "variants is not a setting"),  # no @package line
        ("trainer/default.yaml", None, "trainer.compile is missing: expected true or false"),
    ],
)
def test_a_conf_file_with_a_key_no_section_has_or_without_one_it_needs_is_refused_naming_it(
    study, capsys, tmp_path, conf_file, text, named
):
    conf = tmp_path / "edited-conf"
    shutil.copytree(ROOT / "conf", conf)
    path = conf / conf_file
    if text is None:  # the file without the key
        path.write_text("".join(line for line in path.read_text().splitlines(True) if not line.startswith("compile:")))
    else:
        path.write_text(text)
    params = with_study(variants=[1, "4-qk"]) | {"report": {"title": "t", "compare": [[1, "4-qk"]]}}
    assert_configure_refuses(study, capsys, params, named, conf)


@pytest.mark.parametrize("command", ["config", "train"])
def test_bfloat16_on_a_cpu_without_native_bfloat16_is_refused_naming_float32(study, capsys, monkeypatch, command):
    import torch

    before = study(SMALL)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    line = refused(capsys, command, "data=textdir", "trainer.precision=bf16-mixed")
    assert "trainer.precision=bf16-mixed: this CPU computes no bfloat16 natively" in line
    assert line.endswith("use trainer.precision=32-true")
    assert files_in(Path.cwd()) == before


def test_bfloat16_on_a_cpu_with_native_bfloat16_is_accepted(study, capsys, monkeypatch):
    import torch

    study(SMALL)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    main(["config", "data=textdir", "trainer.precision=bf16-mixed"])
    assert yaml.safe_load(capsys.readouterr().out)["trainer"]["precision"] == "bf16-mixed"


@pytest.mark.parametrize(
    "vendor, amx, warned",
    [("GenuineIntel", False, True), ("GenuineIntel", True, False), ("AuthenticAMD", False, False)],
)
def test_configure_warns_that_bfloat16_is_slower_only_where_it_was_measured_slower_and_trains_it(
    study, capsys, monkeypatch, vendor, amx, warned
):
    import torch

    from headstudy.bookkeeping import provenance

    params = yaml.safe_load(yaml.safe_dump(SMALL))
    params["trainer"]["precision"] = "bf16-mixed"
    study(params)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(provenance, "cpu_info", lambda: {"vendor_id": vendor})
    capsys.readouterr()
    main(["configure"])
    warnings = capsys.readouterr().err.strip().splitlines()
    if warned:
        [line] = warnings
        assert line.startswith("configure: warning: trainer.precision=bf16-mixed on an Intel CPU without AMX is slower")
        assert line.endswith("for speed use trainer.precision=32-true")
    else:  # AMX, and AMD's Zen 4 without AMX, were measured faster in bfloat16
        assert warnings == []
    assert yaml.safe_load(Path("configs/train/h4-s0.yaml").read_text())["trainer"]["precision"] == "bf16-mixed"


@pytest.mark.parametrize("heads", ["0", "-4", "abc"])
def test_a_head_count_that_is_none_names_model_n_heads_and_conf_variants(study, capsys, heads):
    study(SMALL)
    line = refused(capsys, "config", f"model.n_heads={heads}")
    got = repr(heads) if heads == "abc" else heads
    assert f"model.n_heads must be an integer >= 1 (the number of heads), got {got}" in line
    assert "conf/variants/NAME.yaml" in line


def test_a_variant_that_is_no_variant_names_the_folder_conf_variants(study, capsys):
    study(SMALL)
    line = refused(capsys, "config", "variant=0")
    assert "conf/variants/NAME.yaml" in line and "conf/variant/" not in line


def truncate(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[: len(lines) // 2]))


def not_yaml(path: Path) -> None:
    path.write_text(path.read_text() + "model: [\n")


def edited(path: Path) -> None:
    path.write_text(path.read_text().replace("max_steps: 20", "max_steps: 30"))


@pytest.mark.parametrize("damage", [truncate, not_yaml, Path.unlink, edited])
@pytest.mark.parametrize("command", ["train", "evaluate"])
def test_a_stage_refuses_its_config_file_unless_configure_wrote_it_as_it_is(study, capsys, damage, command):
    study(SMALL)
    main(["configure"])
    config = Path("configs/train/h4-s0.yaml")
    damage(config)
    before = files_in(Path.cwd())
    line = refused(capsys, command, "--config", str(config))
    assert str(config) in line and "`dvc repro configure`" in line, line
    assert files_in(Path.cwd()) == before


def test_a_stage_refuses_its_config_file_once_params_or_conf_changed_but_not_for_a_comment(study, capsys):
    """The stage checks the digests configure recorded; params.yaml is compared as parsed, as
    DVC compares it, and conf/ byte for byte, as DVC hashes it."""
    study(SMALL)
    main(["configure"])
    from headstudy.cli import load_config

    config = "configs/train/h4-s0.yaml"
    params = Path("params.yaml")
    params.write_text("# a comment, which DVC does not rerun configure for\n" + params.read_text())
    assert load_config("train", ["--config", config]).model.n_heads == 4
    edited = yaml.safe_load(params.read_text())
    edited["report"]["title"] = "another title"  # not a training setting: still a study that configure did not write
    params.write_text(yaml.safe_dump(edited))
    line = refused(capsys, "train", "--config", config)
    assert f"{config} was written from another params.yaml or conf/" in line and "`dvc repro configure`" in line
    main(["configure"])
    assert load_config("train", ["--config", config]).model.n_heads == 4
    with open("conf/trainer/default.yaml", "a") as conf:
        conf.write("# a comment\n")
    assert "changed since" in refused(capsys, "evaluate", "--config", config)


def test_a_stage_reads_its_config_file_as_configure_wrote_it(study, capsys):
    study(SMALL)
    main(["configure"])
    from headstudy.cli import load_config

    assert load_config("train", ["--config", "configs/train/h4-s0.yaml"]).model.n_heads == 4
    assert load_config("report", ["--config", "configs/report.yaml"]).report.title == "t"


def test_prepare_and_evaluate_refuse_an_output_folder_that_cannot_be_written(study, capsys, monkeypatch):
    study(SMALL)
    main(["configure"])
    # As root a read-only folder takes files anyway: the folder is a file, which takes none.
    Path("blocked").write_text("")
    before = files_in(Path.cwd())
    line = refused(capsys, "prepare", "data=textdir", "paths.prepared=blocked/prepared")
    assert "blocked/prepared cannot be written" in line and "before prepare does its work" in line
    line = refused(capsys, "evaluate", "model=tiny", "paths.metrics=blocked/metrics", "paths.models=elsewhere")
    assert "blocked/metrics cannot be written" in line
    assert files_in(Path.cwd()) == before


REPORT_INPUTS = ["metrics", "studies/budget/metrics/curves", "reports/heads.json", "reports/figures/heads"]


@pytest.fixture
def report_inputs(study, tmp_path):
    """The committed default study's report inputs in a study folder, the report to go to out/;
    the prepared data's stats written as prepare writes them for the Penn Treebank."""
    study(yaml.safe_load((ROOT / "params.yaml").read_text()))
    for item in REPORT_INPUTS:
        source = ROOT / item
        (tmp_path / item).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copy)(source, tmp_path / item)
    prepared = tmp_path / "data/prepared"
    prepared.mkdir(parents=True)
    stats = {"corpus": "ptb", "vocab_size": 1024, "splits": {"test": {"tokens": 100001, "words": 82430, "lines": 3761}}}
    (prepared / "stats.json").write_text(json.dumps(stats))
    out = tmp_path / "out"
    shutil.copytree(tmp_path / "reports", out)
    heads = (out / "heads.json").read_text().replace('"reports/figures/heads/', f'"{out}/figures/heads/')
    (out / "heads.json").write_text(heads)
    return out


@pytest.mark.slow
def test_a_report_by_hand_with_an_input_missing_writes_nothing(report_inputs, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    (report_inputs / "heads.json").unlink()  # inspect's, read last of all by the report
    before = files_in(tmp_path)
    line = refused(capsys, "report", f"paths.reports={report_inputs}")
    assert "out/heads.json not found" in line
    assert files_in(tmp_path) == before


@pytest.mark.slow
def test_the_report_refuses_a_nan_in_a_validation_curve(report_inputs, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    study = yaml.safe_load((ROOT / "params.yaml").read_text())["study"]
    curve = Path(f"metrics/curves/h{study['variants'][0]}-s{study['seeds'][0]}.csv")
    lines = curve.read_text().splitlines()
    lines[2] = lines[2].rsplit(",", 1)[0] + ",nan"
    curve.write_text("\n".join(lines) + "\n")
    before = files_in(tmp_path)
    line = refused(capsys, "report", f"paths.reports={report_inputs}")
    assert f"{curve}: column val_ppl holds line 3: nan" in line
    assert files_in(tmp_path) == before


@pytest.mark.slow
def test_the_report_opens_the_store_before_it_writes(report_inputs, capsys, monkeypatch, tmp_path):
    (tmp_path / "broken.db").write_text("no database")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'broken.db'}")
    before = files_in(report_inputs)
    assert "cannot open the MLflow store" in refused(capsys, "report", f"paths.reports={report_inputs}")
    assert files_in(report_inputs) == before  # (the store's lock file beside it is the store's)


@pytest.mark.slow
def test_a_report_outside_the_project_refuses_figures_that_are_not_in_it(report_inputs, capsys, monkeypatch, tmp_path):
    """heads.json as the pipeline wrote it names reports/figures/heads/...: not this folder's."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    shutil.copytree(ROOT / "reports", elsewhere, ignore=shutil.ignore_patterns("results.*", "*.csv"))
    before = files_in(elsewhere)
    line = refused(capsys, "report", f"paths.reports={elsewhere}")
    assert "heads.json names the figure 'reports/figures/heads/" in line and "`headstudy inspect`" in line
    assert files_in(elsewhere) == before


# Settings that configure did not check, so that a later stage crashed after DVC had removed its
# outputs: the chapter's claim, the precision, an emptied section, a key given twice.
CLAIM = {"a": 1, "b": 4, "ppl_a": 46.1, "ppl_b": 43.2}


@pytest.mark.parametrize(
    "claim, named",
    [
        ({"a": 1, "b": 4, "ppl_a": 46.1}, "report.chapter_claim.ppl_b in params.yaml is missing: expected a positive"),
        ({**CLAIM, "ppl_b": "43.2"}, "report.chapter_claim.ppl_b in params.yaml must be a positive number"),
        ({**CLAIM, "ppl_a": "forty"}, "report.chapter_claim.ppl_a in params.yaml must be a positive number"),
        ("four heads win", "report.chapter_claim in params.yaml must be {a: VARIANT"),
        ({**CLAIM, "ppl_b": -43.2}, "report.chapter_claim.ppl_b in params.yaml must be a positive number"),
        ({**CLAIM, "ppl_a": 0}, "report.chapter_claim.ppl_a in params.yaml must be a positive number"),
        ({**CLAIM, "ppl": 40}, "report.chapter_claim.ppl in params.yaml is not a setting"),
        ({**CLAIM, "b": 8}, "report.chapter_claim.b in params.yaml names variant 8, but study.variants (1, 4)"),
        (
            {**CLAIM, "a": 4, "b": 1},
            "report.chapter_claim in params.yaml sets the chapter beside the comparison [4, 1]",
        ),
    ],
    ids=[
        "missing-ppl_b",
        "text",
        "word",
        "plain-string",
        "negative",
        "zero",
        "unknown-key",
        "outside-the-study",
        "no-comparison",
    ],
)
def test_configure_refuses_a_chapter_claim_the_report_would_crash_on_or_drop(study, capsys, claim, named):
    params = yaml.safe_load(yaml.safe_dump(SMALL))
    params["report"]["chapter_claim"] = claim
    assert_configure_refuses(study, capsys, params, named)


def test_configure_writes_a_chapter_claim_beside_its_comparison(study, capsys):
    params = yaml.safe_load(yaml.safe_dump(SMALL))
    params["report"]["chapter_claim"] = CLAIM
    study(params)
    main(["configure"])
    assert yaml.safe_load(Path("configs/report.yaml").read_text())["report"]["chapter_claim"] == CLAIM


@pytest.mark.parametrize("precision", ["fp8", "16-true", "bf16-true", "64-true", "16-mixed", "transformer-engine", 32])
@pytest.mark.parametrize("command", ["configure", "config"])
def test_a_precision_the_trainer_does_not_support_on_a_cpu_is_refused_naming_the_supported(
    study, capsys, monkeypatch, command, precision
):
    import torch

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)  # bf16-mixed is one of them
    params = yaml.safe_load(yaml.safe_dump(SMALL))
    params["trainer"]["precision"] = precision
    before = study(params)
    line = refused(capsys, command)
    assert f"trainer.precision must be one of 32-true, bf16-mixed on a CPU, got {precision!r}" in line, line
    assert ("in bfloat16" in line) == (precision == "16-mixed")
    assert files_in(Path.cwd()) == before


def test_a_gpu_training_may_take_16_mixed_but_not_half_weights(study, capsys):
    study(SMALL)
    main(["config", "trainer=gpu", "trainer.precision=16-mixed"])
    assert yaml.safe_load(capsys.readouterr().out)["trainer"]["precision"] == "16-mixed"
    line = refused(capsys, "config", "trainer=gpu", "trainer.precision=bf16-true")
    assert "trainer.precision must be one of 32-true, bf16-mixed, 16-mixed with trainer.accelerator=gpu" in line


@pytest.mark.parametrize("section", ["trainer", "model"])
def test_configure_refuses_a_section_whose_keys_were_removed(study, capsys, section):
    params = yaml.safe_load(yaml.safe_dump(SMALL))
    params[section] = None  # `trainer:` left without its keys (Hydra took the null for a group choice)
    before = study(params)
    line = refused(capsys, "configure")
    assert f"params.yaml: the section {section}: is empty: expected its keys" in line, line
    assert files_in(Path.cwd()) == before


def test_a_bad_shared_setting_is_blamed_on_its_key_not_on_a_variant_outside_the_study(study, capsys):
    params = with_study(variant_overrides={"1-mix": ["optimizer.lr=0.006"], "4": ["optimizer.lr=0.003"]})
    params["trainer"]["max_steps"] = -5
    before = study(params)
    line = refused(capsys, "configure")
    assert line.endswith("error: trainer.max_steps must be an integer >= 1, got -5"), line
    assert files_in(Path.cwd()) == before


@pytest.mark.parametrize("trainer", [None, {"val_every_steps": 10}])
def test_configure_refuses_a_study_that_does_not_state_its_budget(study, capsys, trainer):
    params = yaml.safe_load(yaml.safe_dump(SMALL))
    if trainer is None:
        del params["trainer"]  # the section deleted: conf's 3,000 steps would train silently
    else:
        params["trainer"] = trainer
    before = study(params)
    line = refused(capsys, "configure")
    assert "params.yaml: expected trainer.max_steps, the study's training budget in steps" in line, line
    assert files_in(Path.cwd()) == before


@pytest.mark.parametrize("command", [["configure"], ["config"], ["train", "variant=4"]])
def test_a_key_given_twice_in_params_yaml_is_refused_as_dvc_refuses_it(study, capsys, command):
    before = study(SMALL)
    text = Path("params.yaml").read_text()
    assert "  max_steps: 20\n" in text
    Path("params.yaml").write_text(text.replace("  max_steps: 20\n", "  max_steps: 20\n  max_steps: 40\n"))
    before["params.yaml"] = Path("params.yaml").read_bytes()
    line = refused(capsys, *command)
    assert "params.yaml gives trainer.max_steps (lines " in line and "more than once: keep one" in line, line
    assert files_in(Path.cwd()) == before


@pytest.mark.parametrize("command", ["diagnose", "evaluate"])
def test_a_command_that_lightning_stops_by_sigterm_exits_143_as_train_does(study, capsys, monkeypatch, command):
    """Lightning ends a fit stopped by SIGTERM in a SystemExit of status 0: diagnose exited 0 and
    wrote nothing, where train exits 143."""
    import importlib

    from lightning.pytorch.utilities.exceptions import SIGTERMException

    def stopped(config):
        raise SIGTERMException

    study(SMALL)
    monkeypatch.setattr(importlib.import_module(f"headstudy.{command}"), "main", stopped)
    hand = [f"paths.{key}=hand/{key}" for key in ("models", "metrics", "checkpoints", "prepared")]
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main([command, "model=tiny", *hand])
    assert stop.value.code == 143
    assert f"headstudy {command}: stopped by SIGTERM before it finished" in capsys.readouterr().err


def partner_study(tmp_path, monkeypatch, **changes) -> Path:
    """A study (variants 1 and 4, configured) beside one that trains 1-mix and reads its partners
    1 and 4 from it; the second, with these changes to its params, is the working folder."""
    partner = project(tmp_path / "partner", SMALL)
    monkeypatch.chdir(partner)
    main(["configure"])
    params = yaml.safe_load(yaml.safe_dump(SMALL))
    params["study"] = {"variants": ["1-mix"], "seeds": [0], "partners": {"folder": "../partner", "variants": [1, 4]}}
    params["report"]["compare"] = [[1, 4], [1, "1-mix"]]
    for key, value in changes.items():
        section, name = key.split("__")
        params[section][name] = value
    monkeypatch.chdir(project(tmp_path / "pair", params))
    return tmp_path / "pair"


def test_configure_lists_partner_models_with_the_metrics_of_the_study_that_trained_them(tmp_path, monkeypatch):
    partner_study(tmp_path, monkeypatch)
    main(["configure"])
    assert sorted(path.name for path in Path("configs/train").iterdir()) == ["h1-mix-s0.yaml"]
    report = yaml.safe_load(Path("configs/report.yaml").read_text())
    assert report["study"]["variants"] == ["1", "4", "1-mix"]
    assert [(m["name"], m.get("metrics")) for m in report["models"]] == [
        ("h1-s0", "../partner/metrics"),
        ("h4-s0", "../partner/metrics"),
        ("h1-mix-s0", None),
    ]


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"trainer__max_steps": 30}, ["study.partners.folder=../partner", "h1-s0.yaml differs", "the same settings"]),
        ({"study__seeds": [0, 1]}, ["study.partners.folder=../partner", "h1-s1.yaml not found", "on seed 1"]),
        ({"study__partners": {"folder": "../partner"}}, ["study.partners.variants in params.yaml is missing"]),
        ({"study__variants": ["1"]}, ["study.partners.variants", "lists 1, which study.variants trains here"]),
    ],
)
def test_configure_refuses_partners_that_would_differ_in_more_than_the_variant(
    tmp_path, monkeypatch, capsys, changes, named
):
    partner_study(tmp_path, monkeypatch, **changes)
    before = files_in(Path.cwd())
    line = refused(capsys, "configure")
    for name in named:
        assert name in line, line
    assert files_in(Path.cwd()) == before


def test_one_number_as_study_rates_trains_every_variant_at_that_rate_but_for_its_own_settings(study, capsys):
    study(with_study(rates=0.004, variant_overrides={"1": ["optimizer.lr=0.001"]}))
    for variant, lr in (("4", 0.004), ("1-mix", 0.004), ("8", 0.004), ("1", 0.001)):
        capsys.readouterr()
        main(["config", f"variant={variant}"])
        assert yaml.safe_load(capsys.readouterr().out)["optimizer"]["lr"] == lr, variant


def test_the_keys_a_user_changes_are_in_params_yaml_so_dvc_exp_run_sets_them_without_a_plus():
    """`dvc exp run -S key=value` refuses a key params.yaml lacks (it asks for `+key`): the heads and
    variants, seeds, learning rate, width and steps of the default study are all there."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for key in ("study.variants", "study.seeds", "study.rates", "model.width", "trainer.max_steps"):
        section, name = key.split(".")
        assert name in params[section], key


@pytest.mark.parametrize(("width", "expected", "wide_mlp"), [(None, 128, 512 + 64), (256, 256, 512 + 128)])
def test_a_null_width_is_the_presets_and_a_number_sets_it_with_the_wider_mlp_scaled(
    study, capsys, width, expected, wide_mlp
):
    params = yaml.safe_load(yaml.safe_dump(SMALL))
    params["model"] = {"preset": "course", "width": width}
    study(params)
    capsys.readouterr()
    main(["config", "variant=1"])
    assert yaml.safe_load(capsys.readouterr().out)["model"]["width"] == expected
    main(["config", "variant=1-wide"])
    wide = yaml.safe_load(capsys.readouterr().out)["model"]
    # The wider MLP buys the output projection's width^2 + width parameters: 64 units at 128, 128 at 256.
    assert wide["width"] == expected and wide["mlp_hidden"] == wide_mlp
