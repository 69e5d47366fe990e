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
stays usable after each.

**Threads.** A run, a wait and every copy release the GIL. ``run`` is ``submit(...).result()``
and ``RunHandle.wait`` waits in short slices, checking for signals between them, so Ctrl-C
raises ``KeyboardInterrupt`` promptly; the run goes on (its outputs land when it completes),
and the worker and the handle stay usable. A submitted run owns its host arrays until it
completes (the handle keeps them alive): do not modify them meanwhile.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _native
from .callable import CallableHandle, ChipCallable
from .config import CallConfig
from .errors import (
    ArgumentCountError,
    ArgumentTypeError,
    InvalidArgumentError,
    InvalidConfigError,
    UnknownCallableError,
    UnsupportedError,
    WorkerStateError,
)
from .tensor import Buffer, TaskArgs, Tensor, as_array
from .types import ArgSpec, TensorArgType, scalar_to_uint64

__all__ = ["Worker", "RunHandle", "RunReport"]

PLATFORMS = ("sim", "a2a3sim")
RUNTIMES = ("tensormap_and_ringbuffer",)
_DEFAULT_HEAP = 256 << 20

# Upstream options with no effect here, accepted so upstream scripts run unchanged.
_IGNORED_POSITIVE = ("startup_timeout_s", "py_control_timeout_s")


@dataclass(frozen=True)
class RunReport:
    """What a successful run reports."""

    epoch: int
    """The run's epoch (process-unique, non-zero)."""
    device_time_s: float
    """From the launch of the first kernel to the proof of completion."""
    total_time_s: float
    """From the call to the return, including staging and copy-back."""


class Worker:
    """One chip (level 2). See the module docs for the lifecycle and argument rules.

    Options: ``platform`` (``"sim"``; ``"a2a3sim"`` is an alias), ``runtime``
    (``"tensormap_and_ringbuffer"``), ``device_id``, and the chip's shape and sizes:
    ``clusters`` (8), ``aicpu_threads`` (4), ``aicpu_thread_num`` (0 = all), ``heap_ring_size``
    (bytes, 256 MiB), ``task_window`` (tasks per run), ``run_timeout_s`` (50),
    ``launch_depth`` (runs on the device at once, 1 or 2; default 2).
    """

    def __init__(self, level: int = 2, **config: Any) -> None:
        if level != 2:
            raise UnsupportedError(
                f"level {level}: only level 2 (one chip) is implemented"
                + ("" if level > 2 else "; levels start at 2")
            )
        self.level = level
        self.platform = config.pop("platform", "sim")
        self.runtime = config.pop("runtime", "tensormap_and_ringbuffer")
        self.device_id = config.pop("device_id", 0)
        if self.platform not in PLATFORMS:
            raise UnsupportedError(f"platform {self.platform!r}: only 'sim' exists in this build")
        if self.runtime not in RUNTIMES:
            raise UnsupportedError(
                f"runtime {self.runtime!r}: only 'tensormap_and_ringbuffer' exists in this build"
            )
        if not isinstance(self.device_id, int) or self.device_id < 0:
            raise InvalidConfigError(f"device_id must be an int >= 0, got {self.device_id!r}")
        self._native_options = {
            "clusters": config.pop("clusters", 8),
            "aicpu_threads": config.pop("aicpu_threads", 4),
            "aicpu_thread_num": config.pop("aicpu_thread_num", 0),
            "heap_size": config.pop("heap_ring_size", _DEFAULT_HEAP),
            "task_window": config.pop("task_window", None),
            "run_timeout_s": float(config.pop("run_timeout_s", 50.0)),
            "launch_depth": config.pop("launch_depth", None),
        }
        for key in ("device_ids", "num_sub_workers"):
            if config.pop(key, None):
                raise UnsupportedError(f"{key}: several chips (level 3) are not implemented")
        if config.pop("enable_sdma", False):
            raise UnsupportedError("enable_sdma: there is no SDMA engine on the sim platform")
        for key in _IGNORED_POSITIVE:
            value = config.pop(key, None)
            if value is not None and not (isinstance(value, (int, float)) and 0 < value < math.inf):
                raise InvalidConfigError(f"{key} must be positive and finite, got {value!r}")
        if config:
            raise ArgumentTypeError(f"Worker() got unknown option(s): {', '.join(sorted(config))}")
        self._native: Optional[_native.ChipWorker] = None
        self._state = "created"
        self._handles: Dict[str, CallableHandle] = {}
        self._lock = threading.RLock()
        # Runs in flight with the host memory ranges of their arrays: (handle, [(lo, hi, writes)]).
        self._inflight: list = []

    # -- lifecycle ---------------------------------------------------------------------------

    def init(self, prewarm_config: Optional[CallConfig] = None) -> None:
        """Starts the chip and registers the callables registered so far. Once only."""
        del prewarm_config  # nothing to pre-warm: callables load at registration
        with self._lock:
            if self._state == "closed":
                raise WorkerStateError("the worker is closed")
            if self._state == "ready":
                raise WorkerStateError("init() was already called")
            native = _native.ChipWorker(**self._native_options)
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

    def close(self) -> None:
        """Shuts the chip down and frees its device memory. Terminal and idempotent. Runs
        in flight finish first (their outputs land); runs not yet launched are cancelled and
        their handles raise ``WorkerStateError``."""
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

    @property
    def aicpu_thread_num(self) -> int:
        return int(self._native_options["aicpu_thread_num"])

    @property
    def effective_aicpu_thread_num(self) -> int:
        """AICPU threads a run uses (``aicpu_thread_num``, or all when it is 0)."""
        return self.aicpu_thread_num or int(self._native_options["aicpu_threads"])

    @property
    def heap_size(self) -> int:
        return int(self._native_options["heap_size"])

    @property
    def pipeline_depth(self) -> int:
        """Runs the chip holds at once (``launch_depth``)."""
        if self._native is not None:
            return int(self._native.config[6])
        value = self._native_options["launch_depth"]
        return 2 if value is None else int(value)

    @property
    def task_window(self) -> int:
        if self._native is not None:
            return int(self._native.config[4])
        value = self._native_options["task_window"]
        return 16384 if value is None else int(value)

    # -- callables ---------------------------------------------------------------------------

    def register(self, target: ChipCallable, *, workers: Any = None) -> CallableHandle:
        """Registers a :class:`ChipCallable` (before or after :meth:`init`); equal content
        returns the same handle, counted: each ``register`` needs one ``unregister``."""
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
                handle._native_id = self._native.register(target._native)
            self._handles[target.hashid] = handle
            return handle

    def unregister(self, handle: CallableHandle) -> None:
        """Releases one registration of ``handle``; the last one unloads the code."""
        with self._lock:
            self._own_handle(handle)
            handle._refs -= 1
            if handle._refs > 0:
                return
            del self._handles[handle.hashid]
            if handle._native_id is not None and self._native is not None:
                self._native.unregister(handle._native_id)
            handle._native_id = None

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
        """Allocates ``size`` bytes of zeroed device memory."""
        if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size <= 0:
            raise InvalidArgumentError(f"malloc size must be a positive int, got {size!r}")
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
        self, callable: CallableHandle, args: Any = None, config: Optional[CallConfig] = None
    ) -> RunReport:
        """Runs a registered callable and waits for it, with the GIL released.

        This is ``submit(...).result()``: host arrays are lent to the run in place, device
        tensors are used in place, and Ctrl-C raises ``KeyboardInterrupt`` while the run goes
        on (its outputs land when it completes; ``close`` waits for it).
        """
        native, native_id, items, native_config = self._prepare(callable, args, config)
        return self._submit_host(native, native_id, callable, items, native_config).result()

    def submit(
        self, callable: CallableHandle, args: Any = None, config: Optional[CallConfig] = None
    ) -> "RunHandle":
        """Starts a run and returns at once with its :class:`RunHandle`. The run owns its
        arguments until it finishes: do not modify them meanwhile."""
        native, native_id, items, native_config = self._prepare(callable, args, config)
        return self._submit_host(native, native_id, callable, items, native_config)

    def _submit_host(self, native, native_id, callable, items, native_config) -> "RunHandle":
        """Submits host-array arguments. A run whose arrays overlap those of a run still in
        flight — one of the two writing them — first waits for that run, so submissions on
        shared arrays behave as if executed in order (the host copies inputs in at launch
        and outputs back at the end, so overlapping them would read stale data)."""
        sig = self._own_handle(callable).signature
        ranges = []
        for spec, item in zip(sig, items):
            if item[0] == "host":
                arr = item[1]
                lo = int(arr.__array_interface__["data"][0])
                ranges.append((lo, lo + int(arr.nbytes), spec.direction.copies_back))
        with self._lock:
            self._inflight = [(h, r) for h, r in self._inflight if not h.done]
            earlier = [
                h
                for h, theirs in self._inflight
                if any(
                    lo < t_hi and t_lo < hi and (w or t_w)
                    for lo, hi, w in ranges
                    for t_lo, t_hi, t_w in theirs
                )
            ]
        for h in earlier:
            try:
                h.wait()
            except Exception:  # noqa: BLE001 - that run's error belongs to its own handle
                pass
        handle = RunHandle(native.submit(native_id, items, native_config), self)
        with self._lock:
            self._inflight.append((handle, ranges))
        return handle

    def _prepare(self, callable: Any, args: Any, config: Optional[CallConfig]):
        with self._lock:
            native = self._live()
            handle = self._own_handle(callable)
            native_id = handle._native_id
        if config is not None:
            if not isinstance(config, CallConfig):
                raise ArgumentTypeError(f"config must be a CallConfig, got {type(config).__name__}")
            config.check_against(self)
        items = self._native_args(handle, args)
        return native, native_id, items, (config._native() if config is not None else None)

    def _native_args(self, handle: CallableHandle, args: Any) -> List[tuple]:
        sig = handle.signature
        tensor_specs = [s for s in sig if s.direction.is_tensor]
        scalar_specs = [s for s in sig if not s.direction.is_tensor]
        if args is None:
            args = TaskArgs()
        if isinstance(args, TaskArgs):
            tensors = [(args.tensor(i), args.tag(i)) for i in range(args.tensor_count())]
            scalars = [args.scalar(i) for i in range(args.scalar_count())]
        elif isinstance(args, (list, tuple)):
            if len(args) != len(sig):
                raise ArgumentCountError(
                    f"callable `{handle.name}` takes {len(sig)} arguments "
                    f"({', '.join(s.name for s in sig)}), got {len(args)}",
                    callable=handle.name,
                    expected=len(sig),
                    got=len(args),
                )
            tensors = [(a, None) for a, s in zip(args, sig) if s.direction.is_tensor]
            scalars = [a for a, s in zip(args, sig) if not s.direction.is_tensor]
        else:
            raise ArgumentTypeError(
                "run arguments must be TaskArgs or a list in signature order, got "
                f"{type(args).__name__}"
            )
        if len(tensors) != len(tensor_specs) or len(scalars) != len(scalar_specs):
            raise ArgumentCountError(
                f"callable `{handle.name}` takes {len(tensor_specs)} tensors and "
                f"{len(scalar_specs)} scalars, got {len(tensors)} tensors and {len(scalars)} "
                "scalars",
                callable=handle.name,
                expected=len(sig),
                got=len(tensors) + len(scalars),
            )
        items: List[tuple] = []
        tensor_iter, scalar_iter = iter(tensors), iter(scalars)
        for spec in sig:
            if spec.direction.is_tensor:
                tensor, tag = next(tensor_iter)
                items.append(self._tensor_item(spec, tensor, tag))
            else:
                value = next(scalar_iter)
                if isinstance(value, (Tensor, Buffer, np.ndarray)):
                    raise ArgumentTypeError(
                        f"argument `{spec.name}`: the signature declares a scalar, got "
                        f"{type(value).__name__}"
                    )
                try:
                    bits = scalar_to_uint64(value, spec.dtype)
                except (ArgumentTypeError, InvalidArgumentError) as e:
                    raise type(e)(f"argument `{spec.name}`: {e}", arg=spec.name) from None
                items.append(("scalar", bits))
        return items

    def _tensor_item(self, spec: ArgSpec, tensor: Any, tag: Optional[TensorArgType]) -> tuple:
        def bad(reason: str) -> InvalidArgumentError:
            return InvalidArgumentError(
                f"argument `{spec.name}`: {reason}", arg=spec.name, reason=reason
            )

        if isinstance(tensor, Buffer):
            raise ArgumentTypeError(
                f"argument `{spec.name}`: pass buffer.tensor(shape, dtype), not the Buffer itself"
            )
        if isinstance(tensor, (int, float)) or tensor is None:
            raise ArgumentTypeError(
                f"argument `{spec.name}`: the signature declares an {spec.direction.short_name} "
                f"tensor, got {type(tensor).__name__}"
            )
        if not isinstance(tensor, Tensor):
            try:
                tensor = Tensor.from_host(tensor, writable=spec.direction.copies_back)
            except (ArgumentTypeError, InvalidArgumentError) as e:
                raise type(e)(f"argument `{spec.name}`: {e}", arg=spec.name) from None
        if tag is not None and not tag.agrees_with(spec.direction):
            raise bad(f"tag {tag.name} does not agree with the signature's {spec.direction.name}")
        if tensor.dtype is not spec.dtype:
            raise bad(
                f"dtype is {tensor.dtype.short_name}, the signature declares "
                f"{spec.dtype.short_name}"
            )
        if not 1 <= tensor.ndim <= 5:
            raise bad(f"has {tensor.ndim} dimensions; 1..5 are supported")
        if spec.shape is not None and tuple(tensor.shape) != spec.shape:
            raise bad(f"shape is {tuple(tensor.shape)}, the signature declares {spec.shape}")
        if tensor.numel == 0:
            raise bad(f"shape {tuple(tensor.shape)} has no elements")
        if not tensor.is_contiguous:
            raise bad(
                "is not C-contiguous and the host stages contiguous tensors only; pass "
                "numpy.ascontiguousarray(...)"
            )
        if tensor.is_device:
            self._own_buffer(tensor.buffer)
            address = tensor.buffer.address + tensor.byte_offset
            return ("device", address, tensor.nbytes, list(tensor.shape))
        arr = tensor.array
        if arr.dtype.byteorder not in "=|":
            raise bad(f"byte order of {arr.dtype} is not native")
        if spec.direction.copies_back and not arr.flags.writeable:
            raise bad(f"the array is read-only but the run writes it ({spec.direction.short_name})")
        return ("host", arr)


class RunHandle:
    """A submitted run. ``done`` says whether it finished; ``wait(timeout)`` blocks (raising
    ``TimeoutError`` after ``timeout`` seconds, or the run's own error); ``result()`` waits and
    returns the :class:`RunReport`. Waiting is idempotent: every wait after the run finished
    returns (or raises) the same outcome. The handle keeps its host arrays alive."""

    def __init__(self, native: Any, worker: Worker) -> None:
        self._native = native
        self._worker = worker

    @property
    def epoch(self) -> int:
        return int(self._native.epoch)

    @property
    def done(self) -> bool:
        """True once the run finished (successfully or not)."""
        return bool(self._native.poll())

    def wait(self, timeout: Optional[float] = None) -> None:
        """Waits for the run; raises ``WaitTimeoutError`` (a ``TimeoutError``) if it is still
        running after ``timeout`` seconds, or the run's error if it failed."""
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise ArgumentTypeError(f"timeout must be a number of seconds, got {timeout!r}")
            if not (0 <= timeout < math.inf):
                raise InvalidConfigError(f"timeout must be finite and >= 0, got {timeout!r}")
        self._native.wait(None if timeout is None else float(timeout))

    def result(self, timeout: Optional[float] = None) -> RunReport:
        """Waits (see :meth:`wait`) and returns the run's report."""
        self.wait(timeout)
        epoch, device_s, total_s = self._native.result()
        return RunReport(epoch, device_s, total_s)

    def __repr__(self) -> str:
        return f"RunHandle(epoch={self.epoch}, done={self.done})"
