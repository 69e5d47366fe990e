"""Shared memory of a worker's child processes: :class:`SharedBuffer`, what
:meth:`HostWorker.create_buffer <simpler.HostWorker.create_buffer>` returns.

A buffer wraps the native mapping (``simpler._native.SharedMemory``, an anonymous memfd that
the worker's chip children and sub workers map too); this module only views it as numpy
arrays. It allocates nothing itself (the worker's engine does) and knows no worker.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Dict

import numpy as np

from .errors import ArgumentTypeError, InvalidArgumentError
from .types import DataType, shape_tuple

if TYPE_CHECKING:  # pragma: no cover
    from . import _native

__all__ = ["SharedBuffer"]


class SharedBuffer:
    """Shared memory from :meth:`~simpler.HostWorker.create_buffer`: ``nbytes`` zero-filled
    bytes that this process and every child process of the worker map (anonymous memory,
    nothing in the file system). :meth:`array` views it as a numpy array without copying; a
    view (or a slice of one) passed as a task argument reaches a child process in place. The
    memory lives as long as this object or any view of it."""

    backend_kind = "SHARED_MEMFD"

    def __init__(self, native: "_native.SharedMemory") -> None:
        self._native = native

    @property
    def nbytes(self) -> int:
        return int(self._native.nbytes)

    @property
    def identity(self) -> int:
        """The shared region's id, the same in every process that maps it."""
        region = self._native.region
        return -1 if region is None else int(region)

    @property
    def __array_interface__(self) -> Dict[str, Any]:
        return self._native.__array_interface__

    def array(self, shape: Any = None, dtype: Any = np.uint8, byte_offset: int = 0) -> np.ndarray:
        """A writable numpy view of the buffer: ``shape`` elements of ``dtype`` (a simpler
        or numpy dtype) from ``byte_offset``; the whole buffer as bytes by default."""
        try:
            dt = np.dtype(DataType.of(dtype).to_numpy())
        except (ArgumentTypeError, InvalidArgumentError):
            dt = np.dtype(dtype)  # any numpy dtype views the bytes; tasks take simpler's
        raw = np.asarray(self._native)
        if isinstance(byte_offset, bool) or not isinstance(byte_offset, int) or byte_offset < 0:
            raise InvalidArgumentError(f"byte_offset must be an int >= 0, got {byte_offset!r}")
        if shape is None:
            count = (self.nbytes - byte_offset) // dt.itemsize
            shape = (count,)
        dims = shape_tuple(shape, "shape")
        need = math.prod(dims) * dt.itemsize
        if byte_offset + need > self.nbytes:
            raise InvalidArgumentError(
                f"a {dt} view of shape {dims} at byte {byte_offset} needs "
                f"{byte_offset + need} bytes; the buffer has {self.nbytes}"
            )
        return raw[byte_offset : byte_offset + need].view(dt).reshape(dims)

    @property
    def buf(self) -> memoryview:
        """The whole buffer as a writable memoryview (upstream's ``buffer.shm.buf``)."""
        return memoryview(np.asarray(self._native))

    def __repr__(self) -> str:
        return f"SharedBuffer(nbytes={self.nbytes}, identity={self.identity})"
