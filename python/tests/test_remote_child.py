"""The Ray child of a level-4 worker (simpler.remote): its spec, placement, data plane, runs
and failures, on one small local Ray cluster (simpler.testing.ray_cluster) for the session.

The orchestration functions here are pickled by reference: the actors import this module
(they get the driver's sys.path), which is why its top level does nothing but define things.
"""

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from simpler.testing import ray_cluster  # noqa: E402 - sets Ray's environment first

if os.environ.get("SIMPLER_REQUIRE_RAY") == "1":  # .ci/run: these tests must run
    import ray
else:
    ray = pytest.importorskip("ray", reason="Ray is not installed: the Ray child needs it")

import cloudpickle  # noqa: E402

from simpler import CallConfig, InvalidConfigError  # noqa: E402
from simpler import TensorArgType as T  # noqa: E402
from simpler.next_level import (  # noqa: E402
    ChildDied,
    ChildRestarted,
    ChildTimeout,
    TensorArg,
    encode_payload,
)
from simpler.remote import (  # noqa: E402
    DataPlane,
    RayChild,
    RemoteTaskError,
    RemoteWorkerSpec,
    byte_range,
    resolve_node,
)

cluster = ray_cluster.session_fixture()

N = 4096
START_S = 60.0


# -- functions the actors run ------------------------------------------------------------------


def _chip(o, hashid):
    """The actor's handle of the chip callable registered with ``hashid``."""
    return o._worker._handles[hashid]


def make_vadd_orch(hashid):
    def orch_vadd(o, args, cfg):  # c = a + b on chip 0
        o.submit_next_level(_chip(o, hashid), args, cfg, worker=0)

    return orch_vadd


def orch_noop(o, args, cfg):
    pass


def orch_double_inout(o, args, cfg):  # args: x (INOUT), y (OUTPUT): x *= 2; y = x + scalar
    x = args.tensor(0).array
    y = args.tensor(1).array
    x *= 2
    y[:] = x + args.scalar(0)


def orch_raises(o, args, cfg):
    raise ValueError("deliberate failure 42")


def orch_sleeps(o, args, cfg):
    time.sleep(args.scalar(0) / 1000)


# -- helpers -----------------------------------------------------------------------------------


def payload_fn(fn):
    data = cloudpickle.dumps(fn)
    name = f"{fn.__module__}.{fn.__qualname__}"
    return encode_payload(fn, "sha256:" + name, name, pickled=data)


def payload_chip(cc):
    return encode_payload(cc, cc.hashid, cc.name)


def vectors(seed=0):
    rng = np.random.default_rng(seed)
    a = rng.random(N, dtype=np.float32)
    b = rng.random(N, dtype=np.float32)
    a.flags.writeable = False
    b.flags.writeable = False
    return a, b


def vadd_args(a, b, c):
    return [TensorArg(a, T.INPUT), TensorArg(b, T.INPUT), TensorArg(c, T.OUTPUT_EXISTING)]


def started(spec, worker_id, plane=None, default_timeout_s=60.0):
    child = RayChild(spec, worker_id, plane, default_timeout_s)
    child.start(START_S)
    return child


def register_vadd(child, vadd, key_chip=1, key_orch=2):
    child.register(key_chip, payload_chip(vadd))
    child.register(key_orch, payload_fn(make_vadd_orch(vadd.hashid)))
    return key_orch


@pytest.fixture(scope="module")
def plane():
    return DataPlane()


@pytest.fixture(scope="module")
def child_a(cluster, plane, vadd):
    """Worker 0 on host_a (placed by custom resource), vector_add registered as key 2."""
    t0 = time.monotonic()
    child = started(RemoteWorkerSpec(device_ids=[0], node="host_a"), 0, plane)
    child.start_s = time.monotonic() - t0
    register_vadd(child, vadd)
    child.register(3, payload_fn(orch_noop))
    child.register(4, payload_fn(orch_double_inout))
    child.register(5, payload_fn(orch_raises))
    yield child
    child.shutdown()


# -- the spec ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"device_ids": "0"}, "device_ids"),
        ({"device_ids": [0, -1]}, "device_ids"),
        ({"device_ids": [1, 1]}, "device_ids"),
        ({"device_ids": [True]}, "device_ids"),
        ({"device_ids": []}, "num_sub_workers"),
        ({"num_sub_workers": -1}, "num_sub_workers"),
        ({"num_sub_workers": True}, "num_sub_workers"),
        ({"chip_isolation": "fork"}, "chip_isolation"),
        ({"node": ""}, "node"),
        ({"node": 3}, "node"),
        ({"max_restarts": -1}, "max_restarts"),
        ({"max_restarts": 1.5}, "max_restarts"),
        ({"remote_task_timeout_s": 0}, "remote_task_timeout_s"),
        ({"remote_task_timeout_s": float("inf")}, "remote_task_timeout_s"),
        ({"remote_task_timeout_s": "5"}, "remote_task_timeout_s"),
        ({"options": [("clusters", 2)]}, "options"),
        ({"options": {"platform": "sim"}}, "platform"),
        ({"options": {"device_ids": [1]}}, "device_ids"),
        ({"options": {3: 1}}, "options"),
        ({"platform": ""}, "platform"),
    ],
)
def test_spec_refuses(kwargs, field):
    args = {"device_ids": [0], **kwargs}
    with pytest.raises(InvalidConfigError, match=field):
        RemoteWorkerSpec(**args)


def test_import_needs_no_ray():
    code = (
        "import sys, simpler, simpler.remote, simpler.remote.actor, simpler.remote.child, "
        "simpler.remote.plane, simpler.remote.spec; assert 'ray' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_spec_normalizes():
    spec = RemoteWorkerSpec(device_ids=range(2), num_sub_workers=1, options={"clusters": 2})
    assert spec.device_ids == (0, 1)
    assert hash(spec) == hash(RemoteWorkerSpec(device_ids=(0, 1), num_sub_workers=1))
    assert spec.worker_config() == {
        "platform": "sim",
        "device_ids": [0, 1],
        "num_sub_workers": 1,
        "chip_isolation": "thread",
        "clusters": 2,
    }
    assert RemoteWorkerSpec(device_ids=[], num_sub_workers=1).device_ids == ()
    with pytest.raises(InvalidConfigError, match="RemoteWorkerSpec"):
        RayChild({"device_ids": [0]}, 0)


# -- placement ---------------------------------------------------------------------------------

FAKE_NODES = [
    {"NodeID": "aa" * 28, "Alive": True, "NodeManagerAddress": "10.0.0.1",
     "Resources": {"CPU": 4.0, "node:10.0.0.1": 1.0, "host_x": 1.0}},
    {"NodeID": "bb" * 28, "Alive": True, "NodeManagerAddress": "10.0.0.2",
     "Resources": {"CPU": 4.0, "node:10.0.0.2": 1.0, "memory": 1.0}},
    {"NodeID": "cc" * 28, "Alive": False, "NodeManagerAddress": "10.0.0.3", "Resources": {}},
]


def _affinity_id(options):
    return options["scheduling_strategy"].node_id


def test_resolve_node_rules():
    assert resolve_node(None, FAKE_NODES) == ({}, "any node")
    options, where = resolve_node("AA" * 28, FAKE_NODES)  # node id, any case
    assert _affinity_id(options) == "aa" * 28 and options["scheduling_strategy"].soft is False
    assert _affinity_id(resolve_node("10.0.0.2", FAKE_NODES)[0]) == "bb" * 28  # IP
    assert resolve_node("host_x", FAKE_NODES) == ({"resources": {"host_x": 0.001}}, "host_x")
    with pytest.raises(ValueError, match="'10.0.0.3' is a node that is no longer alive"):
        resolve_node("10.0.0.3", FAKE_NODES)
    with pytest.raises(ValueError) as e:
        resolve_node("CPU", FAKE_NODES)  # built-in resources name no node
    text = str(e.value)
    assert "'CPU'" in text and "aa" * 28 in text and "10.0.0.2" in text and "host_x" in text
    twins = [dict(FAKE_NODES[0]), dict(FAKE_NODES[1], NodeManagerAddress="10.0.0.1")]
    with pytest.raises(ValueError, match="IP address of 2 alive Ray nodes"):
        resolve_node("10.0.0.1", twins)


def test_placement_by_resource(child_a, cluster):
    assert child_a.node_id == cluster.nodes["host_a"]
    assert child_a.generation == 1
    assert child_a.describe() == "worker 0 (ray actor on node host_a)"
    node_id, pid, host = ray.get(child_a.actor.ready.remote())
    assert node_id == cluster.nodes["host_a"] and pid == child_a.pid and host


def test_placement_refusals(cluster):
    # every node of the local cluster has 127.0.0.1: the IP names none of them alone
    child = RayChild(RemoteWorkerSpec(device_ids=[0], node="127.0.0.1"), 7)
    with pytest.raises(ValueError, match="IP address of 3 alive Ray nodes"):
        child.start(START_S)
    child.shutdown()
    child = RayChild(RemoteWorkerSpec(device_ids=[0], node="host_nowhere"), 7)
    child.launch()  # never raises: start() does
    with pytest.raises(ValueError) as e:
        child.start(START_S)
    text = str(e.value)
    assert "'host_nowhere'" in text and "host_a" in text and cluster.nodes["host_b"] in text
    child.shutdown()


def test_start_failure_names_node(cluster):
    spec = RemoteWorkerSpec(device_ids=[0], node="host_b", options={"no_such_option": 1})
    child = RayChild(spec, 5)
    with pytest.raises(RuntimeError) as e:
        child.start(START_S)
    text = str(e.value)
    assert "worker 5 (ray actor on node host_b)" in text and "did not start" in text
    assert "no_such_option" in text
    assert child.actor is None
    child.shutdown()


# -- the data plane ----------------------------------------------------------------------------


def test_byte_range():
    a = np.zeros((4, 6), np.float32)
    lo, hi = byte_range(a)
    assert hi - lo == a.nbytes
    assert byte_range(a[1:3]) == (lo + 24, lo + 72)
    r = a[::-1, ::2]  # negative strides: same span start, one column short at the end
    assert byte_range(r) == (lo, hi - 4)
    assert byte_range(a[:, 1:2]) == (lo + 4, lo + 4 + 3 * 24 + 4)
    e = a[2:2]
    assert byte_range(e)[0] == byte_range(e)[1]


def test_plane_caches_per_run_and_sub_writes(cluster):
    p = DataPlane()
    x = np.arange(64, dtype=np.float32)
    r1 = p.input_ref(x, 0)
    assert p.input_ref(x, 0) is r1 and (p.puts, p.reuses) == (1, 1)
    np.testing.assert_array_equal(ray.get(r1), x)
    r2 = p.input_ref(x, 1)  # a sub task wrote something since: sent again
    assert r2 is not r1 and p.puts == 2
    assert p.input_ref(x, 1) is r2
    assert p.input_ref(x, 0) is not r2  # the entry's own sub_writes only
    p.new_run()
    assert len(p) == 0
    p.input_ref(x, 1)
    assert p.puts == 4
    # another view of the same memory is another tensor
    p.input_ref(x[:32], 1)
    p.input_ref(x.reshape(8, 8), 1)
    assert p.puts == 6 and len(p) == 3


def test_plane_invalidation_by_overlap(cluster):
    p = DataPlane()
    x = np.arange(64, dtype=np.float32)
    y = np.arange(8, dtype=np.float32)
    head, tail = x[:32], x[32:]
    p.input_ref(head, 0)
    p.input_ref(tail, 0)
    p.input_ref(y, 0)
    p.wrote([x[40:41]])  # overlaps tail only
    assert len(p) == 2
    p.input_ref(head, 0)
    assert p.reuses == 1
    p.input_ref(tail, 0)
    assert p.puts == 4
    # a produced tensor drops what overlaps it and serves its own ref
    produced = ray.put(np.full(64, 7, np.float32))
    p.produced(x, produced, 3)
    assert len(p) == 2  # x and y
    assert p.input_ref(x, 3) is produced
    assert p.input_ref(x, 4) is not produced  # sub_writes moved on
    p.wrote([y[3:4], x[::2]])
    assert len(p) == 0
    # an empty array overlaps nothing
    p.input_ref(y, 5)
    p.wrote([x[5:5]])
    assert len(p) == 1


def test_plane_put_raced_by_a_write_is_not_cached(cluster, monkeypatch):
    import simpler.remote.plane as rc

    p = DataPlane()
    x = np.arange(64, dtype=np.float32)
    y = np.arange(8, dtype=np.float32)
    during = []

    class Racing:
        exceptions = ray.exceptions

        @staticmethod
        def put(value):
            for arrays in during:
                p.wrote(arrays)  # another lane's task wrote while this put ran
            return ray.put(value)

    monkeypatch.setattr(rc, "_ray", lambda: Racing)
    during.append([y])  # elsewhere: the put is cached
    p.input_ref(x, 0)
    assert len(p) == 1
    p.new_run()
    during[:] = [[x[10:11]]]  # overlapping: returned, not cached
    assert p.input_ref(x, 0) is not None and len(p) == 0
    during.clear()
    p.input_ref(x, 0)
    assert len(p) == 1 and p.puts == 3


def test_plane_one_put_for_concurrent_readers(cluster):
    p = DataPlane()
    x = np.ones(1 << 16, np.float32)
    refs = []
    barrier = threading.Barrier(8)

    def reader():
        barrier.wait()
        refs.append(p.input_ref(x, 0))

    threads = [threading.Thread(target=reader) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert p.puts == 1 and p.reuses == 7 and len({id(r) for r in refs}) == 1


# -- runs --------------------------------------------------------------------------------------


def test_run_vector_add(child_a, plane):
    plane.new_run()
    a, b = vectors(1)
    c = np.zeros(N, np.float32)
    child_a.run(2, vadd_args(a, b, c), CallConfig(), 0)
    np.testing.assert_allclose(c, a + b, rtol=1e-6)
    assert plane.puts >= 2
    # the output is cached: a reader of c gets the producer's object, not a new put
    puts = plane.puts
    ref = plane.input_ref(c, 0)
    assert plane.puts == puts
    np.testing.assert_array_equal(ray.get(ref), c)
    # the same inputs again in this run: not sent again (only the new output's content)
    c2 = np.zeros(N, np.float32)
    child_a.run(2, vadd_args(a, b, c2), None, 0)
    np.testing.assert_allclose(c2, a + b, rtol=1e-6)
    assert plane.puts == puts + 1


def test_run_inout_output_and_scalar(child_a, plane):
    plane.new_run()
    x = np.arange(N, dtype=np.float32)
    y = np.full(N, 99, np.float32)  # the actor gets its content
    child_a.run(4, [TensorArg(x, T.INOUT), TensorArg(y, T.OUTPUT), 5], None, 0)
    np.testing.assert_array_equal(x, np.arange(N) * 2)
    np.testing.assert_array_equal(y, np.arange(N) * 2 + 5)
    # a strided view written in place
    z = np.zeros((N, 2), np.float32)
    child_a.run(4, [TensorArg(x, T.INOUT), TensorArg(z[:, 1], T.OUTPUT), 1], None, 0)
    np.testing.assert_array_equal(z[:, 1], np.arange(N) * 4 + 1)
    assert not z[:, 0].any()


def test_output_moves_between_children(child_a, cluster, plane, vadd):
    """Placement by node id; a tensor child_a wrote is read by a child on another node
    through the producer's ObjectRef; shutdown() while a task runs fails it."""
    child_b = RayChild(RemoteWorkerSpec(device_ids=[0], node=cluster.nodes["host_b"]), 1, plane)
    child_b.launch()  # what the level-4 worker does for every child before start()
    child_b.start(START_S)
    try:
        assert child_b.node_id == cluster.nodes["host_b"]
        assert child_b.describe() == f"worker 1 (ray actor on node {cluster.nodes['host_b']})"
        register_vadd(child_b, vadd)
        plane.new_run()
        a, b = vectors(2)
        c = np.zeros(N, np.float32)
        d = np.zeros(N, np.float32)
        child_a.run(2, vadd_args(a, b, c), None, 0)
        puts = plane.puts
        child_b.run(2, vadd_args(c, b, d), None, 0)  # c from child_a's object, b cached
        assert plane.puts == puts + 1  # only d's content
        np.testing.assert_allclose(d, a + 2 * b, rtol=1e-6)
        # shut down from another thread while a task runs: the task fails, nothing restarts
        child_b.register(6, payload_fn(orch_sleeps))
        failed = []

        def sleeper():
            try:
                child_b.run(6, [20000], None, 0)
            except BaseException as e:  # noqa: BLE001 - examined below
                failed.append(e)

        t = threading.Thread(target=sleeper)
        t.start()
        time.sleep(0.5)
        t0 = time.monotonic()
        child_b.shutdown()
        t.join(10)
        assert time.monotonic() - t0 < 10 and not t.is_alive()
        assert len(failed) == 1 and isinstance(failed[0], ChildDied), failed
        assert "shut down" in str(failed[0])
        with pytest.raises(ChildDied, match="shut down"):
            child_b.run(2, vadd_args(c, b, d), None, 0)
    finally:
        child_b.shutdown()


def test_remote_exception_text(child_a):
    with pytest.raises(RemoteTaskError) as e:
        child_a.run(5, [], None, 0)
    text = str(e.value)
    assert text.startswith("worker 0 (ray actor on node host_a)")
    assert "ValueError: deliberate failure 42" in text
    assert "remote traceback" in text and "orch_raises" in text and "\x1b[" not in text
    assert e.value.remote_type == "ValueError"
    # a chip callable is not a level-4 task
    with pytest.raises(RemoteTaskError, match="chip callable"):
        child_a.run(1, [], None, 0)
    # the child goes on
    child_a.run(3, [], None, 0)


def test_unimportable_function(child_a, tmp_path):
    # a module only this process can import (the actor got sys.path before it existed)
    (tmp_path / "only_on_the_driver.py").write_text("def orch(o, args, cfg):\n    pass\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import only_on_the_driver

        with pytest.raises(RemoteTaskError) as e:
            child_a.register(9, payload_fn(only_on_the_driver.orch))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("only_on_the_driver", None)
    text = str(e.value)
    assert "refused registration 9" in text and "only_on_the_driver" in text
    assert "PayloadError" in text
    child_a.unregister(9)  # never registered: nothing to do
    child_a.register(9, payload_fn(orch_noop))
    child_a.run(9, [], None, 0)
    child_a.unregister(9)
    with pytest.raises(RemoteTaskError, match="no callable is registered under key 9"):
        child_a.run(9, [], None, 0)
    child_a.run(3, [], None, 0)  # still fine


def test_round_trip_numbers(child_a, plane):
    t0 = time.monotonic()
    for _ in range(20):
        child_a.run(3, [], None, 0)
    noop = (time.monotonic() - t0) / 20
    plane.new_run()
    a, b = vectors(3)
    c = np.zeros(N, np.float32)
    t0 = time.monotonic()
    child_a.run(2, vadd_args(a, b, c), None, 0)
    vadd_s = time.monotonic() - t0
    print(f"\nactor start {child_a.start_s:.2f} s; no-op run {noop * 1e3:.1f} ms; "
          f"vector_add of {N} f32 {vadd_s * 1e3:.1f} ms")


# -- failures ----------------------------------------------------------------------------------


def test_killed_actor_restarts_then_dies(cluster, vadd, tmp_path):
    # a module on the driver's sys.path when the actor starts imports there (each generation)
    (tmp_path / "driver_side_module.py").write_text(
        "def orch(o, args, cfg):\n    args.tensor(0).array[:] = 17\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        import driver_side_module

        child = started(RemoteWorkerSpec(device_ids=[0], node="host_b", max_restarts=1), 2)
    finally:
        sys.path.remove(str(tmp_path))
    try:
        register_vadd(child, vadd)
        child.register(6, payload_fn(orch_sleeps))
        child.register(7, payload_fn(driver_side_module.orch))
        sys.modules.pop("driver_side_module", None)
        out = np.zeros(8, np.int32)
        child.run(7, [TensorArg(out, T.OUTPUT)], None, 0)
        assert (out == 17).all()
        first = child.actor
        # killed while a task runs: replaced (generation 2), the task fails
        killer = threading.Timer(0.5, lambda: ray.kill(first, no_restart=True))
        killer.start()
        with pytest.raises(ChildRestarted) as e:
            child.run(6, [5000], None, 0)
        killer.join()
        assert e.value.generation == 2 and child.generation == 2
        assert "worker 2 (ray actor on node host_b)" in e.value.report
        assert "ActorDiedError" in e.value.report
        assert child.node_id == cluster.nodes["host_b"]
        # generation 2 has every callable again
        a, b = vectors(4)
        c = np.zeros(N, np.float32)
        child.run(2, vadd_args(a, b, c), None, 0)
        np.testing.assert_allclose(c, a + b, rtol=1e-6)
        out[:] = 0
        child.run(7, [TensorArg(out, T.OUTPUT)], None, 0)
        assert (out == 17).all()
        # killed before a run, no restart left: dead, and stays dead
        ray.kill(child.actor, no_restart=True)
        with pytest.raises(ChildDied) as e:
            child.run(2, vadd_args(a, b, c), None, 0)
        assert "worker 2" in e.value.report and "ActorDiedError" in e.value.report
        with pytest.raises(ChildDied):
            child.run(3, [], None, 0)
        with pytest.raises(ChildDied):
            child.register(10, payload_fn(orch_noop))
    finally:
        child.shutdown()  # a dead child: nothing left to stop, no error
    assert child.actor is None


def test_task_timeout(cluster, vadd):
    spec = RemoteWorkerSpec(device_ids=[0], chip_isolation="process", remote_task_timeout_s=1,
                            max_restarts=1)
    child = started(spec, 3)
    try:
        assert child.describe() == f"worker 3 (ray actor on node {child.node_id[:12]})"
        assert RayChild(spec, 3).describe() == "worker 3 (ray actor on any node)"
        register_vadd(child, vadd)
        child.register(6, payload_fn(orch_sleeps))
        t0 = time.monotonic()
        with pytest.raises(ChildTimeout) as e:
            child.run(6, [20000], None, 0)
        assert time.monotonic() - t0 < 10
        assert e.value.after_s == 1 and "remote_task_timeout_s" in e.value.report
        # the next call replaces the killed actor
        a, b = vectors(5)
        c = np.zeros(N, np.float32)
        child.run(2, vadd_args(a, b, c), None, 0)  # chips in a child process: shared staging
        np.testing.assert_allclose(c, a + b, rtol=1e-6)
        assert child.generation == 2
        with pytest.raises(ChildTimeout):
            child.run(6, [20000], None, 0)
        with pytest.raises(ChildDied, match="killed after a task ran past 1 s"):
            child.run(2, vadd_args(a, b, c), None, 0)
    finally:
        child.shutdown()


def test_node_removed(cluster, vadd):
    name = cluster.add_node()
    child = started(RemoteWorkerSpec(device_ids=[0], node=name, max_restarts=1), 4)
    try:
        register_vadd(child, vadd)
        a, b = vectors(6)
        c = np.zeros(N, np.float32)
        child.run(2, vadd_args(a, b, c), None, 0)
        cluster.remove_node(name)
        with pytest.raises(ChildDied) as e:  # the restart finds no node to go to
            child.run(2, vadd_args(a, b, c), None, 0)
        report = e.value.report
        assert "worker 4" in report and f"node {name}" in report and "replacing it failed" in report
    finally:
        child.shutdown()
