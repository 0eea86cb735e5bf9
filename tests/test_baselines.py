import math

import numpy as np
import pytest

from headstudy.baselines import bigram_nll, unigram_nll

TRAIN = np.array([0, 1, 0, 1, 0])
TEST = np.array([0, 1, 0])


def test_bigram_add_one_on_an_alternating_sequence():
    # Pairs (0,1) and (1,0) seen twice each; with +1 smoothing p(1|0) = p(0|1) = 3/4.
    assert bigram_nll(TRAIN, TEST, vocab_size=2, add_k=1.0) == pytest.approx(2 * math.log(4 / 3))


def test_unigram_predicts_every_test_token_after_the_first():
    # Counts 3 and 2, +1 each: p(0) = 4/7, p(1) = 3/7; the targets are 1 then 0.
    expected = -math.log(3 / 7) - math.log(4 / 7)
    assert unigram_nll(TRAIN, TEST, vocab_size=2, add_k=1.0) == pytest.approx(expected)
