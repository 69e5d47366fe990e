"""The ``Worker(...)`` options every level shares: the platforms and runtime variants a worker
accepts, the chip options and the host ``WorkerConfig`` fields they set, and the ``trace``
option (the trace level of runs whose :class:`~simpler.CallConfig` leaves it off).

The host (``simpler._native.WorkerConfig``) owns every default and checks the values; this
module only names the options. The options of one level are its worker's (``worker.py``,
``isolated_worker.py``, ``host_worker.py``); the options of one run are ``config.py``'s.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

from . import _native
from .errors import InvalidConfigError

__all__ = ["CHIP_OPTIONS", "PLATFORMS", "RUNTIMES", "trace_option"]

PLATFORMS: Tuple[str, ...] = ("sim", "a2a3sim")
"""The platforms a worker runs on: the sim (``"a2a3sim"`` is an alias)."""

RUNTIMES: Tuple[str, ...] = tuple(_native.RUNTIMES)
"""The runtime variants' names, as the host names them (``simpler_host::Runtime``)."""

CHIP_OPTIONS: Dict[str, str] = {
    "clusters": "clusters",
    "aicpu_threads": "aicpu_threads",
    "aicpu_thread_num": "aicpu_thread_num",
    "heap_ring_size": "heap_size",
    "task_window": "task_window",
    "run_timeout_s": "run_timeout_s",
    "launch_depth": "launch_depth",
    "scheduler_timeout_s": "scheduler_timeout_s",
    "op_execute_timeout_s": "op_execute_timeout_s",
    "tensor_data_timeout_s": "tensor_data_timeout_s",
    "sim_memcheck": "sim_memcheck",
    "sim_executor": "sim_executor",
    "runtime": "runtime",
    "enable_sdma": "enable_sdma",
}
"""The options of a chip, each with the host ``WorkerConfig`` field it sets (options left out
take the host's defaults)."""


def trace_option(config: Dict[str, Any]) -> str:
    """Pops a worker's ``trace`` option from ``config``: the trace level of its runs whose
    :class:`~simpler.CallConfig` leaves ``trace_level`` off (``"off"`` when not given;
    ``docs/tracing.md``). ``InvalidConfigError`` naming ``trace`` for a bad level."""
    level = str(config.pop("trace", None) or "off")
    try:
        _native.CallConfig(trace_level=level)
    except Exception as e:
        raise InvalidConfigError(f"trace: {e}") from None
    return level
