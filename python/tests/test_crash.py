"""Kernel crashes and sim memcheck from Python: a kernel that writes one element past its
tensor runs in a child interpreter; with ``sim_memcheck`` the write faults at once and the
crash report names the kernel and the allocation, then Python's own faulthandler (if enabled)
still runs; without it the run completes as it always did."""

import os
import signal
import subprocess
import sys

import pytest
import simpler
from simpler import Worker, _native

from conftest import KERNELS

CHILD = r"""
import sys
import numpy as np
from pathlib import Path
from simpler import ArgSpec, ChipCallable, CoreCallable, KernelCompiler, Worker

kernels, memcheck = Path(sys.argv[1]), sys.argv[2]
c = KernelCompiler()
orch = c.compile_orchestration("tensormap_and_ringbuffer", kernels / "one_task_orch.c")
core = CoreCallable.build(
    binary=c.compile_incore(kernels / "overrun.c", core_type="aiv"), name="overrun_tile"
)
callable_ = ChipCallable.build(
    [ArgSpec("x", "inout", "f32")], binary=orch, children=[(0, core)], name="overrun"
)
options = {} if memcheck == "default" else {"sim_memcheck": memcheck}
with Worker(level=2, clusters=1, aicpu_threads=2, heap_ring_size=1 << 20, **options) as w:
    w.init()
    h = w.register(callable_)
    x = np.ones(1000, np.float32)
    w.run(h, [x])
print("completed", x[0], x[-1])
"""


def run_child(memcheck, *python_flags):
    env = dict(os.environ)
    env.pop("SIMPLER_SIM_MEMCHECK", None)
    env.pop("SIMPLER_CRASH_REPORT", None)
    return subprocess.run(
        [sys.executable, *python_flags, "-c", CHILD, str(KERNELS), memcheck],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_memcheck_overrun_is_reported_then_faulthandler_runs():
    done = run_child("after", "-X", "faulthandler")
    assert done.returncode == -signal.SIGSEGV, done.stderr
    err = done.stderr
    for want in (
        "simpler: crash: SIGSEGV (invalid memory access, page protected against this access)",
        "kernel:  `overrun` kernel `overrun_tile` (func 0) (entry `kernel_entry`); func id 0; task 0x0",
        "(4000 bytes at 0x",
        "; offset 4000), in its guard page (memcheck)",
        "tensor:  the allocation is the buffer of the kernel's tensor argument 0",
        "Fatal Python error: Segmentation fault",
    ):
        assert want in err, err
    assert err.index("simpler: crash") < err.index("Fatal Python error"), err


def test_without_memcheck_the_overrun_completes_as_before():
    done = run_child("default")
    assert done.returncode == 0, done.stderr
    assert "completed 2.0 2.0" in done.stdout
    assert "simpler: crash" not in done.stderr


def test_sim_memcheck_option_and_variable_reach_the_worker_config(monkeypatch):
    monkeypatch.delenv("SIMPLER_SIM_MEMCHECK", raising=False)
    assert _native.WorkerConfig().sim_memcheck == "off"
    assert _native.WorkerConfig(sim_memcheck=True).sim_memcheck == "after"
    assert _native.WorkerConfig(sim_memcheck="before").sim_memcheck == "before"
    monkeypatch.setenv("SIMPLER_SIM_MEMCHECK", "1")
    assert _native.WorkerConfig().sim_memcheck == "after"
    assert _native.WorkerConfig(sim_memcheck=False).sim_memcheck == "off"
    for bad in ("sometimes", 3):
        with pytest.raises(simpler.InvalidConfigError, match="sim_memcheck"):
            Worker(level=2, sim_memcheck=bad)
    options = {"clusters": 1, "aicpu_threads": 2, "heap_ring_size": 1 << 20}
    with Worker(level=2, sim_memcheck=True, **options) as w:
        w.init()
        assert w._native.config.sim_memcheck == "after"
        assert "sim_memcheck='after'" in repr(w._native.config)
