"""The sweep report's comparison with Vaswani et al. (2017), Table 3 row (A), decided from the
numbers: on the head counts both have, does perplexity fall to 16 heads and rise at 32?"""

from __future__ import annotations

import pytest

from headstudy.report import sweep_section


def rows(means: dict[int, float]) -> list[dict]:
    return [{"heads": h, "test_ppl_mean": m, "test_ppl_ci95": [m - 0.1, m + 0.1], "test_ppl": [m - 0.05, m + 0.05]}
            for h, m in means.items()]


def drop(relative: float, significant: bool) -> dict:
    return {"variant_a": "16", "variant_b": "32", "relative": relative, "significant": significant,
            "relative_ci95": [relative - 0.01, relative + 0.01] if significant else [relative - 0.05, relative + 0.05]}


FALLING = {1: 20.0, 2: 19.0, 4: 18.9, 8: 19.1, 16: 18.5, 32: 19.0}  # 8 heads off the trend: not a Vaswani point


@pytest.mark.parametrize("means, found, agrees, phrase", [
    (FALLING, [drop(+0.03, True)], True, "so it has that shape."),
    (FALLING, [drop(+0.03, False)], None, "these seeds cannot tell"),
    (FALLING, [drop(-0.03, True)], False, "so its means do not have that shape"),
    ({**FALLING, 16: 19.5}, [drop(+0.03, True)], False, "does not fall at every step of 1 to 4 to 16 heads"),
])
def test_sweep_agrees_with_vaswani_only_when_the_numbers_say_so(tmp_path, means, found, agrees, phrase):
    blocks, result = sweep_section(rows(means), found, bigram=40.0, figure_dir=tmp_path)
    assert result["agrees_with_vaswani"] is agrees
    assert phrase in blocks[1][1]
    assert (tmp_path / "sweep.png").is_file()
