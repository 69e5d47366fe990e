"""Zero-copy interop: numpy, the buffer protocol, __dlpack__, and torch when installed."""

import array

import numpy as np
import pytest
import simpler
from simpler import Tensor, as_array


class DLPackOnly:
    """An object that exposes its memory through __dlpack__ and nothing else."""

    def __init__(self, arr):
        self._arr = arr

    def __dlpack__(self, **kwargs):
        return self._arr.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()


def test_as_array_views_without_copying():
    backing = bytearray(16)
    view = as_array(backing)
    view[0] = 7
    assert backing[0] == 7
    floats = array.array("f", [1.0, 2.0, 3.0])
    fv = as_array(floats)
    assert fv.dtype == np.float32 and np.shares_memory(fv, np.frombuffer(floats, np.float32))
    arr = np.arange(6, dtype=np.int32)
    assert as_array(arr) is arr
    assert np.shares_memory(as_array(memoryview(arr)), arr)
    assert np.shares_memory(as_array(DLPackOnly(arr)), arr)


def test_as_array_refuses_what_it_would_have_to_copy():
    for obj in ([1.0, 2.0], 3.0, "abc", {"a": 1}):
        with pytest.raises(TypeError):
            as_array(obj)


def test_make_tensor_arg_keeps_the_memory(chip):
    arr = np.zeros((4, 8), np.float32)
    t = chip.make_tensor_arg(arr)
    assert t.array is arr and t.shape == (4, 8) and t.dtype is simpler.DataType.FLOAT32
    flat = chip.make_tensor_arg(arr, [32], "f32")
    assert flat.shape == (32,) and np.shares_memory(flat.array, arr)
    with pytest.raises(simpler.InvalidArgumentError, match="dtype"):
        chip.make_tensor_arg(arr, dtype="i32")
    with pytest.raises(simpler.InvalidArgumentError, match="elements"):
        chip.make_tensor_arg(arr, [5, 5])
    with pytest.raises(simpler.InvalidArgumentError, match="row-major"):
        chip.make_tensor_arg(arr, strides=[1, 4])


def test_buffer_protocol_and_dlpack_arguments_run_in_place(chip, vadd, rng):
    h = chip.register(vadd)
    n = 4096
    a = array.array("f", rng.random(n, dtype=np.float32).tobytes())
    b = DLPackOnly(rng.random(n, dtype=np.float32))
    out = bytearray(n * 4)
    c = memoryview(out).cast("f")
    chip.run(h, [a, b, c])
    got = np.frombuffer(out, np.float32)
    np.testing.assert_array_equal(got, np.frombuffer(a, np.float32) + b._arr)


def test_a_dlpack_output_is_written_in_place(chip, scale):
    h = chip.register(scale)
    x = np.arange(8, dtype=np.float32)
    holder = DLPackOnly(x)
    view = as_array(holder, writable=True)
    if not view.flags.writeable:
        pytest.skip("this numpy exports read-only DLPack views")
    chip.run(h, [holder, 2.0])
    np.testing.assert_array_equal(x, np.arange(8, dtype=np.float32) * 2)


def test_torch_tensors_are_accepted_without_copying(chip, vadd, scale):
    torch = pytest.importorskip("torch")
    h = chip.register(vadd)
    a = torch.rand(4096)
    b = torch.rand(4096)
    c = torch.zeros(4096)
    chip.run(h, [a, b, c])
    assert torch.equal(c, a + b)
    x = torch.arange(8, dtype=torch.float32)
    chip.run(chip.register(scale), [chip.make_tensor_arg(x), 3.0])
    assert torch.equal(x, torch.arange(8, dtype=torch.float32) * 3)
    with pytest.raises(simpler.InvalidArgumentError, match="dtype"):
        chip.run(h, [a.double(), b, c])
    with pytest.raises(simpler.InvalidArgumentError, match="contiguous"):
        chip.run(h, [a.reshape(64, 64).t(), b.reshape(64, 64), c.reshape(64, 64)])


def test_tensor_views_of_device_buffers_validate_their_extent(chip):
    buf = chip.malloc(256)
    try:
        t = buf.tensor([8, 8], "f32")
        assert t.is_device and t.nbytes == 256 and t.is_contiguous
        with pytest.raises(simpler.InvalidArgumentError):
            buf.tensor([8, 8], "f32", byte_offset=4)
        with pytest.raises(simpler.InvalidArgumentError, match="multiple"):
            buf.tensor([4], "f32", byte_offset=2)
        with pytest.raises(TypeError):
            Tensor(np.zeros(4), 0, [4], None, "f32")
    finally:
        chip.free(buf)
