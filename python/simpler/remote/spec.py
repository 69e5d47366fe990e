"""What a remote child is and where it goes: :class:`RemoteWorkerSpec` (the level-3 worker to
run in a Ray actor, checked when made), :func:`resolve_node` (the actor options that place it
on a node: node id, IP address or custom resource), the driver's ``sys.path`` the actor
adopts, and :func:`_ray`, the one lazy import of Ray the package shares.

It owns no actor, no Ray object and no data: it must not call into Ray beyond building
placement options, and must not import Ray at module level (``import simpler`` never does).
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import InvalidConfigError

__all__ = ["RemoteWorkerSpec", "resolve_node"]

_ISOLATIONS = ("thread", "process")
# Options the spec names itself; `options` may not repeat them.
_RESERVED = ("level", "platform", "device_ids", "device_id", "num_sub_workers", "chip_isolation")
# Resources every Ray node reports; a spec's `node` never names one of them.
_BUILTIN_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")


def _ray() -> Any:
    try:
        import ray
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"remote workers run in Ray actors, and Ray does not import here ({e}); "
            "install it with `pip install ray`"
        ) from None
    return ray


def _is_count(value: Any) -> bool:
    return bool(
        not isinstance(value, bool) and isinstance(value, (int, np.integer)) and value >= 0
    )


# -- the spec ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RemoteWorkerSpec:
    """A level-3 worker to run in a Ray actor, as ``Worker(level=4).add_remote_worker`` takes
    it.

    ``device_ids``: its chips; ``num_sub_workers``, ``chip_isolation``, ``platform`` and
    ``options`` (further ``Worker(level=3, ...)`` options, e.g. ``{"clusters": 2}``) configure
    it as ``Worker(level=3, ...)`` would. ``node`` says where the actor goes: a Ray node id
    (hex), a node's IP address, or a custom resource a node has (tried in that order against
    the cluster's alive nodes); ``None`` lets Ray choose. ``max_restarts``: how many times a
    dead actor is replaced by a new one (the task it was running still fails).
    ``remote_task_timeout_s``: how long one task may run (``None``: the level-4 worker's
    default, 60 s)."""

    device_ids: Sequence[int]
    num_sub_workers: int = 0
    chip_isolation: str = "thread"
    node: Optional[str] = None
    max_restarts: int = 0
    remote_task_timeout_s: Optional[float] = None
    options: Dict[str, Any] = field(default_factory=dict, hash=False)
    platform: str = "sim"

    def __post_init__(self) -> None:
        ids = self.device_ids
        if isinstance(ids, (str, bytes)) or not isinstance(ids, (list, tuple, range)):
            raise InvalidConfigError(f"device_ids must be a list of ints, got {ids!r}")
        checked = []
        for d in ids:
            if not _is_count(d):
                raise InvalidConfigError(f"device_ids must hold ints >= 0, got {d!r}")
            checked.append(int(d))
        if len(set(checked)) != len(checked):
            raise InvalidConfigError(f"device_ids has a device twice: {checked}")
        object.__setattr__(self, "device_ids", tuple(checked))
        if not _is_count(self.num_sub_workers):
            raise InvalidConfigError(
                f"num_sub_workers must be an int >= 0, got {self.num_sub_workers!r}"
            )
        object.__setattr__(self, "num_sub_workers", int(self.num_sub_workers))
        if not checked and self.num_sub_workers == 0:
            raise InvalidConfigError(
                "device_ids is empty and num_sub_workers is 0: a remote worker needs a chip "
                "or a sub worker"
            )
        if self.chip_isolation not in _ISOLATIONS:
            raise InvalidConfigError(
                f"chip_isolation must be 'thread' or 'process', got {self.chip_isolation!r}"
            )
        if self.node is not None and (not isinstance(self.node, str) or not self.node.strip()):
            raise InvalidConfigError(
                "node must be None or a Ray node id, a node IP address or a custom resource "
                f"name, got {self.node!r}"
            )
        if not _is_count(self.max_restarts):
            raise InvalidConfigError(f"max_restarts must be an int >= 0, got {self.max_restarts!r}")
        object.__setattr__(self, "max_restarts", int(self.max_restarts))
        t = self.remote_task_timeout_s
        if t is not None and not (
            isinstance(t, (int, float)) and not isinstance(t, bool) and 0 < t <= MAX_TIMEOUT_S
        ):
            raise InvalidConfigError(
                f"remote_task_timeout_s must be None or in (0, {MAX_TIMEOUT_S:g}] seconds, "
                f"got {t!r}"
            )
        if not isinstance(self.options, dict):
            raise InvalidConfigError(
                "options must be a dict of Worker(level=3) options, got "
                f"{type(self.options).__name__}"
            )
        for key in self.options:
            if not isinstance(key, str):
                raise InvalidConfigError(f"options keys must be option names, got {key!r}")
            if key in ("level", "device_id"):
                raise InvalidConfigError(
                    f"options[{key!r}]: a remote child is a level-3 worker of the chips "
                    "`device_ids`; give those as the spec's own field"
                )
            if key in _RESERVED:
                raise InvalidConfigError(
                    f"options[{key!r}]: give it as the spec's own field ({key}=...)"
                )
        object.__setattr__(self, "options", dict(self.options))
        if not isinstance(self.platform, str) or not self.platform:
            raise InvalidConfigError(f"platform must be a platform name, got {self.platform!r}")

    def worker_config(self) -> Dict[str, Any]:
        """The keyword arguments of the remote ``Worker(level=3, ...)`` (a plain dict)."""
        return {
            "platform": self.platform,
            "device_ids": list(self.device_ids),
            "num_sub_workers": self.num_sub_workers,
            "chip_isolation": self.chip_isolation,
            **{k: v for k, v in self.options.items() if k not in _RESERVED},
        }


# The longest task timeout a child takes, in seconds (about 11.5 days; Ray's waits take no
# more).
MAX_TIMEOUT_S = 1e6


# -- placement ---------------------------------------------------------------------------------


def _custom_resources(node: Dict[str, Any]) -> List[str]:
    return sorted(
        r
        for r in node.get("Resources", {})
        if r not in _BUILTIN_RESOURCES
        and not r.startswith("node:")
        and not r.startswith("accelerator_type:")
    )


def resolve_node(node: Optional[str], nodes: List[Dict[str, Any]]) -> Tuple[Dict[str, Any], str]:
    """The actor options that place it on ``node`` (see :class:`RemoteWorkerSpec`), given the
    cluster's ``ray.nodes()``, and how messages name that place. Raises ``ValueError`` naming
    ``node`` and listing the alive nodes when it matches none of them (or several by IP)."""
    if node is None:
        return {}, "any node"
    alive = [n for n in nodes if n.get("Alive")]
    want = node.strip()
    for n in alive:
        if str(n.get("NodeID", "")).lower() == want.lower():
            return _affinity(n["NodeID"]), want
    by_ip = [n for n in alive if n.get("NodeManagerAddress") == want]
    if len(by_ip) == 1:
        return _affinity(by_ip[0]["NodeID"]), want
    if len(by_ip) > 1:
        ids = ", ".join(str(n["NodeID"])[:12] + "..." for n in by_ip)
        raise ValueError(
            f"node {want!r} is the IP address of {len(by_ip)} alive Ray nodes ({ids}); name "
            "one by its node id or by a custom resource only it has"
        )
    if any(want in _custom_resources(n) for n in alive):
        return {"resources": {want: 0.001}}, want
    dead = [n for n in nodes if not n.get("Alive") and want in (
        str(n.get("NodeID", "")).lower(), n.get("NodeManagerAddress"))]
    listing = "; ".join(
        f"id {n['NodeID']} ip {n.get('NodeManagerAddress')} resources "
        f"[{', '.join(_custom_resources(n)) or 'none'}]"
        for n in alive
    ) or "none"
    why = "is a node that is no longer alive" if dead else (
        "is no alive Ray node's id, IP address or custom resource")
    raise ValueError(f"node {want!r} {why}; the alive nodes: {listing}")


def _affinity(node_id: str) -> Dict[str, Any]:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)}


def _driver_path() -> List[str]:
    """This process's ``sys.path`` (then its ``PYTHONPATH``): the actor puts it in front of
    its own, so functions pickled by reference import there as here."""
    path = [p for p in sys.path if p]
    old = os.environ.get("PYTHONPATH")
    if old:
        path.extend(p for p in old.split(os.pathsep) if p and p not in path)
    return path


def _adopt_path(path: Sequence[str]) -> None:
    """Puts the driver's ``path`` entries this process lacks in front of ``sys.path`` (in
    the driver's order), and in ``PYTHONPATH`` for this process's children."""
    missing = [p for p in path if p not in sys.path]
    sys.path[:0] = missing
    old = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(list(path) + [p for p in old if p not in path])

