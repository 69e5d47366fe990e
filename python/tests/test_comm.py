"""Comm domains and collectives from Python (``docs/comm.md``): every refusal of
``allocate_domain`` names its field; a domain's contexts; release at the end of its ``with``
block; the collectives of ``simpler.collectives`` (allreduce f32/i32, allgather,
reduce-scatter) over 2, 4 and 8 chips in this process and over 4 chip processes, checked
against numpy; a wait whose peer never comes fails with the comm timeout code; a chip child
killed mid-collective fails the collective on every rank promptly (not at its timeout) and
the worker goes on with the other chips."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import simpler
from simpler import CommBufferSpec, TaskArgs, Worker
from simpler.collectives import ALLREDUCE, Collectives

COUNT = 1024


@pytest.fixture(scope="module")
def eight():
    """One worker of 8 chips in this process, with the collectives registered."""
    w = Worker(level=3, device_ids=list(range(8)))
    coll = Collectives(w)
    w.init()
    yield w, coll
    w.close()


def views(w, n, shape, dtype):
    item = np.dtype(dtype).itemsize
    size = int(np.prod(shape)) * item
    stride = (size + 63) // 64 * 64
    buf = w.create_buffer(stride * n)
    return [buf.array(shape, dtype, i * stride) for i in range(n)]


def check_collectives(w, coll, workers, rng):
    n = len(workers)
    f_in = views(w, n, (COUNT,), np.float32)
    i_in = views(w, n, (COUNT,), np.int32)
    rs_in = views(w, n, (n * COUNT,), np.float32)
    f_out = views(w, n, (COUNT,), np.float32)
    i_out = views(w, n, (COUNT,), np.int32)
    g_out = views(w, n, (n * COUNT,), np.float32)
    rs_out = views(w, n, (COUNT,), np.float32)
    for a in f_in + rs_in:
        a[:] = rng.uniform(-1, 1, a.shape)
    for a in i_in:
        a[:] = rng.integers(-(1 << 31), (1 << 31) - 1, a.shape, dtype=np.int32)
    for a in f_out + g_out + rs_out:
        a[:] = np.nan

    def orch(o, _a, _c):
        with coll.allocate_domain(o, "f", workers, COUNT, np.float32) as dom:
            coll.allreduce(o, dom, f_in, f_out)
            coll.allgather(o, dom, f_in, g_out)
            coll.reduce_scatter(o, dom, rs_in, rs_out)
            coll.allreduce(o, dom, rs_out, f_out)  # a fourth round on the same domain
        with coll.allocate_domain(o, "i", workers, COUNT, np.int32) as dom:
            coll.allreduce(o, dom, i_in, i_out)

    w.run(orch)
    rs_sum = np.sum(np.stack(rs_in), axis=0, dtype=np.float64)
    rs_want = [rs_sum[r * COUNT : (r + 1) * COUNT] for r in range(n)]
    for r in range(n):
        np.testing.assert_allclose(rs_out[r], rs_want[r], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(g_out[r], np.concatenate(f_in))
        np.testing.assert_allclose(f_out[r], np.sum(np.stack(rs_want), axis=0), rtol=1e-5, atol=1e-5)
        want_i = np.sum(np.stack(i_in).astype(np.int64), axis=0).astype(np.int32)
        np.testing.assert_array_equal(i_out[r], want_i)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_collectives_match_numpy_on_chips_in_this_process(eight, n):
    w, coll = eight
    check_collectives(w, coll, list(range(8 - n, 8))[::-1], np.random.default_rng(n))


def test_collectives_match_numpy_on_chip_processes():
    w = Worker(level=3, device_ids=[0, 1, 2, 3], chip_isolation="process")
    coll = Collectives(w)
    w.init()
    try:
        check_collectives(w, coll, [0, 1, 2, 3], np.random.default_rng(7))
    finally:
        w.close()


def test_every_refusal_names_its_field(eight):
    w, _ = eight
    spec = CommBufferSpec("x", np.float32, 4)
    cases = [
        ("name", dict(name="", workers=[0], window_size=64)),
        ("workers", dict(name="d", workers=[], window_size=64)),
        ("workers", dict(name="d", workers=[1, 1], window_size=64)),
        ("workers", dict(name="d", workers=list(range(8)) * 9, window_size=64)),
        ("window_size", dict(name="d", workers=[0], window_size=0)),
        ("window_size", dict(name="d", workers=[0], window_size=-1)),
        ("buffers[1].name", dict(name="d", workers=[0], window_size=64, buffers=[spec, spec])),
        ("buffers[0].count", dict(name="d", workers=[0], window_size=64, buffers=[CommBufferSpec("z", np.int8, 0)])),
        ("buffers[0].nbytes", dict(name="d", workers=[0], window_size=64, buffers=[CommBufferSpec("z", np.float32, nbytes=6)])),
        ("buffers", dict(name="d", workers=[0], window_size=8, buffers=[spec])),
    ]

    def orch(o, _a, _c):
        for field, kw in cases:
            with pytest.raises(simpler.InvalidArgumentError) as info:
                o.allocate_domain(**kw)
            assert f"`{field}`" in str(info.value) or info.value.arg == field, (field, str(info.value))
        with pytest.raises(simpler.InvalidArgumentError, match="9"):
            o.allocate_domain("d", [9], 64)  # no chip 9: names the id and the count
        with pytest.raises(simpler.ArgumentTypeError):
            o.allocate_domain("d", [0], 64, buffers=[("x", np.float32, 4)])
        with pytest.raises(simpler.ArgumentTypeError):
            o.allocate_domain("d", [0], 64.0)
        # Nothing was made: the name is free.
        with o.allocate_domain("d", [0, 1], 64) as dom:
            with pytest.raises(simpler.InvalidArgumentError, match="live"):
                o.allocate_domain("d", [2], 64)
        o.allocate_domain("d", [2], 64)  # released at the end of the with block

    w.run(orch)


def test_contexts_and_release(eight):
    w, coll = eight
    handle = coll._handles[simpler.DataType.FLOAT32]
    x, y = views(w, 2, (16,), np.float32)

    def orch(o, _a, _c):
        specs = [CommBufferSpec("scratch", np.float32, 64), CommBufferSpec("signal", np.int32, 16)]
        with o.allocate_domain("ctx", [5, 3], 5000, specs) as dom:
            assert dom.workers == [5, 3] and len(dom) == 2 and 5 in dom and 4 not in dom
            with pytest.raises(KeyError, match="not a member"):
                dom[4]
            a, b = dom[5], dom[3]
            assert (a.domain_rank, b.domain_rank, a.domain_size) == (0, 1, 2)
            assert a.actual_window_size == 8192
            assert a.device_ctx != b.device_ctx or a.worker != b.worker
            assert a.buffers["scratch"].worker == 5 and a.buffers["signal"].shape == (16,)
            assert [c.domain_rank for c in dom] == [0, 1]
        assert dom.released
        args = (
            TaskArgs()
            .add_tensor(x, simpler.TensorArgType.INPUT)
            .add_tensor(y, simpler.TensorArgType.OUTPUT_EXISTING)
            .add_tensor(dom[5].buffers["scratch"], simpler.TensorArgType.INOUT)
            .add_tensor(dom[5].buffers["signal"], simpler.TensorArgType.INOUT)
            .add_scalar(dom[5].device_ctx)
            .add_scalar(ALLREDUCE)
            .add_scalar(1)
            .add_scalar(1000)
        )
        with pytest.raises(simpler.InvalidArgumentError, match="not a live allocation"):
            o.submit_next_level(handle, args, worker=5)

    w.run(orch)


def test_a_peer_that_never_comes_fails_the_wait_with_its_code(eight):
    w, coll = eight
    x, y = views(w, 2, (COUNT,), np.float32)
    started = time.monotonic()

    def orch(o, _a, _c):
        dom = coll.allocate_domain(o, "lonely", [0, 1], COUNT, np.float32)
        # Only rank 0 is submitted: its wait for rank 1 ends at the 0.3 s timeout.
        ctx = dom[0]
        o.submit_next_level(
            coll._handles[simpler.DataType.FLOAT32],
            TaskArgs()
            .add_tensor(x, simpler.TensorArgType.INPUT)
            .add_tensor(y, simpler.TensorArgType.OUTPUT_EXISTING)
            .add_tensor(ctx.buffers["scratch"], simpler.TensorArgType.INOUT)
            .add_tensor(ctx.buffers["signal"], simpler.TensorArgType.INOUT)
            .add_scalar(ctx.device_ctx)
            .add_scalar(ALLREDUCE)
            .add_scalar(dom.next_round())
            .add_scalar(300_000),
            worker=0,
        )

    with pytest.raises(simpler.SimplerError) as info:
        w.run(orch)
    assert "120" in str(info.value), str(info.value)
    assert time.monotonic() - started < 20
    check_collectives(w, coll, [0, 1], np.random.default_rng(1))  # the chips are usable


def test_a_chip_killed_mid_collective_fails_every_rank_promptly_and_the_rest_goes_on():
    w = Worker(level=3, device_ids=[0, 1, 2], chip_isolation="process")
    coll = Collectives(w)
    w.init()
    try:
        x = views(w, 3, (COUNT,), np.float32)
        y = views(w, 3, (COUNT,), np.float32)
        handle = coll._handles[simpler.DataType.FLOAT32]
        victim = next(pid for name, pid in w.child_pids().items() if name.startswith("chip 0"))

        def orch(o, _a, _c):
            dom = coll.allocate_domain(o, "doomed", [0, 1, 2], COUNT, np.float32)
            round_ = dom.next_round()
            # Ranks 0 and 1 start and wait (60 s timeout) for rank 2, which never comes.
            o.submit_next_level_group(
                handle,
                [
                    TaskArgs()
                    .add_tensor(x[r], simpler.TensorArgType.INPUT)
                    .add_tensor(y[r], simpler.TensorArgType.OUTPUT_EXISTING)
                    .add_tensor(dom[r].buffers["scratch"], simpler.TensorArgType.INOUT)
                    .add_tensor(dom[r].buffers["signal"], simpler.TensorArgType.INOUT)
                    .add_scalar(dom[r].device_ctx)
                    .add_scalar(ALLREDUCE)
                    .add_scalar(round_)
                    .add_scalar(60_000_000)
                    for r in (0, 1)
                ],
                workers=[0, 1],
            )

        run = w.submit(orch)
        time.sleep(0.5)
        assert not run.done
        started = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        with pytest.raises(simpler.EndpointFailureError) as info:
            run.wait(30)
        assert "chip 0" in str(info.value)
        assert time.monotonic() - started < 10, "rank 1 saw the abort, not its 60 s timeout"
        # Chips 1 and 2 go on together; chip 0 is refused.
        check_collectives(w, coll, [1, 2], np.random.default_rng(3))
        with pytest.raises(simpler.SimplerError, match="chip 0"):
            w.run(lambda o, _a, _c: coll.allocate_domain(o, "dead", [0, 1], COUNT, np.float32))
    finally:
        w.close()


def raw_args(ctx, x, y, op, round_, timeout_us):
    return (
        TaskArgs()
        .add_tensor(x, simpler.TensorArgType.INPUT)
        .add_tensor(y, simpler.TensorArgType.OUTPUT_EXISTING)
        .add_tensor(ctx.buffers["scratch"], simpler.TensorArgType.INOUT)
        .add_tensor(ctx.buffers["signal"], simpler.TensorArgType.INOUT)
        .add_scalar(ctx.device_ctx)
        .add_scalar(op)
        .add_scalar(round_)
        .add_scalar(timeout_us)
    )


def test_a_handle_of_an_earlier_run_is_refused_even_at_a_reused_address(eight):
    w, coll = eight
    x, y = views(w, 2, (COUNT,), np.float32)
    kept = []
    w.run(lambda o, _a, _c: kept.append(coll.allocate_domain(o, "old", [0, 1], COUNT, np.float32)))
    old = kept[0]
    assert old.released
    for _ in range(4):  # a new domain of the same size often lands at the old address

        def orch(o, _a, _c):
            coll.allocate_domain(o, "new", [0, 1], COUNT, np.float32)
            with pytest.raises(simpler.InvalidArgumentError, match="not a live allocation"):
                o.submit_next_level_group(
                    coll._handles[simpler.DataType.FLOAT32],
                    [raw_args(old[c], x, y, ALLREDUCE, 1, 1_000_000) for c in (0, 1)],
                    workers=[0, 1],
                )

        w.run(orch)


def test_collective_arguments_are_checked_before_anything_runs(eight):
    w, coll = eight
    a = views(w, 2, (COUNT,), np.float32)
    short = views(w, 2, (COUNT // 2,), np.float32)
    i32 = views(w, 2, (COUNT,), np.int32)
    out = views(w, 2, (COUNT,), np.float32)

    def orch(o, _a, _c):
        refused = [
            (2.5, np.float32, "count"),
            (0, np.float32, "count"),
            (True, np.float32, "count"),
            (-3, np.float32, "count"),
            (4, np.float64, "dtype"),
            (4, "nonsense", "dtype"),
        ]
        for count, dtype, arg in refused:
            with pytest.raises(simpler.InvalidArgumentError, match=arg) as info:
                coll.allocate_domain(o, "c", [0, 1], count, dtype)
            assert info.value.arg == arg, (count, dtype, str(info.value))
        with coll.allocate_domain(o, "c", [0, 1], COUNT, np.float32) as dom:
            cases = [
                ("inputs[1]", lambda: coll.allreduce(o, dom, [a[0], short[1]], [out[0], short[1]])),
                ("outputs[0]", lambda: coll.allreduce(o, dom, a, [short[0], out[1]])),
                ("outputs[0]", lambda: coll.allgather(o, dom, a, out)),  # needs 2 * COUNT
                ("inputs[0]", lambda: coll.allreduce(o, dom, i32, out)),  # i32 on an f32 domain
                ("inputs[0]", lambda: coll.reduce_scatter(o, dom, a, out)),  # needs 2 * COUNT in
                ("outputs", lambda: coll.allreduce(o, dom, a, out[:1])),
                ("inputs", lambda: coll.allreduce(o, dom, a[:1], out)),
                ("inputs", lambda: coll.allreduce(o, dom, "ab", out)),
                ("timeout_s", lambda: coll.allreduce(o, dom, a, out, timeout_s=float("inf"))),
                ("timeout_s", lambda: coll.allreduce(o, dom, a, out, timeout_s=float("nan"))),
                ("timeout_s", lambda: coll.allreduce(o, dom, a, out, timeout_s=41)),
                ("timeout_s", lambda: coll.allreduce(o, dom, a, out, timeout_s=0)),
                ("timeout_s", lambda: coll.allreduce(o, dom, a, out, timeout_s=-1.0)),
                ("timeout_s", lambda: coll.allreduce(o, dom, a, out, timeout_s=True)),
                ("timeout_s", lambda: coll.allreduce(o, dom, a, out, timeout_s="10")),
            ]
            for field, call in cases:
                with pytest.raises(simpler.InvalidArgumentError) as info:
                    call()
                assert info.value.arg == field, (field, str(info.value))
                text = str(info.value)
                assert f"`{field}`" in text or text.startswith(field), text
            # The refused calls took no round: this one completes.
            coll.allreduce(o, dom, a, out, timeout_s=10)
            with pytest.raises(KeyError):
                dom[True]

    w.run(orch)
    np.testing.assert_allclose(out[0], a[0] + a[1], rtol=1e-6)


def test_the_native_rules_are_rusts_and_agree_with_the_c_header():
    """The collectives' rules and limits come from Rust (``simpler_worker::collectives``), with
    Rust's messages; its constants agree with ``simpler/collectives.h``."""
    from simpler import _native
    from simpler import collectives as c

    root = Path(__file__).resolve().parents[2]
    header = (root / "include" / "simpler" / "collectives.h").read_text()
    defines = dict(re.findall(r"#define (SIMPLER_COLLECTIVE_\w+) (\d+)", header))
    assert (c.ALLREDUCE, c.ALLGATHER, c.REDUCE_SCATTER) == tuple(
        int(defines[f"SIMPLER_COLLECTIVE_OP_{k}"])
        for k in ("ALLREDUCE", "ALLGATHER", "REDUCE_SCATTER")
    )
    assert c.SIGNAL_WORDS == int(defines["SIMPLER_COLLECTIVE_SIGNAL_WORDS"])
    assert c.MAX_TIMEOUT_S * 1e6 == int(defines["SIMPLER_COLLECTIVE_MAX_TIMEOUT_US"])
    assert c.DTYPES == (simpler.DataType.FLOAT32, simpler.DataType.INT32)

    assert _native.collective_timeout_us(40) == 40_000_000
    assert _native.collective_timeout_us(np.float32(0.5)) == 500_000
    assert _native.collective_timeout_us(1e-9) == 1
    dt = simpler.DataType
    f32, i32, f64 = int(dt.FLOAT32), int(dt.INT32), int(dt.FLOAT64)
    check, c_count = _native.collective_check, _native.collective_check_count
    in_range = "must be a number of seconds in (0, 40]"
    layout = _native.collective_domain_layout(4, 10, f32)
    assert (layout.scratch, layout.window) == (40, 320)
    assert _native.collective_check_count(np.int64(3)) == 3
    _native.collective_check(c.ALLGATHER, [(f32, [4])] * 2, [(f32, [8])] * 2, f32, 8, 2)

    refusals = [
        ("timeout_s", f"{in_range}, got 41 s", lambda: _native.collective_timeout_us(41)),
        ("timeout_s", f"{in_range}, got 0 s", lambda: _native.collective_timeout_us(0)),
        ("dtype", "support f32 and i32, not f64", lambda: _native.collective_check_dtype(f64)),
        ("dtype", "99 is not a DataType wire value", lambda: _native.collective_check_dtype(99)),
        ("count", "must be >= 1 (elements per rank), got 0", lambda: c_count(0)),
        ("count", "do not fit a window", lambda: _native.collective_domain_layout(2, 2**63, f32)),
        (
            "outputs[1]",
            "allgather over 2 ranks with 4-element inputs needs 8-element outputs, got 4",
            lambda: check(c.ALLGATHER, [(f32, [4])] * 2, [(f32, [8]), (f32, [4])], f32, 8, 2),
        ),
        (
            "inputs[0]",
            "allreduce on this domain takes 1-D f32 vectors, got shape [4] of i32",
            lambda: check(c.ALLREDUCE, [(i32, [4])] * 2, [(f32, [4])] * 2, f32, 8, 2),
        ),
        (
            "inputs",
            "allreduce needs 9 elements of scratch per rank; the domain has 8",
            lambda: check(c.ALLREDUCE, [(f32, [9])] * 2, [(f32, [9])] * 2, f32, 8, 2),
        ),
        ("op", "not a collective op code", lambda: check(7, [], [], f32, 8, 0)),
    ]
    for arg, reason, call in refusals:
        with pytest.raises(simpler.InvalidArgumentError) as info:
            call()
        assert info.value.arg == arg, (arg, str(info.value))
        assert reason in info.value.reason, (reason, info.value.reason)
        assert str(info.value).startswith(f"argument `{arg}`: "), str(info.value)
    assert _native.collective_rename("args_list[1][0]: bad") == "inputs[1]: bad"


def test_a_rank_that_fails_early_aborts_its_peers_waits(eight):
    w, coll = eight
    x, y = views(w, 2, (COUNT,), np.float32)

    def orch(o, _a, _c):
        dom = coll.allocate_domain(o, "early", [0, 1], COUNT, np.float32)
        # Rank 0 asks for an unknown op (it fails at once); rank 1 waits up to 30 s for it.
        o.submit_next_level_group(
            coll._handles[simpler.DataType.FLOAT32],
            [raw_args(dom[0], x, y, 99, 1, 30_000_000), raw_args(dom[1], x, y, ALLREDUCE, 1, 30_000_000)],
            workers=[0, 1],
        )

    started = time.monotonic()
    with pytest.raises(simpler.SimplerError, match="op must be"):
        w.run(orch)
    assert time.monotonic() - started < 10, "rank 1 saw the abort, not its 30 s timeout"


def test_close_ends_a_collective_that_waits_for_a_missing_rank():
    w = Worker(level=3, device_ids=[0, 1], close_timeout_s=1.0)
    coll = Collectives(w)
    w.init()
    x, y = views(w, 2, (COUNT,), np.float32)

    def orch(o, _a, _c):
        dom = coll.allocate_domain(o, "stuck", [0, 1], COUNT, np.float32)
        o.submit_next_level(coll._handles[simpler.DataType.FLOAT32], raw_args(dom[0], x, y, ALLREDUCE, 1, 30_000_000), worker=0)

    run = w.submit(orch)
    time.sleep(0.3)
    started = time.monotonic()
    w.close()
    assert time.monotonic() - started < 10, "close aborted the domain after close_timeout"
    with pytest.raises(simpler.SimplerError, match="121"):
        run.wait(5)
