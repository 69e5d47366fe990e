"""Tensors, device buffers and task arguments.

* :func:`as_array` — a zero-copy ``numpy.ndarray`` view of any tensor-like object: a numpy
  array, an object with the buffer protocol (``bytearray``, ``memoryview``, ``array.array``),
  or one with ``__dlpack__`` (a CPU torch tensor, ...). Nothing is ever copied silently: an
  object that cannot be viewed (a list, a GPU tensor) is refused.
* :class:`Tensor` — an argument tensor: either a host array (``Worker.make_tensor_arg``),
  staged to the device and copied back by the callable's signature, or a view of a device
  :class:`Buffer` (``Buffer.tensor``).
* :class:`Buffer` — device memory from ``Worker.malloc``.
* :class:`ChildTensor` — device memory on one chip of a level-3 worker
  (``alloc_child_tensor``).
* :class:`TaskArgs` — a run's arguments: tensors with tags, then scalars.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

import numpy as np

from .errors import ArgumentTypeError, InvalidArgumentError, WorkerStateError
from .types import DataType, TensorArgType, scalar_to_uint64, shape_tuple

if TYPE_CHECKING:  # pragma: no cover
    from .worker import Worker

__all__ = ["as_array", "Tensor", "Buffer", "ChildTensor", "TaskArgs"]


def _dlpack_array(obj: Any, writable: bool) -> np.ndarray:
    try:
        arr = np.from_dlpack(obj)
    except (TypeError, ValueError, RuntimeError, BufferError, AttributeError) as e:
        raise ArgumentTypeError(
            f"cannot view {type(obj).__name__} through __dlpack__ on the host: {e}", cause=str(e)
        ) from e
    if writable and not arr.flags.writeable and hasattr(obj, "__array__"):
        # Older DLPack exchanges mark the view read-only; numpy's own protocol on the same
        # object (torch's `Tensor.__array__` shares memory on the CPU) may be writable.
        alt = np.asarray(obj)
        if alt.flags.writeable and np.shares_memory(alt, arr):
            return alt
    return arr


def as_array(obj: Any, *, writable: bool = False, what: str = "tensor") -> np.ndarray:
    """A numpy view of ``obj``'s memory, without copying.

    ``writable`` asks for a writable view where the object offers both (DLPack producers that
    export read-only); a read-only result is still returned when nothing better exists, and
    the caller decides whether that is an error.

    Raises :class:`~simpler.ArgumentTypeError` when ``obj`` exposes no memory this way.
    """
    if isinstance(obj, np.ndarray):
        return obj
    if isinstance(obj, (Tensor, Buffer)):
        raise ArgumentTypeError(
            f"{what}: expected a host array, got a simpler {type(obj).__name__}"
        )
    try:
        view = memoryview(obj)
    except TypeError:
        view = None
    if view is not None:
        try:
            return np.asarray(view)
        except (TypeError, ValueError) as e:
            raise ArgumentTypeError(
                f"{what}: numpy cannot interpret the buffer of {type(obj).__name__} "
                f"(format {view.format!r})",
                cause=str(e),
            ) from e
    if hasattr(obj, "__dlpack__"):
        return _dlpack_array(obj, writable)
    if hasattr(obj, "__array_interface__"):
        return np.asarray(obj)
    raise ArgumentTypeError(
        f"{what}: expected a numpy array or an object with the buffer protocol or __dlpack__, "
        f"got {type(obj).__name__} (convert it with numpy.asarray(..., dtype=...) first)"
    )


class Buffer:
    """Device memory from :meth:`Worker.malloc`; ``nbytes`` bytes at device ``address``.

    ``tensor(shapes, dtype)`` views it as a tensor argument. Free it with
    :meth:`Worker.free` (or :meth:`free`); a freed buffer refuses every use.
    """

    backend_kind = "DEVICE_MALLOC"

    def __init__(self, worker: "Worker", address: int, nbytes: int) -> None:
        self._worker = worker
        self.address = int(address)
        self.nbytes = int(nbytes)
        self.freed = False

    @property
    def base(self) -> int:
        """Upstream name of :attr:`address`."""
        return self.address

    @property
    def worker(self) -> "Worker":
        return self._worker

    def check_live(self) -> None:
        if self.freed:
            raise WorkerStateError(f"device buffer at {self.address:#x} was freed")

    def tensor(
        self,
        shapes: Any,
        dtype: Any,
        strides: Optional[Sequence[int]] = None,
        byte_offset: int = 0,
    ) -> "Tensor":
        """A tensor view of this buffer (row-major unless ``strides`` say otherwise)."""
        return Tensor(self, byte_offset, shapes, strides, dtype)

    def free(self) -> None:
        """Frees the buffer (same as ``worker.free(buffer)``)."""
        self._worker.free(self)

    def __repr__(self) -> str:
        state = " freed" if self.freed else ""
        return f"Buffer(address={self.address:#x}, nbytes={self.nbytes}{state})"


def _row_major(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


class Tensor:
    """A tensor argument.

    ``Tensor(buffer, byte_offset, shapes, strides, dtype)`` is a view of a device
    :class:`Buffer` (strides in elements; ``None`` for row-major). :meth:`from_host` (what
    :meth:`Worker.make_tensor_arg` returns) wraps a host array, which a run stages to the
    device and copies back according to the callable's signature.
    """

    def __init__(
        self,
        buffer: Buffer,
        byte_offset: int,
        shapes: Any,
        strides: Optional[Sequence[int]],
        dtype: Any,
    ) -> None:
        if not isinstance(buffer, Buffer):
            raise ArgumentTypeError(
                f"Tensor(buffer, ...) needs a device Buffer, got {type(buffer).__name__}; "
                "wrap host arrays with Worker.make_tensor_arg(array)"
            )
        self.buffer: Optional[Buffer] = buffer
        self.array: Optional[np.ndarray] = None
        self.dtype = DataType.of(dtype)
        self.shape = shape_tuple(shapes, "shapes")
        self.byte_offset = int(byte_offset)
        if self.byte_offset < 0 or self.byte_offset % self.dtype.itemsize:
            raise InvalidArgumentError(
                f"byte_offset {self.byte_offset} must be a non-negative multiple of "
                f"{self.dtype.itemsize} (the {self.dtype.short_name} element size)"
            )
        self.strides = (
            _row_major(self.shape) if strides is None else shape_tuple(strides, "strides")
        )
        if len(self.strides) != len(self.shape):
            raise InvalidArgumentError(f"strides {self.strides} do not match shape {self.shape}")
        if self.nbytes and self.byte_offset + self.span_bytes > buffer.nbytes:
            raise InvalidArgumentError(
                f"a {self.dtype.short_name} tensor of shape {self.shape} at byte offset "
                f"{self.byte_offset} needs {self.byte_offset + self.span_bytes} bytes; the "
                f"buffer has {buffer.nbytes}"
            )

    @classmethod
    def from_host(
        cls,
        obj: Any,
        shapes: Any = None,
        dtype: Any = None,
        *,
        strides: Optional[Sequence[int]] = None,
        writable: bool = False,
    ) -> "Tensor":
        """Wraps a host tensor-like object without copying (see :func:`as_array`).

        ``shapes`` may re-view a contiguous array with the same number of elements; ``dtype``,
        when given, must be the array's own, except that ``"bf16"`` also takes a ``uint16``
        array of raw bfloat16 bits (numpy has no bfloat16 without ``ml_dtypes``; the same rule
        as a bf16 ``.npy`` file for ``simpler run``). ``strides`` other than the array's
        row-major ones are refused: the host stages C-contiguous memory only.
        """
        arr = as_array(obj, writable=writable)
        want = None
        if dtype is not None:
            want = DataType.of(dtype)
            have = DataType.from_numpy(arr.dtype)
            if want is DataType.BFLOAT16 and arr.dtype == np.uint16:
                have = want
            if want is not have:
                raise InvalidArgumentError(
                    f"the array's dtype is {arr.dtype} ({have.short_name}), not "
                    f"{want.short_name}; convert it with .astype(...) first",
                    reason="dtype mismatch",
                )
        if shapes is not None:
            shape = shape_tuple(shapes, "shapes")
            if shape != arr.shape:
                if math.prod(shape) != arr.size:
                    raise InvalidArgumentError(
                        f"shapes {shape} hold {math.prod(shape)} elements, the array {arr.size}"
                    )
                if not arr.flags.c_contiguous:
                    raise InvalidArgumentError("only a C-contiguous array can be re-viewed")
                arr = arr.reshape(shape)
        if strides is not None and tuple(strides) != _row_major(arr.shape):
            raise InvalidArgumentError(
                f"strides {tuple(strides)} are not row-major; the host stages C-contiguous "
                "tensors only (pass numpy.ascontiguousarray(...))"
            )
        self = cls.__new__(cls)
        self.buffer = None
        self.array = arr
        self.dtype = want if want is DataType.BFLOAT16 else DataType.from_numpy(arr.dtype)
        self.shape = tuple(int(d) for d in arr.shape)
        self.byte_offset = 0
        self.strides = (
            _row_major(self.shape)
            if arr.flags.c_contiguous
            else tuple(s // arr.itemsize for s in arr.strides)
        )
        return self

    @property
    def is_device(self) -> bool:
        """True for a view of device memory, False for a host array."""
        return self.buffer is not None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def span_bytes(self) -> int:
        """Bytes from the first element to one past the last, following the strides."""
        if self.numel == 0:
            return 0
        last = sum((d - 1) * s for d, s in zip(self.shape, self.strides))
        return (last + 1) * self.dtype.itemsize

    @property
    def is_contiguous(self) -> bool:
        if self.array is not None:
            return bool(self.array.flags.c_contiguous)
        return self.strides == _row_major(self.shape)

    @property
    def shapes(self) -> Tuple[int, ...]:
        """Upstream name of :attr:`shape`."""
        return self.shape

    def __repr__(self) -> str:
        where = (
            f"device {self.buffer.address + self.byte_offset:#x}"
            if self.buffer is not None
            else "host"
        )
        return f"Tensor({where}, shape={self.shape}, dtype={self.dtype.name})"


class ChildTensor:
    """Persistent device memory on one chip of a level-3 worker, from
    ``alloc_child_tensor(worker, shape, dtype)``: ``shape`` elements of ``dtype`` (C order) on
    chip ``worker``. A task argument of chip tasks on that chip (passed in place); filled and
    read back with ``orch.copy_to`` / ``orch.copy_from``."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @property
    def worker(self) -> int:
        """The chip's worker id."""
        return int(self._native.worker)

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(int(d) for d in self._native.shape)

    @property
    def dtype(self) -> DataType:
        return DataType(self._native.dtype)

    @property
    def nbytes(self) -> int:
        return int(self._native.nbytes)

    @property
    def address(self) -> int:
        """The first byte, in the chip's address space."""
        return int(self._native.address)

    def __repr__(self) -> str:
        return (
            f"ChildTensor(worker={self.worker}, shape={self.shape}, dtype={self.dtype.name}, "
            f"address={self.address:#x})"
        )


class TaskArgs:
    """A run's arguments: tensors (each with a :class:`TensorArgType` tag), then scalars.

    Positions follow the callable's signature: the i-th tensor goes to the i-th tensor entry,
    the i-th scalar to the i-th scalar entry. Once a scalar is added, tensors are refused.
    """

    def __init__(self) -> None:
        self._tensors: List[Any] = []
        self._tags: List[TensorArgType] = []
        self._scalars: List[Any] = []

    def add_tensor(self, tensor: Any, tag: Any = TensorArgType.INPUT) -> "TaskArgs":
        """Appends a tensor: a :class:`Tensor`, a :class:`ChildTensor` (level 3), or any host
        tensor-like object (wrapped without copying, as :meth:`Worker.make_tensor_arg` does)."""
        if self._scalars:
            raise InvalidArgumentError(
                "tensors must come before scalars: add_tensor after add_scalar is refused"
            )
        tag = _tag(tag)
        if not isinstance(tensor, (Tensor, ChildTensor)):
            name = f"args[{len(self._tensors)}]"
            try:
                tensor = Tensor.from_host(tensor, writable=tag is not TensorArgType.INPUT)
            except (ArgumentTypeError, InvalidArgumentError) as e:
                raise type(e)(
                    f"argument `{name}` (tensor {len(self._tensors)} of this TaskArgs): {e}",
                    arg=name,
                    reason=str(e),
                ) from None
        self._tensors.append(tensor)
        self._tags.append(tag)
        return self

    def add_scalar(self, value: Any) -> "TaskArgs":
        """Appends a scalar: an int, a float, a numpy scalar or a ctypes value; it is encoded
        by the signature's dtype at run time (see :func:`~simpler.scalar_to_uint64`)."""
        scalar_to_uint64(value)  # type check now, encoding by dtype at run time
        self._scalars.append(value)
        return self

    def tensor(self, i: int) -> Any:
        """The ``i``-th tensor: a :class:`Tensor` or a :class:`ChildTensor`."""
        return self._tensors[i]

    def tag(self, i: int) -> TensorArgType:
        return self._tags[i]

    def set_tag(self, i: int, tag: Any) -> None:
        self._tags[i] = _tag(tag)

    def scalar(self, i: int) -> Any:
        return self._scalars[i]

    def tensor_count(self) -> int:
        return len(self._tensors)

    def scalar_count(self) -> int:
        return len(self._scalars)

    def clear(self) -> None:
        self._tensors.clear()
        self._tags.clear()
        self._scalars.clear()

    def __len__(self) -> int:
        return len(self._tensors) + len(self._scalars)

    def __repr__(self) -> str:
        return f"TaskArgs(tensors={len(self._tensors)}, scalars={len(self._scalars)})"


def _tag(tag: Any) -> TensorArgType:
    if isinstance(tag, TensorArgType):
        return tag
    if isinstance(tag, str):
        try:
            return TensorArgType[tag.upper()]
        except KeyError:
            pass
    elif isinstance(tag, int) and not isinstance(tag, bool):
        try:
            return TensorArgType(tag)
        except ValueError:
            pass
    raise ArgumentTypeError(f"{tag!r} is not a TensorArgType")
