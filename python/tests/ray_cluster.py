"""One small local Ray cluster for a test session: a head node and fake extra nodes, all on
this machine, listening on 127.0.0.1 only.

Each node carries a custom resource naming it (``host_head``, ``host_a``, ``host_b``) so tests
can place actors on it, a small CPU count and a small object store. Start it once per session
(:func:`get_cluster`, or the ``ray_cluster`` fixture a test module builds with
:func:`session_fixture`); the driver is connected to it (``ray.init(address=...)``). Extra
nodes for node-removal tests come and go with :meth:`LocalCluster.add_node` /
:meth:`LocalCluster.remove_node`.

Run as a script, it starts the cluster, prints how long that took and the memory of the Ray
processes, and stops it::

    python python/tests/ray_cluster.py
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

# No usage-stats prompt or upload from any process of the cluster (they inherit this).
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Ray turns a bootstrap address of 127.0.0.1 into this machine's outward IP (where nothing
# listens: every node here binds 127.0.0.1) unless "cluster mode" is off, which makes it use
# the loopback address throughout. Read by ray at import; `_loopback_only` also sets it on an
# already-imported ray.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

LOOPBACK = "127.0.0.1"
OBJECT_STORE_BYTES = 100 * 1024 * 1024  # per node; Ray's floor is 75 MiB
NODE_CPUS = 1
HEAD_RESOURCE = "host_head"
NODE_RESOURCES = ("host_a", "host_b")


def _loopback_only() -> None:
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def _node_args(resource: str, num_cpus: int = NODE_CPUS) -> Dict[str, Any]:
    return {
        "num_cpus": num_cpus,
        "resources": {resource: 1.0},
        "object_store_memory": OBJECT_STORE_BYTES,
        "node_ip_address": LOOPBACK,
        "include_dashboard": False,
    }


@dataclass
class LocalCluster:
    """A running local cluster: ``cluster`` is Ray's ``cluster_utils.Cluster``; ``nodes`` maps
    each node's custom resource to its Ray node id (hex)."""

    cluster: Any
    nodes: Dict[str, str] = field(default_factory=dict)
    start_s: float = 0.0
    _handles: Dict[str, Any] = field(default_factory=dict)
    _extra: int = 0

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def add_node(self, resource: Optional[str] = None, num_cpus: int = NODE_CPUS) -> str:
        """Adds a node carrying the custom resource ``resource`` (a fresh ``host_extra<n>`` by
        default) and returns that name once the node is alive."""
        import ray

        if resource is None:
            self._extra += 1
            resource = f"host_extra{self._extra}"
        if resource in self._handles:
            raise ValueError(f"the cluster already has a node named {resource!r}")
        node = self.cluster.add_node(**_node_args(resource, num_cpus))
        self._handles[resource] = node
        self.nodes[resource] = node.node_id
        deadline = time.monotonic() + 30
        while ray.is_initialized() and not any(n["Alive"] and n["NodeID"] == node.node_id for n in ray.nodes()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {resource} did not join the cluster within 30 s")
            time.sleep(0.05)
        return resource

    def remove_node(self, resource: str, graceful: bool = False) -> None:
        """Kills every process of the node named ``resource`` (never the head)."""
        if resource == HEAD_RESOURCE:
            raise ValueError("the head node carries the driver; it cannot be removed")
        node = self._handles.pop(resource)
        self.nodes.pop(resource, None)
        self.cluster.remove_node(node, allow_graceful=graceful)

    def node_memory_bytes(self) -> int:
        """Resident memory of this cluster's Ray processes (raylets, GCS, agents, idle
        workers; the driver excluded), from /proc."""
        return sum(rss for _pid, _name, rss in _ray_processes())

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        self.cluster.shutdown()
        self._handles.clear()
        self.nodes.clear()


def _ray_processes() -> List[Any]:
    """(pid, command, resident bytes) of every process of this machine's Ray sessions except
    this one."""
    out = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            if "ray" not in cmd or "ray_cluster.py" in cmd or "pytest" in cmd:
                continue
            with open(f"/proc/{entry}/statm") as f:
                rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            continue
        if any(k in cmd for k in ("raylet", "gcs_server", "ray/", "ray::", "default_worker")):
            out.append((int(entry), cmd[:80], rss))
    return out


_lock = threading.Lock()
_cluster: Optional[LocalCluster] = None


def get_cluster() -> LocalCluster:
    """The session's cluster, started on first use (head + ``host_a`` + ``host_b``) with this
    process connected to it; stopped at exit."""
    global _cluster
    with _lock:
        if _cluster is not None:
            return _cluster
        import ray
        from ray.cluster_utils import Cluster

        _loopback_only()
        t0 = time.monotonic()
        cluster = Cluster(initialize_head=True, head_node_args=_node_args(HEAD_RESOURCE))
        local = LocalCluster(cluster)
        local._handles[HEAD_RESOURCE] = cluster.head_node
        local.nodes[HEAD_RESOURCE] = cluster.head_node.node_id
        for name in NODE_RESOURCES:
            local.add_node(name)
        ray.init(
            address=cluster.address,
            _node_ip_address=LOOPBACK,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
        local.start_s = time.monotonic() - t0
        _cluster = local
        atexit.register(stop_cluster)
        return local


def stop_cluster() -> None:
    """Stops the session's cluster (idempotent)."""
    global _cluster
    with _lock:
        if _cluster is None:
            return
        local, _cluster = _cluster, None
        local.shutdown()


def session_fixture() -> Any:
    """A session-scoped pytest fixture yielding the :class:`LocalCluster` (stopped at the end
    of the session). Use as ``ray_cluster = ray_cluster.session_fixture()`` in a test module."""
    import pytest

    @pytest.fixture(scope="session")
    def ray_cluster() -> Any:
        local = get_cluster()
        try:
            yield local
        finally:
            stop_cluster()

    return ray_cluster


if __name__ == "__main__":
    local = get_cluster()
    import ray

    print(f"cluster of {len(ray.nodes())} nodes started in {local.start_s:.2f} s")
    procs = _ray_processes()
    for pid, cmd, rss in sorted(procs, key=lambda p: -p[2]):
        print(f"  {pid:>7} {rss / 2**20:7.1f} MiB  {cmd}")
    print(f"Ray processes: {len(procs)}, resident {local.node_memory_bytes() / 2**20:.0f} MiB")
    t0 = time.monotonic()
    stop_cluster()
    print(f"stopped in {time.monotonic() - t0:.2f} s")
