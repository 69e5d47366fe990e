"""A trace write that fails raises ``TraceWriteError`` (a ``SimplerError`` and an
``OSError``) naming the path asked for, never the atomic write's temporary file."""

import os

import numpy as np
import pytest
import simpler
from simpler import CallConfig


@pytest.fixture
def traced_report(chip, vadd):
    h = chip.register(vadd)
    a, b = np.ones((2, 64), np.float32)
    return chip.run(h, [a, b, np.zeros(64, np.float32)], CallConfig(trace_level="tasks"))


def test_a_trace_in_a_missing_directory_names_the_path(traced_report, tmp_path):
    path = tmp_path / "missing" / "run.pftrace"
    with pytest.raises(simpler.TraceWriteError) as err:
        traced_report.write_trace(path)
    e = err.value
    assert isinstance(e, simpler.SimplerError) and isinstance(e, OSError)
    assert e.path == str(path) and str(path) in str(e)
    rest = str(e).replace(str(path), "")
    assert "/" not in rest, f"only the path asked for is named: {e}"
    assert not path.parent.exists()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_trace_on_a_full_device_names_the_path(traced_report, tmp_path):
    with pytest.raises(simpler.TraceWriteError) as err:
        traced_report.write_trace("/dev/full")
    assert err.value.path == "/dev/full"
    assert "/dev/full" in str(err.value)


def test_run_with_trace_raises_the_same(chip, vadd, tmp_path):
    h = chip.register(vadd)
    a, b = np.ones((2, 64), np.float32)
    path = tmp_path / "nope" / "t.json"
    with pytest.raises(simpler.TraceWriteError) as err:
        chip.run(h, [a, b, np.zeros(64, np.float32)], trace=path)
    assert err.value.path == str(path)
