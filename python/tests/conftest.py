"""Shared fixtures: a private kernel cache, compiled test callables and workers."""

import os
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
import simpler
from simpler import ArgSpec, ChipCallable, CoreCallable, KernelCompiler, Worker

pytest_plugins = ["pytester"]


def pytest_configure(config):
    """Ctrl-C raises KeyboardInterrupt in this process, as in an interactive Python.

    A shell without job control starts a background command with SIGINT ignored, and Python
    then installs no handler of its own, so the tests that check how a blocked call answers
    Ctrl-C (they send the process SIGINT) would wait for ever under such a CI runner.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EXAMPLES = REPO / "examples"
KERNELS = HERE / "kernels"


@pytest.fixture(scope="session", autouse=True)
def kernel_cache(tmp_path_factory):
    """Every compile of the session goes to a private cache directory."""
    path = tmp_path_factory.mktemp("kernel-cache")
    old = os.environ.get("SIMPLER_CACHE_DIR")
    os.environ["SIMPLER_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("SIMPLER_CACHE_DIR", None)
    else:
        os.environ["SIMPLER_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def compiler(kernel_cache):
    return KernelCompiler(cache_dir=kernel_cache)


def _one_task(compiler, name, kernel, signature):
    orch = compiler.compile_orchestration("tensormap_and_ringbuffer", KERNELS / "one_task_orch.c")
    core = CoreCallable.build(binary=compiler.compile_incore(KERNELS / kernel, core_type="aiv"))
    return ChipCallable.build(signature, binary=orch, children=[(0, core)], name=name)


@pytest.fixture(scope="session")
def vadd(compiler):
    """vector_add from the example's sources, with a shape-free signature."""
    orch = compiler.compile_orchestration(
        "tensormap_and_ringbuffer", EXAMPLES / "vector_add" / "orchestration.c"
    )
    add = compiler.compile_incore(EXAMPLES / "vector_add" / "kernels" / "add.c", core_type="aiv")
    return ChipCallable.build(
        [("a", "in", "f32"), ("b", "in", "f32"), ("c", "out", "f32")],
        "aicpu_orchestration_entry",
        orch,
        [(0, CoreCallable.build(binary=add, core_type="aiv"))],
        name="vector_add",
    )


@pytest.fixture(scope="session")
def scale(compiler):
    """x *= alpha in place (x INOUT f32, alpha an f32 scalar)."""
    return _one_task(
        compiler,
        "scale",
        "scale.c",
        [ArgSpec("x", "inout", "f32"), ArgSpec("alpha", "scalar", "f32")],
    )


@pytest.fixture(scope="session")
def failing(compiler):
    """A callable whose only kernel fails the run (KERNEL_FATAL)."""
    return _one_task(
        compiler,
        "failing",
        "fail.c",
        [ArgSpec("x", "inout", "f32"), ArgSpec("alpha", "scalar", "f32")],
    )


@pytest.fixture(scope="session")
def spin(compiler):
    """Busy for `ms` milliseconds, then sets x[0] = 1."""
    return _one_task(
        compiler, "spin", "spin.c", [ArgSpec("x", "inout", "f32"), ArgSpec("ms", "scalar", "u64")]
    )


@pytest.fixture(scope="module")
def chip():
    """One initialised worker shared by a module's tests."""
    w = Worker(level=2, platform="sim", runtime="tensormap_and_ringbuffer", device_id=0)
    w.init()
    yield w
    w.close()


@pytest.fixture
def worker():
    """A fresh worker for tests that change its state."""
    w = Worker(level=2, platform="sim")
    w.init()
    yield w
    w.close()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def simpler_cli():
    """The `simpler` binary: $SIMPLER_CLI, else target/{release,debug}/simpler, else None."""
    env = os.environ.get("SIMPLER_CLI")
    if env:
        return env
    for profile in ("release", "debug"):
        path = REPO / "target" / profile / "simpler"
        if path.is_file():
            return str(path)
    return shutil.which("simpler")


def run_cli(*args):
    cli = simpler_cli()
    if cli is None:
        pytest.skip("the simpler CLI is not built (cargo build -p simpler-cli, or set SIMPLER_CLI)")
    return subprocess.run([cli, *map(str, args)], capture_output=True, text=True, check=True)


__all__ = ["simpler", "run_cli", "EXAMPLES", "KERNELS", "REPO"]
