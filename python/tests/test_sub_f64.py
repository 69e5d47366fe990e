"""Sub tasks over float64 arrays: a sub worker process sees an f64 tensor as a float64
array in place, reads one and writes another; the engine orders a second sub task after the
first by the tags."""

import numpy as np
import simpler
from simpler import DataType, TaskArgs, TensorArgType, Worker

IN = TensorArgType.INPUT
OUT = TensorArgType.OUTPUT_EXISTING


def test_a_sub_task_reads_and_writes_float64_arrays():
    def affine(args):  # pickled by value: a closure of this test
        x, y = args[0], args[1]
        assert x.dtype == np.float64 and y.dtype == np.float64, (x.dtype, y.dtype)
        np.multiply(x, 3.0, out=y)
        y += 1e-300  # no float32 holds it

    def minus(args):
        np.subtract(args[1], args[0], out=args[2])

    with Worker(level=3, platform="sim", device_ids=[0], num_sub_workers=2) as w:
        w.init()
        f, g = w.register(affine), w.register(minus)
        buf = w.create_buffer(3 * 64 * 8)
        x, y, z = (buf.array((64,), np.float64, byte_offset=i * 64 * 8) for i in range(3))
        x[:] = np.linspace(-2.5e200, 1 / 3, 64)
        y[:], z[:] = np.nan, np.nan

        def orch(o, _args, _cfg):
            o.submit_sub(f, TaskArgs().add_tensor(x, IN).add_tensor(y, OUT))
            o.submit_sub(g, TaskArgs().add_tensor(x, IN).add_tensor(y, IN).add_tensor(z, OUT))

        w.run(orch)
        want = x * 3.0 + 1e-300
        assert np.array_equal(y, want)
        assert np.array_equal(z, want - x)
        assert TaskArgs().add_tensor(x, IN).tensor(0).dtype is DataType.FLOAT64
    assert simpler.DataType.of("f64") is DataType.FLOAT64
