import math

import numpy as np
import pytest
import torch

from headstudy.analysis.measures.perplexity import perplexity, stream_nll
from headstudy.settings.compose import compose_config, model_config
from headstudy.weights.model import Decoder


def uniform_model(in_project):
    """All weights zero: every logit is 0, so every next token gets probability 1/vocab."""
    model = Decoder(model_config(compose_config(["model=tiny"])))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
    return model


def test_uniform_model_has_perplexity_equal_to_vocabulary_size(in_project):
    tokens = np.random.default_rng(0).integers(0, 1024, 1000).astype(np.uint16)
    total, count = stream_nll(uniform_model(in_project), tokens, batch_size=4)
    assert count == 999
    assert total == pytest.approx(999 * math.log(1024), rel=1e-6)
    assert perplexity(total, count) == pytest.approx(1024, rel=1e-6)


def test_perplexity_is_exp_of_mean_negative_log_likelihood():
    # Two predictions with probabilities 1/2 and 1/8: ppl = exp((ln 2 + ln 8) / 2) = 4.
    assert perplexity(math.log(2) + math.log(8), 2) == pytest.approx(4.0)
