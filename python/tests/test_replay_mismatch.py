"""A replay whose arguments its recording cannot take raises ``ReplayMismatchError`` naming
the argument, whichever check refuses it first: the recording's, or a fixed-shape
signature's (``docs/python.md`` §13)."""

import numpy as np
import pytest
import simpler
from conftest import EXAMPLES
from simpler import ChipCallable


@pytest.fixture(scope="module")
def gemm(compiler):
    """gemm, whose manifest fixes every argument's shape at 512 x 512."""
    return ChipCallable.from_example(EXAMPLES / "gemm", compiler)


def test_a_replay_with_another_shape_of_a_fixed_shape_callable_is_a_mismatch(worker, gemm):
    h = worker.register(gemm)
    rng = np.random.default_rng(1)
    a, b = rng.random((2, 512, 512), dtype=np.float32)
    c = np.empty_like(a)
    rec = worker.record(h, [a, b, c])
    small = [np.ones((256, 256), np.float32) for _ in range(3)]
    with pytest.raises(simpler.ReplayMismatchError) as err:
        worker.replay(rec, small)
    assert isinstance(err.value, simpler.InvalidArgumentError) and isinstance(err.value, ValueError)
    assert err.value.arg == "A" and "256" in err.value.reason
    assert not small[2].any() or np.all(small[2] == 1.0), "nothing ran"
    with pytest.raises(simpler.ReplayMismatchError) as err:
        worker.submit(rec, [a, b])
    assert err.value.arg == "gemm", "a count names the callable"
    with pytest.raises(simpler.ReplayMismatchError) as err:
        worker.replay(rec, [a, b.astype(np.int32), c])
    assert err.value.arg == "B"
    # The right shapes still replay.
    c2 = np.zeros_like(c)
    assert worker.replay(rec, [a, b, c2]).graph.replayed
    np.testing.assert_allclose(c2, c)
    # A run of the callable itself keeps its own error for another shape.
    with pytest.raises(simpler.InvalidArgumentError) as err:
        worker.run(h, small)
    assert not isinstance(err.value, simpler.ReplayMismatchError)
