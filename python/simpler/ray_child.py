"""Level-3 workers in Ray actors: the remote children of a level-4 worker.

A level-4 worker's ``add_remote_worker(RemoteWorkerSpec(...))`` makes a :class:`RayChild`:
one Ray actor (on the node the spec names) that owns a ``Worker(level=3, ...)`` and runs the
level-4 tasks sent to it as level-3 orchestration functions ``f(orch, args, config)``. The
engine drives it through :class:`simpler.next_level.NextLevelChild` from one lane thread.

**Data.** A tensor a task reads is ``ray.put`` once per level-4 run, however many children
read it (the :class:`DataPlane` the Ray children of one level-4 worker share caches its
``ObjectRef``); Ray resolves the refs on the actor's node. Each tensor the task writes comes
back as an ``ObjectRef`` of its own, is copied into the level-4 process's array before
:meth:`RayChild.run` returns, and is recorded in the plane, so a later reader of exactly that
tensor on another Ray child gets the producer's object (moved node to node by Ray).

**Failures.** A task the actor raised fails with :class:`RemoteTaskError` (the remote text and
traceback). An actor that dies (killed, its node removed) is ``ChildDied`` — or, while the
spec's ``max_restarts`` last, is replaced by a new actor (a new *generation*, every callable
registered again) and the task fails with ``ChildRestarted``; tasks are never re-executed. A
task running past ``remote_task_timeout_s`` is ``ChildTimeout``: its actor is killed, and the
next call replaces it (or, with no restarts left, is ``ChildDied``).

Ray is imported only when something here needs it; ``import simpler`` never does.
"""

from __future__ import annotations

import math
import os
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type, Union

import numpy as np

from .config import CallConfig
from .errors import InvalidConfigError
from .next_level import (
    ChildDied,
    ChildRestarted,
    ChildTimeout,
    NextLevelChild,
    TensorArg,
    decode_payload,
    task_args,
)
from .types import TensorArgType

__all__ = ["DataPlane", "RayChild", "RemoteTaskError", "RemoteWorkerSpec"]

_ISOLATIONS = ("thread", "process")
# Options the spec names itself; `options` may not repeat them.
_RESERVED = ("level", "platform", "device_ids", "device_id", "num_sub_workers", "chip_isolation")
# Resources every Ray node reports; a spec's `node` never names one of them.
_BUILTIN_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")
_SHUTDOWN_WAIT_S = 30.0
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _ray() -> Any:
    try:
        import ray
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"remote workers run in Ray actors, and Ray does not import here ({e}); "
            "install it with `pip install ray`"
        ) from None
    return ray


def _is_count(value: Any) -> bool:
    return bool(
        not isinstance(value, bool) and isinstance(value, (int, np.integer)) and value >= 0
    )


# -- the spec ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RemoteWorkerSpec:
    """A level-3 worker to run in a Ray actor, as ``Worker(level=4).add_remote_worker`` takes
    it.

    ``device_ids``: its chips; ``num_sub_workers``, ``chip_isolation``, ``platform`` and
    ``options`` (further ``Worker(level=3, ...)`` options, e.g. ``{"clusters": 2}``) configure
    it as ``Worker(level=3, ...)`` would. ``node`` says where the actor goes: a Ray node id
    (hex), a node's IP address, or a custom resource a node has (tried in that order against
    the cluster's alive nodes); ``None`` lets Ray choose. ``max_restarts``: how many times a
    dead actor is replaced by a new one (the task it was running still fails).
    ``remote_task_timeout_s``: how long one task may run (``None``: the level-4 worker's
    default, 60 s)."""

    device_ids: Sequence[int]
    num_sub_workers: int = 0
    chip_isolation: str = "thread"
    node: Optional[str] = None
    max_restarts: int = 0
    remote_task_timeout_s: Optional[float] = None
    options: Dict[str, Any] = field(default_factory=dict, hash=False)
    platform: str = "sim"

    def __post_init__(self) -> None:
        ids = self.device_ids
        if isinstance(ids, (str, bytes)) or not isinstance(ids, (list, tuple, range)):
            raise InvalidConfigError(f"device_ids must be a list of ints, got {ids!r}")
        checked = []
        for d in ids:
            if not _is_count(d):
                raise InvalidConfigError(f"device_ids must hold ints >= 0, got {d!r}")
            checked.append(int(d))
        if len(set(checked)) != len(checked):
            raise InvalidConfigError(f"device_ids has a device twice: {checked}")
        object.__setattr__(self, "device_ids", tuple(checked))
        if not _is_count(self.num_sub_workers):
            raise InvalidConfigError(
                f"num_sub_workers must be an int >= 0, got {self.num_sub_workers!r}"
            )
        object.__setattr__(self, "num_sub_workers", int(self.num_sub_workers))
        if not checked and self.num_sub_workers == 0:
            raise InvalidConfigError(
                "device_ids is empty and num_sub_workers is 0: a remote worker needs a chip "
                "or a sub worker"
            )
        if self.chip_isolation not in _ISOLATIONS:
            raise InvalidConfigError(
                f"chip_isolation must be 'thread' or 'process', got {self.chip_isolation!r}"
            )
        if self.node is not None and (not isinstance(self.node, str) or not self.node.strip()):
            raise InvalidConfigError(
                "node must be None or a Ray node id, a node IP address or a custom resource "
                f"name, got {self.node!r}"
            )
        if not _is_count(self.max_restarts):
            raise InvalidConfigError(f"max_restarts must be an int >= 0, got {self.max_restarts!r}")
        object.__setattr__(self, "max_restarts", int(self.max_restarts))
        t = self.remote_task_timeout_s
        if t is not None and not (
            isinstance(t, (int, float)) and not isinstance(t, bool) and 0 < t < math.inf
        ):
            raise InvalidConfigError(
                f"remote_task_timeout_s must be None or positive and finite, got {t!r}"
            )
        if not isinstance(self.options, dict):
            raise InvalidConfigError(
                "options must be a dict of Worker(level=3) options, got "
                f"{type(self.options).__name__}"
            )
        for key in self.options:
            if not isinstance(key, str):
                raise InvalidConfigError(f"options keys must be option names, got {key!r}")
            if key in _RESERVED:
                raise InvalidConfigError(
                    f"options[{key!r}]: give it as the spec's own field"
                    + ("" if key in ("level", "device_id") else f" ({key}=...)")
                )
        object.__setattr__(self, "options", dict(self.options))
        if not isinstance(self.platform, str) or not self.platform:
            raise InvalidConfigError(f"platform must be a platform name, got {self.platform!r}")

    def worker_config(self) -> Dict[str, Any]:
        """The keyword arguments of the remote ``Worker(level=3, ...)`` (a plain dict)."""
        return {
            "platform": self.platform,
            "device_ids": list(self.device_ids),
            "num_sub_workers": self.num_sub_workers,
            "chip_isolation": self.chip_isolation,
            **self.options,
        }


# -- placement ---------------------------------------------------------------------------------


def _custom_resources(node: Dict[str, Any]) -> List[str]:
    return sorted(
        r
        for r in node.get("Resources", {})
        if r not in _BUILTIN_RESOURCES
        and not r.startswith("node:")
        and not r.startswith("accelerator_type:")
    )


def resolve_node(node: Optional[str], nodes: List[Dict[str, Any]]) -> Tuple[Dict[str, Any], str]:
    """The actor options that place it on ``node`` (see :class:`RemoteWorkerSpec`), given the
    cluster's ``ray.nodes()``, and how messages name that place. Raises ``ValueError`` naming
    ``node`` and listing the alive nodes when it matches none of them (or several by IP)."""
    if node is None:
        return {}, "any node"
    alive = [n for n in nodes if n.get("Alive")]
    want = node.strip()
    for n in alive:
        if str(n.get("NodeID", "")).lower() == want.lower():
            return _affinity(n["NodeID"]), want
    by_ip = [n for n in alive if n.get("NodeManagerAddress") == want]
    if len(by_ip) == 1:
        return _affinity(by_ip[0]["NodeID"]), want
    if len(by_ip) > 1:
        ids = ", ".join(str(n["NodeID"])[:12] + "..." for n in by_ip)
        raise ValueError(
            f"node {want!r} is the IP address of {len(by_ip)} alive Ray nodes ({ids}); name "
            "one by its node id or by a custom resource only it has"
        )
    if any(want in _custom_resources(n) for n in alive):
        return {"resources": {want: 0.001}}, want
    dead = [n for n in nodes if not n.get("Alive") and want in (
        str(n.get("NodeID", "")).lower(), n.get("NodeManagerAddress"))]
    listing = "; ".join(
        f"id {n['NodeID']} ip {n.get('NodeManagerAddress')} resources "
        f"[{', '.join(_custom_resources(n)) or 'none'}]"
        for n in alive
    ) or "none"
    why = "is a node that is no longer alive" if dead else (
        "is no alive Ray node's id, IP address or custom resource")
    raise ValueError(f"node {want!r} {why}; the alive nodes: {listing}")


def _affinity(node_id: str) -> Dict[str, Any]:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)}


def _driver_path() -> List[str]:
    """This process's ``sys.path`` (then its ``PYTHONPATH``): the actor puts it in front of
    its own, so functions pickled by reference import there as here."""
    path = [p for p in sys.path if p]
    old = os.environ.get("PYTHONPATH")
    if old:
        path.extend(p for p in old.split(os.pathsep) if p and p not in path)
    return path


def _adopt_path(path: Sequence[str]) -> None:
    """Puts the driver's ``path`` entries this process lacks in front of ``sys.path`` (in
    the driver's order), and in ``PYTHONPATH`` for this process's children."""
    missing = [p for p in path if p not in sys.path]
    sys.path[:0] = missing
    old = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(list(path) + [p for p in old if p not in path])


# -- the actor ---------------------------------------------------------------------------------


def _stage_here(worker: Any, shared: bool, src: Optional[np.ndarray], shape: Tuple[int, ...],
                dtype: np.dtype, writes: bool) -> np.ndarray:
    """The actor's own array for one tensor: ``src`` (read-only, from the object store) as it
    is when only read in this process; otherwise a writable copy, or zeros when nothing was
    sent; in shared memory when a child process of the worker must see it."""
    dt = np.dtype(dtype)
    if shared and math.prod(shape) * dt.itemsize > 0:
        arr = worker.create_buffer(math.prod(shape) * dt.itemsize).array(shape, dt)
        if src is not None:
            np.copyto(arr, src)
        return arr
    if src is None:
        return np.zeros(shape, dt)
    return np.array(src) if writes else src


def _adopt_here(worker: Any, reg: Any) -> Any:
    """Registers ``reg`` on a worker without ``_adopt``: a chip callable as itself, a function
    as a sub callable when there are sub workers to run it."""
    if reg.kind == "chip" or worker.num_sub_workers > 0:
        return worker.register(reg.target)
    return None


class Level3Actor:
    """The body of a remote child's Ray actor (made a Ray actor class by ``_actor_class``):
    one ``Worker(level=3, ...)``, the callables registered on it, and the runs. Its methods
    run one at a time, on one thread."""

    def __init__(self, config: Dict[str, Any], worker_id: int,
                 path: Optional[Sequence[str]] = None) -> None:
        from .host_worker import HostWorker

        if path:
            _adopt_path(path)
        self.worker_id = int(worker_id)
        self.worker = HostWorker(level=3, **config)
        self.worker.init()
        # Tensors a child process of the worker (chip or sub worker) may see go to shared
        # memory.
        self.shared = (
            config.get("chip_isolation") == "process" or config.get("num_sub_workers", 0) > 0
        )
        self.handles: Dict[int, Any] = {}
        self.functions: Dict[int, Any] = {}

    def ready(self) -> Tuple[str, int, str]:
        """(Ray node id, pid, host name)."""
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid(), socket.gethostname()

    def register(self, key: int, payload: bytes) -> str:
        reg = decode_payload(payload)
        adopt = getattr(self.worker, "_adopt", None)
        handle = adopt(reg) if adopt is not None else _adopt_here(self.worker, reg)
        self.handles[key] = handle
        if reg.kind == "python":
            self.functions[key] = reg.target
        return reg.kind

    def unregister(self, key: int) -> None:
        handle = self.handles.pop(key, None)
        self.functions.pop(key, None)
        if handle is None:
            return
        unadopt = getattr(self.worker, "_unadopt", None)
        if unadopt is not None:
            unadopt(handle)
        else:
            self.worker.unregister(handle)

    def run(self, key: int, specs: List[Tuple[Any, ...]], config: Optional[CallConfig],
            *arrays: np.ndarray) -> Any:
        """Runs function ``key`` on the tensors ``specs`` describes (``("t", tag, shape,
        dtype, sent, writes)``; ``arrays`` holds the sent ones, in order) and the scalars
        (``("s", bits)``). Returns the status, then each written tensor."""
        fn = self.functions.get(key)
        if fn is None:
            if key in self.handles:
                raise TypeError(
                    "a level-4 task runs a level-3 orchestration function f(orch, args, "
                    "config); this callable is a chip callable: submit it from inside one"
                )
            raise KeyError(f"no callable is registered under key {key} on this worker")
        sent = iter(arrays)
        args: List[Union[TensorArg, int]] = []
        written: List[np.ndarray] = []
        for item in specs:
            if item[0] == "s":
                args.append(int(item[1]))
                continue
            _, tag, shape, dtype, was_sent, writes = item
            src = next(sent) if was_sent else None
            arr = _stage_here(self.worker, self.shared, src, tuple(shape), dtype, writes)
            args.append(TensorArg(arr, TensorArgType(tag)))
            if writes:
                written.append(arr)
        t0 = time.monotonic()
        report = self.worker.run(fn, task_args(args), config)
        status = {
            "run": report.run,
            "tasks": report.tasks,
            "total_time_s": report.total_time_s,
            "wall_s": time.monotonic() - t0,
        }
        if not written:
            return status
        return (status, *written)

    def shutdown(self) -> None:
        self.worker.close()


_ACTOR_CLASS: Any = None
_ACTOR_LOCK = threading.Lock()


def _actor_class() -> Any:
    """:class:`Level3Actor` as a Ray actor class (made once)."""
    global _ACTOR_CLASS
    with _ACTOR_LOCK:
        if _ACTOR_CLASS is None:
            _ACTOR_CLASS = _ray().remote(
                num_cpus=0, max_concurrency=1, max_restarts=0, max_task_retries=0
            )(Level3Actor)
        return _ACTOR_CLASS


# -- errors ------------------------------------------------------------------------------------


class RemoteTaskError(RuntimeError):
    """A call the actor raised: the message holds the remote error and its traceback;
    ``remote_type`` is the remote exception's class name, ``remote_message`` its text,
    ``remote_traceback`` the traceback as the actor printed it."""

    def __init__(self, message: str, remote_type: str = "", remote_message: str = "",
                 remote_traceback: str = "") -> None:
        super().__init__(message)
        self.remote_type = remote_type
        self.remote_message = remote_message
        self.remote_traceback = remote_traceback


def _clean(text: str) -> str:
    return _ANSI.sub("", text)


def _remote_error(prefix: str, e: BaseException) -> RemoteTaskError:
    # str() of Ray's error: a header line naming the actor's process, then the traceback.
    lines = _clean(str(e)).rstrip().splitlines()
    header, tb = (lines[0], "\n".join(lines[1:]).strip("\n")) if lines else ("", "")
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException):
        kind, msg = type(cause).__name__, _clean(str(cause))
    else:
        kind, msg = type(e).__name__, (lines[-1] if lines else "")
    found = re.search(r"pid=(\d+), ip=([^,)]+)", header)
    where = f" (pid {found.group(1)} on {found.group(2)})" if found else ""
    text = f"{prefix}: {kind}: {msg}"
    if tb:
        text += f"\nremote traceback{where}:\n{tb}"
    return RemoteTaskError(text, kind, msg, tb)


def _lost_errors() -> Tuple[Type[BaseException], ...]:
    """The Ray errors that mean the actor (or what it needed) is gone."""
    from ray import exceptions as rx

    names = (
        "RayActorError", "ActorDiedError", "ActorUnavailableError", "ActorUnschedulableError",
        "NodeDiedError", "ObjectLostError", "OwnerDiedError", "ObjectFetchTimedOutError",
        "ObjectReconstructionFailedError", "WorkerCrashedError", "LocalRayletDiedError",
        "OutOfMemoryError", "TaskCancelledError", "RaySystemError", "RuntimeEnvSetupError",
    )
    return tuple(getattr(rx, n) for n in names if hasattr(rx, n))


def _ray_text(e: BaseException) -> str:
    text = _clean(str(e)).strip()
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


# -- the data plane ----------------------------------------------------------------------------


def byte_range(array: np.ndarray) -> Tuple[int, int]:
    """The bytes ``array`` spans: from its lowest to one past its highest (empty for an
    empty array)."""
    lo = hi = int(array.__array_interface__["data"][0])
    if array.size == 0:
        return lo, lo
    for n, s in zip(array.shape, array.strides):
        ext = (n - 1) * s
        if ext < 0:
            lo += ext
        else:
            hi += ext
    return lo, hi + array.itemsize


def _key(array: np.ndarray) -> Tuple[Any, ...]:
    return (
        int(array.__array_interface__["data"][0]),
        int(array.nbytes),
        array.dtype,
        tuple(array.shape),
        tuple(array.strides),
    )


@dataclass
class _Entry:
    lo: int
    hi: int
    sub_writes: int
    run: int
    ref: Any
    array: np.ndarray  # held so its memory (and address) is not reused while cached


class DataPlane:
    """What the Ray children of one level-4 worker sent or received, per tensor: the
    ``ObjectRef`` that holds a tensor's current content. Thread-safe (lane threads share it).

    An entry is the exact tensor (address, size, dtype, shape, strides); it is dropped when a
    task writes an overlapping byte range (:meth:`produced`, :meth:`wrote`) and at each
    level-4 run (:meth:`new_run`), and it is used only with the ``sub_writes`` value it was
    made with (a level-4 sub task that wrote something since may have changed it).
    ``puts`` counts ``ray.put`` calls, ``reuses`` the inputs served from an entry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: Dict[Tuple[Any, ...], _Entry] = {}
        self._pending: Dict[Tuple[Any, ...], Tuple[threading.Event, int, int]] = {}
        self._run = 0
        # Invalidations while puts are in flight, (sequence number, lo, hi): a put that an
        # overlapping one raced is returned but not cached.
        self._seq = 0
        self._log: List[Tuple[int, int, int]] = []
        self.puts = 0
        self.reuses = 0

    def input_ref(self, array: np.ndarray, sub_writes: int) -> Any:
        """The ``ObjectRef`` of ``array``'s content: the cached one when still valid, else a
        new ``ray.put`` (made once even when several lanes ask at the same time)."""
        key = _key(array)
        while True:
            with self._lock:
                e = self._entries.get(key)
                if e is not None and e.sub_writes == sub_writes and e.run == self._run:
                    self.reuses += 1
                    return e.ref
                pending = self._pending.get(key)
                if pending is None or pending[1] != sub_writes or pending[2] != self._run:
                    done = threading.Event()
                    self._pending[key] = (done, sub_writes, self._run)
                    run, start = self._run, self._seq
                    break
            pending[0].wait()
        try:
            ref = _ray().put(np.ascontiguousarray(array))
        except BaseException:
            with self._lock:
                if self._pending.get(key, (None,))[0] is done:
                    del self._pending[key]
            done.set()
            raise
        lo, hi = byte_range(array)
        with self._lock:
            self.puts += 1
            if self._pending.get(key, (None,))[0] is done:
                del self._pending[key]
            raced = any(seq > start and a < hi and lo < b for seq, a, b in self._log)
            if run == self._run and not raced:
                self._entries[key] = _Entry(lo, hi, sub_writes, run, ref, array)
            if not self._pending:
                self._log.clear()
        done.set()
        return ref

    def produced(self, array: np.ndarray, ref: Any, sub_writes: int) -> None:
        """A task wrote ``array``, and ``ref`` holds what it wrote: drop what overlaps it,
        then keep ``ref`` as that exact tensor's content."""
        lo, hi = byte_range(array)
        with self._lock:
            self._drop(lo, hi)
            self._entries[_key(array)] = _Entry(lo, hi, sub_writes, self._run, ref, array)

    def wrote(self, arrays: Sequence[np.ndarray]) -> None:
        """Tasks wrote ``arrays`` in this process: drop every entry overlapping them."""
        ranges = [byte_range(a) for a in arrays]
        with self._lock:
            for lo, hi in ranges:
                self._drop(lo, hi)

    def forget(self, refs: Sequence[Any]) -> None:
        """Drops the entries holding any of ``refs`` (objects Ray lost)."""
        gone = set(id(r) for r in refs)
        with self._lock:
            for key in [k for k, e in self._entries.items() if id(e.ref) in gone]:
                del self._entries[key]

    def new_run(self) -> None:
        """A level-4 run starts: nothing cached is valid any more."""
        with self._lock:
            self._run += 1
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _drop(self, lo: int, hi: int) -> None:
        if lo == hi:
            return
        self._seq += 1
        if self._pending:
            self._log.append((self._seq, lo, hi))
        for key in [k for k, e in self._entries.items() if e.lo < hi and lo < e.hi]:
            del self._entries[key]


# -- the child ---------------------------------------------------------------------------------


class RayChild(NextLevelChild):
    """A level-4 worker's child in a Ray actor (see the module docs). ``plane`` is the
    :class:`DataPlane` the worker's Ray children share (``None``: nothing is cached);
    ``default_timeout_s`` bounds a task when the spec's ``remote_task_timeout_s`` is
    ``None``, and every control call.

    :meth:`launch` creates the actor without waiting (so that several start at once);
    :meth:`start` waits for it (launching it first if needed). The other calls come from one
    thread at a time (the engine's lane); :meth:`shutdown` may come from another thread
    while a task runs: it kills the actor, and that task fails with ``ChildDied``."""

    def __init__(self, spec: RemoteWorkerSpec, worker_id: int, plane: Optional[DataPlane] = None,
                 default_timeout_s: float = 60.0) -> None:
        if not isinstance(spec, RemoteWorkerSpec):
            raise InvalidConfigError(
                f"a remote worker is described by a RemoteWorkerSpec, got {type(spec).__name__}"
            )
        self.spec = spec
        self.worker_id = int(worker_id)
        self.plane = plane
        limit = spec.remote_task_timeout_s
        self.task_timeout_s = float(limit if limit is not None else default_timeout_s)
        self.control_timeout_s = float(max(default_timeout_s, self.task_timeout_s))
        self.restart_timeout_s = 60.0  # how long a replacement actor may take to be ready
        self._actor: Any = None
        self._ready_ref: Any = None
        self._launch_error: Optional[BaseException] = None
        self._generation = 0
        self._restarts_used = 0
        self._node_id: Optional[str] = None
        self._pid: Optional[int] = None
        self._host: Optional[str] = None
        self._where = spec.node  # how messages name the node (None: Ray chooses it)
        self._payloads: Dict[int, bytes] = {}
        self._path: Optional[List[str]] = None
        self._stale: Optional[str] = None  # the actor was killed after a timeout: the limit
        self._dead: Optional[str] = None  # the child is gone for good: the report
        self._closed = False
        self._ready = False
        self._running = False  # a task is in flight (shutdown then kills at once)
        self._lock = threading.Lock()  # guards the actor handle against shutdown()

    # -- naming ----------------------------------------------------------------------------------

    def describe(self) -> str:
        if self._where is not None:
            return f"worker {self.worker_id} (ray actor on node {self._where})"
        if self._node_id:  # placed by Ray: named by the node it went to
            return f"worker {self.worker_id} (ray actor on node {self._node_id[:12]})"
        return f"worker {self.worker_id} (ray actor on any node)"

    @property
    def generation(self) -> int:
        """1 for the first actor, one more for each replacement (0 before launch)."""
        return self._generation

    @property
    def node_id(self) -> Optional[str]:
        """The Ray node id the current actor runs on (``None`` until it is ready)."""
        return self._node_id

    @property
    def pid(self) -> Optional[int]:
        """The current actor's process id (``None`` until it is ready)."""
        return self._pid

    @property
    def actor(self) -> Any:
        """The current Ray actor handle (for tests and diagnostics)."""
        return self._actor

    def _who(self) -> str:
        extra = []
        if self._node_id:
            extra.append(f"node id {self._node_id[:12]}...")
        if self._pid is not None:
            extra.append(f"pid {self._pid}")
        if self._generation > 1:
            extra.append(f"generation {self._generation}")
        return self.describe() + (f" [{', '.join(extra)}]" if extra else "")

    # -- lifecycle -------------------------------------------------------------------------------

    def launch(self) -> None:
        """Creates the actor without waiting for it; never raises (a failure is raised by
        :meth:`start`)."""
        if self._actor is not None or self._launch_error is not None:
            return
        try:
            self._create()
        except BaseException as e:  # noqa: BLE001 - start() raises it
            self._launch_error = e

    def _create(self) -> None:
        ray = _ray()
        with _ACTOR_LOCK:
            if not ray.is_initialized():  # as Ray's own first call would: a local cluster
                ray.init()
        placement, where = resolve_node(self.spec.node, ray.nodes())
        self._where = where if self.spec.node is not None else None
        # The driver's sys.path goes as an argument, not as a runtime_env's PYTHONPATH:
        # the actor then starts from a pre-started Ray worker (~0.9 s here, against ~1.6 s
        # for a worker started for a runtime_env). Payloads are unpickled after __init__.
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self.describe()} is shut down")
            if self._path is None:  # every generation gets the first one's
                self._path = _driver_path()
            self._actor = _actor_class().options(**placement).remote(
                self.spec.worker_config(), self.worker_id, self._path
            )
            self._generation += 1
            self._ready = False
            self._node_id = self._pid = self._host = None
            self._ready_ref = self._actor.ready.remote()

    def start(self, timeout_s: float) -> None:
        """Launches the actor if :meth:`launch` did not, and waits until its level-3 worker
        is up, within ``timeout_s``. Raises naming the node (the actor is killed then)."""
        self.restart_timeout_s = max(float(timeout_s), 60.0)
        self.launch()
        if self._launch_error is not None:
            e, self._launch_error = self._launch_error, None
            raise e
        self._wait_ready(timeout_s)

    def _wait_ready(self, timeout_s: float) -> None:
        ray = _ray()
        try:
            node_id, pid, host = ray.get(self._ready_ref, timeout=max(timeout_s, 0.001))
        except ray.exceptions.GetTimeoutError:
            self._kill()
            raise RuntimeError(
                f"{self.describe()}: the actor was not ready within {timeout_s:g} s (its "
                "node may lack room for it, or its level-3 worker may be slow to start); "
                "it was killed"
            ) from None
        except Exception as e:  # noqa: BLE001 - any failure to start is reported with Ray's text
            self._kill()
            raise RuntimeError(
                f"{self.describe()}: the level-3 worker did not start: {_ray_text(e)}"
            ) from None
        self._node_id, self._pid, self._host = str(node_id), int(pid), str(host)
        self._ready = True

    def shutdown(self) -> None:
        """Closes the actor's level-3 worker (waiting up to 30 s), then kills the actor. A
        task still running is not waited for: the actor is killed at once, and the task
        fails with ``ChildDied``. An actor found dead is reported by one error, once it is
        killed."""
        ray = _ray()
        with self._lock:
            self._closed = True
            actor, self._actor = self._actor, None
            self._launch_error = None
            ready, self._ready = self._ready, False
            running = self._running
        if actor is None:
            return
        error: Optional[BaseException] = None
        if ready and not running and self._dead is None and self._stale is None:
            try:
                ray.get(actor.shutdown.remote(), timeout=_SHUTDOWN_WAIT_S)
            except ray.exceptions.RayTaskError as e:
                error = _remote_error(f"{self._who()}: closing its level-3 worker failed", e)
            except ray.exceptions.GetTimeoutError:
                error = RuntimeError(
                    f"{self._who()}: closing its level-3 worker took over "
                    f"{_SHUTDOWN_WAIT_S:g} s; the actor was killed"
                )
            except Exception as e:  # noqa: BLE001 - a dead actor: one clear error
                error = ChildDied(f"{self._who()} had died: {_ray_text(e)}")
        _kill_actor(actor)
        if error is not None:
            raise error

    def _kill(self) -> None:
        with self._lock:
            actor, self._actor = self._actor, None
            self._ready = False
        if actor is not None:
            _kill_actor(actor)

    # -- failures --------------------------------------------------------------------------------

    def _restarts_left(self) -> int:
        return self.spec.max_restarts - self._restarts_used

    def _die(self, report: str) -> ChildDied:
        self._kill()
        self._dead = report
        return ChildDied(report)

    def _replace(self, report: str) -> int:
        """Kills the current actor, makes the next generation and registers every callable
        on it again; returns the generation. Raises ChildDied when that fails."""
        self._kill()
        self._restarts_used += 1
        self._stale = None
        try:
            self._create()
            self._wait_ready(self.restart_timeout_s)
            refs = [self._actor.register.remote(k, p) for k, p in self._payloads.items()]
            _ray().get(refs, timeout=self.control_timeout_s)
        except Exception as e:  # noqa: BLE001 - any failure leaves the child dead
            if isinstance(e, _ray().exceptions.RayTaskError):
                text = str(_remote_error("registering its callables again", e))
            elif isinstance(e, RuntimeError):
                text = str(e)
            else:
                text = _ray_text(e)
            raise self._die(f"{report}; replacing it failed: {text}") from None
        return self._generation

    def _lost(self, what: str, e: BaseException) -> str:
        if self._closed:
            return f"{self._who()} was shut down {what}"
        return f"{self._who()} was lost {what}: {_ray_text(e)}"

    def _live_actor(self) -> Any:
        """The actor to call: refuses when dead or shut down, replaces the actor killed
        after a timeout first."""
        if self._dead is not None:
            raise ChildDied(self._dead)
        if self._closed:
            raise ChildDied(f"{self._who()} is shut down")
        if self._stale is not None:
            report = f"{self._who()} was killed after a task ran past {self._stale}"
            if self._restarts_left() <= 0:
                raise self._die(report)
            self._replace(report)
        actor = self._actor
        if actor is None:
            raise ChildDied(f"{self.describe()} is not started")
        return actor

    def _after_loss(self, report: str) -> int:
        """The actor is gone: replaces it (returning the new generation) while restarts
        last, else raises ChildDied."""
        if self._closed or self._restarts_left() <= 0:
            raise self._die(report)
        return self._replace(report)

    # -- control calls ---------------------------------------------------------------------------

    def _control(self, what: str, method: str, *args: Any) -> Any:
        """Calls ``method`` on the actor; a lost actor is replaced (while restarts last) and
        the call made again on the new one."""
        ray = _ray()
        lost = _lost_errors()
        for attempt in range(2):
            actor = self._live_actor()
            try:
                return ray.get(getattr(actor, method).remote(*args), timeout=self.control_timeout_s)
            except ray.exceptions.RayTaskError as e:
                raise _remote_error(f"{self._who()} refused {what}", e) from None
            except ray.exceptions.GetTimeoutError:
                report = f"{self._who()} did not answer {what} within {self.control_timeout_s:g} s"
            except lost as e:
                report = self._lost(f"during {what}", e)
            if attempt:
                raise self._die(report)
            self._after_loss(report)
        raise AssertionError("unreachable")  # pragma: no cover

    def register(self, key: int, payload: bytes) -> None:
        self._control(f"registration {key}", "register", int(key), bytes(payload))
        self._payloads[int(key)] = bytes(payload)

    def unregister(self, key: int) -> None:
        if self._payloads.pop(int(key), None) is None:
            return
        if self._dead is not None or self._stale is not None or self._closed:
            return  # nothing runs it; a replacement will not know it
        self._control(f"unregistration {key}", "unregister", int(key))

    # -- runs --------------------------------------------------------------------------------------

    def run(self, key: int, args: List[Union[TensorArg, int]], config: Optional[CallConfig],
            sub_writes: int) -> None:
        ray = _ray()
        lost = _lost_errors()
        tensors = [a for a in args if isinstance(a, TensorArg)]
        written = [t for t in tensors if t.writes]
        for attempt in range(2):
            actor = self._live_actor()
            refs: List[Any] = []
            specs: List[Tuple[Any, ...]] = []
            for a in args:
                if isinstance(a, TensorArg):
                    # NO_DEP tensors carry data too: sent, never written back.
                    sends = a.reads or a.tag == TensorArgType.NO_DEP
                    specs.append(("t", int(a.tag), tuple(a.array.shape), a.array.dtype, sends,
                                  a.writes))
                    if sends:
                        refs.append(self._input_ref(a.array, sub_writes))
                else:
                    specs.append(("s", int(a)))
            with self._lock:
                if self._actor is not actor:  # shut down meanwhile
                    raise ChildDied(f"{self._who()} is shut down")
                out = actor.run.options(num_returns=1 + len(written)).remote(
                    int(key), specs, config, *refs
                )
                self._running = True
            status_ref, out_refs = (out, []) if not written else (out[0], list(out[1:]))
            try:
                try:
                    ray.get(status_ref, timeout=self.task_timeout_s)
                    values = ray.get(out_refs, timeout=self.control_timeout_s) if out_refs else []
                finally:
                    self._running = False
                break
            except ray.exceptions.RayTaskError as e:
                raise _remote_error(f"{self._who()}: the task failed", e) from None
            except ray.exceptions.GetTimeoutError:
                report = (
                    f"{self._who()}: the task ran past remote_task_timeout_s "
                    f"({self.task_timeout_s:g} s); the actor was killed"
                )
                self._kill()
                self._stale = f"{self.task_timeout_s:g} s"
                raise ChildTimeout(self.task_timeout_s, report) from None
            except lost as e:
                if attempt == 0 and not self._closed and self._inputs_lost(e, actor, refs):
                    continue  # an input object was lost and the actor is alive: resend
                report = self._lost("during a task", e)
                gen = self._after_loss(report)
                raise ChildRestarted(
                    f"{report}; replaced by generation {gen}: {self.describe()}", gen
                ) from None
        for t, ref, value in zip(written, out_refs, values):
            if value.shape != t.array.shape:
                raise RuntimeError(
                    f"{self._who()}: a written tensor came back with shape {value.shape}, "
                    f"not {t.array.shape}"
                )
            np.copyto(t.array, value)
            if self.plane is not None:
                self.plane.produced(t.array, ref, sub_writes)

    def _input_ref(self, array: np.ndarray, sub_writes: int) -> Any:
        if self.plane is not None:
            return self.plane.input_ref(array, sub_writes)
        return _ray().put(np.ascontiguousarray(array))

    def _inputs_lost(self, e: BaseException, actor: Any, refs: List[Any]) -> bool:
        """True when ``e`` is a lost object while the actor still answers: an input the
        plane had cached went with its node; it is forgotten so the retry puts it again."""
        ray = _ray()
        if not isinstance(e, ray.exceptions.ObjectLostError) or not refs:
            return False
        try:
            ray.get(actor.ready.remote(), timeout=10)
        except Exception:  # noqa: BLE001 - the actor is gone too
            return False
        if self.plane is not None:
            self.plane.forget(refs)
        return True


def _kill_actor(actor: Any) -> None:
    try:
        _ray().kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001 - an actor already gone (or its node) needs no kill
        pass
