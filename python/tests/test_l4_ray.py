"""Level 4 over Ray: ``Worker(level=4)`` with children in Ray actors on the nodes of one local
cluster (head + ``host_a`` + ``host_b`` on 127.0.0.1, shared by the whole session:
``simpler.testing.ray_cluster``). The two-host example end to end, an output passed from one
host to another, inputs put once per run, a killed actor, a removed node, restarts, a task
timeout, and ``close()`` leaving no actor alive (``docs/l4-worker.md``).

Skipped without Ray, unless ``SIMPLER_REQUIRE_RAY=1`` (``.ci/run`` sets it): then a missing
Ray fails the module.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

if os.environ.get("SIMPLER_REQUIRE_RAY") != "1":
    pytest.importorskip("ray", reason="Ray is not installed: pip install 'simpler[ray]'")

import ray  # noqa: E402 - after the skip

import simpler  # noqa: E402
from simpler import ChipCallable, RemoteWorkerSpec, TaskArgs, Worker  # noqa: E402
from simpler import TensorArgType as T  # noqa: E402
from simpler.testing import ray_cluster  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
N = 1 << 20  # vector_add's length

cluster = ray_cluster.session_fixture()


@pytest.fixture(scope="module")
def vector_add():
    return ChipCallable.from_example("vector_add")


def vadd_args(a, b, c):
    return TaskArgs().add_tensor(a, T.INPUT).add_tensor(b, T.INPUT).add_tensor(c, T.OUTPUT_EXISTING)


@pytest.fixture(scope="module")
def two(cluster, vector_add):
    """A level-4 worker with Ray children on host_a and host_b (one chip each) and one sub
    worker, shared by the tests that leave it usable; ``fn`` runs vector_add on the child's
    chip 0 (a level-3 orchestration function closing over the level-4 handle: it travels
    by value)."""
    w = Worker(level=4, num_sub_workers=1)
    ids = [w.add_remote_worker(RemoteWorkerSpec(device_ids=[0], node=n)) for n in ("host_a", "host_b")]
    add = w.register(vector_add)

    def vadd(o, args, cfg):
        o.submit_next_level(add, args, cfg, worker=0)

    fn = w.register(vadd)
    w.init()
    yield w, ids, fn
    w.close()


def test_the_two_hosts_example_passes(cluster, capsys):
    spec = importlib.util.spec_from_file_location("two_hosts", REPO / "examples/l4/two_hosts/main.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["two_hosts"] = module
    spec.loader.exec_module(module)
    import cloudpickle

    # As when run as a script (its functions are __main__'s): they travel by value.
    cloudpickle.register_pickle_by_value(module)
    assert module._run_on_cluster(seed=3) is True
    out = capsys.readouterr().out
    assert "0 of 131072 elements differ" in out, out


def test_an_output_moves_from_one_host_to_the_other(two):
    w, (a, b), fn = two
    rng = np.random.default_rng(1)
    x = rng.random(N, dtype=np.float32)
    y = np.zeros(N, np.float32)
    z = np.zeros(N, np.float32)
    plane = w._plane
    before = (plane.puts, plane.reuses)

    def orch(o, _args, cfg):
        o.submit_next_level(fn, vadd_args(x, x, y), cfg, worker=a)  # y = 2x on host_a
        o.submit_next_level(fn, vadd_args(y, x, z), cfg, worker=b)  # z = y + x on host_b

    w.run(orch)
    np.testing.assert_array_equal(y, x + x)  # written back into the caller's array
    np.testing.assert_array_equal(z, (x + x) + x)
    puts, reuses = plane.puts - before[0], plane.reuses - before[1]
    # Puts: x once (read three times), and the contents of y and z (outputs keep what their
    # task does not write). y reaches host_b as host_a's output ref: not put again.
    assert puts == 3, (puts, reuses)
    assert reuses == 3, (puts, reuses)


def test_a_group_reads_one_input_put_once_per_run(two):
    w, ids, fn = two
    x = np.arange(N, dtype=np.float32)
    outs = [np.zeros(N, np.float32) for _ in ids]
    plane = w._plane
    for run in range(2):
        before = plane.puts
        w.run(
            lambda o, _a, cfg: o.submit_next_level_group(
                fn, [vadd_args(x, x, c) for c in outs], cfg, workers=ids
            )
        )
        # x once, however many members read it; each member's output once (its content).
        puts = plane.puts - before
        assert puts == 1 + len(outs), f"run {run}: {puts} puts"
        for c in outs:
            np.testing.assert_array_equal(c, 2 * x)
        x += 1  # the caller writes its array between runs: the next run puts it again


def test_a_level4_sub_task_reads_the_remote_outputs(two):
    w, (a, b), fn = two

    def total(args):
        np.add(args[0], args[1], out=args[2])

    tot = w.register(total)
    shared = w.create_buffer(3 * 4 * N)
    c0, c1, s = (shared.array((N,), np.float32, i * 4 * N) for i in range(3))
    x = np.full(N, 2.0, np.float32)

    def orch(o, _args, cfg):
        o.submit_next_level(fn, vadd_args(x, x, c0), cfg, worker=a)
        o.submit_next_level(fn, vadd_args(x, x, c1), cfg, worker=b)
        o.submit_sub(tot, TaskArgs().add_tensor(c0, T.INPUT).add_tensor(c1, T.INPUT).add_tensor(s, T.OUTPUT_EXISTING))

    report = w.run(orch)
    assert report.tasks == 3
    np.testing.assert_array_equal(s, np.full(N, 8.0, np.float32))


def _fresh(spec_kwargs):
    """A level-4 worker of Ray children made by ``spec_kwargs`` (one dict per child) and
    ``slow``, a level-3 orchestration function sleeping its first scalar's seconds."""
    w = Worker(level=4)
    ids = [w.add_remote_worker(RemoteWorkerSpec(device_ids=[0], **kw)) for kw in spec_kwargs]

    def slow(o, args, cfg):
        import time as clock

        clock.sleep(float(args.scalar(0)))

    handle = w.register(slow)
    w.init()
    return w, ids, handle


def _sleep_args(seconds, *tensors):
    """The arguments of ``slow``: ``tensors`` (tag, array pairs), then the seconds."""
    args = TaskArgs()
    for tag, array in tensors:
        args.add_tensor(array, tag)
    return args.add_scalar(int(seconds))


def _kill_soon(actor, after_s=1.0):
    def go():
        time.sleep(after_s)
        ray.kill(actor, no_restart=True)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def test_killing_an_actor_mid_run_fails_its_task_and_its_dependents(cluster):
    w, (a, b), slow = _fresh([{"node": "host_a"}, {"node": "host_b"}])
    try:
        marker = np.zeros(4, np.float32)

        def orch(o, _args, cfg):
            o.submit_next_level(slow, _sleep_args(3, (T.OUTPUT_EXISTING, marker)), cfg, worker=a)
            o.submit_next_level(slow, _sleep_args(0, (T.INPUT, marker)), cfg, worker=b)

        t = _kill_soon(w.children[a].actor)
        with pytest.raises(simpler.EndpointFailureError) as info:
            w.run(orch)
        t.join()
        text = str(info.value)
        assert "worker 0" in text and "host_a" in text, text
        assert info.value.code_name == "ENDPOINT_FAILURE"
        # Later submits naming the dead child are refused; the other child goes on.
        with pytest.raises(simpler.EndpointFailureError, match="refused"):
            w.run(lambda o, _a, cfg: o.submit_next_level(slow, _sleep_args(0), cfg, worker=a))
        w.run(lambda o, _a, cfg: o.submit_next_level(slow, _sleep_args(0), cfg, worker=b))
    finally:
        w.close()


def test_a_removed_node_fails_the_task_with_endpoint_failure(cluster):
    node = cluster.add_node()
    w, (a,), slow = _fresh([{"node": node}])
    try:
        h = w.submit(lambda o, _a, cfg: o.submit_next_level(slow, _sleep_args(5), cfg, worker=a))
        time.sleep(1.0)
        cluster.remove_node(node)
        with pytest.raises(simpler.EndpointFailureError) as info:
            h.wait(timeout=60)
        assert node in str(info.value) or "worker 0" in str(info.value), str(info.value)
    finally:
        w.close()


def test_max_restarts_recreates_the_actor_and_never_reruns_the_task(cluster):
    w, (a,), slow = _fresh([{"node": "host_b", "max_restarts": 1}])
    try:
        child = w.children[a]
        first = child.actor
        t = _kill_soon(first)
        with pytest.raises(simpler.EndpointFailureError) as info:
            w.run(lambda o, _a, cfg: o.submit_next_level(slow, _sleep_args(3), cfg, worker=a))
        t.join()
        assert info.value.details.get("generation") == 2 or getattr(info.value, "generation", None) == 2, str(info.value)
        assert "not re-executed" in str(info.value)
        assert child.generation == 2 and child.actor is not first
        w.run(lambda o, _a, cfg: o.submit_next_level(slow, _sleep_args(0), cfg, worker=a))
    finally:
        w.close()


def test_a_task_past_its_timeout_fails_with_a_typed_timeout(cluster):
    w, (a,), slow = _fresh([{"node": "host_a", "remote_task_timeout_s": 1.0}])
    try:
        t0 = time.monotonic()
        with pytest.raises(simpler.TaskTimeoutError) as info:
            w.run(lambda o, _a, cfg: o.submit_next_level(slow, _sleep_args(30), cfg, worker=a))
        assert time.monotonic() - t0 < 20
        assert isinstance(info.value, TimeoutError)
        assert info.value.code_name == "TASK_TIMEOUT" and "worker 0" in str(info.value)
    finally:
        w.close()


def test_close_leaves_no_actor_alive(cluster):
    w, ids, _slow = _fresh([{"node": "host_a"}, {"node": "host_b"}])
    actors = [w.children[i].actor for i in ids]
    w.close()
    for actor in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.ready.remote(), timeout=30)


def test_a_child_that_cannot_start_rolls_init_back(cluster):
    w = Worker(level=4)
    good = w.add_remote_worker(RemoteWorkerSpec(device_ids=[0], node="host_a"))
    w.add_remote_worker(RemoteWorkerSpec(device_ids=[0], node="host_b", options={"clusters": 0}))
    with pytest.raises(simpler.StartupError) as info:
        w.init()
    assert "worker 1" in str(info.value), str(info.value)
    actor = w.children[good].actor
    if actor is not None:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.ready.remote(), timeout=30)
    w.close()


def _listening_inodes_off_loopback():
    """Inodes of the TCP sockets of this machine listening on an address other than
    127.0.0.1 (IPv4, or IPv4-mapped in IPv6) or ::1."""
    loopback = {"0100007F", "0" * 24 + "01000000", "0000000000000000FFFF00000100007F"}
    out = set()
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(path).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, state, inode = fields[1].split(":")[0], fields[3], fields[9]
            if state == "0A" and address not in loopback:  # 0A: LISTEN
                out.add(inode)
    return out


def _socket_inodes(pid):
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        pass
    return inodes


def test_unwritten_output_elements_keep_their_values(two):
    """A task that writes part of an output leaves the rest as it was, as in place."""
    w, (a, _b), _fn = two

    def first_only(o, args, cfg):
        args.tensor(0).array[0] = 42.0

    handle = w.register(first_only)
    y = np.full(4, 5.0, np.float32)
    w.run(lambda o, _a, cfg: o.submit_next_level(handle, TaskArgs().add_tensor(y, T.OUTPUT_EXISTING), cfg, worker=a))
    np.testing.assert_array_equal(y, [42.0, 5.0, 5.0, 5.0])


def test_a_reclaimed_alloc_is_sent_again(two):
    """orch.alloc hands reclaimed bytes out again: what was sent for the old tensor is not
    reused for the new one."""
    w, (a, b), fn = two
    outs = [np.zeros(N, np.float32) for _ in range(3)]

    def orch(o, _args, cfg):
        for i, out in enumerate(outs):
            with o.scope():
                t = o.alloc((N,), "float32")
                t[:] = float(i + 1)
                o.submit_next_level(fn, vadd_args(t, t, out), cfg, worker=b)

    w.run(orch)
    for i, out in enumerate(outs):
        np.testing.assert_array_equal(out, np.full(N, 2.0 * (i + 1), np.float32))


def test_the_cluster_and_the_actors_listen_on_loopback_only(two):
    """Ray's sockets (the driver's, every node's, every actor's) are bound to 127.0.0.1; and
    simpler itself opens none (the driver's are all Ray's)."""
    w, ids, fn = two
    x = np.ones(N, np.float32)
    c = np.zeros(N, np.float32)
    w.run(lambda o, _a, cfg: o.submit_next_level(fn, vadd_args(x, x, c), cfg, worker=ids[0]))
    exposed = _listening_inodes_off_loopback()
    pids = [os.getpid()] + [pid for pid, _cmd, _rss in ray_cluster._ray_processes()]
    offenders = {pid: _socket_inodes(pid) & exposed for pid in pids}
    assert not any(offenders.values()), {p: s for p, s in offenders.items() if s}


def test_close_kills_a_child_still_busy_after_close_timeout(cluster):
    w = Worker(level=4, close_timeout_s=2)
    a = w.add_remote_worker(RemoteWorkerSpec(device_ids=[0], node="host_a"))

    def slow(o, args, cfg):
        import time as clock

        clock.sleep(float(args.scalar(0)))

    handle = w.register(slow)
    w.init()
    actor = w.children[a].actor
    h = w.submit(lambda o, _a, cfg: o.submit_next_level(handle, _sleep_args(60), cfg, worker=a))
    time.sleep(1.0)
    t0 = time.monotonic()
    w.close()
    assert time.monotonic() - t0 < 20, "close() waited for the 60 s task"
    with pytest.raises(simpler.EndpointFailureError, match="close_timeout"):
        h.wait(timeout=5)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.ready.remote(), timeout=30)


def test_a_worker_left_open_is_closed_at_exit(cluster):
    script = (
        "import simpler.testing.ray_cluster\n"  # Ray's loopback-only settings, before ray
        "import ray\n"
        f"ray.init(address={cluster.address!r}, log_to_driver=False)\n"
        "from simpler import RemoteWorkerSpec, Worker\n"
        "w = Worker(level=4)\n"
        "w.add_remote_worker(RemoteWorkerSpec(device_ids=[0], node='host_a'))\n"
        "w.init()\n"
        "print('up', flush=True)\n"
    )
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "up" in done.stdout, done.stderr[-2000:]


def test_registration_skips_a_child_found_dead(cluster):
    w, (a, b), slow = _fresh([{"node": "host_a"}, {"node": "host_b"}])
    try:
        ray.kill(w.children[a].actor, no_restart=True)
        time.sleep(1.0)

        def late(o, args, cfg):
            pass

        handle = w.register(late)  # the dead child is skipped, the live one takes it
        w.run(lambda o, _a, cfg: o.submit_next_level(handle, TaskArgs(), cfg, worker=b))
        with pytest.raises(simpler.EndpointFailureError):
            w.run(lambda o, _a, cfg: o.submit_next_level(handle, TaskArgs(), cfg, worker=a))
    finally:
        w.close()
