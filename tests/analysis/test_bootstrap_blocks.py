"""A bootstrap draws its resamples in bounded blocks, and the blocks are the numbers of one draw."""

import numpy as np
import pytest

from satbench.analysis import intervals


@pytest.mark.parametrize("n,resamples", [(1, 3), (3, 7), (100, 200), (1001, 7), (5001, 3)])
def test_bootstrap_blocks_draw_the_numbers_of_one_draw(monkeypatch, n, resamples):
    monkeypatch.setattr(intervals, "PICKS_PER_BLOCK", 1000)  # several blocks, odd sizes included
    whole = np.random.Generator(np.random.PCG64(5))
    want = whole.integers(0, n, size=(resamples, n))
    blocks = np.random.Generator(np.random.PCG64(5))
    got = list(intervals._picks(blocks, n, resamples))
    assert len(got) > 1 or resamples * n <= 1000
    assert (np.concatenate(got) == want).all()
    assert (blocks.integers(0, 10, size=5) == whole.integers(0, 10, size=5)).all()  # the same state after
