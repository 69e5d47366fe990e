"""Enumerations, signatures, scalar encoding, CallConfig and the exception classes."""

import ctypes
import pickle
import struct

import numpy as np
import pytest
import simpler
from simpler import (
    ArgDirection,
    ArgSpec,
    CallConfig,
    DataType,
    RuntimeEnv,
    TensorArgType,
    scalar_to_uint64,
)


def test_data_type_wire_values_match_the_c_header():
    header = (simpler.include_dir() / "simpler" / "types.h").read_text()
    for dt in DataType:
        assert f"SIMPLER_DT_{dt.name} = {dt.value}" in header


@pytest.mark.parametrize(
    "value, expected",
    [
        ("f32", DataType.FLOAT32),
        ("float16", DataType.FLOAT16),
        ("INT64", DataType.INT64),
        (np.uint8, DataType.UINT8),
        (np.dtype("int16"), DataType.INT16),
        ("torch.bfloat16", DataType.BFLOAT16),
        (DataType.UINT32, DataType.UINT32),
    ],
)
def test_data_type_coercion(value, expected):
    assert DataType.of(value) is expected


def test_float64_is_a_data_type_with_one_wire_value():
    assert DataType.of("f64") is DataType.FLOAT64 is DataType.of(np.float64)
    assert DataType.from_numpy(np.float64) is DataType.FLOAT64
    assert DataType.FLOAT64 == 11 and DataType.FLOAT64.itemsize == 8
    assert DataType.FLOAT64.is_float and DataType.FLOAT64.short_name == "f64"
    assert DataType.FLOAT64.to_numpy() == np.float64
    assert simpler.uint64_to_scalar(simpler.scalar_to_uint64(1e-300, "f64"), "f64") == 1e-300


def test_data_type_rejects_unknown_names_and_dtypes():
    with pytest.raises(TypeError):
        DataType.of("complex64")
    with pytest.raises(ValueError):
        DataType.from_numpy(np.complex128)


def test_direction_semantics():
    assert ArgDirection.IN.copies_in and not ArgDirection.IN.copies_back
    assert ArgDirection.OUT.copies_back and not ArgDirection.OUT.copies_in
    assert ArgDirection.INOUT.copies_in and ArgDirection.INOUT.copies_back
    assert not ArgDirection.SCALAR.is_tensor
    assert ArgDirection.of("inout") is ArgDirection.INOUT


def test_tensor_arg_type_values_and_agreement():
    assert [t.value for t in TensorArgType] == [0, 1, 2, 3, 4]
    assert TensorArgType.for_direction(ArgDirection.OUT) is TensorArgType.OUTPUT_EXISTING
    assert TensorArgType.INPUT.agrees_with(ArgDirection.IN)
    assert not TensorArgType.INPUT.agrees_with(ArgDirection.OUT)
    assert TensorArgType.NO_DEP.agrees_with(ArgDirection.INOUT)


def test_arg_spec_forms():
    spec = ArgSpec("a", "in", "f32", [4, 4])
    assert spec.direction is ArgDirection.IN and spec.dtype is DataType.FLOAT32
    assert spec.shape == (4, 4)
    assert ArgSpec.coerce(("b", ArgDirection.OUT, np.float32), 0).shape is None
    assert (
        ArgSpec.coerce({"name": "c", "direction": "scalar", "dtype": "i32"}, 0).dtype
        is DataType.INT32
    )
    with pytest.raises(simpler.SignatureError, match="bare ArgDirection"):
        ArgSpec.coerce(ArgDirection.IN, 0)
    with pytest.raises(simpler.SignatureError):
        ArgSpec("", "in", "f32")


@pytest.mark.parametrize(
    "value, dtype, bits",
    [
        (1.0, None, struct.unpack("<I", struct.pack("<f", 1.0))[0]),
        (1.5, "f32", 0x3FC00000),
        (2, "f32", 0x40000000),
        (-1, "i32", 2**64 - 1),
        (-1, None, 2**64 - 1),
        (255, "u8", 255),
        (True, "u8", 1),
        (1.0, "f16", 0x3C00),
        (1.0, "bf16", 0x3F80),
        (np.float32(0.5), "f32", 0x3F000000),
        (ctypes.c_double(1.0), "f32", 0x3FF0000000000000),
        (ctypes.c_int8(-2), None, 2**64 - 2),
    ],
)
def test_scalar_encoding(value, dtype, bits):
    assert scalar_to_uint64(value, dtype) == bits


def test_scalar_encoding_rejects_out_of_range_and_wrong_kinds():
    with pytest.raises(simpler.InvalidArgumentError):
        scalar_to_uint64(256, "u8")
    with pytest.raises(simpler.InvalidArgumentError):
        scalar_to_uint64(2**31, "i32")
    with pytest.raises(TypeError):
        scalar_to_uint64(1.5, "i32")
    with pytest.raises(TypeError):
        scalar_to_uint64("1")


def test_call_config_validate():
    CallConfig().validate()
    CallConfig(aicpu_thread_num=3, runtime_env=RuntimeEnv(ring_task_window=64)).validate()
    bad = [
        CallConfig(aicpu_thread_num=1),
        CallConfig(aicpu_thread_num=-2),
        CallConfig(runtime_env=RuntimeEnv(ring_task_window=48)),
        CallConfig(runtime_env=RuntimeEnv(ring_heap=100)),
        CallConfig(runtime_env=RuntimeEnv(ring_dep_pool=[4, 4])),
        CallConfig(enable_pmu=2),
    ]
    for config in bad:
        with pytest.raises(ValueError):
            config.validate()


def test_every_error_class_derives_from_its_builtin_and_keeps_its_code():
    expected = {
        "InvalidConfigError": (ValueError, 1),
        "DeviceError": (RuntimeError, 2),
        "LoadError": (RuntimeError, 3),
        "InvalidCallableError": (ValueError, 4),
        "SignatureError": (ValueError, 5),
        "UnknownCallableError": (KeyError, 6),
        "RegistryFullError": (RuntimeError, 7),
        "ArgumentCountError": (TypeError, 8),
        "InvalidArgumentError": (ValueError, 9),
        "RunFailedError": (RuntimeError, 10),
        "DeviceFaultError": (RuntimeError, 11),
        "RunTimeoutError": (TimeoutError, 12),
        "DeviceUnusableError": (RuntimeError, 13),
        "WaitTimeoutError": (TimeoutError, 14),
        "RunUndecidedError": (RuntimeError, 15),
        "LanePoisonedError": (RuntimeError, 16),
        "ReplayMismatchError": (ValueError, 18),
        "StaleRecordingError": (RuntimeError, 19),
        "ArgumentTypeError": (TypeError, 20),
        "WorkerStateError": (RuntimeError, 21),
        "UnsupportedError": (NotImplementedError, 22),
        "BundleError": (ValueError, 30),
        "BundleIOError": (OSError, 31),
        "CompileError": (RuntimeError, 40),
        "CompilerNotFoundError": (FileNotFoundError, 41),
    }
    for name, (builtin, code) in expected.items():
        cls = getattr(simpler, name)
        err = cls("message", cause="because", arg="x")
        assert isinstance(err, simpler.SimplerError) and isinstance(err, builtin), name
        assert err.code == code and err.cause == "because" and err.arg == "x"
        assert str(err) == "message (caused by: because)"
        clone = pickle.loads(pickle.dumps(err))
        assert type(clone) is cls and clone.code == code and clone.details == {"arg": "x"}


def test_key_error_subclass_prints_its_message_unquoted():
    assert str(simpler.UnknownCallableError("no callable")) == "no callable"
