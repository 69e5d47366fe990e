"""The native module's type stub matches the module (``python -m mypy.stubtest``).

Needs mypy (scripts/test-python.sh installs it). Without mypy the test skips locally, but
fails when ``CI`` is set, so the check can never silently stop running there.
"""

import importlib.util
import os
import subprocess
import sys

import pytest


def test_native_stub_matches_the_module():
    if importlib.util.find_spec("mypy") is None:
        if os.environ.get("CI"):
            pytest.fail("mypy is not installed; scripts/test-python.sh installs it")
        pytest.skip("mypy is not installed")
    done = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "simpler._native"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
