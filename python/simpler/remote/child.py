"""The driver's side of a remote child: :class:`RayChild` (the ``NextLevelChild`` the
level-4 engine calls: it launches the actor, sends registrations and runs, writes results back
and turns a lost, restarted or timed-out actor into ``ChildDied`` / ``ChildRestarted`` /
``ChildTimeout``) and :func:`_kill_actor`.

It must not run anything of the actor's (that is :mod:`.actor`), nor decide what is cached (it
asks :mod:`.plane`), and must not import Ray at module level.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from ..config import CallConfig
from ..errors import InvalidConfigError
from ..next_level import (
    ChildDied,
    ChildRestarted,
    ChildTimeout,
    NextLevelChild,
    TensorArg,
)
from ..types import TensorArgType
from .actor import _ACTOR_LOCK, _actor_class, _lost_errors, _ray_text, _remote_error
from .plane import DataPlane
from .spec import RemoteWorkerSpec, _driver_path, _ray, resolve_node

__all__ = ["RayChild"]

_SHUTDOWN_WAIT_S = 30.0


class RayChild(NextLevelChild):
    """A level-4 worker's child in a Ray actor (see :mod:`simpler.remote`). ``plane`` is the
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
        self._killed: Optional[str] = None  # why close() killed the actor mid-task
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
        _await_death(actor)
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

    def kill(self, reason: str) -> None:
        """``close()`` found this child's task running past its close timeout: the actor is
        killed, and the task fails with ``ChildDied`` saying ``reason`` (no restart)."""
        self._killed = str(reason)
        self._kill()

    def _lost(self, what: str, e: BaseException) -> str:
        if self._killed is not None:
            return f"{self._who()} was killed {what}: {self._killed}"
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
        if self._closed or self._killed is not None or self._restarts_left() <= 0:
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
        if int(key) not in self._payloads:
            return
        if self._dead is None and self._stale is None and not self._closed:
            self._control(f"unregistration {key}", "unregister", int(key))
        # Forgotten once the actor has (or nothing runs it): a replacement will not know it.
        del self._payloads[int(key)]

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
                    # Every tensor's content is sent: a written one keeps the elements the
                    # task leaves alone, as in place (NO_DEP ones are never written back).
                    sends = True
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
                    values = self._outputs(out_refs)
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

    def _outputs(self, out_refs: List[Any]) -> List[Any]:
        """The values of a finished task's output refs, within the control timeout (the
        task is over: only the transfer remains)."""
        if not out_refs:
            return []
        ray = _ray()
        try:
            return list(ray.get(out_refs, timeout=self.control_timeout_s))
        except ray.exceptions.GetTimeoutError:
            raise RuntimeError(
                f"{self._who()}: the task finished but its outputs did not arrive within "
                f"{self.control_timeout_s:g} s"
            ) from None

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


def _await_death(actor: Any, limit_s: float = 10.0) -> None:
    """Returns once a killed ``actor`` answers no more (Ray's kill is asynchronous: a call
    made just after it may still be served), or after ``limit_s``."""
    ray = _ray()
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.ready.remote(), timeout=max(0.1, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001 - dead (or unreachable): what shutdown waits for
            return
        time.sleep(0.05)


def _kill_actor(actor: Any) -> None:
    try:
        _ray().kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001 - an actor already gone (or its node) needs no kill
        pass
