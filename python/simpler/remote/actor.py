"""The Ray actor's side of a remote child: :class:`Level3Actor` (the actor body: one
``Worker(level=3, ...)``, its registrations and runs, staging of the tensors it is sent),
:func:`_actor_class` (that body as a Ray actor class, made once), and the helpers that turn
Ray's errors into ours (:class:`RemoteTaskError`, :func:`_remote_error`, :func:`_lost_errors`,
:func:`_ray_text`).

Actors unpickle :class:`Level3Actor` by reference (``simpler.remote.actor.Level3Actor``), so
the class must stay importable here under that name. This module must not hold driver-side
state (the child's generations, timeouts, restarts are :mod:`.child`'s; cached objects are
:mod:`.plane`'s), and must not import Ray at module level.
"""

from __future__ import annotations

import math
import os
import re
import socket
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type, Union

import numpy as np

from ..config import CallConfig
from ..next_level import TensorArg, decode_payload, task_args
from ..types import TensorArgType
from ..worker import Worker
from .spec import _adopt_path, _ray

__all__ = ["Level3Actor", "RemoteTaskError"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


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


class Level3Actor:
    """The body of a remote child's Ray actor (made a Ray actor class by ``_actor_class``):
    one ``Worker(level=3, ...)``, the callables registered on it, and the runs. Its methods
    run one at a time, on one thread."""

    def __init__(self, config: Dict[str, Any], worker_id: int,
                 path: Optional[Sequence[str]] = None) -> None:
        if path:
            _adopt_path(path)
        self.worker_id = int(worker_id)
        self.worker = Worker(level=3, **config)
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
        handle = self.worker._adopt(reg)
        self.handles[key] = handle
        if reg.kind == "python":
            self.functions[key] = reg.target
        return reg.kind

    def unregister(self, key: int) -> None:
        handle = self.handles.pop(key, None)
        self.functions.pop(key, None)
        if handle is not None:
            self.worker._unadopt(handle)

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

