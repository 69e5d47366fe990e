"""One small local Ray cluster on this machine — a head node and fake extra nodes, all
listening on 127.0.0.1 only — for tests, examples and benchmarks of level 4 (and for trying
``Worker(level=4).add_remote_worker`` without a real cluster). Needs Ray.

Each node carries a custom resource naming it (``host_head``, ``host_a``, ``host_b``) so tests
can place actors on it, a small CPU count and a small object store. Start it once per session
(:func:`get_cluster`, or a session fixture a test module makes with
``cluster = ray_cluster.session_fixture()``); the driver is connected to it
(``ray.init(address=...)``). Extra
nodes for node-removal tests come and go with :meth:`LocalCluster.add_node` /
:meth:`LocalCluster.remove_node`.

Run as a script, it starts the cluster, prints how long that took and the memory of the Ray
processes, and stops it::

    python -m simpler.testing.ray_cluster
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
        while ray.is_initialized() and not any(
            n["Alive"] and n["NodeID"] == node.node_id for n in ray.nodes()
        ):
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
        """Memory (proportional set size) of this machine's Ray processes (raylets, GCS,
        agents, workers and actors; the driver excluded), from /proc."""
        return sum(rss for _pid, _name, rss in _ray_processes())

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        self.cluster.shutdown()
        self._handles.clear()
        self.nodes.clear()


def _pss_bytes(pid: str) -> int:
    """A process's proportional set size (shared pages split among their users), else its
    resident size."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _ray_processes() -> List[Any]:
    """(pid, command, proportional resident bytes) of every process of this machine's Ray
    sessions except this one."""
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
            rss = _pss_bytes(entry)
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
        if ray.is_initialized():  # a connection made elsewhere: this cluster replaces it
            ray.shutdown()
        t0 = time.monotonic()
        head = _node_args(HEAD_RESOURCE)
        # A removed node is declared dead after ~1.5 s of missed health checks (Ray's
        # default: ~15 s), so node-removal tests are quick.
        head["_system_config"] = {
            "health_check_initial_delay_ms": 1000,
            "health_check_period_ms": 500,
            "health_check_timeout_ms": 500,
            "health_check_failure_threshold": 3,
        }
        cluster = Cluster(initialize_head=True, head_node_args=head)
        local = LocalCluster(cluster)
        head_node: Any = cluster.head_node
        local._handles[HEAD_RESOURCE] = head_node
        local.nodes[HEAD_RESOURCE] = head_node.node_id
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
    of the session); its name is the module attribute it is assigned to
    (``cluster = ray_cluster.session_fixture()``). Every module that makes one shares the same
    cluster."""
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
    print(f"Ray processes: {len(procs)}, {local.node_memory_bytes() / 2**20:.0f} MiB (PSS)")
    t0 = time.monotonic()
    stop_cluster()
    print(f"stopped in {time.monotonic() - t0:.2f} s")
