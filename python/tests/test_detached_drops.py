"""Native objects that Python drops without closing them release the interpreter while their
teardown waits (crates/simpler-py, `sync::drop_detached`): a level-4 engine dropped unclosed
closes itself, and its close calls each child's Python ``shutdown`` from the child's lane
thread, which waits for the interpreter; a drop that kept it would wait for that thread
forever. Each case runs in a child interpreter under a timeout, so a deadlock fails the test
instead of hanging the suite."""

import subprocess
import sys
import textwrap

CHILD = """
import gc
import threading
from simpler import _native
from simpler.next_level import NextLevelChild


class Child(NextLevelChild):
    def __init__(self):
        self.calls = []

    def describe(self):
        return "worker 0 (a test child)"

    def start(self, timeout_s):
        self.calls.append("start")

    def register(self, key, payload):
        self.calls.append("register")

    def unregister(self, key):
        self.calls.append("unregister")

    def run(self, key, args, config, sub_writes):
        self.calls.append("run")

    def shutdown(self):
        self.calls.append("shutdown on " + threading.current_thread().name)
"""


def run_child(body: str, timeout: float = 60) -> str:
    """Runs CHILD + ``body`` in a fresh interpreter; its stdout (a hang fails the test)."""
    code = textwrap.dedent(CHILD) + textwrap.dedent(body)
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(
            f"the child interpreter hung for {timeout} s (a drop waited while holding the "
            f"interpreter); its output:\n{e.stdout}\n{e.stderr}"
        ) from None
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_a_level_4_engine_dropped_unclosed_shuts_its_python_child_down():
    out = run_child(
        r"""
        child = Child()
        w = _native.HostWorker(4, [], next_level=[child])
        w.init()
        del w  # never closed: the drop closes the engine, whose lane calls child.shutdown
        gc.collect()
        print(*child.calls, sep="\n")
        """
    )
    calls = out.splitlines()
    assert calls[0] == "start" and calls[-1].startswith("shutdown on "), out

