"""The Python ↔ native contract: options and reports cross as native classes with named
fields, their defaults come from the host, and the host's argument check names what is wrong.
"""

import os
import re

import numpy as np
import pytest
import simpler
from simpler import CallConfig, RuntimeEnv, TaskArgs, Worker, _native


def test_worker_options_default_to_the_hosts_worker_config():
    defaults = _native.WorkerConfig()
    assert (defaults.clusters, defaults.aicpu_threads, defaults.aicpu_thread_num) == (8, 4, 0)
    assert defaults.heap_size == 256 << 20 and defaults.launch_depth == 2
    w = Worker(level=2)
    try:
        assert w.task_window == defaults.task_window
        assert w.pipeline_depth == defaults.launch_depth
        assert w.heap_size == defaults.heap_size
        assert w.effective_aicpu_thread_num == defaults.aicpu_threads
    finally:
        w.close()


def test_the_started_worker_reports_its_config_by_name():
    with Worker(level=2, clusters=2, aicpu_threads=3, heap_ring_size=1 << 20, launch_depth=1) as w:
        assert w.task_window == _native.WorkerConfig().task_window
        w.init()
        config = w._native.config
        assert isinstance(config, _native.WorkerConfig)
        assert (config.clusters, config.aicpu_threads, config.heap_size) == (2, 3, 1 << 20)
        assert config.launch_depth == w.pipeline_depth == 1
        assert config.effective_aicpu_thread_num == w.effective_aicpu_thread_num == 3
        assert "clusters=2" in repr(config)


def test_bad_worker_option_values_name_the_option():
    with pytest.raises(simpler.InvalidConfigError, match="clusters"):
        Worker(level=2, clusters="many")
    with pytest.raises(simpler.InvalidConfigError, match="device_id"):
        Worker(level=2, device_id=-1)
    with pytest.raises(simpler.InvalidConfigError, match="run_timeout_s"):
        Worker(level=2, run_timeout_s=float("nan"))
    with pytest.raises(simpler.InvalidConfigError, match="launch_depth"):
        Worker(level=2, launch_depth=3).init()


def test_sim_executor_option_and_variable_reach_the_worker_config(monkeypatch):
    monkeypatch.delenv("SIMPLER_SIM_EXECUTOR", raising=False)
    assert _native.WorkerConfig().sim_executor == "pool"
    assert _native.WorkerConfig(sim_executor=None).sim_executor == "pool"
    assert _native.WorkerConfig(sim_executor="threads").sim_executor == "threads"
    assert _native.WorkerConfig(sim_executor="pool").sim_executor == "pool"
    assert "sim_executor='threads'" in repr(_native.WorkerConfig(sim_executor="threads"))
    monkeypatch.setenv("SIMPLER_SIM_EXECUTOR", "threads")
    assert _native.WorkerConfig().sim_executor == "threads"
    assert _native.WorkerConfig(sim_executor="pool").sim_executor == "pool"
    monkeypatch.delenv("SIMPLER_SIM_EXECUTOR")
    for bad, shown in (("fibers", '"fibers"'), ("Threads", '"Threads"'), (3, "3"), (True, "True")):
        with pytest.raises(simpler.InvalidConfigError, match="sim_executor") as raised:
            Worker(level=2, sim_executor=bad)
        assert shown in str(raised.value), str(raised.value)
        with pytest.raises(simpler.InvalidConfigError, match="sim_executor"):
            _native.WorkerConfig(sim_executor=bad)


def _os_threads():
    """OS threads of this process (Linux: the entries of /proc/self/task)."""
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_a_thread_per_core_worker_runs_a_callable_on_threads_of_its_own(monkeypatch, vadd, rng):
    monkeypatch.delenv("SIMPLER_SIM_EXECUTOR", raising=False)
    options = {"clusters": 2, "aicpu_threads": 3, "heap_ring_size": 1 << 20}
    a = rng.random(4096, dtype=np.float32)
    b = rng.random(4096, dtype=np.float32)

    def started(name):
        """A started worker on executor `name` and the OS threads starting it added."""
        before = _os_threads()
        w = Worker(level=2, sim_executor=name, **options)
        w.init()
        assert w._native.config.sim_executor == name
        assert f"sim_executor='{name}'" in repr(w._native.config)
        return w, _os_threads() - before

    def runs_vadd(w):
        c = np.zeros_like(a)
        w.run(w.register(vadd), [a, b, c])
        np.testing.assert_array_equal(c, a + b)

    # The first pool worker of the process may start the shared pool; the second one adds
    # only what any worker adds (the host's own threads).
    with started("pool")[0] as w:
        runs_vadd(w)
    w, added_pool = started("pool")
    w.close()
    w, added_threads = started("threads")
    with w:
        runs_vadd(w)
    # A thread-per-core device has an OS thread per AICore (3 per cluster) and per AICPU
    # thread; a pool device runs them as fibers on the pool.
    device_threads = 3 * options["clusters"] + options["aicpu_threads"]
    assert added_threads - added_pool >= device_threads, (added_pool, added_threads)


def test_call_config_defaults_and_rules_are_the_hosts():
    assert CallConfig().aicpu_thread_num == _native.CallConfig().aicpu_thread_num
    native = _native.CallConfig(
        aicpu_thread_num=3, runtime_env=_native.RuntimeEnv(ring_heap=4096, ring_dep_pool=[8] * 4)
    )
    assert native.aicpu_thread_num == 3
    assert native.runtime_env.ring_heap == [4096]
    assert native.runtime_env.ring_dep_pool == [8, 8, 8, 8]
    assert native.runtime_env.ring_task_window is None
    # The worker-free rules pass; the worker's limits do not (its heap is 1 MiB).
    big = CallConfig(runtime_env=RuntimeEnv(ring_heap=1 << 20))
    big.validate()
    with Worker(level=2, heap_ring_size=1 << 20) as w:
        with pytest.raises(simpler.InvalidConfigError, match="ring_heap needs"):
            big.check_against(w)
    with pytest.raises(simpler.InvalidConfigError, match=r"ring_task_window\[3\]"):
        CallConfig(runtime_env=RuntimeEnv(ring_task_window=[64, 64, 64, 3])).validate()
    with pytest.raises(simpler.InvalidConfigError, match="one int or 4 ints"):
        RuntimeEnv(ring_heap="4096").validate()


def test_a_run_reports_by_name(chip, vadd, rng):
    h = chip.register(vadd)
    a = rng.random(256, dtype=np.float32)
    c = np.zeros_like(a)
    handle = chip.submit(h, [a, a, c])
    native = handle._native.result()
    assert isinstance(native, _native.RunReport)
    report = handle.result()
    assert isinstance(report, simpler.RunReport)
    assert (report.epoch, report.device_time_s, report.total_time_s, report.tasks) == (
        native.epoch,
        native.device_time_s,
        native.total_time_s,
        native.tasks,
    )
    assert report.tasks is not None and report.tasks >= 1
    assert repr(report).startswith(f"RunReport(epoch={report.epoch}, device_time_s=")


def test_the_hosts_argument_check_names_each_problem(chip, vadd, scale, rng):
    h, hs = chip.register(vadd), chip.register(scale)
    a, b, c = (rng.random(64, dtype=np.float32) for _ in range(3))
    with pytest.raises(simpler.ArgumentCountError) as info:
        chip.run(h, [a, b])
    assert "takes 3 arguments (a, b, c), got 2" in str(info.value)
    assert (info.value.expected, info.value.got) == (3, 2)
    with pytest.raises(simpler.InvalidArgumentError) as info:
        chip.run(h, [c, b, c])
    assert info.value.arg == "c" and "shares memory with argument `a`" in str(info.value)
    # Tensors where the signature declares a scalar: a type error naming the argument.
    with pytest.raises(simpler.ArgumentTypeError) as info:
        chip.run(hs, TaskArgs().add_tensor(a, "INOUT").add_tensor(b, "INOUT"))
    assert info.value.arg == "alpha" and "declares a scalar, got a tensor" in str(info.value)
    with pytest.raises(simpler.ArgumentTypeError, match="argument `alpha`: scalar 1.5"):
        chip.run(chip.register(_int_scale(chip, scale)), [a, 1.5])
    with pytest.raises(
        simpler.InvalidArgumentError,
        match=re.escape("argument `alpha`: 1e39 is out of range for f32 (|x| <= 3.4028235e38)"),
    ):
        chip.run(hs, [a, 1e39])


def _int_scale(chip, scale):
    """`scale` with an i32 scalar in its signature (never run: the check refuses first)."""
    sig = [simpler.ArgSpec("x", "inout", "f32"), simpler.ArgSpec("alpha", "scalar", "i32")]
    return simpler.ChipCallable.build(
        sig, scale.func_name, scale.binary, scale.children, name="int_scale"
    )


def test_scalars_are_encoded_by_the_host():
    assert simpler.scalar_to_uint64(65504.0, "f16") == 0x7BFF
    with pytest.raises(
        simpler.InvalidArgumentError,
        match=re.escape("1000000.0 is out of range for f16 (|x| <= 65504)"),
    ):
        simpler.scalar_to_uint64(1e6, "f16")
    assert _native.encode_scalar(_native.RawScalar(7), 5) == 7  # raw bits pass unchanged
    with pytest.raises(simpler.ArgumentTypeError):
        _native.encode_scalar("1")


def test_the_run_timeout_default_follows_the_hosts_environment_variable(monkeypatch):
    monkeypatch.setenv("SIMPLER_STREAM_SYNC_TIMEOUT_MS", "1234")
    assert Worker(level=2)._worker_config().run_timeout_s == pytest.approx(1.234)
    assert Worker(level=2, run_timeout_s=7)._worker_config().run_timeout_s == 7.0


def test_every_timeout_follows_the_same_environment_variable_as_the_cli(monkeypatch):
    # (variable, value, option, seconds): the variables the CLI and Rust read, in their units.
    rows = [
        ("SIMPLER_STREAM_SYNC_TIMEOUT_MS", "4000", "run_timeout_s", 4.0),
        ("SIMPLER_SCHEDULER_TIMEOUT_MS", "250", "scheduler_timeout_s", 0.25),
        ("SIMPLER_OP_EXECUTE_TIMEOUT_US", "1500000", "op_execute_timeout_s", 1.5),
        ("SIMPLER_TENSOR_DATA_TIMEOUT_MS", "750", "tensor_data_timeout_s", 0.75),
    ]
    for var, value, _, _ in rows:
        monkeypatch.setenv(var, value)
    config = Worker(level=2)._worker_config()
    for var, _, option, seconds in rows:
        assert getattr(config, option) == pytest.approx(seconds), var
        # An explicit option wins over the variable.
        assert getattr(Worker(level=2, **{option: 3})._worker_config(), option) == 3.0
    with pytest.raises(simpler.InvalidConfigError, match="op_execute_timeout_s"):
        Worker(level=2, op_execute_timeout_s=-1)
