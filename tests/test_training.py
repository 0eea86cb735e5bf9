"""The `train` stage's Lightning module against the same training written out in PyTorch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from headstudy.formats.prepared import load_tokens
from headstudy.settings.compose import compose_config, model_config
from headstudy.settings.training import diverged, training_settings
from headstudy.weights.model import Decoder, next_token_loss
from headstudy.weights.training import (
    LanguageModelModule,
    TokenDataModule,
    TrainingBatches,
    TrainingDiverged,
    build_trainer,
    one_cycle,
)

STEPS = 12


@pytest.mark.slow
def test_lightning_training_matches_a_plain_loop_weight_for_weight(small_corpus, in_project, monkeypatch, request):
    """Lightning runs our own step (zero_grad, backward, AdamW, the one-cycle schedule) on the
    batch of each step, across validation intervals: any step it skipped, repeated, reordered
    or left unscheduled would change the weights."""
    config = compose_config(
        ["model=tiny", "threads=1", f"trainer.max_steps={STEPS}", "trainer.val_every_steps=5", *small_corpus]
    )
    # Both trainings at one thread count, whatever an earlier test of this process left: Lightning
    # sets torch's threads from OMP_NUM_THREADS's absence, and other thread counts give other sums.
    monkeypatch.setenv("OMP_NUM_THREADS", str(config.threads))
    request.addfinalizer(lambda threads=torch.get_num_threads(): torch.set_num_threads(threads))
    torch.set_num_threads(config.threads)

    torch.manual_seed(config.seed)
    plain_model = Decoder(model_config(config))
    setup = LanguageModelModule(plain_model, training_settings(config).optimizer, STEPS).configure_optimizers()
    optimizer, schedule = setup["optimizer"], setup["lr_scheduler"]
    batches = TrainingBatches(
        load_tokens(Path(config.paths.prepared), "train"), config.data.batch_size, config.model.context, config.seed
    )
    for step in range(STEPS):
        inputs, targets = batches[step]
        loss = next_token_loss(plain_model(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()

    torch.manual_seed(config.seed)
    module = LanguageModelModule(Decoder(model_config(config)), training_settings(config).optimizer, STEPS)
    trainer = build_trainer(training_settings(config).trainer, [])
    trainer.fit(
        module,
        datamodule=TokenDataModule(
            load_tokens(config.paths.prepared, "train"),
            load_tokens(config.paths.prepared, "valid"),
            config.data.batch_size,
            config.model.context,
            config.seed,
            config.trainer.val_every_steps,
        ),
    )

    assert trainer.global_step == STEPS
    plain_weights = dict(plain_model.named_parameters())
    differing = [
        name
        for name, weight in module.model.named_parameters()
        if not torch.equal(weight.detach(), plain_weights[name].detach())
    ]
    assert not differing, differing
    settings = config.optimizer
    final_lr = settings.lr * one_cycle(
        STEPS, STEPS, settings.warmup_fraction, settings.start_factor, settings.final_factor
    )
    assert trainer.optimizers[0].param_groups[0]["lr"] == optimizer.param_groups[0]["lr"] == final_lr


@pytest.mark.slow
@pytest.mark.skipif(
    not torch.cpu._is_avx512_bf16_supported(),
    reason="this CPU computes no bfloat16 natively: trainer.precision=bf16-mixed is refused here",
)
def test_bf16_mixed_trains_in_bfloat16_and_keeps_float32_weights(small_corpus, in_project):
    """bf16-mixed on a CPU: the matrix products of the stage's own training run in bfloat16 under
    autocast, the weights stay float32, and the model learns (its loss on a batch falls)."""
    overrides = ["model=tiny", "threads=1", "trainer.max_steps=30", "trainer.val_every_steps=15"]
    config = compose_config([*overrides, "trainer.precision=bf16-mixed", *small_corpus])
    tokens = {split: load_tokens(config.paths.prepared, split) for split in ("train", "valid")}
    inputs, targets = TrainingBatches(tokens["train"], config.data.batch_size, config.model.context, config.seed)[0]
    torch.manual_seed(config.seed)
    module = LanguageModelModule(
        Decoder(model_config(config)), training_settings(config).optimizer, config.trainer.max_steps
    )
    with torch.no_grad():
        loss_before = next_token_loss(module.model(inputs), targets).item()
    output_dtypes = set()
    linear = next(layer for layer in module.model.modules() if isinstance(layer, torch.nn.Linear))
    hook = linear.register_forward_hook(lambda _layer, _inputs, output: output_dtypes.add(output.dtype))

    trainer = build_trainer(training_settings(config).trainer, [])
    trainer.fit(
        module,
        datamodule=TokenDataModule(
            tokens["train"],
            tokens["valid"],
            config.data.batch_size,
            config.model.context,
            config.seed,
            config.trainer.val_every_steps,
        ),
    )
    hook.remove()

    assert trainer.global_step == config.trainer.max_steps
    assert output_dtypes == {torch.bfloat16}, output_dtypes
    assert {weight.dtype for weight in module.model.parameters()} == {torch.float32}
    with torch.no_grad():
        assert next_token_loss(module.model(inputs), targets).item() < loss_before


def test_a_divergence_in_float16_names_the_precision_and_otherwise_the_learning_rate():
    error = TrainingDiverged("train/loss", float("nan"), step=12, max_steps=3000, lr=0.003)
    in_float16 = str(diverged(error, "16-mixed"))
    assert "trainer.precision=16-mixed" in in_float16 and "bf16-mixed or 32-true" in in_float16
    assert "optimizer.lr=0.003 is likely too high" not in in_float16
    for precision in ("32-true", "bf16-mixed"):
        message = str(diverged(error, precision))
        assert "optimizer.lr=0.003 is likely too high" in message and "trainer.precision" not in message
        assert message.startswith("training diverged: train/loss is nan at step 12 of trainer.max_steps=3000")
