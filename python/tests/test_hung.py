"""A kernel that never returns, driven from Python in a child interpreter (its device thread
never comes back, so it must not share pytest's process): the run raises
``KernelTimeoutError`` — a ``RunTimeoutError`` and a ``RunFailedError`` with the runtime's
OP_EXECUTE_TIMEOUT code and the task it names — within the op-execute timeout plus a small
margin; the worker then refuses new runs; ``close()`` and the interpreter's exit (with or
without ``close()``) end the process normally, never by a signal."""

import subprocess
import sys

import pytest

from conftest import KERNELS

CHILD = r"""
import sys, time
import numpy as np
import simpler
from simpler import ArgSpec, ChipCallable, CoreCallable, KernelCompiler, Worker

kernels, cache, close = sys.argv[1], sys.argv[2], sys.argv[3] == "close"
c = KernelCompiler(cache_dir=cache)
orch = c.compile_orchestration("tensormap_and_ringbuffer", kernels + "/one_task_orch.c")
core = CoreCallable.build(binary=c.compile_incore(kernels + "/hang.c", core_type="aiv"))
hung = ChipCallable.build([ArgSpec("x", "inout", "f32")], binary=orch, children=[(0, core)],
                          name="hung")
w = Worker(level=2, clusters=1, aicpu_threads=2, op_execute_timeout_s=1.0,
           scheduler_timeout_s=0.3)
w.init()
h = w.register(hung)
started = time.monotonic()
try:
    w.run(h, [np.zeros(4, np.float32)])
    sys.exit("the hung kernel's run succeeded")
except simpler.RunTimeoutError as e:
    took = time.monotonic() - started
    assert isinstance(e, simpler.KernelTimeoutError), type(e)
    assert isinstance(e, simpler.RunFailedError), type(e)
    assert (e.code, e.code_name) == (-112, "OP_EXECUTE_TIMEOUT"), (e.code, e.code_name)
    for want in ("op-execute clock fired (1000 ms)", "submit #1", "func 0 aiv", "on core "):
        assert want in e.device_message, (want, e.device_message)
    assert took < 4.0, took
try:
    w.run(h, [np.zeros(4, np.float32)])
    sys.exit("a run was admitted after the hung kernel")
except simpler.DeviceUnusableError:
    pass
if close:
    w.close()
print("DONE", flush=True)
"""


@pytest.mark.parametrize("close", ["close", "exit"])
def test_a_hung_kernel_raises_kernel_timeout_and_the_interpreter_exits_cleanly(
    kernel_cache, close
):
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(KERNELS), str(kernel_cache), close],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, (
        f"exit status {child.returncode}\nstdout: {child.stdout}\nstderr: {child.stderr}"
    )
    assert "DONE" in child.stdout, child.stdout
