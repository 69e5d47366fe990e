"""ExecutionContextRefused and RunPreparationRefused: RuntimeError subclasses with
stable codes, and a real fork: the child's use of an inherited worker is refused, the parent
continues."""

import os

import numpy as np
import pytest
import simpler


@pytest.mark.parametrize(
    "cls, code",
    [(simpler.ExecutionContextRefused, 23), (simpler.RunPreparationRefused, 24)],
)
def test_the_classes_are_runtime_errors_with_stable_codes(cls, code):
    assert issubclass(cls, RuntimeError)
    assert issubclass(cls, simpler.SimplerError)
    assert cls.__name__ in simpler.errors.__all__
    err = cls("refused", epoch=7)
    assert err.code == code
    assert err.details == {"epoch": 7}
    with pytest.raises(RuntimeError):
        raise err


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_is_refused_and_the_parent_continues(worker, vadd, rng):
    h = worker.register(vadd)
    a = rng.random(1000, dtype=np.float32)
    b = rng.random(1000, dtype=np.float32)
    c = np.zeros(1000, np.float32)
    worker.run(h, [a, b, c])
    pid = os.fork()
    if pid == 0:  # the child: leave with a status, never back into pytest
        status = 1
        try:
            worker.run(h, [a, b, np.zeros(1000, np.float32)])
        except simpler.ExecutionContextRefused as e:
            status = 0 if isinstance(e, RuntimeError) and e.code == 23 else 2
        except BaseException:  # noqa: BLE001 - any other outcome fails the test
            status = 3
        os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    c[:] = 0
    worker.run(h, [a, b, c])
    np.testing.assert_array_equal(c, a + b)
