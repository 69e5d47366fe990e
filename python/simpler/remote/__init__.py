"""Level-3 workers in Ray actors: the remote children of a level-4 worker.

A level-4 worker's ``add_remote_worker(RemoteWorkerSpec(...))`` makes a :class:`RayChild`:
one Ray actor (on the node the spec names) that owns a ``Worker(level=3, ...)`` and runs the
level-4 tasks sent to it as level-3 orchestration functions ``f(orch, args, config)``. The
engine drives it through :class:`simpler.next_level.NextLevelChild` from one lane thread.

**Data.** A tensor a task reads is ``ray.put`` once per level-4 run, however many children
read it (the :class:`DataPlane` the Ray children of one level-4 worker share caches its
``ObjectRef``); Ray resolves the refs on the actor's node. Each tensor the task writes comes
back as an ``ObjectRef`` of its own, is copied into the level-4 process's array before
:meth:`RayChild.run` returns, and is recorded in the plane, so a later reader of exactly that
tensor on another Ray child gets the producer's object (moved node to node by Ray).

**Failures.** A task the actor raised fails with :class:`RemoteTaskError` (the remote text and
traceback). An actor that dies (killed, its node removed) is ``ChildDied`` — or, while the
spec's ``max_restarts`` last, is replaced by a new actor (a new *generation*, every callable
registered again) and the task fails with ``ChildRestarted``; tasks are never re-executed. A
task running past ``remote_task_timeout_s`` is ``ChildTimeout``: its actor is killed, and the
next call replaces it (or, with no restarts left, is ``ChildDied``).

**Modules.** :mod:`.spec`: the spec and node placement (no Ray state); :mod:`.actor`: the
actor's body and the translation of Ray's errors; :mod:`.plane`: the data plane;
:mod:`.child`: the driver's side, :class:`RayChild`. Each says what it owns and what it must
not touch.

Ray is imported only when something here needs it; ``import simpler`` never does.
"""

from .actor import RemoteTaskError
from .child import RayChild
from .plane import DataPlane, byte_range
from .spec import RemoteWorkerSpec, resolve_node

__all__ = [
    "DataPlane",
    "RayChild",
    "RemoteTaskError",
    "RemoteWorkerSpec",
    "byte_range",
    "resolve_node",
]
