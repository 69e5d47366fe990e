"""Caller-owned device contexts on the sim platform, for borrowed workers and caller streams.

A framework that embeds simpler owns the device context and its streams; simpler's worker
*borrows* the context and orders each run inside one of the caller's streams. On hardware
the context is the framework's; on the sim platform :class:`Context` plays it: a sim device
named by a nonzero context ``generation`` (``simpler_host::sim_context::SimContext``, through
``simpler._native.SimContext``). See ``docs/python.md`` section 12 and ``docs/lane.md``
section 12::

    import simpler.sim

    ctx = simpler.sim.Context(clusters=2, aicpu_threads=2)
    with ctx:                                   # current on this thread until the block ends
        w = Worker(level=2)
        w.init(borrowed_context_generation=ctx.generation)
        h = w.register(vadd)
        a, b, c = (w.malloc(4 * n) for _ in range(3))
        s = ctx.create_stream()
        ctx.launch_host_fn(s, lambda: ctx.copy_to(a, x))           # the caller's earlier work
        w.submit(h, [a.tensor([n], "f32"), ...], caller_stream=s)  # ordered after it
        ctx.launch_host_fn(s, lambda: ctx.copy_from(out, c))       # and before this
        ctx.synchronize(s)
        w.close()
    ctx.close()

**Current context.** ``with ctx:`` (or ``ctx.make_current()``) makes the context the calling
thread's current one and restores the previous one on exit; a borrowed worker refuses every
call from a thread where its context is not current (``ExecutionContextRefused``; retry once
it is current again — the same run handle too).

**Host functions.** ``ctx.launch_host_fn(stream, fn)`` queues ``fn()`` on the stream: it runs
on the stream's thread (holding the GIL) after the work queued before it, and the stream's
later work waits for it. An exception it raises is kept and raised by the next
``ctx.synchronize(stream)``. A host function runs where no context is current: it reaches
device memory through :meth:`Context.copy_to` and :meth:`Context.copy_from` (which need none),
not through the borrowed worker, and must not wait for its own stream.

**Lifetime.** ``ctx.close()`` removes the generation (no new worker can attach); a worker
already attached keeps the device alive and works on. A context inherited by a forked child
refuses every call there with ``ExecutionContextRefused``. Synchronize the streams (and close
the context) before the interpreter exits: a host function still queued then cannot take the
GIL.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, List, Optional, Tuple

from . import _native
from .errors import ArgumentTypeError, InvalidArgumentError, WorkerStateError
from .tensor import Buffer, Tensor, as_array

__all__ = ["Context", "CurrentContext", "Stream", "current_context"]


class Stream(int):
    """A stream of a :class:`Context`'s device: an int (its raw handle, what
    ``Worker.submit(..., caller_stream=...)`` takes), also as :attr:`handle`."""

    @property
    def handle(self) -> int:
        """The raw stream handle."""
        return int(self)

    def __repr__(self) -> str:
        return f"Stream({int(self)})"


def current_context() -> Optional[int]:
    """The generation of the calling thread's current context, or ``None``."""
    return _native.current_context()


class CurrentContext:
    """What :meth:`Context.make_current` returns: :meth:`restore` (or leaving its ``with``
    block) makes the thread's previous context current again, once."""

    def __init__(self, previous: Optional[int]) -> None:
        self.previous = previous
        """The generation that was current before (``None``: none)."""
        self._restored = False

    def restore(self) -> None:
        """Makes the previous context current again (later calls do nothing). Call it on the
        thread that made the context current."""
        if not self._restored:
            self._restored = True
            _native.set_current_context(self.previous)

    def __enter__(self) -> "CurrentContext":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()


def _device_range(target: Any, what: str) -> Tuple[int, int]:
    """(address, capacity) of a device :class:`Buffer`, a contiguous device :class:`Tensor`,
    or a raw ``(address, nbytes)`` pair."""
    if isinstance(target, Tensor) and target.is_device:
        if not target.is_contiguous:
            raise InvalidArgumentError(f"{what}: only contiguous device tensors can be copied")
        target.buffer.check_live()
        return target.buffer.address + target.byte_offset, target.nbytes
    if isinstance(target, Buffer):
        target.check_live()
        return target.address, target.nbytes
    raise ArgumentTypeError(
        f"{what}: expected a device Buffer or device Tensor, got {type(target).__name__}"
    )


class Context:
    """A caller-owned device context on the sim platform (see the module docs).

    ``clusters`` and ``aicpu_threads`` shape its device, ``sim_memcheck`` and
    ``sim_executor`` build it as the :class:`~simpler.Worker` options of the same names do
    (each defaults to the host's default). A bad value raises ``InvalidConfigError`` naming
    the option. ``with ctx:`` makes it current on the calling thread for the block; the
    context itself is closed by :meth:`close`.
    """

    def __init__(
        self,
        *,
        clusters: Optional[int] = None,
        aicpu_threads: Optional[int] = None,
        sim_memcheck: Any = None,
        sim_executor: Optional[str] = None,
    ) -> None:
        self._native = _native.SimContext(
            clusters=clusters,
            aicpu_threads=aicpu_threads,
            sim_memcheck=sim_memcheck,
            sim_executor=sim_executor,
        )
        self._entered = threading.local()

    @property
    def generation(self) -> int:
        """The context's generation: nonzero, never reused in this process; what
        ``Worker.init(borrowed_context_generation=...)`` takes."""
        return int(self._native.generation)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return bool(self._native.closed)

    # -- current context -----------------------------------------------------------------

    def make_current(self) -> CurrentContext:
        """Makes this context the calling thread's current one; the returned
        :class:`CurrentContext` restores the previous one (``with ctx.make_current():``, or
        its ``restore()``). ``WorkerStateError`` once the context is closed."""
        if self._native.closed:
            raise WorkerStateError(f"sim context generation {self.generation} is closed")
        return CurrentContext(_native.set_current_context(self.generation))

    def __enter__(self) -> "Context":
        stack: List[CurrentContext] = self._entered.__dict__.setdefault("stack", [])
        stack.append(self.make_current())
        return self

    def __exit__(self, *exc: Any) -> None:
        self._entered.stack.pop().restore()

    # -- streams -------------------------------------------------------------------------

    def create_stream(self) -> Stream:
        """A new stream of the context's device."""
        return Stream(self._native.create_stream())

    def destroy_stream(self, stream: int) -> None:
        """Destroys ``stream`` once the work queued on it has run. An exception a host
        function on it raised since the last :meth:`synchronize` goes to
        ``sys.unraisablehook``."""
        self._native.destroy_stream(stream)

    def launch_host_fn(self, stream: int, fn: Callable[[], Any]) -> None:
        """Queues ``fn()`` on ``stream``: called on the stream's thread (holding the GIL)
        after the work queued on the stream before it; the stream's later work waits for it.
        Its return value is dropped; an exception it raises is kept and raised by the next
        :meth:`synchronize` of the stream (see the module docs for what it may call)."""
        self._native.launch_host_fn(stream, fn)

    def synchronize(self, stream: int, timeout: Optional[float] = None) -> None:
        """Waits until everything queued on ``stream`` has finished (``timeout`` seconds at
        most; ``None``: as long as it takes; Ctrl-C interrupts it), then raises the first
        exception a host function on the stream raised since the last synchronize (the
        others go to ``sys.unraisablehook``). ``WaitTimeoutError`` when the time is up (the
        work goes on); ``InvalidArgumentError`` naming ``stream`` for an unknown stream."""
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float))
        ):
            raise ArgumentTypeError(f"timeout must be a number of seconds, got {timeout!r}")
        self._native.synchronize(stream, None if timeout is None else float(timeout))

    # -- device memory -------------------------------------------------------------------

    def copy_to(self, dst: Any, src: Any) -> None:
        """Copies a host tensor (numpy array, buffer or DLPack object) into device memory
        ``dst`` (a :class:`~simpler.Buffer` of a worker attached to this context, or a device
        :class:`~simpler.Tensor` over one). Needs no current context: a host function may
        call it to write a run's inputs in stream order."""
        address, capacity = _device_range(dst, "copy_to destination")
        arr = as_array(src, what="copy_to source")
        if not arr.flags.c_contiguous:
            raise InvalidArgumentError("copy_to source is not C-contiguous")
        if arr.nbytes > capacity:
            raise InvalidArgumentError(
                f"copy_to source holds {arr.nbytes} bytes; the destination has {capacity}"
            )
        self._native.copy_to(address, arr)

    def copy_from(self, dst: Any, src: Any) -> None:
        """Copies device memory ``src`` (a :class:`~simpler.Buffer` or device
        :class:`~simpler.Tensor`) into a writable host tensor, as many bytes as ``dst``
        holds. Needs no current context: a host function may call it to read a run's
        outputs in stream order."""
        address, capacity = _device_range(src, "copy_from source")
        arr = as_array(dst, writable=True, what="copy_from destination")
        if not arr.flags.c_contiguous or not arr.flags.writeable:
            raise InvalidArgumentError("copy_from destination must be C-contiguous and writable")
        if arr.nbytes > capacity:
            raise InvalidArgumentError(
                f"copy_from destination holds {arr.nbytes} bytes; the source has {capacity}"
            )
        self._native.copy_from(arr, address)

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Removes the context's generation (no worker can attach any more) and drops this
        object's hold on the device; a worker already attached keeps it alive. Exceptions of
        host functions not yet synchronized go to ``sys.unraisablehook``. Idempotent."""
        self._native.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"simpler.sim.Context(generation={self.generation}, {state})"
