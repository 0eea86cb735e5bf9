"""The `train` stage's Lightning module against the same training written out in PyTorch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from headstudy.formats.prepared import load_tokens
from headstudy.settings.compose import compose_config, model_config
from headstudy.weights.model import Decoder, next_token_loss
from headstudy.weights.training import LanguageModelModule, TokenDataModule, TrainingBatches, build_trainer, one_cycle

STEPS = 12


@pytest.mark.slow
def test_lightning_training_matches_a_plain_loop_weight_for_weight(small_corpus, in_project):
    """Lightning runs our own step (zero_grad, backward, AdamW, the one-cycle schedule) on the
    batch of each step, across validation intervals: any step it skipped, repeated, reordered
    or left unscheduled would change the weights."""
    config = compose_config(
        ["model=tiny", "threads=1", f"trainer.max_steps={STEPS}", "trainer.val_every_steps=5", *small_corpus]
    )

    torch.manual_seed(config.seed)
    plain_model = Decoder(model_config(config))
    setup = LanguageModelModule(plain_model, config.optimizer, STEPS).configure_optimizers()
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
    module = LanguageModelModule(Decoder(model_config(config)), config.optimizer, STEPS)
    trainer = build_trainer(config, [])
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
