"""The level-3 worker: several chips of one host and a pool of sub workers, driven by a Python
orchestration function (``Worker(level=3, ...)``; every level above 3 is the same engine).

Lifecycle (upstream's)::

    w = Worker(level=3, platform="sim", device_ids=[0, 1], num_sub_workers=1)
    add = w.register(vector_add)            # a ChipCallable: runs on the chips
    check = w.register(check_fn)            # a Python function f(args): runs in a sub worker
    w.init()                                # starts the chips, the sub worker processes
    def orch(o, args, cfg):                 # runs on the caller's thread
        for i in range(2):
            o.submit_next_level(add, parts[i], cfg, worker=i)
        o.submit_sub(check, TaskArgs().add_tensor(c, TensorArgType.INPUT))
    w.run(orch)                             # or w.submit(orch) -> HostRunHandle
    w.close()

**The orchestration** ``f(orch, args, cfg)`` gets an :class:`~simpler.Orchestrator` (valid
only while ``f`` runs), the ``args`` and ``config`` given to :meth:`HostWorker.submit`. Each
``orch.submit_*`` adds a task; the engine orders tasks by their tensors' tags (``INPUT`` waits
for the writers of overlapping memory; ``OUTPUT``, ``OUTPUT_EXISTING``, ``INOUT`` for its
writers and readers; ``NO_DEP`` for nothing) and runs ready ones at once. An exception raised
by ``f`` fails the run (its tasks not yet started are cancelled) and is re-raised as it is by
``submit``/``run``.

**Memory.** With ``chip_isolation="thread"`` (the default) chips run in this process and take
numpy arrays in place. Memory a child process must see — every sub task's tensors (sub
workers are processes), and every chip tensor with ``chip_isolation="process"`` — must be
shared: a :meth:`HostWorker.create_buffer` buffer (or a numpy view of one) or an
``orch.alloc`` tensor; a plain array is refused at submit with an error naming the argument.
``orch.alloc_child_tensor`` is device memory on one chip, filled by ``orch.copy_to``.

**Threads.** Every blocking native call releases the GIL; waits run in 50 ms slices and check
for signals, so Ctrl-C raises ``KeyboardInterrupt`` while the run goes on. ``close()`` must be
called from the thread that called ``init()``, and never from inside an orchestration.

See ``docs/python.md`` §11 and ``docs/l3-worker.md``.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import math
import os
import sys
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from . import _native
from ._launch import child_program
from ._source import with_source
from .callable import CallableHandle, ChipCallable
from .config import CallConfig
from .errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    InvalidConfigError,
    UnknownCallableError,
    UnsupportedError,
    WorkerStateError,
)
from .next_level import LocalChild, encode_payload
from .options import CHIP_OPTIONS, PLATFORMS, trace_option
from .orchestrator import Orchestrator
from .remote import DataPlane, RayChild, RemoteWorkerSpec
from .runs import HostRunHandle, HostRunReport
from .shared_buffer import SharedBuffer
from .tensor import ChildTensor, Tensor
from .types import DataType, shape_tuple
from .worker import RecordedRun, Worker

__all__ = ["HostWorker"]

# Chip options of the level-2 Worker that a level-3 worker applies to each of its chips;
# `heap_ring_size` is the level-3 engine's own heap ring here (bytes per heap, 4 heaps).
_CHIP_OPTIONS = {key: field for key, field in CHIP_OPTIONS.items() if key != "heap_ring_size"}
_ISOLATIONS = ("thread", "process")


def _index_list(value: Any, what: str) -> List[int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, range)):
        raise InvalidConfigError(f"{what} must be a list of ints, got {value!r}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise InvalidConfigError(f"{what} must hold ints >= 0, got {v!r}")
        out.append(int(v))
    return out


# Level-4 workers not closed yet. Closing one calls into Python from its lane threads (its
# children are Python objects), which an interpreter that is finalizing can no longer serve,
# so whatever the caller left open is closed at exit, while it still can — and before Ray's
# own exit handler disconnects from the cluster: `_init_children` registers this handler
# again after the children launched (exit handlers run last registered first).
_UPPER: "weakref.WeakSet[HostWorker]" = weakref.WeakSet()


def _close_upper_workers() -> None:
    for w in list(_UPPER):
        try:
            w.close()
        except Exception as e:  # noqa: BLE001 - at exit: say it, close the others
            print(f"simpler: warning: closing {w!r} at exit: {e}", file=sys.stderr)


class HostWorker(Worker):
    """A worker of level 3 or above (``Worker(level=3, ...)`` makes one); see the module docs.

    Options: ``platform`` (``"sim"``), ``runtime``, ``device_ids`` (one chip per entry; chip
    ``i`` is worker id ``i``), ``num_sub_workers`` (sub worker processes, default 0),
    ``chip_isolation`` (``"thread"``: chips in this process, the default; ``"process"``: each
    chip in a child process), ``heap_ring_size`` (bytes per heap of ``orch.alloc``'s 4 heaps,
    default 64 MiB), ``startup_timeout_s`` (the whole tree's start, default 300),
    ``close_timeout_s`` (how long ``close()`` waits for the runs in flight before it kills
    the child processes still running tasks, default 30), and the
    level-2 chip options (``clusters``, ``aicpu_threads``, timeouts, ``sim_executor``,
    ``runtime`` ...), applied to every chip. The engine checks the configuration here, before anything starts.
    """

    @classmethod
    def _serves(cls, level: Any, config: Dict[str, Any]) -> bool:
        """``Worker(level=3, ...)`` and every level above make a host worker."""
        return isinstance(level, int) and not isinstance(level, bool) and level >= 3

    def __init__(self, level: int = 3, **config: Any) -> None:
        if isinstance(level, bool) or not isinstance(level, int) or level < 3:
            raise InvalidConfigError(f"a host worker has level >= 3, got {level!r}")
        self.level = level
        self.platform = config.pop("platform", "sim")
        if self.platform not in PLATFORMS:
            raise UnsupportedError(f"platform {self.platform!r}: only 'sim' exists in this build")
        if level >= 4 and ("device_ids" in config or "device_id" in config):
            raise InvalidConfigError(
                f"device_ids is a level-3 option: a level-{level} worker's next level is "
                f"level-{level - 1} workers (add_worker / add_remote_worker)"
            )
        remote_timeout = config.pop("remote_task_timeout_s", None)
        if remote_timeout is not None and (level < 4 or not (
            isinstance(remote_timeout, (int, float))
            and not isinstance(remote_timeout, bool)
            and 0 < remote_timeout <= 1e6
        )):
            raise InvalidConfigError(
                "remote_task_timeout_s is a level-4 option, in (0, 1e6] seconds, "
                f"got {remote_timeout!r}"
            )
        self.remote_task_timeout_s = 60.0 if remote_timeout is None else float(remote_timeout)
        """Level 4: how long a remote child's task may take by default (seconds; a
        ``RemoteWorkerSpec`` may set its own)."""
        if "device_id" in config and "device_ids" in config:
            raise InvalidConfigError("give device_ids (level 3) or device_id, not both")
        if "device_id" in config:
            device_ids = _index_list([config.pop("device_id")], "device_id")
        else:
            device_ids = _index_list(config.pop("device_ids", []), "device_ids")
        subs = config.pop("num_sub_workers", 0)
        if isinstance(subs, bool) or not isinstance(subs, (int, np.integer)) or subs < 0:
            raise InvalidConfigError(f"num_sub_workers must be an int >= 0, got {subs!r}")
        isolation = config.pop("chip_isolation", "thread")
        if isolation not in _ISOLATIONS:
            raise InvalidConfigError(
                f"chip_isolation must be 'thread' or 'process', got {isolation!r}"
            )
        heap_ring_size = config.pop("heap_ring_size", None)
        if heap_ring_size is not None and (
            isinstance(heap_ring_size, bool)
            or not isinstance(heap_ring_size, (int, np.integer))
            or heap_ring_size <= 0
        ):
            raise InvalidConfigError(
                f"heap_ring_size must be a positive int (bytes per heap), got {heap_ring_size!r}"
            )
        startup = config.pop("startup_timeout_s", None)
        close_timeout = config.pop("close_timeout_s", None)
        control = config.pop("py_control_timeout_s", None)
        for key, value in (
            ("startup_timeout_s", startup),
            ("close_timeout_s", close_timeout),
            ("py_control_timeout_s", control),
        ):
            if value is not None and not (
                isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < math.inf
            ):
                raise InvalidConfigError(f"{key} must be positive and finite, got {value!r}")
        # The trace level of runs whose CallConfig leaves it off (docs/tracing.md).
        self.trace_level = trace_option(config)
        options = {field: config.pop(key) for key, field in _CHIP_OPTIONS.items() if key in config}
        if config:
            raise ArgumentTypeError(f"Worker() got unknown option(s): {', '.join(sorted(config))}")
        self.device_ids = tuple(device_ids)
        self.chip_isolation = isolation
        self.num_sub_workers = int(subs)
        # The chips' own configuration (the host's WorkerConfig); checked by the engine.
        self._config = _native.WorkerConfig(device_id=device_ids[0] if device_ids else 0, **options)
        self.runtime = str(self._config.runtime)
        chips = [_native.WorkerConfig(device_id=d, **options) for d in device_ids]
        self._host_args = dict(
            chip_isolation=isolation,
            num_sub_workers=self.num_sub_workers,
            heap_ring_size=None if heap_ring_size is None else int(heap_ring_size),
            startup_timeout_s=startup,
            close_timeout_s=close_timeout,
            **child_program(),
        )
        # Level 4 and above: the engine is made at init(), once the children are known.
        self._host: Any = None
        if level == 3:
            self._host = _native.HostWorker(level, chips, **self._host_args)
        self._native = None  # the level-2 chip handle: none here
        self._state = "created"
        self._handles: Dict[str, CallableHandle] = {}
        self._lock = threading.RLock()
        # Level 4: the children (worker id = index), registrations waiting for init(), the
        # Ray children's data plane. Level 3 under a level-4 worker: that worker, and the
        # handles it issued, by hashid (docs/l4-worker.md §2).
        if level >= 4:
            _UPPER.add(self)  # closed at interpreter exit if the caller did not
        self._children: List[Any] = []
        self._pending: List[Any] = []
        self._plane: Any = None
        self._parent: Any = None
        self._aliases: Dict[str, CallableHandle] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def init(self, prewarm_config: Optional[CallConfig] = None) -> None:
        """Starts the chips, the sub worker processes, the lanes and the scheduler, once; a
        failure stops everything it started. A Python callable with no sub worker to run it
        is refused here."""
        del prewarm_config  # nothing to pre-warm: callables load at registration
        with self._lock:
            if self._state == "closed":
                raise WorkerStateError("the worker is closed", code_name="CLOSED")
            if self._host is None:
                self._init_children()
            else:
                self._host.init()
            self._state = "ready"

    def _init_children(self) -> None:
        """Level 4: makes the engine over the children, applies the registrations made
        before ``init()``, and starts it (every child within one startup deadline; the Ray
        children's actors are all created first, so they start together). A failure stops
        every child."""
        if not self._children and self.num_sub_workers == 0:
            raise InvalidConfigError(
                f"a level-{self.level} worker needs children (add_worker / add_remote_worker) "
                "or sub workers (num_sub_workers=...)"
            )
        for child in self._children:
            child.plane = self._plane
            launch = getattr(child, "launch", None)
            if launch is not None:
                launch()
        atexit.unregister(_close_upper_workers)
        atexit.register(_close_upper_workers)
        try:
            self._host = _native.HostWorker(
                self.level, [], next_level=list(self._children), **self._host_args
            )
            for pending in self._pending:
                self._apply_registration(*pending)
            self._pending.clear()
            self._host.init()
        except BaseException:
            self._stop_children()
            raise

    def _stop_children(self) -> None:
        """Shuts every child down (idempotent per child); what a failed init or closing a
        never-started level-4 worker leaves."""
        for child in self._children:
            try:
                child.shutdown()
            except Exception:  # noqa: BLE001 - best effort: every child gets its turn
                pass

    def close(self) -> None:
        """Waits for the runs in flight and stops every chip and child process (shared
        buffers and ``orch.alloc`` arrays stay valid while Python holds them). A child process
        still running a task after ``close_timeout_s`` (default 30) is killed: that task fails
        with ``EndpointFailureError``. Terminal and idempotent; refused
        (``WorkerStateError``, the worker stays open) from inside an orchestration and from a
        thread other than the one that called ``init()``. An error of the shutdown itself (a
        child that had died) is raised once the worker is closed."""
        if self._state == "closed":
            return
        if self._host is None:  # a level-4 worker never initialized
            self._stop_children()
            with self._lock:
                self._state = "closed"
                self._handles.clear()
            return
        # Not under the lock: a registration holding it may wait behind a task that only
        # close ends, and an orchestration in flight may still register (taking it) before
        # its run ends, which close waits for.
        try:
            self._host.close()
        finally:
            if self._host.closed:
                with self._lock:
                    self._state = "closed"
                    self._handles.clear()

    def _live(self) -> Any:
        if self._state == "closed":
            raise WorkerStateError("the worker is closed", code_name="CLOSED")
        if self._host is None:
            raise WorkerStateError(
                f"a level-{self.level} worker's engine starts at init(); call init() first",
                code_name="INVALID_STATE",
            )
        return self._host

    def _worker_config(self) -> "_native.WorkerConfig":
        """The chips' configuration (what a ``CallConfig`` is checked against)."""
        return self._config

    @property
    def chip_count(self) -> int:
        """Next-level workers: chips at level 3, children at level 4 and above."""
        if self._host is None:
            return len(self._children)
        return int(self._host.chip_count)

    @property
    def sub_worker_count(self) -> int:
        return self.num_sub_workers

    def child_pids(self) -> Dict[str, int]:
        """The worker's live child processes: endpoint name (``"chip 0 (device 0, pid 42)"``,
        ``"sub worker 1 (pid 43)"``) to pid. A child the engine found dead (its task failed
        with ``EndpointFailureError``) is left out."""
        return dict(self._host.child_pids())

    # -- callables ---------------------------------------------------------------------------

    def register(self, target: Any, *, workers: Any = None) -> CallableHandle:
        """Registers a :class:`ChipCallable` (run by the chips) or a Python function
        ``f(args)`` (run by sub workers; pickled with cloudpickle, so a function of an
        importable module crosses by reference and a lambda or closure by value), before or
        after :meth:`init`. Equal content returns the same handle, counted: each
        ``register`` needs one ``unregister``."""
        if workers is not None:
            raise UnsupportedError(
                "workers=: a callable is registered on every endpoint of its kind"
            )
        if isinstance(target, CallableHandle):
            raise ArgumentTypeError("register takes a ChipCallable or a function, not a handle")
        if isinstance(target, ChipCallable):
            hashid, name, kind, payload = target.hashid, target.name, "CHIP_CALLABLE", None
            signature = target.signature
        elif callable(target):
            import cloudpickle  # a dependency of the package; imported when first needed

            payload = cloudpickle.dumps(target)
            hashid = "sha256:" + hashlib.sha256(payload).hexdigest()
            shipped = with_source(target)
            if shipped is not target:  # its source lines go along (see SourcedFunction)
                payload = cloudpickle.dumps(shipped)
            module = getattr(target, "__module__", None) or "?"
            qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
            name, kind, signature = f"{module}.{qualname}", "PYTHON_SERIALIZED", ()
        else:
            raise ArgumentTypeError(
                f"a level-{self.level} worker registers a ChipCallable or a Python function, "
                f"got {type(target).__name__}"
            )
        if self.level >= 4:
            return self._register_upper(target, hashid, name, kind, signature, payload)
        with self._lock:
            host = self._live()
            existing = self._handles.get(hashid)
            if existing is not None:
                existing._refs += 1
                return existing
            if payload is None:
                native = host.register_chip(target._native)
            else:
                native = host.register_sub(name, payload)
            handle = CallableHandle(
                hashid=hashid,
                name=name,
                signature=signature,
                kind=kind,
                target_namespace="LOCAL_CHIP" if payload is None else "LOCAL_PYTHON",
                _owner=self,
                _callable=target,
                _native_id=native,
            )
            self._handles[hashid] = handle
            return handle

    def _register_upper(
        self, target: Any, hashid: str, name: str, kind: str, signature: Any, pickled: Any
    ) -> CallableHandle:
        """Level 4 and above: a chip callable goes to the children (each registers it on its
        level-3 worker); a function goes to the children (as a level-3 orchestration
        function, and a sub callable of theirs) and to this worker's sub workers."""
        next_payload = encode_payload(target, hashid, name, pickled)
        sub_payload = pickled if pickled is not None and self.num_sub_workers > 0 else None
        with self._lock:
            if self._state == "closed":
                raise WorkerStateError("the worker is closed", code_name="CLOSED")
            existing = self._handles.get(hashid)
            if existing is not None:
                existing._refs += 1
                return existing
            handle = CallableHandle(
                hashid=hashid,
                name=name,
                signature=signature,
                kind=kind,
                target_namespace="NEXT_LEVEL",
                _owner=self,
                _callable=target,
            )
            if self._host is None:
                self._pending.append((handle, name, next_payload, sub_payload))
            else:
                self._apply_registration(handle, name, next_payload, sub_payload)
            self._handles[hashid] = handle
            return handle

    def _apply_registration(
        self, handle: CallableHandle, name: str, next_payload: bytes, sub_payload: Any
    ) -> None:
        """Registers ``handle`` with the engine: for the children when there are any (or
        when nothing else could run it, so the engine names what is missing), for the sub
        workers when it is a function and there are some."""
        if self._children or sub_payload is None:
            handle._next_id = self._host.register_next(name, next_payload)
        if sub_payload is not None:
            try:
                handle._native_id = self._host.register_sub(name, sub_payload)
            except BaseException:
                if handle._next_id is not None:
                    self._host.unregister(handle._next_id)
                raise

    def unregister(self, handle: CallableHandle) -> None:
        """Releases one registration of ``handle``; the last one removes it everywhere."""
        with self._lock:
            self._own_handle(handle)
            if handle._refs > 1:
                handle._refs -= 1
                return
            if self._host is None:  # level 4 before init: never given to the engine
                self._pending = [p for p in self._pending if p[0] is not handle]
            else:
                # The engine may refuse (inside an orchestration, runs in flight): the handle
                # stays registered then.
                for native_id in (handle._next_id, handle._native_id):
                    if native_id is not None:
                        self._host.unregister(native_id)
            handle._refs -= 1
            del self._handles[handle.hashid]

    # -- level 4: children ---------------------------------------------------------------------

    def _check_topology(self, what: str) -> None:
        if self.level < 4:
            raise WorkerStateError(
                f"{what} adds a child to a level-4 (or higher) worker; this one has level "
                f"{self.level} (its next level is chips: device_ids)",
                code_name="INVALID_STATE",
            )
        if self._state != "created":
            raise WorkerStateError(
                f"{what} must be called before init()", code_name="INVALID_STATE"
            )

    def add_worker(self, worker: "HostWorker") -> int:
        """Level 4 and above, before :meth:`init`: adds ``worker``, a new (not initialized)
        worker of the level below, as a child running in this process, and returns its
        worker id (``0, 1, ...`` in the order children are added). This worker initializes
        it at :meth:`init` and closes it at :meth:`close`."""
        self._check_topology("add_worker")
        if not isinstance(worker, HostWorker):
            raise ArgumentTypeError(
                f"add_worker takes a Worker(level={self.level - 1}), got {type(worker).__name__}"
            )
        if worker is self:
            raise InvalidArgumentError("add_worker: a worker cannot be its own child")
        if worker.level != self.level - 1:
            raise InvalidArgumentError(
                f"add_worker: a level-{self.level} worker's children have level "
                f"{self.level - 1}, got a level-{worker.level} worker"
            )
        if worker._parent is not None:
            raise InvalidArgumentError("add_worker: that worker is a child of a worker already")
        if worker._state != "created":
            raise InvalidArgumentError(
                f"add_worker takes a new worker (not initialized, not closed); that one is "
                f"{worker._state}"
            )
        with self._lock:
            worker._parent = self
            child = LocalChild(worker, len(self._children))
            self._children.append(child)
            return child.worker_id

    def add_remote_worker(self, spec: Any) -> int:
        """Level 4 and above, before :meth:`init`: adds a level-3 worker described by ``spec``
        (a :class:`~simpler.RemoteWorkerSpec`) that runs in a Ray actor on the node the spec
        names, and returns its worker id. The actor is created at :meth:`init` and killed at
        :meth:`close`. Needs Ray (``pip install "simpler[ray]"``); Ray starts a local
        cluster unless ``ray.init(address=...)`` was called first."""
        self._check_topology("add_remote_worker")
        if importlib.util.find_spec("ray") is None:
            raise UnsupportedError(
                'add_remote_worker needs Ray, which is not installed: pip install "simpler[ray]"'
            )
        if not isinstance(spec, RemoteWorkerSpec):
            raise ArgumentTypeError(
                f"add_remote_worker takes a RemoteWorkerSpec, got {type(spec).__name__}"
            )
        # The remote worker's options are checked here, as that worker's constructor checks
        # them (it starts nothing), rather than on the remote host after its actor started.
        HostWorker(level=3, **spec.worker_config())
        with self._lock:
            if self._plane is None:
                self._plane = DataPlane()
            child = RayChild(
                spec, len(self._children), self._plane, self.remote_task_timeout_s
            )
            self._children.append(child)
            return len(self._children) - 1

    @property
    def children(self) -> List[Any]:
        """Level 4: the children (``simpler.next_level.NextLevelChild``), by worker id."""
        return list(self._children)

    # -- level 3 under level 4 -------------------------------------------------------------------

    def _adopt(self, reg: Any) -> CallableHandle:
        """Registers what a parent level-4 worker shipped (a decoded registration) and
        answers this worker's handle, found afterwards by the parent's hashid: a chip
        callable is registered here; a function is a level-3 orchestration function (kept
        by the caller) and, when this worker has sub workers, a sub callable too."""
        if reg.kind == "chip" or self.num_sub_workers > 0:
            handle = self.register(reg.target)
        else:
            handle = CallableHandle(
                hashid=reg.hashid,
                name=reg.name,
                signature=(),
                kind="PYTHON_SERIALIZED",
                target_namespace="LOCAL_PYTHON",
                _owner=self,
                _callable=reg.target,
            )
        with self._lock:
            self._aliases[reg.hashid] = handle
        return handle

    def _unadopt(self, handle: CallableHandle) -> None:
        """Undoes one :meth:`_adopt`."""
        with self._lock:
            for k in [k for k, h in self._aliases.items() if h is handle]:
                del self._aliases[k]
        if self._handles.get(handle.hashid) is handle:
            self.unregister(handle)

    def _stage_in(self, array: np.ndarray) -> np.ndarray:
        """``array`` as this worker's tasks can take it: itself when nothing runs in a child
        process, else a shared-memory copy of it (a written tensor keeps the elements its
        task leaves alone, as in place)."""
        if self.chip_isolation != "process" and self.num_sub_workers == 0:
            return array
        view = self.create_buffer(max(int(array.nbytes), 1)).array(array.shape, array.dtype)
        np.copyto(view, array)
        return view

    def _own_handle(self, handle: Any) -> CallableHandle:
        if isinstance(handle, ChipCallable) or (
            callable(handle) and not isinstance(handle, CallableHandle)
        ):
            raise ArgumentTypeError(
                "pass the handle that register() returned, not the callable itself"
            )
        if not isinstance(handle, CallableHandle):
            raise ArgumentTypeError(f"expected a CallableHandle, got {type(handle).__name__}")
        if handle._owner is not self or self._handles.get(handle.hashid) is not handle:
            alias = self._aliases.get(handle.hashid)
            if alias is not None and (handle._owner is None or handle._owner is self._parent):
                return alias  # the parent level-4 worker's handle, shipped here
            raise UnknownCallableError(
                f"callable `{handle.name}` ({handle.hashid[:19]}...) is not registered on this "
                "worker",
                callable=handle.name,
            )
        return handle

    # -- runs ----------------------------------------------------------------------------------

    def submit(  # type: ignore[override]
        self,
        orch_fn: Callable[..., Any],
        args: Any = None,
        config: Optional[CallConfig] = None,
    ) -> HostRunHandle:
        """Runs the orchestration ``orch_fn(orch, args, config)`` on this thread and returns
        the run's handle once it has returned (the run's tasks go on). Blocks while two runs
        are in flight. An exception raised by ``orch_fn`` fails the run and is re-raised
        here as it is.

        The run is traced at ``config.trace_level`` when it is not off, else at the worker's
        ``trace=`` level: every chip task runs at that level at least, and the report holds
        the merged trace (``docs/tracing.md``, Level 3). ``orch_fn`` gets ``config`` as
        given."""
        return self._submit_run(orch_fn, args, config, default_level=self.trace_level)

    def _submit_run(
        self,
        orch_fn: Callable[..., Any],
        args: Any,
        config: Optional[CallConfig],
        default_level: str,
    ) -> HostRunHandle:
        """:meth:`submit`, traced at ``config``'s level, else the worker's, else
        ``default_level``."""
        if isinstance(orch_fn, (CallableHandle, ChipCallable)) or not callable(orch_fn):
            raise ArgumentTypeError(
                "a level-3 run is an orchestration function f(orch, args, config), got "
                f"{type(orch_fn).__name__}; submit the callable from it with "
                "orch.submit_next_level(handle, args, config, worker=i)"
            )
        if config is None:
            config = CallConfig()
        level = str(self._traced_config(config, default=default_level).trace_level)
        host = self._live()
        if self._plane is not None:
            self._plane.new_run()  # the caller may have written its arrays since

        def body(native_orch: "_native.Orchestrator") -> None:
            orch_fn(Orchestrator(native_orch, self), args, config)

        return HostRunHandle(host.submit(body, trace_level=level))

    def run(  # type: ignore[override]
        self,
        orch_fn: Callable[..., Any],
        args: Any = None,
        config: Optional[CallConfig] = None,
        *,
        trace: Optional[Union[str, "os.PathLike[str]"]] = None,
    ) -> HostRunReport:
        """``submit(orch_fn, args, config).result()``. ``trace=path`` records the run (at
        the config's trace level, else the worker's, else ``"tasks"``) and writes its merged
        trace there atomically (Perfetto, or Chrome JSON for a ``.json`` path), as level 2's
        ``Worker.run(trace=)``."""
        if trace is None:
            return self.submit(orch_fn, args, config).result()
        report = self._submit_run(orch_fn, args, config, default_level="tasks").result()
        report.write_trace(trace)
        return report

    # -- memory --------------------------------------------------------------------------------

    def create_buffer(self, nbytes: int) -> SharedBuffer:
        """``nbytes`` of zero-filled shared memory that every child process of this worker can
        read and write in place (see :class:`SharedBuffer`)."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes <= 0:
            raise InvalidArgumentError(f"create_buffer size must be a positive int, got {nbytes!r}")
        return SharedBuffer(self._live().create_buffer(int(nbytes)))

    def make_tensor_arg(
        self,
        tensor: Any,
        shapes: Any = None,
        dtype: Any = None,
        *,
        strides: Optional[Sequence[int]] = None,
    ) -> Tensor:
        """A task argument over ``tensor`` without copying: a :class:`SharedBuffer` viewed as
        ``shapes`` elements of ``dtype``, or a host array (numpy, buffer-protocol or
        ``__dlpack__`` object), re-viewed by ``shapes`` when given."""
        if isinstance(tensor, SharedBuffer):
            if dtype is None or shapes is None:
                raise InvalidArgumentError("a SharedBuffer needs the shapes and dtype to view")
            return Tensor.from_host(tensor.array(shapes, dtype), strides=strides)
        return Tensor.from_host(tensor, shapes, dtype, strides=strides, writable=True)

    def alloc_child_tensor(self, worker: int, shape: Any, dtype: Any) -> ChildTensor:
        """Persistent device memory on chip ``worker`` (zeroed): ``shape`` elements of
        ``dtype``, as ``orch.alloc_child_tensor``. Freed by :meth:`free` or at close."""
        dims = shape_tuple(shape, "shape")
        return ChildTensor(
            self._live().alloc_child_tensor(worker, list(dims), int(DataType.of(dtype)))
        )

    def free(self, tensor: Any) -> None:  # type: ignore[override]
        """Frees device memory from :meth:`alloc_child_tensor`."""
        if not isinstance(tensor, ChildTensor):
            raise ArgumentTypeError(
                f"free takes a ChildTensor from alloc_child_tensor, got {type(tensor).__name__}"
            )
        self._live().free_child_tensor(tensor._native)

    def copy_to(self, dst: Any, src: Any) -> None:
        """Copies host memory ``src`` into the chip memory ``dst`` (a :class:`ChildTensor`),
        as one run."""
        self.run(lambda orch, _args, _cfg: orch.copy_to(dst, src))

    def copy_from(self, dst: Any, src: Any) -> None:
        """Copies the chip memory ``src`` (a :class:`ChildTensor`) into host memory ``dst``, as
        one run."""
        self.run(lambda orch, _args, _cfg: orch.copy_from(dst, src))

    def record(self, callable: Any, args: Any = None, config: Optional[CallConfig] = None) -> Any:
        """Not available at level 3: ``UnsupportedError``. A chip task runs under its
        worker's ``runtime`` (or its config's); recordings are a level-2 worker's
        (``Worker(level=2).record``)."""
        raise UnsupportedError(
            "record: recordings are a level-2 worker's (Worker(level=2).record); a level-3 "
            "worker runs its chip tasks under host_build_graph (runtime='host_build_graph') "
            "without recording them"
        )

    def replay(
        self, recording: RecordedRun, args: Any = None, config: Optional[CallConfig] = None
    ) -> Any:
        """Not available at level 3 (see :meth:`record`): ``UnsupportedError``."""
        raise UnsupportedError("replay: recordings are a level-2 worker's (Worker(level=2))")

    def malloc(self, size: int) -> Any:
        raise UnsupportedError(
            "malloc is level-2 device memory; a level-3 worker allocates on one chip with "
            "alloc_child_tensor(worker, shape, dtype)"
        )

    # Level-2 properties that describe one chip's run options.
    @property
    def pipeline_depth(self) -> int:
        """Runs in flight at once (the engine's pipeline depth)."""
        return 2

    def __repr__(self) -> str:
        return (
            f"Worker(level={self.level}, device_ids={list(self.device_ids)}, "
            f"num_sub_workers={self.num_sub_workers}, chip_isolation={self.chip_isolation!r}, "
            f"state={self._state})"
        )
