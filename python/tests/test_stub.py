"""The native module's type stub matches the module (needs mypy; skipped without it)."""

import subprocess
import sys

import pytest


def test_native_stub_matches_the_module():
    pytest.importorskip("mypy")
    done = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "simpler._native"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
