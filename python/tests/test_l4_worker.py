"""Level-4 worker with level-3 children in this process (``add_worker``), no Ray: level-4
tasks running level-3 orchestration functions on the children, their ordering by tags,
groups, failures and poisoning, refusals, registration before and after init, handles that
cross to the children, a child with process-isolated chips, close and init rollback, runs in
flight."""

import pickle
import threading
from types import SimpleNamespace

import l3_subs
import numpy as np
import pytest
import simpler
from simpler import CallConfig, ChipCallable, TaskArgs, TensorArgType, Worker

IN = TensorArgType.INPUT
OUT = TensorArgType.OUTPUT_EXISTING
INOUT = TensorArgType.INOUT
N = 1 << 20  # vector_add's signature: a, b in f32[1048576], c out


def vadd_args(a, b, c):
    return TaskArgs().add_tensor(a, IN).add_tensor(b, IN).add_tensor(c, OUT)


def chip_args(args):
    """The first three tensors of a level-4 task's TaskArgs as vector_add's arguments."""
    return vadd_args(args.tensor(0), args.tensor(1), args.tensor(2))


def renamed(add, name):
    """vector_add under another name: the same kernels, another callable (another hashid)."""
    return ChipCallable.build(
        add.signature, add.func_name, add.binary, add.children, name=name, runtime=add.runtime
    )


def owner_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("simpler-l3-owner")]


def _missing_module():
    raise ModuleNotFoundError("No module named 'not_on_this_side'", name="not_on_this_side")


class NeedsAMissingModule:
    """Pickles fine; unpickling fails as an object of a module the loading side lacks."""

    def __reduce__(self):
        return (_missing_module, ())


def f32(rng, *shape):
    return rng.random(shape, dtype=np.float32)


@pytest.fixture(scope="module")
def vector_add():
    return ChipCallable.from_example("vector_add")


@pytest.fixture(scope="module")
def l4(vector_add):
    """Two children in this process (child 0: one chip; child 1: two chips) and one sub
    worker of the level-4 worker's own. Registered before init: vector_add, the level-3
    orchestration `on_chip` and the sub callable `total`."""
    w = Worker(level=4, num_sub_workers=1)
    kids = [Worker(level=3, device_ids=[0]), Worker(level=3, device_ids=[1, 2])]
    assert [w.add_worker(k) for k in kids] == [0, 1]
    add = w.register(vector_add)

    def on_chip(o, args, cfg):
        # A level-3 orchestration: vector_add on the child's chip named by scalar 0 (default
        # 0). It closes over the level-4 handle `add`, which travels as a foreign handle and
        # is resolved by the child.
        chip = args.scalar(0) if args.scalar_count() else 0
        o.submit_next_level(add, chip_args(args), cfg, worker=chip)

    def total(args):  # a sub callable of the level-4 worker: runs in its sub worker process
        np.add(args[0], args[1], out=args[2])

    ns = SimpleNamespace(
        w=w, kids=kids, add=add, on_chip=w.register(on_chip), total=w.register(total)
    )
    assert w.chip_count == 2
    w.init()
    assert w.chip_count == 2 and all(k._state == "ready" for k in kids)
    yield ns
    w.close()


@pytest.fixture(scope="module")
def solo(vector_add):
    """A level-4 worker without sub workers whose only child has process-isolated chips and
    a sub worker (so its tensors are staged through its shared memory)."""
    w = Worker(level=4)
    kid = Worker(level=3, device_ids=[0], chip_isolation="process", num_sub_workers=1)
    w.add_worker(kid)
    add = w.register(vector_add)
    inc = w.register(l3_subs.add_one)  # a sub callable of the child's (it has a sub worker)

    def add_then_inc(o, args, cfg):
        o.submit_next_level(add, chip_args(args), cfg, worker=0)
        o.submit_sub(inc, TaskArgs().add_tensor(args.tensor(3), INOUT))

    ns = SimpleNamespace(w=w, kid=kid, add=add, inc=inc, add_then_inc=w.register(add_then_inc))
    w.init()
    yield ns
    w.close()


# -- runs ------------------------------------------------------------------------------------


def test_two_children_and_a_level_4_sub_task_reducing_their_outputs(l4, rng):
    w = l4.w
    x, y = f32(rng, N), f32(rng, N)
    c0, c1, s = (w.create_buffer(4 * N).array((N,), np.float32) for _ in range(3))

    def orch(o, args, cfg):
        assert args == "payload" and isinstance(cfg, CallConfig)
        o.submit_next_level(l4.on_chip, vadd_args(x, y, c0), cfg, worker=0)
        o.submit_next_level(l4.on_chip, vadd_args(x, x, c1).add_scalar(1), cfg, worker=1)
        sums = TaskArgs().add_tensor(c0, IN).add_tensor(c1, IN).add_tensor(s, OUT)
        o.submit_sub(l4.total, sums)  # waits for both children

    report = w.run(orch, "payload")
    # The children resolved `add` (a level-4 handle the orchestration closed over) by hashid.
    assert report.tasks == 3 and report.run >= 1 and report.total_time_s > 0
    np.testing.assert_array_equal(c0, x + y)
    np.testing.assert_array_equal(c1, x + x)
    np.testing.assert_array_equal(s, (x + y) + (x + x))


def test_a_child_reads_what_another_child_wrote_in_the_same_run(l4, rng):
    w = l4.w
    x, y = f32(rng, N), f32(rng, N)
    c, d = np.zeros(N, np.float32), np.zeros(N, np.float32)

    def chain(o, _a, cfg):
        o.submit_next_level(l4.on_chip, vadd_args(x, y, c), cfg, worker=0)
        o.submit_next_level(l4.on_chip, vadd_args(c, x, d), cfg, worker=1)  # waits for c

    assert w.run(chain).tasks == 2
    np.testing.assert_array_equal(c, x + y)
    np.testing.assert_array_equal(d, (x + y) + x, err_msg="child 1 saw child 0's output")

    # And a write waits for an earlier reader on another (idle) child.
    e = y.copy()
    d[:] = 0

    def war(o, _a, cfg):
        o.submit_next_level(l4.on_chip, vadd_args(e, x, d), cfg, worker=1)  # reads e
        o.submit_next_level(l4.on_chip, vadd_args(x, x, e), cfg, worker=0)  # then overwrites it

    w.run(war)
    np.testing.assert_array_equal(d, y + x, err_msg="the reader saw e before it was overwritten")
    np.testing.assert_array_equal(e, x + x)


def test_a_group_runs_each_member_on_its_child_with_its_args(l4, rng):
    w = l4.w
    x, y = f32(rng, N), f32(rng, N)
    c, d = np.zeros(N, np.float32), np.zeros(N, np.float32)
    # Member 0 names chip 1, which only child 1 has: it must run on workers[0] == 1.
    members = [vadd_args(x, y, c).add_scalar(1), vadd_args(y, y, d).add_scalar(0)]
    report = w.run(
        lambda o, _a, cfg: o.submit_next_level_group(l4.on_chip, members, cfg, workers=[1, 0])
    )
    assert report.tasks == 1
    np.testing.assert_array_equal(c, x + y)
    np.testing.assert_array_equal(d, y + y)

    # The other way round, member 0 (chip 1) lands on child 0, which has one chip.
    c[:] = 0
    with pytest.raises(simpler.TaskFailedError) as info:
        w.run(
            lambda o, _a, cfg: o.submit_next_level_group(l4.on_chip, members, cfg, workers=[0, 1])
        )
    assert info.value.worker.startswith("worker 0"), info.value.details
    assert "worker 1: there is no such chip (this worker has 1)" in info.value.traceback
    assert (c == 0).all()


def test_the_task_config_reaches_the_level_3_orchestration(l4):
    seen = np.zeros(4, np.uint64)

    def record(o, args, cfg):  # runs on the child, in this process: writes the driver's array
        t = args.tensor(0).array
        t[0] = isinstance(cfg, CallConfig)
        t[1] = cfg.aicpu_thread_num
        t[2] = args.scalar_count()
        t[3] = args.scalar(0)

    h = l4.w.register(record)
    try:
        l4.w.run(
            lambda o, _a, cfg: o.submit_next_level(
                h, TaskArgs().add_tensor(seen, OUT).add_scalar(-7), cfg, worker=1
            ),
            config=CallConfig(aicpu_thread_num=3),
        )
    finally:
        l4.w.unregister(h)
    assert list(seen) == [1, 3, 1, 2**64 - 7], seen  # a scalar arrives as its raw 64 bits
    assert simpler.uint64_to_scalar(int(seen[3]), "i64") == -7


def test_a_raising_level_3_orchestration_fails_the_run_and_poisons_its_dependents(l4, rng):
    w = l4.w

    def explode(o, args, cfg):
        raise ValueError("the level-3 orchestration gave up")

    bad = w.register(explode)
    x, y = f32(rng, N), f32(rng, N)
    c, d, e = (np.zeros(N, np.float32) for _ in range(3))
    try:

        def orch(o, _a, cfg):
            o.submit_next_level(bad, vadd_args(x, y, c), cfg, worker=1)
            o.submit_next_level(l4.on_chip, vadd_args(c, x, d), cfg, worker=0)  # depends on c
            o.submit_next_level(l4.on_chip, vadd_args(d, x, e), cfg, worker=1)  # on d

        with pytest.raises(simpler.TaskFailedError) as info:
            w.run(orch)
        err, text = info.value, str(info.value)
        assert "explode" in text and "worker 1" in text, text
        assert "the level-3 orchestration gave up" in text and "ValueError" in err.traceback
        assert err.task.endswith("explode") and err.worker.startswith("worker 1"), err.details
        assert err.code_name == "SUB_FAILED", err.code_name
        assert (d == 0).all() and (e == 0).all(), "the dependents never ran"
        # The worker, and the child that failed, take the next run.
        again = vadd_args(x, y, c)
        w.run(lambda o, _a, cfg: o.submit_next_level(l4.on_chip, again, cfg, worker=1))
        np.testing.assert_array_equal(c, x + y)
    finally:
        w.unregister(bad)


def test_two_runs_in_flight(l4, rng):
    w = l4.w
    x, y = f32(rng, N), f32(rng, N)
    outs = [np.zeros(N, np.float32) for _ in range(3)]

    def first(o, _a, cfg):
        o.submit_next_level(l4.on_chip, vadd_args(x, y, outs[0]), cfg, worker=0)
        o.submit_next_level(l4.on_chip, vadd_args(outs[0], x, outs[1]), cfg, worker=1)

    def second(o, _a, cfg):  # reads what the first run writes: runs never overlap
        o.submit_next_level(l4.on_chip, vadd_args(outs[1], y, outs[2]), cfg, worker=0)

    a, b = w.submit(first), w.submit(second)
    assert b.run == a.run + 1
    report = b.result()
    assert a.done, "runs end in submission order"
    assert a.result().tasks == 2 and report.tasks == 1
    np.testing.assert_array_equal(outs[1], (x + y) + x)
    np.testing.assert_array_equal(outs[2], ((x + y) + x) + y)
    a.wait()  # idempotent


# -- refusals ----------------------------------------------------------------------------------


def test_add_worker_refusals(l4):
    with pytest.raises(simpler.WorkerStateError, match="level-4") as info:
        Worker(level=3, device_ids=[0]).add_worker(Worker(level=3, device_ids=[0]))
    assert "has level 3" in str(info.value) and info.value.code_name == "INVALID_STATE"
    with pytest.raises(simpler.WorkerStateError, match=r"before init\(\)"):
        l4.w.add_worker(Worker(level=3, device_ids=[0]))
    assert l4.w.chip_count == 2

    w = Worker(level=4)
    try:
        with pytest.raises(simpler.InvalidArgumentError, match="a child of a worker already"):
            w.add_worker(l4.kids[0])
        started = Worker(level=3, device_ids=[0])
        started.init()
        try:
            with pytest.raises(simpler.InvalidArgumentError, match="not initialized.*ready"):
                w.add_worker(started)
        finally:
            started.close()
        with pytest.raises(simpler.InvalidArgumentError, match="not initialized.*closed"):
            w.add_worker(started)
        with pytest.raises(simpler.InvalidArgumentError, match="have level 3, got a level-4"):
            w.add_worker(Worker(level=4))
        with pytest.raises(simpler.ArgumentTypeError, match=r"takes a Worker\(level=3\)"):
            w.add_worker(Worker(level=2))
        with pytest.raises(simpler.InvalidArgumentError, match="its own child"):
            w.add_worker(w)
        assert w.children == [] and w.chip_count == 0, "nothing was added"
        # A refused worker is still free to be a child.
        free = Worker(level=3, device_ids=[0])
        assert w.add_worker(free) == 0 and len(w.children) == 1
    finally:
        w.close()
    assert free._state == "closed"


def test_device_ids_are_refused_at_level_4():
    for key, value in (("device_ids", [0]), ("device_id", 0)):
        with pytest.raises(simpler.InvalidConfigError, match="is a level-3 option") as info:
            Worker(level=4, **{key: value})
        assert "add_worker" in str(info.value)


def test_a_chip_callable_is_refused_at_level_4(l4, vector_add):
    c = np.zeros(N, np.float32)
    args = vadd_args(c, c, c)
    with pytest.raises(simpler.ArgumentTypeError) as info:
        l4.w.run(lambda o, _a, cfg: o.submit_next_level(l4.add, args, cfg, worker=0))
    text = str(info.value)
    assert "`vector_add` is a chip callable" in text, text
    assert "level-3 orchestration function" in text and "from inside one" in text, text
    with pytest.raises(simpler.ArgumentTypeError, match="from inside one"):
        l4.w.run(
            lambda o, _a, cfg: o.submit_next_level_group(
                l4.add, [vadd_args(c, c, c)], cfg, workers=[0]
            )
        )
    with pytest.raises(simpler.ArgumentTypeError, match="the handle that register"):
        l4.w.run(lambda o, _a, cfg: o.submit_next_level(vector_add, args, cfg, worker=0))


def test_worker_ids_are_checked_at_level_4(l4):
    c = np.zeros(N, np.float32)

    def submit(worker):
        args = vadd_args(c, c, c)
        l4.w.run(lambda o, _a, cfg: o.submit_next_level(l4.on_chip, args, cfg, worker=worker))

    with pytest.raises(simpler.InvalidArgumentError, match="worker 2") as info:
        submit(2)
    err = info.value
    assert err.code_name == "UNKNOWN_WORKER" and err.worker == 2 and err.count == 2, err.details
    assert "has 2" in str(err), str(err)
    with pytest.raises(simpler.InvalidArgumentError, match="negative"):
        submit(-1)
    with pytest.raises(simpler.SimplerError) as info:
        l4.w.run(
            lambda o, _a, cfg: o.submit_next_level_group(
                l4.on_chip, [vadd_args(c, c, c)] * 2, cfg, workers=[1, 1]
            )
        )
    assert "workers" in str(info.value)


def test_an_unknown_worker_id_at_level_4_is_not_called_a_chip(l4):
    c = np.zeros(N, np.float32)
    args = vadd_args(c, c, c)
    with pytest.raises(simpler.InvalidArgumentError) as info:
        l4.w.run(lambda o, _a, cfg: o.submit_next_level(l4.on_chip, args, cfg, worker=2))
    assert "chip" not in str(info.value), str(info.value)
    assert "no such child worker (this worker has 2)" in str(info.value)


def test_submit_sub_without_level_4_sub_workers_is_refused(solo):
    c = solo.w.create_buffer(4 * N).array((N,), np.float32)
    with pytest.raises(simpler.InvalidArgumentError, match="has no sub worker to run on") as info:
        solo.w.run(lambda o, _a, _c: o.submit_sub(solo.inc, TaskArgs().add_tensor(c, INOUT)))
    assert "num_sub_workers=0" in str(info.value) and info.value.reason == "no sub workers"
    assert (c == 0).all()


# -- registration ------------------------------------------------------------------------------


def test_registration_after_init_reaches_the_children_and_unregister_forgets_it(
    l4, vector_add, rng
):
    w = l4.w
    late = w.register(renamed(vector_add, "vector_add_late"))  # a chip callable after init
    assert late.kind == "CHIP_CALLABLE" and late.hashid != l4.add.hashid

    def via_late(o, args, cfg):
        o.submit_next_level(late, chip_args(args), cfg, worker=0)

    uses = w.register(via_late)  # a function after init: an orchestration of the children ...
    double = w.register(l3_subs.double_into)  # ... and a sub callable of the level-4 worker's
    assert w.register(l3_subs.double_into) is double, "equal content, the same handle, counted"
    try:
        x, y = f32(rng, N), f32(rng, N)
        c, d = np.zeros(N, np.float32), np.zeros(N, np.float32)
        shared = w.create_buffer(8 * N)
        s_in, s_out = shared.array((2, N), np.float32)
        two = TaskArgs().add_tensor(s_in, IN).add_tensor(s_out, OUT)
        for child in (0, 1):
            w.run(
                lambda o, _a, cfg, i=child: o.submit_next_level(
                    uses, vadd_args(x, y, c), cfg, worker=i
                )
            )
            np.testing.assert_array_equal(c, x + y)
            c[:] = 0
        s_in[:] = x
        w.run(lambda o, _a, _c: o.submit_sub(double, two))
        np.testing.assert_array_equal(s_out, x * 2)
        w.unregister(double)  # one of two registrations: still there
        s_out[:] = 0
        w.run(lambda o, _a, _c: o.submit_sub(double, two))
        np.testing.assert_array_equal(s_out, x * 2)
    finally:
        w.unregister(double)
        w.unregister(late)
    with pytest.raises(simpler.UnknownCallableError):
        w.run(lambda o, _a, _c: o.submit_sub(double, two))
    # The children forgot `late` too: the orchestration that names it fails there.
    try:
        with pytest.raises(simpler.TaskFailedError) as info:
            w.run(lambda o, _a, cfg: o.submit_next_level(uses, vadd_args(x, y, d), cfg, worker=1))
        assert "UnknownCallableError" in info.value.traceback, info.value.traceback
        assert "vector_add_late" in str(info.value) and "not registered" in str(info.value)
        assert (d == 0).all()
    finally:
        w.unregister(uses)
    with pytest.raises(simpler.UnknownCallableError):
        w.run(lambda o, _a, cfg: o.submit_next_level(uses, vadd_args(x, y, d), cfg, worker=1))


def test_a_function_unregistered_before_init_never_reaches_the_engine(vector_add, rng):
    w = Worker(level=4)
    w.add_worker(Worker(level=3, device_ids=[0]))
    try:
        add = w.register(vector_add)

        def on0(o, args, cfg):
            o.submit_next_level(add, chip_args(args), cfg, worker=0)

        gone, kept = w.register(lambda o, args, cfg: None), w.register(on0)
        w.unregister(gone)
        w.init()
        x = f32(rng, N)
        c = np.zeros(N, np.float32)
        w.run(lambda o, _a, cfg: o.submit_next_level(kept, vadd_args(x, x, c), cfg, worker=0))
        np.testing.assert_array_equal(c, x + x)
        with pytest.raises(simpler.UnknownCallableError):
            w.run(lambda o, _a, cfg: o.submit_next_level(gone, vadd_args(x, x, c), cfg, worker=0))
    finally:
        w.close()


def test_a_function_the_children_cannot_load_is_refused_after_init(l4, rng):
    w = l4.w
    thing = NeedsAMissingModule()

    def needs_it(o, args, cfg):
        return thing

    for _ in range(2):  # not kept: refused again
        with pytest.raises(simpler.SimplerError) as info:
            w.register(needs_it)
        text = str(info.value)
        assert "needs_it" in text and "`not_on_this_side`" in text, text
        assert "cannot be loaded here" in text, text
    assert not any(h.name.endswith(".needs_it") for h in w._handles.values()), "nothing kept"
    x = f32(rng, N)
    c = np.zeros(N, np.float32)
    w.run(lambda o, _a, cfg: o.submit_next_level(l4.on_chip, vadd_args(x, x, c), cfg, worker=1))
    np.testing.assert_array_equal(c, x + x)


def test_a_refused_registration_after_init_names_the_child(l4):
    thing = NeedsAMissingModule()

    def needs_it(o, args, cfg):
        return thing

    with pytest.raises(simpler.InvalidArgumentError) as info:
        l4.w.register(needs_it)
    text = str(info.value)
    assert "worker 0 (level-3 worker in this process) refused" in text, text
    assert "needs_it" in text and info.value.arg == "callable", text


def test_a_function_the_children_cannot_load_fails_init_and_rolls_it_back():
    w = Worker(level=4)
    kids = [Worker(level=3, device_ids=[0]), Worker(level=3, device_ids=[1])]
    for k in kids:
        w.add_worker(k)
    thing = NeedsAMissingModule()

    def needs_it(o, args, cfg):
        return thing

    w.register(needs_it)
    with pytest.raises(simpler.StartupError) as info:
        w.init()
    text = str(info.value)
    assert text.startswith("worker 0 (level-3 worker in this process) failed to start"), text
    assert "registering `" in text and "needs_it" in text and "not_on_this_side" in text, text
    assert [k._state for k in kids] == ["closed", "closed"]
    w.close()
    assert w.closed


def test_handles_cross_as_foreign_handles(l4, vector_add, rng):
    # A level-3 orchestration that closes over a level-4 handle resolves it on the child:
    # every run through `on_chip` above shows it. Here: what a handle pickles to, and the
    # refusal of a handle no child knows.
    for h in (l4.add, l4.on_chip, l4.total):
        f = pickle.loads(pickle.dumps(h))
        assert f is not h and f._owner is None and f.target_namespace == "FOREIGN"
        assert (f.hashid, f.name, f.kind, f.signature) == (h.hashid, h.name, h.kind, h.signature)
    child = l4.kids[0]
    alias = child._own_handle(pickle.loads(pickle.dumps(l4.add)))
    assert alias._owner is child and alias.hashid == l4.add.hashid

    other = Worker(level=4)
    ghost = other.register(renamed(vector_add, "vector_add_ghost"))
    other.close()
    with pytest.raises(simpler.UnknownCallableError, match="vector_add_ghost.*not registered"):
        child._own_handle(pickle.loads(pickle.dumps(ghost)))

    def via_ghost(o, args, cfg):
        o.submit_next_level(ghost, chip_args(args), cfg, worker=0)

    h = l4.w.register(via_ghost)
    x = f32(rng, N)
    c = np.zeros(N, np.float32)
    try:
        with pytest.raises(simpler.TaskFailedError) as info:
            l4.w.run(
                lambda o, _a, cfg: o.submit_next_level(h, vadd_args(x, x, c), cfg, worker=0)
            )
        assert "UnknownCallableError" in info.value.traceback, info.value.traceback
        assert "vector_add_ghost" in str(info.value) and "worker 0" in str(info.value)
        assert (c == 0).all()
    finally:
        l4.w.unregister(h)


# -- a child with process-isolated chips --------------------------------------------------------


def test_a_child_with_process_isolated_chips_gets_its_tensors_through_shared_memory(solo, rng):
    assert any("chip 0" in name for name in solo.kid.child_pids()), solo.kid.child_pids()
    x, y = f32(rng, N), f32(rng, N)
    c = np.zeros(N, np.float32)  # private arrays: the chip process cannot see them
    acc = np.arange(8, dtype=np.float32)
    args = vadd_args(x, y, c).add_tensor(acc, INOUT)
    for run in (1, 2):
        report = solo.w.run(
            lambda o, _a, cfg: o.submit_next_level(solo.add_then_inc, args, cfg, worker=0)
        )
        assert report.tasks == 1
        np.testing.assert_array_equal(c, x + y)
        np.testing.assert_array_equal(acc, np.arange(8, dtype=np.float32) + run)
        c[:] = 0


# -- close and init ------------------------------------------------------------------------------


def test_close_waits_for_the_run_in_flight_closes_every_child_and_is_idempotent(vector_add, rng):
    w = Worker(level=4)
    kids = [Worker(level=3, device_ids=[0]), Worker(level=3, device_ids=[1])]
    for k in kids:
        w.add_worker(k)
    add = w.register(vector_add)

    def on0(o, args, cfg):
        o.submit_next_level(add, chip_args(args), cfg, worker=0)

    h = w.register(on0)
    before = len(owner_threads())
    w.init()
    assert len(owner_threads()) == before + 2
    before += 2
    x = f32(rng, N)
    c, d = np.zeros(N, np.float32), np.zeros(N, np.float32)

    def chain(o, _a, cfg):
        o.submit_next_level(h, vadd_args(x, x, c), cfg, worker=0)
        o.submit_next_level(h, vadd_args(c, x, d), cfg, worker=1)

    run = w.submit(chain)
    w.close()
    assert run.done and run.result().tasks == 2
    np.testing.assert_array_equal(d, (x + x) + x)
    assert w.closed and [k._state for k in kids] == ["closed", "closed"]
    for k in kids:
        with pytest.raises(simpler.WorkerStateError, match="closed"):
            k.run(lambda o, _a, _c: None)
    assert len(owner_threads()) == before - 2, "the children's owner threads ended"
    w.close()  # idempotent
    with pytest.raises(simpler.WorkerStateError, match="closed"):
        w.run(lambda o, _a, _c: None)
    with pytest.raises(simpler.WorkerStateError, match="closed"):
        w.register(vector_add)


def test_closing_a_level_4_worker_never_initialized_closes_its_children():
    w = Worker(level=4)
    kids = [
        Worker(level=3, device_ids=[0]),
        Worker(level=3, device_ids=[0], chip_isolation="process"),
    ]
    for k in kids:
        w.add_worker(k)
    w.close()
    assert w._state == "closed" and [k._state for k in kids] == ["closed", "closed"]
    with pytest.raises(simpler.WorkerStateError, match="closed"):
        w.init()
    w.close()


@pytest.mark.parametrize("bad_first", [False, True], ids=["bad-second", "bad-first"])
def test_a_child_that_fails_to_start_rolls_init_back(bad_first):
    # clusters=0 passes the constructor and fails only at the chip's start.
    bad = Worker(level=3, device_ids=[1], clusters=0)
    good = Worker(level=3, device_ids=[0])
    w = Worker(level=4)
    for k in (bad, good) if bad_first else (good, bad):
        w.add_worker(k)
    before = len(owner_threads())
    with pytest.raises(simpler.StartupError) as info:
        w.init()
    text = str(info.value)
    assert f"worker {0 if bad_first else 1}" in text and "clusters" in text, text
    assert good._state == "closed" and bad._state == "closed", (good._state, bad._state)
    with pytest.raises(simpler.WorkerStateError):
        good.run(lambda o, _a, _c: None)
    assert len(owner_threads()) == before, "no owner thread is left running"
    w.close()
    assert w._state == "closed"
