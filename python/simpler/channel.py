"""The L3↔L2 region: shared memory between a level-3 orchestration and a task running on one
chip (``docs/comm.md`` §7).

Inside an orchestration function::

    region = orch.create_worker_chip_region(0, payload_bytes=4096, counter_bytes=64)
    args = region.add_descriptor(TaskArgs().add_tensor(...))   # six u64 scalars
    orch.submit_next_level(handle, args, worker=0)              # the chip task starts
    region.payload_write(0, data)
    region.counter(0).notify(1, NotifyOp.SET)                   # "data 1 is there"
    region.counter(4).wait(1, WaitCmp.GE, timeout=5.0)          # the chip's reply
    reply = region.payload_read(64, 8)

The chip side is ``simpler/region.h``. The handle works until :meth:`WorkerChipRegion.free`
or until the orchestration returns (then every call raises ``WorkerStateError``); the memory
stays mapped on the chip until the run is over. Every check and wait is the engine's
(``crates/simpler-worker/src/channel.rs``); this module converts arguments.
"""

from __future__ import annotations

import enum
from typing import Any, Tuple

import numpy as np

from .errors import ArgumentTypeError

__all__ = [
    "NotifyOp",
    "QueueMessage",
    "QueueOpcode",
    "RegionCounter",
    "WaitCmp",
    "WorkerChipQueue",
    "WorkerChipRegion",
]


class NotifyOp(enum.IntEnum):
    """How :meth:`RegionCounter.notify` changes a counter."""

    SET = 0
    """``counter = value``."""
    ADD = 1
    """``counter += value``, atomic, wrapping at 2**32."""


class WaitCmp(enum.IntEnum):
    """The comparison a wait waits for, the counter (``uint32``) on the left."""

    EQ = 0
    NE = 1
    GT = 2
    GE = 3
    LT = 4
    LE = 5


def _u32(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentTypeError(f"{name} must be an int, got {type(value).__name__}", arg=name, reason="not an int")
    if not 0 <= int(value) < 1 << 32:
        raise ArgumentTypeError(f"{name} = {value} does not fit a u32 counter", arg=name, reason="out of range")
    return int(value)


def _offset(value: Any, name: str = "offset") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < 0:
        raise ArgumentTypeError(f"{name} must be an int >= 0, got {value!r}", arg=name, reason="not an offset")
    return int(value)


class RegionCounter:
    """The ``uint32`` counter at byte ``offset`` of a region's counter area."""

    def __init__(self, region: "WorkerChipRegion", offset: int) -> None:
        self._region = region
        self.offset = offset

    def notify(self, value: int, op: NotifyOp = NotifyOp.SET) -> None:
        """Sets the counter to ``value`` or adds ``value`` (atomically): the payload bytes
        written before are visible to a chip that sees the new value."""
        self._region._native.notify(self.offset, _u32(value, "value"), int(NotifyOp(op)))

    def test(self) -> int:
        """The counter now, without waiting."""
        return int(self._region._native.test(self.offset))

    def wait(self, value: int, cmp: WaitCmp = WaitCmp.GE, timeout: float = 10.0) -> int:
        """Waits until ``counter <cmp> value``, at most ``timeout`` seconds (finite, > 0);
        returns the counter then. Raises ``WaitTimeoutError`` when it did not hold in time;
        Ctrl-C ends the wait."""
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise ArgumentTypeError(f"timeout must be a number of seconds, got {timeout!r}", arg="timeout", reason="not a number")
        from .errors import WaitTimeoutError

        cmp = WaitCmp(cmp)
        try:
            return int(self._region._native.wait(self.offset, _u32(value, "value"), int(cmp), float(timeout)))
        except WaitTimeoutError:
            seen = self.test()
            raise WaitTimeoutError(
                f"counter {self.offset} did not reach {cmp.name} {value} within {timeout} s "
                f"(it holds {seen})",
                timeout_s=float(timeout),
            ) from None

    def __repr__(self) -> str:
        return f"RegionCounter(offset={self.offset})"


class WorkerChipRegion:
    """A region with one chip (see the module docs)."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @property
    def worker(self) -> int:
        """The chip's worker id."""
        return int(self._native.worker)

    @property
    def descriptor(self) -> Tuple[int, int, int, int, int, int]:
        """``(magic_version, region_id, payload_base, payload_bytes, counter_base,
        counter_bytes)``: the six scalars the chip task takes, in the chip's addresses."""
        d = self._native.descriptor
        return (int(d[0]), int(d[1]), int(d[2]), int(d[3]), int(d[4]), int(d[5]))

    @property
    def payload_bytes(self) -> int:
        return self.descriptor[3]

    @property
    def counter_bytes(self) -> int:
        return self.descriptor[5]

    @property
    def is_open(self) -> bool:
        """True until :meth:`free` or the end of its orchestration."""
        return bool(self._native.is_open)

    def add_descriptor(self, args: Any) -> Any:
        """Appends the six descriptor scalars to ``args`` (a :class:`~simpler.TaskArgs`) and
        returns it."""
        for word in self.descriptor:
            args.add_scalar(word)
        return args

    def payload_write(self, offset: int, data: Any) -> None:
        """Writes ``data`` (bytes-like, or a numpy array's bytes) at payload byte ``offset``."""
        if isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data).tobytes()
        elif not isinstance(data, (bytes, bytearray, memoryview)):
            raise ArgumentTypeError(
                f"data must be bytes-like or a numpy array, got {type(data).__name__}", arg="data", reason="not bytes"
            )
        self._native.payload_write(_offset(offset), bytes(data))

    def payload_read(self, offset: int, nbytes: int) -> bytes:
        """``nbytes`` payload bytes at ``offset``."""
        return bytes(self._native.payload_read(_offset(offset), _offset(nbytes, "nbytes")))

    def counter(self, offset: int) -> RegionCounter:
        """The counter at byte ``offset`` (a multiple of 4) of the counter area."""
        return RegionCounter(self, _offset(offset))

    def free(self) -> None:
        """Ends the host's use: later calls raise ``WorkerStateError``. Idempotent."""
        self._native.free()

    def __repr__(self) -> str:
        state = "open" if self.is_open else "closed"
        return f"WorkerChipRegion(worker={self.worker}, payload_bytes={self.payload_bytes}, counter_bytes={self.counter_bytes}, {state})"


class QueueOpcode(enum.IntEnum):
    """What a queue message is (``docs/comm.md`` §8)."""

    DATA = 1
    STOP = 2
    """The end of the input: the chip's loop ends (input only)."""
    ERROR = 3
    """An error report; the payload is its text."""


class QueueMessage:
    """A message taken from a queue's output: ``opcode`` and ``data`` (bytes)."""

    __slots__ = ("opcode", "data")

    def __init__(self, opcode: QueueOpcode, data: bytes) -> None:
        self.opcode = opcode
        self.data = data

    def array(self, dtype: Any) -> np.ndarray:
        """The data as a 1-D numpy array of ``dtype`` (a copy)."""
        return np.frombuffer(self.data, dtype=dtype).copy()

    def __repr__(self) -> str:
        return f"QueueMessage({self.opcode.name}, {len(self.data)} bytes)"


def _timeout(timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ArgumentTypeError(f"timeout must be a number of seconds, got {timeout!r}", arg="timeout", reason="not a number")
    return float(timeout)


class WorkerChipQueue:
    """The host's end of an L3↔L2 message queue with one chip, from
    :meth:`Orchestrator.create_worker_chip_queue`: :meth:`send` into the chip task's input,
    :meth:`recv` from its output, :meth:`stop` to end its loop. Pass :attr:`descriptor` to the
    chip task (``add_descriptor``); the chip side is ``simpler/queue.h``."""

    def __init__(self, native: Any) -> None:
        self._native = native
        self.region = WorkerChipRegion(native.region)
        """The region the queue lives on."""

    @property
    def depth(self) -> int:
        """Slots of each ring."""
        return int(self._native.depth)

    @property
    def descriptor(self) -> Tuple[int, int, int, int, int, int]:
        """The region's six descriptor words."""
        return self.region.descriptor

    def add_descriptor(self, args: Any) -> Any:
        """Appends the six descriptor scalars to ``args`` and returns it."""
        return self.region.add_descriptor(args)

    def send(self, data: Any, timeout: float = 10.0) -> None:
        """Sends one ``DATA`` message (bytes-like, or a numpy array's bytes), waiting at most
        ``timeout`` seconds for a free slot and arena room (``WaitTimeoutError``)."""
        self._send(QueueOpcode.DATA, data, timeout)

    def send_error(self, text: str, timeout: float = 10.0) -> None:
        """Sends an ``ERROR`` message carrying ``text``."""
        self._send(QueueOpcode.ERROR, str(text).encode(), timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Sends ``STOP``: the chip's loop ends once it takes it."""
        self._send(QueueOpcode.STOP, b"", timeout)

    def _send(self, opcode: QueueOpcode, data: Any, timeout: Any) -> None:
        if isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data).tobytes()
        elif not isinstance(data, (bytes, bytearray, memoryview)):
            raise ArgumentTypeError(
                f"data must be bytes-like or a numpy array, got {type(data).__name__}", arg="data", reason="not bytes"
            )
        self._native.send(int(opcode), bytes(data), _timeout(timeout))

    def recv(self, timeout: float = 10.0) -> QueueMessage:
        """The next output message (released at once), waiting at most ``timeout`` seconds
        (``WaitTimeoutError``; Ctrl-C ends the wait)."""
        opcode, data = self._native.recv(_timeout(timeout))
        return QueueMessage(QueueOpcode(opcode), bytes(data))

    def free(self) -> None:
        """Gives the queue up: a chip task still waiting on it fails at once."""
        self._native.free()

    def __repr__(self) -> str:
        return f"WorkerChipQueue(worker={self.region.worker}, depth={self.depth})"
