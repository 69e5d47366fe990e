"""Enumerations and small value types shared by the whole API.

* :class:`DataType` — element types, with the wire values of ``include/simpler/types.h``.
* :class:`ArgDirection` — the direction of a signature entry (``SCALAR``, ``IN``, ``OUT``,
  ``INOUT``): it decides which host tensors are copied to the device and which come back.
* :class:`TensorArgType` — the tag of a tensor in :class:`~simpler.TaskArgs` (upstream names).
* :class:`ArgSpec` — one entry of a callable's signature: name, direction, dtype, shape.
* :func:`scalar_to_uint64` — the 64 raw bits a scalar argument travels as;
  :func:`uint64_to_scalar` — its inverse, the value those bits carry for a dtype.
"""

from __future__ import annotations

import ctypes
import enum
import struct
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from .errors import ArgumentTypeError, InvalidArgumentError, SignatureError

__all__ = [
    "DataType",
    "ArgDirection",
    "TensorArgType",
    "ArgSpec",
    "scalar_to_uint64",
    "uint64_to_scalar",
    "normalize_signature",
]


def _bfloat16_numpy() -> Optional[np.dtype]:
    """numpy's bfloat16 dtype when ml_dtypes is installed (numpy has none of its own)."""
    try:
        import ml_dtypes  # type: ignore[import-not-found]
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


class DataType(enum.IntEnum):
    """Element type of a tensor (values are the ``SimplerDataType`` wire values)."""

    FLOAT32 = 0
    FLOAT16 = 1
    INT32 = 2
    INT16 = 3
    INT8 = 4
    UINT8 = 5
    BFLOAT16 = 6
    INT64 = 7
    UINT64 = 8
    UINT16 = 9
    UINT32 = 10
    FLOAT64 = 11

    @property
    def short_name(self) -> str:
        """The manifest name: ``"f32"``, ``"i64"``, ``"bf16"``..."""
        return _SHORT[self]

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return _ITEMSIZE[self]

    @property
    def is_float(self) -> bool:
        return self in (DataType.FLOAT32, DataType.FLOAT16, DataType.BFLOAT16, DataType.FLOAT64)

    @property
    def is_signed(self) -> bool:
        return self in (DataType.INT8, DataType.INT16, DataType.INT32, DataType.INT64)

    def to_numpy(self) -> np.dtype:
        """The numpy dtype; ``BFLOAT16`` needs the ``ml_dtypes`` package."""
        if self is DataType.BFLOAT16:
            bf16 = _bfloat16_numpy()
            if bf16 is None:
                raise ArgumentTypeError("bfloat16 arrays need the ml_dtypes package")
            return bf16
        return np.dtype(_NUMPY[self])

    @classmethod
    def from_numpy(cls, dtype: Any) -> "DataType":
        """The DataType of a numpy dtype (``InvalidArgumentError`` if there is none)."""
        dt = np.dtype(dtype)
        if dt.name == "bfloat16":
            return cls.BFLOAT16
        for member, name in _NUMPY.items():
            if dt.kind == np.dtype(name).kind and dt.itemsize == np.dtype(name).itemsize:
                return member
        raise InvalidArgumentError(
            f"numpy dtype {dt} has no simpler DataType: chips take "
            + ", ".join(sorted(_NUMPY.values()))
            + " and bfloat16; convert the array first, e.g. with .astype(np.float32)",
            reason="unsupported dtype",
        )

    @classmethod
    def of(cls, value: Any) -> "DataType":
        """Coerces a DataType, a name (``"f32"``, ``"float32"``, ``"FLOAT32"``), a numpy
        dtype or scalar type, or a torch dtype."""
        if isinstance(value, DataType):
            return value
        if isinstance(value, str):
            key = value.strip()
            key = key[len("torch.") :] if key.startswith("torch.") else key
            found = _BY_NAME.get(key.lower())
            if found is None:
                raise ArgumentTypeError(f"unknown dtype name {value!r}")
            return found
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            try:
                return cls(int(value))
            except ValueError:
                raise ArgumentTypeError(f"{value} is not a DataType wire value") from None
        if type(value).__module__.startswith("torch"):
            return cls.of(str(value))
        try:
            dt = np.dtype(value)
        except TypeError:
            raise ArgumentTypeError(f"cannot interpret {value!r} as a DataType") from None
        return cls.from_numpy(dt)


_SHORT = {
    DataType.FLOAT32: "f32",
    DataType.FLOAT16: "f16",
    DataType.INT32: "i32",
    DataType.INT16: "i16",
    DataType.INT8: "i8",
    DataType.UINT8: "u8",
    DataType.BFLOAT16: "bf16",
    DataType.INT64: "i64",
    DataType.UINT64: "u64",
    DataType.UINT16: "u16",
    DataType.UINT32: "u32",
    DataType.FLOAT64: "f64",
}
_ITEMSIZE = {
    DataType.FLOAT32: 4,
    DataType.FLOAT16: 2,
    DataType.INT32: 4,
    DataType.INT16: 2,
    DataType.INT8: 1,
    DataType.UINT8: 1,
    DataType.BFLOAT16: 2,
    DataType.INT64: 8,
    DataType.UINT64: 8,
    DataType.UINT16: 2,
    DataType.UINT32: 4,
    DataType.FLOAT64: 8,
}
_NUMPY = {
    DataType.FLOAT32: "float32",
    DataType.FLOAT16: "float16",
    DataType.INT32: "int32",
    DataType.INT16: "int16",
    DataType.INT8: "int8",
    DataType.UINT8: "uint8",
    DataType.INT64: "int64",
    DataType.UINT64: "uint64",
    DataType.UINT16: "uint16",
    DataType.UINT32: "uint32",
    DataType.FLOAT64: "float64",
}
_BY_NAME = {}
for _d in DataType:
    _BY_NAME[_d.name.lower()] = _d
    _BY_NAME[_SHORT[_d]] = _d
for _d, _n in _NUMPY.items():
    _BY_NAME[_n] = _d
_BY_NAME.update(
    {
        "half": DataType.FLOAT16,
        "float": DataType.FLOAT32,
        "double": DataType.FLOAT64,
        "bf16": DataType.BFLOAT16,
    }
)


class ArgDirection(enum.IntEnum):
    """Direction of a signature entry: which tensors are staged in and copied back."""

    SCALAR = 0
    IN = 1
    OUT = 2
    INOUT = 3

    @property
    def short_name(self) -> str:
        """The manifest name: ``"scalar"``, ``"in"``, ``"out"``, ``"inout"``."""
        return self.name.lower()

    @property
    def is_tensor(self) -> bool:
        return self is not ArgDirection.SCALAR

    @property
    def copies_in(self) -> bool:
        """True when the host copies the tensor to the device before the run."""
        return self in (ArgDirection.IN, ArgDirection.INOUT)

    @property
    def copies_back(self) -> bool:
        """True when the host copies the tensor back after a successful run."""
        return self in (ArgDirection.OUT, ArgDirection.INOUT)

    @classmethod
    def of(cls, value: Any) -> "ArgDirection":
        """Coerces an ArgDirection or a name (``"in"``, ``"IN"``, ``"inout"``...)."""
        if isinstance(value, ArgDirection):
            return value
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                raise ArgumentTypeError(
                    f"unknown direction {value!r} (expected scalar, in, out or inout)"
                ) from None
        raise ArgumentTypeError(f"cannot interpret {value!r} as an ArgDirection")


class TensorArgType(enum.IntEnum):
    """Tag of a tensor in :class:`~simpler.TaskArgs` (``SimplerTensorArgType`` values).

    At level 2 the chip's dependencies come from the C orchestration, so the tags only have
    to agree with the signature: ``INPUT`` for ``IN``, ``OUTPUT``/``OUTPUT_EXISTING`` for
    ``OUT``, ``INOUT`` for ``INOUT``; ``NO_DEP`` goes with any direction.
    """

    INPUT = 0
    OUTPUT = 1
    INOUT = 2
    OUTPUT_EXISTING = 3
    NO_DEP = 4

    @classmethod
    def for_direction(cls, direction: ArgDirection) -> "TensorArgType":
        """The tag scene tests use for a signature direction (upstream's mapping)."""
        return {
            ArgDirection.IN: cls.INPUT,
            ArgDirection.OUT: cls.OUTPUT_EXISTING,
            ArgDirection.INOUT: cls.INOUT,
        }[ArgDirection.of(direction)]

    def agrees_with(self, direction: ArgDirection) -> bool:
        """True when this tag may stand for an argument of ``direction``."""
        if self is TensorArgType.NO_DEP:
            return True
        allowed = {
            ArgDirection.IN: (TensorArgType.INPUT,),
            ArgDirection.OUT: (TensorArgType.OUTPUT, TensorArgType.OUTPUT_EXISTING),
            ArgDirection.INOUT: (TensorArgType.INOUT,),
        }
        return self in allowed.get(direction, ())


@dataclass(frozen=True)
class ArgSpec:
    """One entry of a signature.

    ``shape`` (a tuple of ints) fixes the exact shape a tensor must have; ``None`` accepts
    any shape. Scalars have no shape; their ``dtype`` says how a Python number is encoded.
    """

    name: str
    direction: ArgDirection
    dtype: DataType
    shape: Optional[Tuple[int, ...]] = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SignatureError(f"a signature entry needs a non-empty name, got {self.name!r}")
        object.__setattr__(self, "direction", ArgDirection.of(self.direction))
        object.__setattr__(self, "dtype", DataType.of(self.dtype))
        if self.shape is not None:
            try:
                shape = tuple(int(d) for d in self.shape)
            except (TypeError, ValueError):
                raise SignatureError(
                    f"argument `{self.name}`: shape must be a sequence of ints, got {self.shape!r}"
                ) from None
            if any(d < 0 for d in shape):
                raise SignatureError(f"argument `{self.name}`: negative dimension in {shape}")
            object.__setattr__(self, "shape", shape)

    def to_native(self) -> Tuple[str, str, str, Optional[list]]:
        return (
            self.name,
            self.direction.short_name,
            self.dtype.short_name,
            None if self.shape is None else list(self.shape),
        )

    @classmethod
    def coerce(cls, value: Any, index: int) -> "ArgSpec":
        """An ArgSpec from an ArgSpec, a ``(name, direction, dtype[, shape])`` tuple or a dict
        with those keys."""
        if isinstance(value, ArgSpec):
            return value
        if isinstance(value, dict):
            return cls(**value)
        if isinstance(value, (tuple, list)) and 3 <= len(value) <= 4:
            return cls(*value)
        if isinstance(value, ArgDirection):
            raise SignatureError(
                f"signature entry {index} is a bare ArgDirection; simpler signatures also name "
                "the argument and its dtype: ArgSpec(name, direction, dtype, shape=None)"
            )
        raise SignatureError(
            f"signature entry {index}: expected ArgSpec, (name, direction, dtype[, shape]) or a "
            f"dict, got {value!r}"
        )


def normalize_signature(signature: Iterable[Any]) -> Tuple[ArgSpec, ...]:
    """A tuple of :class:`ArgSpec` from any accepted signature form."""
    if isinstance(signature, (str, bytes)) or not isinstance(signature, Iterable):
        raise SignatureError(f"a signature is a sequence of entries, got {signature!r}")
    return tuple(ArgSpec.coerce(entry, i) for i, entry in enumerate(signature))


_CTYPES_BITS = {
    ctypes.c_float: ("<f", "<I"),
    ctypes.c_double: ("<d", "<Q"),
}


def scalar_item(value: Any) -> Union[int, float, "_native.RawScalar"]:
    """A Python scalar as the native module takes it: an ``int`` or a ``float`` (encoded by
    the host for the signature's dtype), or a :class:`_native.RawScalar` for a ctypes value
    (which keeps its own bits). Raises :class:`~simpler.ArgumentTypeError` for anything else.
    """
    if isinstance(value, ctypes._SimpleCData):  # type: ignore[attr-defined]
        kind = type(value)
        if kind in _CTYPES_BITS:
            fmt_in, fmt_out = _CTYPES_BITS[kind]
            return _native.RawScalar(struct.unpack(fmt_out, struct.pack(fmt_in, value.value))[0])
        raw = value.value
        if not isinstance(raw, int):
            raise ArgumentTypeError(f"cannot pass a {kind.__name__} as a scalar")
        return _native.RawScalar(raw & (2**64 - 1))
    if isinstance(value, (bool, np.bool_, int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    raise ArgumentTypeError(
        f"a scalar must be an int, a float, a numpy scalar or a ctypes value, got "
        f"{type(value).__name__}"
    )


def is_scalar(value: Any) -> bool:
    """True for the objects :func:`scalar_item` converts."""
    return isinstance(
        value,
        (bool, np.bool_, int, np.integer, float, np.floating, ctypes._SimpleCData),  # type: ignore[attr-defined]
    )


def scalar_to_uint64(value: Any, dtype: Union[DataType, str, None] = None) -> int:
    """The 64 raw bits a scalar argument travels as (the host's encoding).

    * ``int`` (and numpy integers, ``bool``): the two's-complement value; with an integer
      ``dtype`` it must fit that type (a negative ``i32`` is sign-extended, as in C); with a
      float ``dtype``, the value converted to it.
    * ``float`` (and numpy floats): the bit pattern of ``dtype`` (``f32`` when ``dtype`` is
      ``None``, as upstream), zero-extended, rounded to nearest even; refused for an integer
      ``dtype``, and out of range when a finite value would round to infinity.
    * ``ctypes`` values keep their own type: ``c_double`` its 64 bits, ``c_float`` its 32,
      integer types their value.
    """
    dt = None if dtype is None else int(DataType.of(dtype))
    return int(_native.encode_scalar(scalar_item(value), dt))


def uint64_to_scalar(bits: int, dtype: Any) -> Union[int, float]:
    """The value the 64 raw bits ``bits`` carry for ``dtype`` (a :class:`DataType`, a name
    such as ``"f32"`` or ``"i64"``, or a numpy dtype): the inverse of
    :func:`scalar_to_uint64` (the host's one encoding decodes them too).

    * an integer dtype: its low bits as that type, an ``int`` (sign-extended for ``i8`` ..
      ``i64``: ``uint64_to_scalar(2**64 - 3, "i64") == -3``);
    * ``f32``, ``f16``, ``bf16``: the low 32 or 16 bits as that type, a ``float``
      (``uint64_to_scalar(scalar_to_uint64(0.5), "f32") == 0.5``).

    Raises :class:`~simpler.ArgumentTypeError` for an unknown dtype or non-int ``bits`` and
    :class:`~simpler.InvalidArgumentError` for ``bits`` outside ``0 .. 2**64 - 1``.
    """
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)):
        raise ArgumentTypeError(f"bits must be an int (0 .. 2**64 - 1), got {bits!r}")
    if not 0 <= int(bits) < 1 << 64:
        raise InvalidArgumentError(f"bits must lie in 0 .. 2**64 - 1, got {bits}")
    return _native.decode_scalar(int(bits), int(DataType.of(dtype)))


def shape_tuple(shape: Any, what: str = "shape") -> Tuple[int, ...]:
    """A tuple of non-negative ints (each below 2**64) from an int or a sequence of ints."""
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    if not isinstance(shape, Sequence) and not isinstance(shape, np.ndarray):
        raise ArgumentTypeError(f"{what} must be a sequence of ints, got {shape!r}")
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise ArgumentTypeError(f"{what} must be a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise InvalidArgumentError(f"{what} has a negative dimension: {dims}")
    if any(d >= 1 << 64 for d in dims):
        raise InvalidArgumentError(f"{what} has a dimension of 2**64 or more: {dims}")
    return dims
