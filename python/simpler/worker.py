"""The level-2 :class:`Worker`: one simulated chip, its callables, device memory and runs.

Lifecycle (upstream's)::

    w = Worker(level=2, platform="sim", runtime="tensormap_and_ringbuffer", device_id=0)
    h = w.register(chip_callable)      # before or after init()
    w.init()                           # starts the chip
    try:
        w.run(h, [a, b, c])            # or TaskArgs, or w.submit(...) -> RunHandle
    finally:
        w.close()                      # terminal; `with Worker(...) as w:` closes too

**Arguments.** A run's arguments follow the callable's signature: tensors in order, then
scalars. Pass a :class:`~simpler.TaskArgs`, or a list with one item per signature entry
(arrays, :class:`~simpler.Tensor` objects, Python numbers). Host tensors (numpy arrays,
buffer-protocol or ``__dlpack__`` objects, :meth:`Worker.make_tensor_arg`) are used in place:
``IN``/``INOUT`` are copied to the device, ``OUT``/``INOUT`` copied back after a successful
run; a failed run leaves them untouched. Device tensors (:meth:`Buffer.tensor` of
:meth:`malloc` memory) are passed to the run in place: the run reads and writes the device
memory itself, and nothing is copied.

**Errors** are raised before anything reaches the device: wrong types, counts, dtypes,
shapes, non-contiguous or read-only arrays, aliasing outputs, a closed worker. The worker
stays usable after each. This module only converts Python objects (arrays, tensors,
numbers) into the native argument types; the host (``simpler-host``) checks them against the
signature, once, and its errors arrive as the classes of :mod:`simpler.errors`. Options and
reports cross as native classes with named fields (``simpler._native.WorkerConfig``,
``CallConfig``, ``RunReport``), and every default is the host's. See ``docs/python.md``.

**Runtimes and recordings.** ``runtime`` (``"tensormap_and_ringbuffer"``, the default, or
``"host_build_graph"``) is the variant of every run whose callable and :class:`CallConfig`
name none. A ``host_build_graph`` run's report has ``graph`` (:class:`GraphReport`).
:meth:`Worker.record` runs a callable once under ``host_build_graph`` and keeps its graph as a
:class:`RecordedRun`; :meth:`Worker.replay` (or ``submit``/``run`` given the recording)
runs the graph again on new arguments of the same shapes, dtypes and scalars without
running the orchestration. The host checks the replay (``ReplayMismatchError``,
``StaleRecordingError``); see ``docs/chip-runtime.md`` §17.

**Threads.** A run, a wait and every copy release the GIL. ``run`` is ``submit(...).result()``
and ``RunHandle.wait`` waits in short slices, checking for signals between them, so Ctrl-C
raises ``KeyboardInterrupt`` promptly; the run goes on (its outputs land when it completes),
and the worker and the handle stay usable. A submitted run owns its host arrays until it
completes (the handle keeps them alive): do not modify them meanwhile.
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from .callable import CallableHandle, ChipCallable
from .config import CallConfig
from .errors import (
    ArgumentTypeError,
    ExecutionContextRefused,
    InvalidArgumentError,
    InvalidConfigError,
    StaleRecordingError,
    UnknownCallableError,
    UnsupportedError,
    WorkerStateError,
)
from .options import CHIP_OPTIONS, PLATFORMS, trace_option
from .runs import RunHandle, RunReport
from .tensor import Buffer, TaskArgs, Tensor, as_array
from .types import ArgSpec, TensorArgType, is_scalar, scalar_item

__all__ = ["Worker", "RecordedRun"]

# Options that configure the device itself; a worker borrowing a caller's context refuses them.
_DEVICE_OPTIONS = (
    "clusters",
    "aicpu_threads",
    "sim_memcheck",
    "sim_executor",
    "device_id",
    "enable_sdma",
)

# Upstream options with no effect here, accepted so upstream scripts run unchanged.
_IGNORED_POSITIVE = ("startup_timeout_s", "py_control_timeout_s")


class RecordedRun:
    """A ``host_build_graph`` graph recorded by :meth:`Worker.record`: replay it with
    :meth:`Worker.replay` (or pass it to ``submit``/``run`` in place of the callable's
    handle) on new arguments of the recorded shapes, dtypes and scalar values; only the
    arguments' addresses are rebound and the orchestration does not run. Valid on the
    worker that recorded it while its callable stays registered (else
    ``StaleRecordingError``); holding it keeps the graph image in device memory."""

    def __init__(self, native: Any, handle: CallableHandle, worker: "Worker", report: RunReport):
        self._native = native
        self._handle = handle
        self._worker = worker
        self.report = report
        """The recording run's report (the run filled its outputs)."""

    @property
    def callable(self) -> str:
        """The recorded callable's name."""
        return str(self._native.callable_name)

    @property
    def signature(self) -> Tuple[ArgSpec, ...]:
        """The recorded callable's signature (a replay's arguments follow it)."""
        return self._handle.signature

    @property
    def tasks(self) -> int:
        """Tasks in the graph."""
        return int(self._native.tasks)

    @property
    def image_bytes(self) -> int:
        """Bytes of the graph image on the device."""
        return int(self._native.image_bytes)

    @property
    def generation(self) -> int:
        """The callable's registration generation it was recorded under."""
        return int(self._native.generation)

    @property
    def build_time_s(self) -> float:
        """Seconds the host spent running the orchestration and writing the image."""
        return float(self._native.build_time_s)

    @property
    def upload_time_s(self) -> float:
        """Seconds spent copying the image to the device."""
        return float(self._native.upload_time_s)

    def __repr__(self) -> str:
        return (
            f"RecordedRun(callable={self.callable!r}, tasks={self.tasks}, "
            f"image_bytes={self.image_bytes}, generation={self.generation}, "
            f"build_time_s={self.build_time_s:.6f}, upload_time_s={self.upload_time_s:.6f})"
        )


class Worker:
    """One chip (level 2). See the module docs for the lifecycle and argument rules.

    ``trace`` (a trace level: ``"tasks"``, ``"dispatch"``, ``"scheduler"``,
    ``"orchestrator"`` or 1..4) records every run whose :class:`CallConfig` leaves
    ``trace_level`` off; the report then has ``write_trace(path)`` and ``trace_summary()``
    (``docs/tracing.md``).

    Options: ``platform`` (``"sim"``; ``"a2a3sim"`` is an alias), ``runtime`` (the variant of
    runs whose callable and :class:`CallConfig` name none: ``"tensormap_and_ringbuffer"``, the
    default, or ``"host_build_graph"``; another name is an ``InvalidConfigError`` listing
    them), ``device_id``, and the chip's shape and sizes:
    ``clusters``, ``aicpu_threads``, ``aicpu_thread_num`` (0 = all), ``heap_ring_size``
    (bytes), ``task_window`` (task slots per ring), ``launch_depth`` (runs on the device at once,
    1 or 2) and the timeouts in seconds: ``run_timeout_s`` (the host's wait for a run),
    ``scheduler_timeout_s`` (nothing runs and nothing progresses), ``op_execute_timeout_s``
    (one kernel), ``tensor_data_timeout_s`` (``get/set_tensor_data``). Options left out take
    the host's defaults (8 clusters, 4 AICPU threads, 256 MiB, launch depth 2, the
    ``SIMPLER_*_TIMEOUT_*`` environment variables read as the CLI reads them, ...:
    ``simpler._native.WorkerConfig()``); the host checks the values when :meth:`init` starts
    the chip. ``sim_memcheck`` (``True``/``"after"``: every device allocation ends at a guard
    page, so a kernel writing past a tensor faults at once and the crash report names the
    allocation; ``"before"``: starts after one; default off, or ``SIMPLER_SIM_MEMCHECK``).
    ``sim_executor`` (``"pool"``: the sim's cores and AICPU threads are fibers on the process's
    shared pool of worker threads; ``"threads"``: one OS thread each; default ``"pool"``, or
    ``SIMPLER_SIM_EXECUTOR``). A bad value of either raises ``InvalidConfigError`` naming it.
    ``enable_sdma=True`` provisions the chip's SDMA engine, so kernels may start asynchronous
    copies with ``simpler_sdma_copy`` (``simpler/async.h``) whose tasks complete when the
    copy lands (default ``False``, as upstream; ``docs/chip-runtime.md`` section 18).
    ``chip_isolation``: ``"thread"`` (the default: the chip runs in this process) or
    ``"process"``: the chip runs in a child process, and ``Worker(...)`` makes a
    :class:`~simpler.IsolatedWorker` (``python/simpler/isolated_worker.py``).

    **Borrowed contexts and caller streams.** ``init(borrowed_context_generation=g)`` attaches
    the worker to a caller-owned context (a :class:`simpler.sim.Context` current on this
    thread) instead of starting a chip; ``submit(h, args, caller_stream=s)`` then orders each
    run inside the caller's stream ``s``. The context must be current on every thread that
    uses the worker or its handles (else ``ExecutionContextRefused``, retryable); program
    launch (``run``, ``submit`` without ``caller_stream``) is refused; options that configure
    the device are refused with ``InvalidConfigError``. See :mod:`simpler.sim` and
    ``docs/python.md`` section 12.
    """

    def __new__(cls, level: int = 2, **config: Any) -> "Worker":
        # `Worker(...)` makes the subclass that serves the level and options (each says so in
        # `_serves`): HostWorker for level 3 and above (host_worker.py), IsolatedWorker for a
        # level-2 chip in a child process (isolated_worker.py); else this class. The
        # subclasses import this module, never the reverse.
        if cls is Worker:
            for sub in Worker.__subclasses__():
                if sub._serves(level, config):
                    return super().__new__(sub)
        return super().__new__(cls)

    @classmethod
    def _serves(cls, level: Any, config: Dict[str, Any]) -> bool:
        """Whether ``Worker(level=level, **config)`` makes this subclass (each direct subclass
        that serves a level or an option says which; none by default). ``config`` is only
        read."""
        return False

    def __init__(self, level: int = 2, **config: Any) -> None:
        if level != 2:
            raise UnsupportedError(
                f"level {level!r}: levels start at 2 (2: one chip; 3 and above: chips and sub "
                "workers of one host)"
            )
        self.level = level
        # Options that shape or build the device: refused for a borrowed context, whose device
        # the caller owns (init(borrowed_context_generation=...)).
        self._device_options = [k for k in _DEVICE_OPTIONS if k in config]
        self.platform = config.pop("platform", "sim")
        self.device_id = config.pop("device_id", 0)
        if self.platform not in PLATFORMS:
            raise UnsupportedError(f"platform {self.platform!r}: only 'sim' exists in this build")
        options = {field: config.pop(key) for key, field in CHIP_OPTIONS.items() if key in config}
        for key in ("device_ids", "num_sub_workers"):
            if config.pop(key, None):
                raise UnsupportedError(
                    f"{key}: several chips and sub workers are a level-3 worker: "
                    "Worker(level=3, ...)"
                )
        # The trace level of runs whose CallConfig leaves it off (docs/tracing.md).
        self.trace_level = trace_option(config)
        # "process" is python/simpler/isolated_worker.py (Worker.__new__ makes one).
        isolation = config.pop("chip_isolation", "thread")
        if isolation != "thread":
            raise InvalidConfigError(
                f"chip_isolation must be 'thread' or 'process', got {isolation!r}"
            )
        self.chip_isolation = "thread"
        for key in _IGNORED_POSITIVE:
            value = config.pop(key, None)
            if value is not None and not (isinstance(value, (int, float)) and 0 < value < math.inf):
                raise InvalidConfigError(f"{key} must be positive and finite, got {value!r}")
        if config:
            raise ArgumentTypeError(f"Worker() got unknown option(s): {', '.join(sorted(config))}")
        # The host's WorkerConfig: its defaults for what is left out; checked at init().
        self._config = _native.WorkerConfig(device_id=self.device_id, **options)
        self.runtime = str(self._config.runtime)
        self._native: Optional[_native.ChipWorker] = None
        self._state = "created"
        self._handles: Dict[str, CallableHandle] = {}
        self._lock = threading.RLock()

    # -- lifecycle ---------------------------------------------------------------------------

    def init(
        self,
        prewarm_config: Optional[CallConfig] = None,
        *,
        borrowed_context_generation: Optional[int] = None,
    ) -> None:
        """Starts the chip and registers the callables registered so far. Once only.

        With ``borrowed_context_generation`` (the nonzero ``generation`` of a live
        :class:`simpler.sim.Context`, current on this thread), the worker starts no chip: it
        borrows the caller's context and its device, launches its runs on the caller's
        streams (``submit(..., caller_stream=s)``), and refuses program launch (``run``, and
        ``submit`` without ``caller_stream``) with ``WorkerStateError``. Options that
        configure the device (``clusters``, ``aicpu_threads``, ``sim_memcheck``,
        ``sim_executor``, ``device_id``) are refused with ``InvalidConfigError`` naming the
        option: the caller owns the device. Every call of a borrowed worker (and of its run
        handles) from a thread where the context is not current raises
        ``ExecutionContextRefused`` and changes nothing; retry with the context current.
        """
        del prewarm_config  # nothing to pre-warm: callables load at registration
        generation = self._borrowed_generation(borrowed_context_generation)
        with self._lock:
            if self._state == "closed":
                raise WorkerStateError("the worker is closed")
            if self._state == "ready":
                raise WorkerStateError("init() was already called")
            if generation is None:
                native = _native.ChipWorker(self._config)
            else:
                native = _native.ChipWorker(self._config, borrowed_context_generation=generation)
            try:
                for handle in self._handles.values():
                    handle._native_id = native.register(handle._callable._native)
            except BaseException:
                native.close()
                for handle in self._handles.values():
                    handle._native_id = None
                raise
            self._native = native
            self._state = "ready"

    def _borrowed_generation(self, generation: Any) -> Optional[int]:
        """``init``'s ``borrowed_context_generation``, checked: ``None``, or a nonzero int on a
        worker given no option that configures the device."""
        if generation is None:
            return None
        if isinstance(generation, bool) or not isinstance(generation, (int, np.integer)):
            raise InvalidConfigError(
                "borrowed_context_generation must be a nonzero int (a simpler.sim.Context's "
                f"generation), got {generation!r}"
            )
        if not 0 < int(generation) < 1 << 64:
            raise InvalidConfigError(
                "borrowed_context_generation must be a nonzero context generation, got "
                f"{int(generation)}"
            )
        for option in self._device_options:
            raise InvalidConfigError(
                f"{option}: a worker borrowing a caller's context (borrowed_context_generation) "
                "runs on the caller's device and cannot configure it; leave the option out"
            )
        return int(generation)

    @property
    def borrowed_context_generation(self) -> Optional[int]:
        """The caller context generation this worker borrows (after ``init``), or ``None``."""
        if self._native is None:
            return None
        return self._native.borrowed_context_generation

    def close(self) -> None:
        """Shuts the chip down and frees its device memory. Terminal and idempotent. Runs
        in flight finish first (their outputs land); runs not yet launched are cancelled and
        their handles raise ``WorkerStateError``. A borrowed worker only releases what it
        holds (the caller's context and device stay usable), and closing it from a thread
        where its context is not current raises ``ExecutionContextRefused``, leaving it open."""
        with self._lock:
            if self._state == "closed":
                return
            if self._native is not None:
                self._native.close()
            self._state = "closed"
            for handle in self._handles.values():
                handle._native_id = None
            self._handles.clear()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def initialized(self) -> bool:
        return self._state == "ready"

    @property
    def closed(self) -> bool:
        return self._state == "closed"

    def _live(self) -> "_native.ChipWorker":
        if self._state == "closed":
            raise WorkerStateError("the worker is closed")
        if self._native is None:
            raise WorkerStateError("the worker is not initialised: call init() first")
        return self._native

    # -- configuration seen by CallConfig ------------------------------------------------------

    def _worker_config(self) -> "_native.WorkerConfig":
        """The host's configuration: the chip's own once started, else the requested one."""
        return self._native.config if self._native is not None else self._config

    @property
    def aicpu_thread_num(self) -> int:
        return int(self._worker_config().aicpu_thread_num)

    @property
    def effective_aicpu_thread_num(self) -> int:
        """AICPU threads a run uses (``aicpu_thread_num``, or all when it is 0)."""
        return int(self._worker_config().effective_aicpu_thread_num)

    @property
    def heap_size(self) -> int:
        return int(self._worker_config().heap_size)

    @property
    def pipeline_depth(self) -> int:
        """Runs the chip holds at once (``launch_depth``)."""
        return int(self._worker_config().launch_depth)

    @property
    def task_window(self) -> int:
        return int(self._worker_config().task_window)

    # -- callables ---------------------------------------------------------------------------

    def register(
        self,
        target: ChipCallable,
        *,
        workers: Any = None,
        timeout: Optional[float] = None,
    ) -> CallableHandle:
        """Registers a :class:`ChipCallable` (before or after :meth:`init`); equal content
        returns the same handle, counted: each ``register`` needs one ``unregister``.

        Loading a callable is refused while any run of this worker is outstanding (submitted
        and not finished): with ``timeout=None`` at once (``WorkerStateError``); with a
        ``timeout`` in seconds the call waits up to that long for no run to be outstanding —
        it drives the runs to completion, and new submits wait behind it — then raises
        ``RegistryBusyError`` (a ``WorkerStateError`` and a ``TimeoutError``) naming how
        many were (``docs/python.md``, registration)."""
        native_timeout = _registry_timeout(timeout)
        if workers is not None:
            raise UnsupportedError("workers=: placing callables on sub-workers is level 3+")
        if not isinstance(target, ChipCallable):
            raise ArgumentTypeError(
                f"a level-2 worker registers ChipCallable objects, got {type(target).__name__}"
            )
        with self._lock:
            if self._state == "closed":
                raise WorkerStateError("the worker is closed")
            existing = self._handles.get(target.hashid)
            if existing is not None:
                self._check_current()
                existing._refs += 1
                return existing
            handle = CallableHandle(
                hashid=target.hashid,
                name=target.name,
                signature=target.signature,
                _owner=self,
                _callable=target,
            )
            if self._native is not None:
                handle._native_id = self._registry_call(
                    self._native.register, target._native, native_timeout
                )
            self._handles[target.hashid] = handle
            return handle

    def unregister(self, handle: CallableHandle, *, timeout: Optional[float] = None) -> None:
        """Releases one registration of ``handle``; the last one unloads the code. A refused
        unload (a run outstanding, a borrowed context not current) keeps the registration;
        ``timeout`` waits for no run to be outstanding as in :meth:`register`."""
        native_timeout = _registry_timeout(timeout)
        with self._lock:
            self._own_handle(handle)
            if handle._refs > 1:
                self._check_current()
                handle._refs -= 1
                return
            # The host first: when it refuses, the handle stays registered here too.
            if handle._native_id is not None and self._native is not None:
                self._registry_call(self._native.unregister, handle._native_id, native_timeout)
            handle._refs -= 1
            del self._handles[handle.hashid]
            handle._native_id = None

    def _registry_call(self, call: Any, target: Any, timeout: Optional[float]) -> Any:
        """``call(target)`` on the native worker, with ``timeout`` when one is given (an
        isolated worker's child process cannot wait: ``UnsupportedError``)."""
        if timeout is None:
            return call(target)
        if isinstance(self._native, _native.IsolatedChipWorker):
            raise UnsupportedError("timeout=: a process-isolated worker refuses at once")
        return call(target, timeout)

    def _check_current(self) -> None:
        """Refuses, as the native calls do, a borrowed worker's call from a thread where its
        context is not current: for the counted registrations that reach no native call."""
        generation = self.borrowed_context_generation
        if generation is None:
            return
        current = _native.current_context()
        if current != generation:
            raise ExecutionContextRefused(
                f"execution context refused: this worker runs in borrowed context generation "
                f"{generation}, but the calling thread's current context is "
                f"{'none' if current is None else current}; make it current and retry"
            )

    def _own_handle(self, handle: Any) -> CallableHandle:
        if isinstance(handle, ChipCallable):
            raise ArgumentTypeError(
                "pass the handle that register() returned, not the ChipCallable"
            )
        if not isinstance(handle, CallableHandle):
            raise ArgumentTypeError(f"expected a CallableHandle, got {type(handle).__name__}")
        if handle._owner is not self or self._handles.get(handle.hashid) is not handle:
            raise UnknownCallableError(
                f"callable `{handle.name}` ({handle.hashid[:19]}...) is not registered on this "
                "worker"
            )
        return handle

    # -- device memory -----------------------------------------------------------------------

    def malloc(self, size: int) -> Buffer:
        """Allocates ``size`` bytes of zeroed device memory: ``size`` an int in 1..2**64-1
        (else ``InvalidArgumentError``; more than the device holds is a ``DeviceError``)."""
        if (
            not isinstance(size, (int, np.integer))
            or isinstance(size, bool)
            or not 0 < size < 1 << 64
        ):
            raise InvalidArgumentError(
                f"malloc size must be a positive int below 2**64, got {size!r}"
            )
        address = self._live().malloc(int(size))
        return Buffer(self, address, int(size))

    def free(self, buffer: Buffer) -> None:
        """Frees a buffer from :meth:`malloc`."""
        self._own_buffer(buffer)
        self._live().free(buffer.address)
        buffer.freed = True

    def _own_buffer(self, buffer: Any) -> Buffer:
        if not isinstance(buffer, Buffer):
            raise ArgumentTypeError(f"expected a device Buffer, got {type(buffer).__name__}")
        if buffer.worker is not self:
            raise InvalidArgumentError("the buffer belongs to another worker")
        buffer.check_live()
        return buffer

    def _device_range(self, target: Any, what: str) -> Tuple[int, int]:
        """(address, capacity) of a Buffer or a contiguous device Tensor."""
        if isinstance(target, Tensor) and target.is_device:
            if not target.is_contiguous:
                raise InvalidArgumentError(f"{what}: only contiguous device tensors can be copied")
            self._own_buffer(target.buffer)
            return target.buffer.address + target.byte_offset, target.nbytes
        buffer = self._own_buffer(target)
        return buffer.address, buffer.nbytes

    def copy_to(self, dst: Any, src: Any) -> None:
        """Copies a host tensor (numpy array or any buffer/DLPack object) into device memory
        ``dst`` (a :class:`Buffer` or a device :class:`Tensor`)."""
        address, capacity = self._device_range(dst, "copy_to destination")
        arr = as_array(src, what="copy_to source")
        if not arr.flags.c_contiguous:
            raise InvalidArgumentError("copy_to source is not C-contiguous")
        if arr.nbytes > capacity:
            raise InvalidArgumentError(
                f"copy_to source holds {arr.nbytes} bytes; the destination has {capacity}"
            )
        self._live().copy_to(address, arr)

    def copy_from(self, dst: Any, src: Any) -> None:
        """Copies device memory ``src`` (a :class:`Buffer` or device :class:`Tensor`) into a
        writable host tensor, as many bytes as ``dst`` holds."""
        address, capacity = self._device_range(src, "copy_from source")
        arr = as_array(dst, writable=True, what="copy_from destination")
        if not arr.flags.c_contiguous:
            raise InvalidArgumentError("copy_from destination is not C-contiguous")
        if not arr.flags.writeable:
            raise InvalidArgumentError("copy_from destination is read-only")
        if arr.nbytes > capacity:
            raise InvalidArgumentError(
                f"copy_from destination holds {arr.nbytes} bytes; the source has {capacity}"
            )
        self._live().copy_from(arr, address)

    def make_tensor_arg(
        self,
        tensor: Any,
        shapes: Any = None,
        dtype: Any = None,
        *,
        strides: Optional[Sequence[int]] = None,
    ) -> Tensor:
        """Wraps a host tensor (numpy array, buffer-protocol or ``__dlpack__`` object, torch
        tensor) as a run argument, without copying; a run stages it by signature."""
        return Tensor.from_host(tensor, shapes, dtype, strides=strides, writable=True)

    # -- runs ----------------------------------------------------------------------------------

    def run(
        self,
        callable: Union[CallableHandle, RecordedRun],
        args: Any = None,
        config: Optional[CallConfig] = None,
        *,
        trace: Optional[Union[str, "os.PathLike[str]"]] = None,
    ) -> RunReport:
        """Runs a registered callable (or replays a :class:`RecordedRun`) and waits for it,
        with the GIL released.

        This is ``submit(...).result()``: host arrays are lent to the run in place, device
        tensors are used in place, and Ctrl-C raises ``KeyboardInterrupt`` while the run goes
        on (its outputs land when it completes; ``close`` waits for it).

        ``trace=path`` records the run (at the config's trace level, else the worker's, else
        ``"tasks"``) and writes its trace there atomically (Perfetto, or Chrome JSON for a
        ``.json`` path; ``docs/tracing.md``).
        """
        if trace is not None:
            config = self._traced_config(config, default="tasks")
        report = self._submit(*self._prepare(callable, args, config)).result()
        if trace is not None:
            report.write_trace(trace)
        return report

    def _traced_config(self, config: Optional[CallConfig], default: str) -> CallConfig:
        """``config`` with a trace level: its own, else the worker's, else ``default``."""
        if config is not None and not isinstance(config, CallConfig):
            raise ArgumentTypeError(f"config must be a CallConfig, got {type(config).__name__}")
        base = config if config is not None else CallConfig()
        if str(base.trace_level) not in ("off", "0"):
            return base
        worker_level = self.trace_level
        level = worker_level if worker_level not in ("off", "0") else default
        return dataclasses.replace(base, trace_level=level)

    def submit(
        self,
        callable: Union[CallableHandle, RecordedRun],
        args: Any = None,
        config: Optional[CallConfig] = None,
        *,
        caller_stream: Optional[int] = None,
    ) -> "RunHandle":
        """Starts a run and returns at once with its :class:`RunHandle`. The run owns its
        arguments until it finishes: do not modify them meanwhile. Given a
        :class:`RecordedRun` instead of a callable handle, the run replays it (see
        :meth:`replay`).

        ``caller_stream`` (a :class:`simpler.sim.Stream` of the borrowed context) launches
        the run inside the caller's stream: after the work queued on it before this call,
        before the work queued after it returns. A successful return means the run is
        enqueued; launch errors raise here, the handle gives the verdict. Device tensors
        (``buffer.tensor(...)``) are the natural arguments; host arrays follow the usual
        rules. A worker that already ran a program launch refuses it (``WorkerStateError``);
        a stream its device does not know is an ``InvalidArgumentError`` naming
        ``caller_stream``.
        """
        if caller_stream is None:
            return self._submit(*self._prepare(callable, args, config))
        if isinstance(callable, RecordedRun):
            raise UnsupportedError(
                "caller_stream: a recording replays as a program launch (submit(rec, args))"
            )
        if isinstance(caller_stream, bool) or not isinstance(caller_stream, (int, np.integer)):
            raise ArgumentTypeError(
                f"caller_stream must be a stream handle (simpler.sim.Stream), got "
                f"{type(caller_stream).__name__}",
                arg="caller_stream",
            )
        native, target, items, native_config = self._prepare(callable, args, config)
        return RunHandle(
            native.submit(target, items, native_config, caller_stream=int(caller_stream)),
            self,
        )

    def _submit(self, native, target, items, native_config) -> "RunHandle":
        """Submits the run of ``target`` (a callable id, or a native recording to replay).
        The host lends every host array in place and orders a run whose arrays overlap those
        of an unfinished run — one of the two writing them — behind that run, so submissions
        on shared arrays behave as if executed in order."""
        if isinstance(target, int):
            return RunHandle(native.submit(target, items, native_config), self)
        return RunHandle(native.submit_replay(target, items, native_config), self)

    def record(
        self, callable: CallableHandle, args: Any = None, config: Optional[CallConfig] = None
    ) -> RecordedRun:
        """Runs ``callable`` once under ``host_build_graph`` and keeps its graph: the run
        fills its outputs as any run does (its report is the recording's ``report``) and
        returns the :class:`RecordedRun` that :meth:`replay` runs again on new arguments of
        the same shapes, dtypes and scalars (``docs/chip-runtime.md`` §17). ``config``
        gives the run's other options; its ``runtime`` is ignored. An orchestration that
        calls ``get/set_tensor_data`` cannot be recorded (``InvalidArgumentError`` naming
        ``record``); a graph that does not fit fails as any ``host_build_graph`` run
        (``RunFailedError``)."""
        native, native_id, items, native_config = self._prepare(callable, args, config)
        assert isinstance(native_id, int)
        run = RunHandle(native.submit_record(native_id, items, native_config), self)
        report = run.result()
        recording = run._native.result().recording
        assert recording is not None, "a recording run's report carries its recording"
        return RecordedRun(recording, callable, self, report)

    def replay(
        self, recording: RecordedRun, args: Any = None, config: Optional[CallConfig] = None
    ) -> RunReport:
        """Replays ``recording`` on ``args`` and waits for it: the recorded graph runs again
        with only the arguments' addresses rebound (the orchestration does not run), so each
        argument must have the recorded shape and dtype and each scalar the recorded value
        (``ReplayMismatchError`` naming it). A recording whose callable was unregistered or
        registered again raises ``StaleRecordingError``. This is ``run(recording, args,
        config)``; ``submit(recording, ...)`` returns at once."""
        if not isinstance(recording, RecordedRun):
            raise ArgumentTypeError(
                f"replay takes a RecordedRun from record(), got {type(recording).__name__}"
            )
        return self.run(recording, args, config)

    def _prepare(self, callable: Any, args: Any, config: Optional[CallConfig]):
        with self._lock:
            native = self._live()
            if isinstance(callable, RecordedRun):
                if callable._worker is not self:
                    raise StaleRecordingError(
                        f"the recording of `{callable.callable}` is stale: it was recorded by "
                        "another worker (a recording replays only on its own)",
                        callable=str(callable.callable),
                        reason="it was recorded by another worker",
                    )
                handle = callable._handle
                target: Any = callable._native
            else:
                handle = self._own_handle(callable)
                target = handle._native_id
        native_config = None
        worker_level = self.trace_level
        if worker_level not in ("off", "0") and (config is None or isinstance(config, CallConfig)):
            config = self._traced_config(config, default=worker_level)
        if config is not None:
            if not isinstance(config, CallConfig):
                raise ArgumentTypeError(f"config must be a CallConfig, got {type(config).__name__}")
            native_config = config._for_worker(self)
        return native, target, self._native_args(handle, args), native_config

    def _native_args(self, handle: CallableHandle, args: Any) -> List[Any]:
        """One native item per argument, in signature order (TaskArgs: its tensors, then its
        scalars). Only Python objects are converted here; the host checks the count, kinds,
        dtypes, shapes, writability, aliasing and scalar ranges against the signature."""
        sig = handle.signature
        if args is None:
            args = TaskArgs()
        if isinstance(args, TaskArgs):
            tensors = [(args.tensor(i), args.tag(i)) for i in range(args.tensor_count())]
            scalars = [(args.scalar(i), None) for i in range(args.scalar_count())]
            entries = tensors + scalars
            paired = len(tensors) == sum(s.direction.is_tensor for s in sig) and len(
                entries
            ) == len(sig)
        elif isinstance(args, (list, tuple)):
            entries = [(a, None) for a in args]
            paired = len(entries) == len(sig)
        else:
            raise ArgumentTypeError(
                "run arguments must be TaskArgs or a list in signature order, got "
                f"{type(args).__name__}"
            )
        # Unpaired (a count mismatch), each value converts by its own type and the host
        # reports the mismatch.
        specs: List[Optional[ArgSpec]] = list(sig) if paired else [None] * len(entries)
        return [
            self._item(spec, i, value, tag)
            for i, (spec, (value, tag)) in enumerate(zip(specs, entries))
        ]

    def _item(
        self, spec: Optional[ArgSpec], index: int, value: Any, tag: Optional[TensorArgType]
    ) -> Any:
        name = spec.name if spec is not None else f"#{index}"
        if is_scalar(value):
            return scalar_item(value)
        if spec is not None and not spec.direction.is_tensor:
            if not isinstance(value, (Tensor, Buffer, np.ndarray)):
                # Neither a number nor a tensor (a tensor goes on: the host names the mismatch).
                raise ArgumentTypeError(
                    f"argument `{name}`: a scalar must be an int, a float, a numpy scalar or a "
                    f"ctypes value, got {type(value).__name__}",
                    arg=name,
                )
        if isinstance(value, Buffer):
            raise ArgumentTypeError(
                f"argument `{name}`: pass buffer.tensor(shape, dtype), not the Buffer itself",
                arg=name,
            )
        if value is None:
            raise ArgumentTypeError(f"argument `{name}`: expected a tensor, got None", arg=name)
        tensor = value
        if not isinstance(tensor, Tensor):
            writable = spec is None or spec.direction.copies_back
            try:
                tensor = Tensor.from_host(tensor, writable=writable)
            except (ArgumentTypeError, InvalidArgumentError) as e:
                raise type(e)(f"argument `{name}`: {e}", arg=name) from None
        if tag is not None and spec is not None and not tag.agrees_with(spec.direction):
            reason = f"tag {tag.name} does not agree with the signature's {spec.direction.name}"
            raise InvalidArgumentError(f"argument `{name}`: {reason}", arg=name, reason=reason)
        if tensor.is_device:
            if not tensor.is_contiguous:
                reason = (
                    "is not C-contiguous and a device tensor is passed in place; view "
                    "contiguous device memory"
                )
                raise InvalidArgumentError(f"argument `{name}`: {reason}", arg=name, reason=reason)
            self._own_buffer(tensor.buffer)
            address = tensor.buffer.address + tensor.byte_offset
            return _native.DeviceTensor(address, list(tensor.shape), int(tensor.dtype))
        return _native.HostTensor(tensor.array, int(tensor.dtype))


def _registry_timeout(timeout: Any) -> Optional[float]:
    """``register``/``unregister``'s ``timeout``: ``None``, or seconds as a float (a bool or
    a non-number is an ``ArgumentTypeError``, a negative or non-finite number an
    ``InvalidArgumentError``, each naming ``timeout``)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float, np.integer, np.floating)):
        raise ArgumentTypeError(
            f"timeout must be a number of seconds or None, got {type(timeout).__name__}",
            arg="timeout",
        )
    value = float(timeout)
    if not math.isfinite(value) or value < 0:
        raise InvalidArgumentError(
            f"timeout must be a finite number of seconds >= 0, got {timeout!r}",
            arg="timeout",
            reason="not a finite number of seconds >= 0",
        )
    return value
