"""Sub callables of the level-3 tests. They live in a module of their own, imported by the
sub worker processes when cloudpickle loads them by reference (the parent's ``sys.path``
reaches the children as ``PYTHONPATH``), so a child imports only this and numpy."""

import os

import numpy as np


def double_into(args):
    """args[1] = 2 * args[0] (INPUT, OUTPUT_EXISTING)."""
    np.multiply(args[0], 2.0, out=args[1])


def fill_with_scalars(args):
    """args[0] (uint64): every element = scalar 0; element 0 = scalar 1; element 1 = this
    pid; element 2 = 1 when args[0] is writable and args[1] (INPUT) is not."""
    t = args.tensor(0)
    t[:] = args.scalar(0)
    t[0] = args.scalar(1)
    t[1] = os.getpid()
    t[2] = int(t.flags.writeable and not args.tensor(1).flags.writeable)


def describe(args):
    """Writes into args[0] (int64) the first tensor's facts: ndim, shape, strides in elements,
    dtype size, tensor count, scalar count; then sums args[1] into args[0][-1]."""
    out, t = args[0], args[1]
    facts = [t.ndim, *t.shape, *(s // t.itemsize for s in t.strides), t.itemsize]
    facts += [args.tensor_count(), args.scalar_count()]
    out[: len(facts)] = facts
    out[-1] = int(t.sum())


def divide_by_zero(args):
    """Raises ZeroDivisionError."""
    return 1 / 0


def add_one(args):
    """args[0] += 1 (INOUT)."""
    args[0][...] += 1


def slow_fill(args):
    """Sleeps scalar 0 milliseconds, then args[0][:] = 1."""
    import time

    time.sleep(args.scalar(0) / 1000)
    args[0][...] = 1


def hang(args):
    """Never returns; with a tensor argument, first sets its element 0 to 1 (it has started)."""
    import time

    if args.tensor_count():
        args[0][0] = 1
    while True:
        time.sleep(1)


def exit_now(args):
    """Ends the sub worker process with status 5, mid-task."""
    os._exit(5)


def raise_system_exit(args):
    """Raises SystemExit(3)."""
    raise SystemExit(3)


def raise_keyboard_interrupt(args):
    """Raises KeyboardInterrupt."""
    raise KeyboardInterrupt


def return_garbage(args):
    """Returns an object that means nothing (the return value is ignored)."""
    return object()


def write_input(args):
    """Writes its INPUT tensor (read-only in the sub worker)."""
    args[0][0] = 1


def decode_scalars(args):
    """args[0] (float32, 6 elements): scalar 0 as f32, scalar 1 as i64 (decoded two ways),
    scalar 0's raw bits, scalar 2 as f16 and as u8."""
    out = args[0]
    out[0] = args.scalar(0, "f32")
    out[1] = args.scalar(1, np.int64)
    out[2] = args.scalar_as(1, "i64")
    out[3] = args.scalar(0)
    out[4] = args.scalar(2, "f16")
    out[5] = args.scalar(3, "u8")
