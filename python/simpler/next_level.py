"""The children of a level-4 worker: what the engine's next-level lanes call.

A ``Worker(level=4)`` is the level-3 engine whose next-level workers (worker ids ``0..n``, where
a level-3 worker has chips) are *children*: level-3 workers in this process
(:class:`LocalChild`, from ``add_worker``) or in Ray actors (``simpler.remote.RayChild``,
from ``add_remote_worker``). The engine drives each child from one lane thread and calls it
through :class:`NextLevelChild`; ordering by tags, groups, poisoning and the refusal of a dead
child are the engine's (``docs/l4-worker.md``).

This module owns that protocol, the registration payload that carries a callable to a child
(:func:`encode_payload` / :func:`decode_payload`), the in-process child, and the failures a child
reports (:class:`ChildDied`, :class:`ChildRestarted`, :class:`ChildTimeout`). It must not touch
Ray: the Ray child lives in ``simpler.remote``.
"""

from __future__ import annotations

import hashlib
import pickle
import queue
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Union

import numpy as np

from .callable import ChipCallable
from .config import CallConfig, RuntimeEnv
from .tensor import TaskArgs
from .types import TensorArgType

if TYPE_CHECKING:  # pragma: no cover
    from .host_worker import HostWorker

__all__ = [
    "ChildDied",
    "ChildRestarted",
    "ChildTimeout",
    "LocalChild",
    "NextLevelChild",
    "Registration",
    "TensorArg",
    "decode_payload",
    "encode_payload",
    "task_args",
]

PAYLOAD_VERSION = 1
_WRITES = (TensorArgType.OUTPUT, TensorArgType.OUTPUT_EXISTING, TensorArgType.INOUT)


class ChildDied(Exception):
    """Raised by :meth:`NextLevelChild.run` (or a control call) when the child is gone (its
    actor died, its node was removed). The engine fails the task with ``ENDPOINT_FAILURE``
    carrying ``report``, poisons its dependents and refuses later work to the child."""

    _endpoint_outcome = "died"

    def __init__(self, report: str) -> None:
        super().__init__(report)
        self.report = report


class ChildRestarted(Exception):
    """Raised by :meth:`NextLevelChild.run` when the child died during the task and was
    re-created as generation ``generation``: the task fails with ``ENDPOINT_FAILURE`` (it is
    never re-executed) and the child takes later work."""

    _endpoint_outcome = "restarted"

    def __init__(self, report: str, generation: int) -> None:
        super().__init__(report)
        self.report = report
        self.generation = int(generation)


class ChildTimeout(Exception):
    """Raised by :meth:`NextLevelChild.run` when the task ran past the child's task timeout
    (``remote_task_timeout_s``): the task fails with ``TASK_TIMEOUT``."""

    _endpoint_outcome = "timeout"

    def __init__(self, after_s: float, report: str = "") -> None:
        super().__init__(report or f"the task ran past {after_s:g} s")
        self.after_s = float(after_s)
        self.report = report


@dataclass(frozen=True)
class TensorArg:
    """One tensor of a level-4 task as a child receives it: ``array`` views the level-4
    process's memory in place (read-only for ``INPUT``), ``tag`` is how the task uses it."""

    array: np.ndarray
    tag: TensorArgType

    @property
    def writes(self) -> bool:
        """True for ``OUTPUT``, ``OUTPUT_EXISTING`` and ``INOUT``."""
        return self.tag in _WRITES

    @property
    def reads(self) -> bool:
        """True for ``INPUT`` and ``INOUT``."""
        return self.tag in (TensorArgType.INPUT, TensorArgType.INOUT)


def task_args(args: List[Union[TensorArg, int]], arrays: Optional[List[np.ndarray]] = None) -> TaskArgs:
    """The :class:`~simpler.TaskArgs` a level-3 orchestration function receives: the tensors of
    ``args`` (or ``arrays[i]`` in place of the ``i``-th tensor's array, a child's own copy) with
    their tags, then the scalars, in order."""
    out = TaskArgs()
    i = 0
    for a in args:
        if isinstance(a, TensorArg):
            out.add_tensor(a.array if arrays is None else arrays[i], a.tag)
            i += 1
    for a in args:
        if not isinstance(a, TensorArg):
            out.add_scalar(int(a))
    return out


# -- registration payloads ---------------------------------------------------------------------


@dataclass(frozen=True)
class Registration:
    """A decoded registration: ``kind`` is ``"chip"`` (``target`` a :class:`ChipCallable`) or
    ``"python"`` (``target`` a function); ``hashid`` is the level-4 worker's id of it."""

    kind: str
    name: str
    hashid: str
    target: Any


class PayloadError(ValueError):
    """A registration payload this side cannot use (malformed, a bundle whose content does
    not match its hash, a function whose module does not import here)."""


def encode_payload(target: Any, hashid: str, name: str, pickled: Optional[bytes] = None) -> bytes:
    """The bytes that carry ``target`` (a :class:`ChipCallable`, or a function whose
    cloudpickle is ``pickled``) to a child, with the level-4 worker's ``hashid`` and ``name``."""
    if isinstance(target, ChipCallable):
        kind, data = "chip", target.to_bytes()
    else:
        if pickled is None:
            raise ValueError("a function's payload needs its cloudpickle bytes")
        kind, data = "python", pickled
    record = {"version": PAYLOAD_VERSION, "kind": kind, "name": name, "hashid": hashid, "data": data}
    return pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)


def decode_payload(payload: bytes) -> Registration:
    """Decodes :func:`encode_payload`'s bytes on the side that will run the callable.

    Raises :class:`PayloadError`: a malformed payload or another version; a chip bundle
    whose sha256 is not its ``hashid`` (it changed on the way); a function that cannot be
    loaded here (the message names the function, the module this side lacks and the fix)."""
    try:
        record = pickle.loads(payload)
        version, kind = record["version"], record["kind"]
        name, hashid, data = str(record["name"]), str(record["hashid"]), bytes(record["data"])
    except Exception as e:  # noqa: BLE001 - any decoding failure is a malformed payload
        raise PayloadError(f"a malformed registration payload ({type(e).__name__}: {e})") from None
    if version != PAYLOAD_VERSION:
        raise PayloadError(
            f"registration payload version {version!r}; this side reads {PAYLOAD_VERSION}: "
            "install the same simpler on every host"
        )
    if kind == "chip":
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if digest != hashid:
            raise PayloadError(
                f"chip callable `{name}`: its bundle hashes to {digest[:19]}..., not "
                f"{hashid[:19]}...: the bytes changed on the way"
            )
        return Registration("chip", name, hashid, ChipCallable.from_bytes(data))
    if kind == "python":
        import cloudpickle

        try:
            fn = cloudpickle.loads(data)
        except ImportError as e:
            missing = getattr(e, "name", None) or str(e)
            raise PayloadError(
                f"function `{name}` cannot be loaded here: it needs module `{missing}`, which "
                f"does not import on this side ({type(e).__name__}: {e}); install that module "
                "on every host, or define the function where it is registered (functions of "
                "`__main__` travel by value)"
            ) from None
        except Exception as e:  # noqa: BLE001 - a function that will not unpickle is refused
            raise PayloadError(
                f"function `{name}` cannot be loaded here ({type(e).__name__}: {e})"
            ) from None
        from ._source import SourcedFunction

        if isinstance(fn, SourcedFunction):  # its file name and source lines came along
            fn = fn.install()
        return Registration("python", name, hashid, fn)
    raise PayloadError(f"a registration payload of unknown kind {kind!r}")


# -- the protocol --------------------------------------------------------------------------------


class NextLevelChild:
    """A child of a level-4 worker as its engine lane drives it. Every method is called from
    one thread at a time (``start`` from ``init``'s thread, the rest from the child's lane).

    Subclasses implement every method; see ``docs/l4-worker.md`` §2 for the contract."""

    def describe(self) -> str:
        """How messages name the child (``"worker 1 (ray actor on node host_a)"``)."""
        raise NotImplementedError

    def start(self, timeout_s: float) -> None:
        """Starts the child and waits until it takes work, within ``timeout_s`` seconds; raises
        on failure (its text is the ``StartupError``'s reason)."""
        raise NotImplementedError

    def register(self, key: int, payload: bytes) -> None:
        """Makes the callable carried by ``payload`` (:func:`decode_payload`) runnable under
        ``key``; raises to refuse it."""
        raise NotImplementedError

    def unregister(self, key: int) -> None:
        """Forgets ``key``."""
        raise NotImplementedError

    def run(
        self, key: int, args: List[Union[TensorArg, int]], config: Optional[CallConfig], sub_writes: int
    ) -> None:
        """Runs the level-3 orchestration function ``key`` on ``args`` and returns when that run
        is over, every written tensor's result in its ``array``. Raises :class:`ChildDied`,
        :class:`ChildRestarted`, :class:`ChildTimeout`, or any other exception to fail the
        task with its text."""
        raise NotImplementedError

    def shutdown(self) -> None:
        """Stops the child; called once, last. Leaves nothing running."""
        raise NotImplementedError

    def kill(self, reason: str) -> None:
        """Called from another thread when ``close()`` found this child's task running past
        the worker's ``close_timeout_s``: stop the task if the child can (its ``run`` then
        raises :class:`ChildDied` naming ``reason``). The default cannot, and ``close()``
        waits for the task."""
        del reason


class _OwnerThread:
    """One thread that makes every ``init()`` and ``close()`` call of a level-3 worker (its
    engine takes ``close()`` only from the thread that called ``init()``, and the level-4
    engine starts a child on ``init``'s thread but shuts it down on its lane)."""

    def __init__(self, name: str) -> None:
        self._calls: "queue.Queue[Any]" = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                return
            fn, done, event = item
            try:
                done.append((True, fn()))
            except BaseException as e:  # noqa: BLE001 - handed back to the caller
                done.append((False, e))
            event.set()

    def call(self, fn: Callable[[], Any]) -> Any:
        """Runs ``fn`` on the thread and returns its value (or raises its exception)."""
        done: List[Any] = []
        event = threading.Event()
        self._calls.put((fn, done, event))
        event.wait()
        ok, value = done[0]
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        self._calls.put(None)
        self._thread.join()


class LocalChild(NextLevelChild):
    """A level-3 :class:`~simpler.HostWorker` in this process (``add_worker``): its runs take
    the level-4 task's arrays in place (copied into its shared memory first when it has child
    processes, which cannot see private arrays)."""

    def __init__(self, worker: "HostWorker", worker_id: int) -> None:
        self.worker = worker
        self.worker_id = int(worker_id)
        self._functions: Dict[int, Callable[..., Any]] = {}
        self._handles: Dict[int, Any] = {}
        self._lock = threading.Lock()
        self._owner: Optional[_OwnerThread] = None
        self.plane: Any = None  # the DataPlane of the level-4 worker's Ray children, if any

    def describe(self) -> str:
        return f"worker {self.worker_id} (level-3 worker in this process)"

    def start(self, timeout_s: float) -> None:
        del timeout_s  # the child's own startup_timeout_s bounds its start
        self._owner = _OwnerThread(f"simpler-l3-owner-{self.worker_id}")
        self._owner.call(self.worker.init)

    def register(self, key: int, payload: bytes) -> None:
        reg = decode_payload(payload)
        handle = self.worker._adopt(reg)
        with self._lock:
            self._handles[key] = handle
            if reg.kind == "python":
                self._functions[key] = reg.target

    def unregister(self, key: int) -> None:
        with self._lock:
            handle = self._handles.pop(key, None)
            self._functions.pop(key, None)
        if handle is not None:
            self.worker._unadopt(handle)

    def run(
        self, key: int, args: List[Union[TensorArg, int]], config: Optional[CallConfig], sub_writes: int
    ) -> None:
        del sub_writes
        with self._lock:
            fn = self._functions.get(key)
        if fn is None:
            raise TypeError(
                "a level-4 task runs a level-3 orchestration function f(orch, args, config); "
                "this callable is a chip callable: submit it from inside one"
            )
        tensors = [a for a in args if isinstance(a, TensorArg)]
        staged = [self.worker._stage_in(t.array) for t in tensors]
        try:
            self.worker.run(fn, task_args(args, staged), config)
        finally:
            if self.plane is not None:
                self.plane.wrote([t.array for t in tensors if t.writes])
        for t, s in zip(tensors, staged):
            if t.writes and s is not t.array:
                np.copyto(t.array, s)

    def shutdown(self) -> None:
        owner, self._owner = self._owner, None
        if owner is None:
            self.worker.close()
            return
        try:
            owner.call(self.worker.close)
        finally:
            owner.stop()


# -- what the engine calls (crates/simpler-py/src/next_level.rs) -------------------------------


def _start(child: NextLevelChild, timeout_s: float) -> None:
    child.start(float(timeout_s))


def _register(child: NextLevelChild, key: int, payload: bytes) -> None:
    child.register(int(key), bytes(payload))


def _unregister(child: NextLevelChild, key: int) -> None:
    child.unregister(int(key))


def _ring(value: Any) -> Any:
    return None if value is None else [int(v) for v in value]


def _config(native: Any) -> CallConfig:
    """The :class:`~simpler.CallConfig` of the engine's ``native`` one."""
    env = native.runtime_env
    return CallConfig(
        aicpu_thread_num=int(native.aicpu_thread_num),
        runtime_env=RuntimeEnv(
            ring_task_window=_ring(env.ring_task_window),
            ring_heap=_ring(env.ring_heap),
            ring_dep_pool=_ring(env.ring_dep_pool),
            ready_queue=env.ready_queue,
        ),
        trace_level=str(native.trace_level),
        runtime=native.runtime,
    )


def _run(child: NextLevelChild, key: int, native_args: List[Any], config: Any, sub_ends: int) -> None:
    args: List[Union[TensorArg, int]] = []
    for a in native_args:
        if isinstance(a, int):
            args.append(a)
        else:
            args.append(TensorArg(np.asarray(a), TensorArgType(int(a.tag))))
    child.run(int(key), args, _config(config), int(sub_ends))


def _shutdown(child: NextLevelChild) -> None:
    child.shutdown()


def _kill(child: NextLevelChild, reason: str) -> None:
    """``close()`` found the child's task running past its close timeout: a child that can
    stop it does (:meth:`NextLevelChild.kill`)."""
    child.kill(str(reason))
