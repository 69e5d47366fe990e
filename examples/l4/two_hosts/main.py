"""C = A·B split over two remote level-3 hosts of two chips each, reduced by a sub task.

``A`` is 256 × 1024 and ``B`` 1024 × 512 (f32). Host ``h`` (a level-3 worker in a Ray actor on
node ``host_a`` or ``host_b``) computes the partial product ``P_h = A[:, K_h] · B[K_h, :]``
over its half ``K_h`` of the inner dimension, one 128-row block per chip, with the gemm
example's kernels (``examples/l3/multi_chip_gemm``'s 128 × 512 block callable). A sub task
of the level-4 worker — the Python function :func:`reduce` in a sub worker process — adds the
two partials into ``C``, which is compared with an independent float64 numpy reference. The
script prints ``PASS`` and exits 0, or ``FAIL`` and exits 1.

The inputs travel through Ray's object store (each put once); the partials come back into
this process's shared memory, where the sub worker reads them.

Without ``--address`` the script starts a local Ray cluster of three nodes on this machine
(the head and two fake nodes, ``host_a`` and ``host_b``, listening on 127.0.0.1 only) and
stops it at the end; ``--address ADDR`` uses an existing cluster instead (``ray.init(address=
ADDR)``), whose nodes must carry the custom resources ``host_a`` and ``host_b``.

Run: ``python examples/l4/two_hosts/main.py [--address ADDR] [--seed N]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from simpler import ChipCallable, RemoteWorkerSpec, SimplerError, TaskArgs, Worker
from simpler import TensorArgType as T

HERE = Path(__file__).resolve().parent
BLOCK = HERE.parent.parent / "l3" / "multi_chip_gemm"  # the 128 x 512 row-block gemm
HOSTS = ("host_a", "host_b")
CHIPS = 2  # per host
M, K, N = 256, 1024, 512
ROWS = M // CHIPS  # 128: one chip's row block
KH = K // len(HOSTS)  # 512: one host's share of the inner dimension
RTOL = ATOL = 1e-4  # two partial sums of 512 products each: a little looser than one gemm


def reduce(args) -> None:
    """The sub callable: ``C = P_0 + P_1`` (``args`` = P_0, P_1 INPUT, C OUTPUT_EXISTING)."""
    np.add(args[0], args[1], out=args[2])


def run(address: Optional[str] = None, seed: int = 0) -> bool:
    """Runs the example once on a cluster (started here unless ``address`` names one); True
    when ``C`` matches the reference."""
    import ray

    local = None
    if address is None:
        from simpler.testing.ray_cluster import get_cluster

        local = get_cluster()  # head + host_a + host_b on 127.0.0.1
    else:
        ray.init(address=address)
    try:
        return _run_on_cluster(seed)
    finally:
        if local is not None:
            from simpler.testing.ray_cluster import stop_cluster

            stop_cluster()


def _run_on_cluster(seed: int) -> bool:
    block = ChipCallable.from_example(BLOCK)

    def partial(o, args, cfg) -> None:
        """A level-3 orchestration function, run on one host: its chip ``i`` computes row
        block ``i`` of ``P = A_h · B_h`` (``args`` = A_h INPUT, B_h INPUT, P OUTPUT)."""
        a, b, p = (args.tensor(i).array for i in range(3))  # numpy arrays on the host
        for i in range(CHIPS):
            rows = slice(i * ROWS, (i + 1) * ROWS)
            o.submit_next_level(
                gemm,
                TaskArgs()
                .add_tensor(np.ascontiguousarray(a[rows]), T.INPUT)
                .add_tensor(b, T.INPUT)
                .add_tensor(p[rows], T.OUTPUT_EXISTING),
                cfg,
                worker=i,
            )

    with Worker(level=4, num_sub_workers=1) as w:
        hosts = [
            w.add_remote_worker(RemoteWorkerSpec(device_ids=list(range(CHIPS)), node=node))
            for node in HOSTS
        ]
        gemm = w.register(block)  # shipped to both hosts
        part = w.register(partial)  # a level-3 orchestration function, shipped too
        add_up = w.register(reduce)  # run by this worker's sub worker
        t0 = time.perf_counter()
        w.init()
        started = time.perf_counter() - t0

        rng = np.random.default_rng(seed)
        A = rng.uniform(-1, 1, (M, K)).astype(np.float32)
        B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
        f32 = np.dtype(np.float32).itemsize
        shared = w.create_buffer(3 * M * N * f32)  # the sub worker reads these in place
        P = [shared.array((M, N), np.float32, h * M * N * f32) for h in range(len(HOSTS))]
        C = shared.array((M, N), np.float32, 2 * M * N * f32)
        C[:] = np.nan

        def orch(o, _args, cfg) -> None:
            for h, host in enumerate(hosts):
                ks = slice(h * KH, (h + 1) * KH)
                o.submit_next_level(
                    part,
                    TaskArgs()
                    .add_tensor(A[:, ks], T.INPUT)
                    .add_tensor(B[ks], T.INPUT)
                    .add_tensor(P[h], T.OUTPUT_EXISTING),
                    cfg,
                    worker=host,
                )
            # Waits for both hosts: P_0 and P_1 are INPUT here.
            o.submit_sub(
                add_up,
                TaskArgs()
                .add_tensor(P[0], T.INPUT)
                .add_tensor(P[1], T.INPUT)
                .add_tensor(C, T.OUTPUT_EXISTING),
            )

        report = w.run(orch)
        reference = A.astype(np.float64) @ B.astype(np.float64)
        error = np.abs(C.astype(np.float64) - reference)
        bad = int(np.count_nonzero(~(error <= ATOL + RTOL * np.abs(reference))))

    print(
        f"2 hosts x {CHIPS} chips (Ray actors on {', '.join(HOSTS)}; started in {started:.1f} s): "
        f"C = A·B, {M} x {K} · {K} x {N} f32; run {report.run}: {report.tasks} tasks in "
        f"{report.total_time_s:.2f} s"
    )
    print(
        f"check (numpy float64 reference): {bad} of {M * N} elements differ "
        f"(rtol = atol = {RTOL:g}), max |error| {float(np.nanmax(error)):.3g}"
    )
    return bad == 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="an existing Ray cluster's address (ray.init)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    opts = parser.parse_args(argv)
    try:
        passed = run(opts.address, opts.seed)
    except SimplerError as err:
        print(f"FAIL: {type(err).__name__}: {err}")
        return 1
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
