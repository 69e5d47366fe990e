//! The orchestrator: runs the user's orchestration entry on the top AICPU thread inside an
//! outer scope and serves its calls, which arrive through the [`OrchOps`] table
//! ([`ops`](super::ops), the C boundary) — task submission ([`submit`](super::submit)),
//! scopes, tensor data access, fatal reports and logging.
//!
//! Scopes (`docs/chip-runtime.md`, scopes): each open scope pins the tasks submitted in it
//! that own runtime-allocated (heap) outputs, whose outputs stay valid until it closes;
//! closing it releases those pins, so its intermediates can be reclaimed. Every other task
//! is reclaimed once it and its consumers have completed, scope or not, and its tensor-map
//! entries are swept with it. A task goes to ring `min(depth, 3)`, the outer scope being
//! depth 0. A MANUAL scope skips the tensor map: only explicit dependencies apply inside it;
//! an AUTO scope may not open inside a MANUAL one.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use simpler_abi::*;
use simpler_device::Doorbell;

use super::ring::{HeapRing, HEAP_ALIGN, RING_COUNT};
use super::state::{RunShared, DEFAULT_TENSOR_WAIT_TIMEOUT_MS};
use super::task::{TaskId, NO_TASK};
use super::tensormap::{Region, TensorMap};
use crate::trace::Tracer;

/// Most nested scopes (`PTO2_MAX_SCOPE_DEPTH`).
pub const MAX_SCOPE_DEPTH: usize = 64;
/// How long one park of the orchestrator lasts before it looks again.
pub(crate) const PARK_SLICE: Duration = Duration::from_millis(20);
/// Tasks reclaimed between two sweeps of the tensor map, per task slot of the four rings:
/// bounds the entries of reclaimed tasks the map may still hold, at one pass over the map
/// (about as many entries as live tasks) per this many reclaimed tasks.
const MAP_SWEEP_PER_SLOTS: usize = 16;
/// Bounds of the tasks reclaimed between two sweeps.
const MAP_SWEEP_TASKS: (u32, u32) = (16, 4096);

/// An open scope.
pub(crate) struct Scope {
    pub(crate) mode: u32,
    /// Index into `scope_tasks` of its first task.
    pub(crate) begin: usize,
    /// Submit calls made before it opened (names the scope in messages).
    pub(crate) opened_after: u64,
}

/// The open scope that pins a task, as a deadlock message names it.
pub(crate) struct Holder {
    /// Depth of the scope (the outer scope is 0).
    pub(crate) depth: usize,
    /// Submit calls made before it opened.
    pub(crate) opened_after: u64,
    /// Tasks of the ring it pins (tasks with heap outputs submitted in it).
    pub(crate) pinned: usize,
}

/// Orchestrator-thread state behind the `runtime` pointer of the ops table.
pub(crate) struct Orchestrator<'a> {
    pub(crate) shared: &'a RunShared,
    pub(crate) bell: Arc<Doorbell>,
    pub(crate) map: TensorMap,
    pub(crate) scopes: Vec<Scope>,
    /// Tasks pinned by the open scopes (those with heap outputs), innermost last.
    pub(crate) scope_tasks: Vec<TaskId>,
    pub(crate) scope_tasks_cap: usize,
    pub(crate) heaps: [HeapRing; RING_COUNT],
    pub(crate) deps: Vec<TaskId>,
    /// `TRACE_EDGE_*` kind of each entry of `deps`, filled only when the run is traced.
    pub(crate) dep_kinds: Vec<u32>,
    /// This thread's trace recorder (`None`: the run records nothing).
    pub(crate) tracer: Option<Tracer>,
    pub(crate) clusters: u32,
    pub(crate) tensor_wait_ms: u64,
    /// Set while a submit is being served: its index in the run and its kernel ids per
    /// lane, for error messages (formatted only when one is raised).
    pub(crate) submitting: Option<(u64, [i32; 3])>,
    /// Submit calls so far (accepted or not).
    pub(crate) submit_calls: u64,
    /// `get/set_tensor_data` calls so far.
    pub(crate) tensor_data_calls: u64,
    /// Unwind payload caught inside an op (a device reset), resumed after the entry returns.
    killed: Option<Box<dyn std::any::Any + Send>>,
    /// Tasks reclaimed since the tensor map was last swept.
    reclaimed_since_sweep: u32,
    /// Reclaimed tasks that trigger a sweep of the tensor map.
    sweep_every: u32,
}

impl<'a> Orchestrator<'a> {
    pub(crate) fn new(
        shared: &'a RunShared,
        bell: Arc<Doorbell>,
        clusters: u32,
    ) -> Orchestrator<'a> {
        let d = &shared.desc;
        let base = d.heap_addr.div_ceil(HEAP_ALIGN) * HEAP_ALIGN;
        let usable = d.heap_size.saturating_sub(base - d.heap_addr);
        // Per-ring heap sizes (aligned down), carved in ring order; all zero = equal split.
        let sizes: [u64; RING_COUNT] = if shared.build {
            // A host build's one ring takes the whole heap, or what ring 0 was given.
            let h = match d.ring_heap[0] {
                0 => usable,
                h => h,
            };
            [h / HEAP_ALIGN * HEAP_ALIGN, 0, 0, 0]
        } else if d.ring_heap.iter().all(|&h| h == 0) {
            [usable / RING_COUNT as u64 / HEAP_ALIGN * HEAP_ALIGN; RING_COUNT]
        } else {
            d.ring_heap.map(|h| h / HEAP_ALIGN * HEAP_ALIGN)
        };
        let mut starts = [0u64; RING_COUNT];
        let mut at = base;
        for r in 0..RING_COUNT {
            starts[r] = at;
            at = at.saturating_add(sizes[r]);
        }
        // A plan larger than the heap gets nothing past its end (the host validates this).
        let end = base.saturating_add(usable);
        let sizes: [u64; RING_COUNT] =
            std::array::from_fn(|r| sizes[r].min(end.saturating_sub(starts[r])));
        let window_total: usize = shared.rings.iter().map(|r| r.window as usize).sum();
        Orchestrator {
            shared,
            bell,
            map: TensorMap::recycled(),
            scopes: Vec::with_capacity(MAX_SCOPE_DEPTH),
            scope_tasks: Vec::new(),
            scope_tasks_cap: window_total,
            heaps: std::array::from_fn(|r| HeapRing::new(starts[r], sizes[r])),
            deps: Vec::with_capacity(64),
            dep_kinds: Vec::new(),
            tracer: None,
            clusters,
            submitting: None,
            submit_calls: 0,
            tensor_data_calls: 0,
            killed: None,
            reclaimed_since_sweep: 0,
            sweep_every: (window_total / MAP_SWEEP_PER_SLOTS)
                .clamp(MAP_SWEEP_TASKS.0 as usize, MAP_SWEEP_TASKS.1 as usize)
                as u32,
            tensor_wait_ms: u64::from(match d.tensor_wait_timeout_ms {
                0 => DEFAULT_TENSOR_WAIT_TIMEOUT_MS,
                t => t,
            }),
        }
    }

    /// Runs the orchestration entry inside an outer scope, closes every scope, then marks
    /// the orchestration done. `call_entry` makes the entry call with a table serving this
    /// orchestrator and returns the entry's code (the C boundary: `ops::call_entry`).
    pub(crate) fn run(&mut self, call_entry: impl FnOnce(&mut Self, u64) -> i32) {
        let entry_addr = self.shared.desc.orch_entry;
        if entry_addr == 0 {
            self.fail(ORCH_INVALID_ARGS, || {
                "the run has no orchestration entry".into()
            });
        } else {
            self.scopes.push(Scope {
                mode: SCOPE_AUTO,
                begin: 0,
                opened_after: 0,
            });
            let rc = call_entry(self, entry_addr);
            if let Some(payload) = self.killed.take() {
                std::panic::resume_unwind(payload);
            }
            // An entry passing on the code a failed submit gave it keeps the first error.
            if rc != 0 && !self.shared.errors.is_fatal() {
                self.fail(ORCH_EXPLICIT_FATAL, || {
                    format!("the orchestration returned {rc}")
                });
            }
            if self.scopes.len() > 1 && !self.shared.errors.is_fatal() {
                // Not an error (the scopes close here), but a latent bug: an open scope keeps
                // its intermediates alive and fills its ring at scale.
                eprintln!(
                    "[orchestration warn] the orchestration returned with {} scope(s) still open; \
                     every simpler_scope_begin needs a simpler_scope_end",
                    self.scopes.len() - 1
                );
            }
            while !self.scopes.is_empty() {
                self.close_scope();
            }
        }
        self.shared.orch_done.store(true, Ordering::Release);
        self.shared.progress();
        self.shared.ring_schedulers();
    }

    /// Latches an orchestrator error; inside a submit the message names the submission
    /// (its index in the run and its kernels), so the author can find it.
    pub(crate) fn fail(&self, code: i32, message: impl FnOnce() -> String) -> i32 {
        match self.submitting {
            Some((n, ids)) => self.shared.errors.orch_fail(code, || {
                let lanes: Vec<String> = ["aic", "aiv0", "aiv1"]
                    .iter()
                    .zip(ids)
                    .filter(|(_, f)| *f != NO_KERNEL)
                    .map(|(lane, f)| format!("{lane} func {f}"))
                    .collect();
                let kernels = if lanes.is_empty() {
                    "dummy task".to_string()
                } else {
                    lanes.join(", ")
                };
                format!("submit #{n} ({kernels}): {}", message())
            }),
            None => self.shared.errors.orch_fail(code, message),
        }
    }

    pub(crate) fn invalid(&self, message: impl FnOnce() -> String) -> i32 {
        self.fail(ORCH_INVALID_ARGS, message)
    }

    /// Runs an op body that may park, so that an unwind from a device reset (which ends
    /// device threads parked in the sim) stops here instead of crossing the orchestration's
    /// C frames, which cannot unwind. The op fails; every later op fails at once; the unwind
    /// resumes once the entry has returned, in Rust.
    pub(super) fn guarded<R>(&mut self, failed: R, body: impl FnOnce(&mut Self) -> R) -> R {
        if self.killed.is_some() {
            return failed;
        }
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(self))) {
            Ok(r) => r,
            Err(payload) => {
                self.killed = Some(payload);
                self.fail(ORCH_EXPLICIT_FATAL, || {
                    "the device was reset during the run".into()
                });
                failed
            }
        }
    }

    /// Depth of the innermost open scope (the outer scope is 0).
    pub(crate) fn depth(&self) -> usize {
        self.scopes.len().saturating_sub(1)
    }

    /// True inside a MANUAL scope.
    pub(crate) fn manual(&self) -> bool {
        self.scopes.last().is_some_and(|s| s.mode == SCOPE_MANUAL)
    }

    pub(super) fn close_scope(&mut self) {
        let Some(scope) = self.scopes.pop() else {
            return;
        };
        for i in scope.begin..self.scope_tasks.len() {
            let id = self.scope_tasks[i];
            self.shared
                .task(id)
                .in_open_scope
                .store(false, Ordering::Release);
            self.shared.unpin(id);
        }
        self.scope_tasks.truncate(scope.begin);
    }

    /// Advances every ring past its consumed tasks and frees their heap blocks; every
    /// `sweep_every` reclaimed tasks (a sixteenth of the task slots, 16..=4096), sweeps the
    /// tensor map of the entries of completed tasks.
    pub(crate) fn reclaim(&mut self) {
        for (r, ring) in self.shared.rings.iter().enumerate() {
            let next = ring.next.load(Ordering::Relaxed);
            let first = ring.last_alive.load(Ordering::Relaxed);
            let mut last = first;
            while last != next && ring.slot(last).consumed.load(Ordering::Acquire) {
                last = last.wrapping_add(1);
            }
            ring.last_alive.store(last, Ordering::Release);
            let alive_from = last;
            self.heaps[r].release_while(|t| (alive_from.wrapping_sub(t as u32) as i32) > 0);
            self.reclaimed_since_sweep = self
                .reclaimed_since_sweep
                .saturating_add(last.wrapping_sub(first));
        }
        if self.reclaimed_since_sweep >= self.sweep_every {
            self.reclaimed_since_sweep = 0;
            let shared = self.shared;
            self.map.sweep(|id| shared.task(id).is_done(id));
        }
    }

    /// The open scope pinning task `id` (a task with heap outputs), if any.
    pub(crate) fn holder(&self, id: TaskId) -> Option<Holder> {
        let at = self.scope_tasks.iter().rposition(|&t| t == id)?;
        let depth = self.scopes.iter().rposition(|s| s.begin <= at)?;
        let scope = &self.scopes[depth];
        let end = self
            .scopes
            .get(depth + 1)
            .map_or(self.scope_tasks.len(), |s| s.begin);
        let pinned = self.scope_tasks[scope.begin..end]
            .iter()
            .filter(|&&t| t >> 32 == id >> 32)
            .count();
        Some(Holder {
            depth,
            opened_after: scope.opened_after,
            pinned,
        })
    }

    /// Parks until something changes (a completion or consumption rings the bell).
    pub(crate) fn park(&self) {
        self.bell.park(PARK_SLICE);
    }

    /// Waits until every task in `tasks` has completed, bounded by the tensor-data timeout.
    fn wait_done(&mut self, tasks: &[TaskId], what: &str) -> Result<(), i32> {
        let start = self.shared.now_ms();
        loop {
            let pending = tasks.iter().find(|&&t| !self.shared.task(t).is_done(t));
            let Some(&t) = pending else { return Ok(()) };
            if self.shared.errors.is_fatal() {
                return Err(self.shared.errors.code().unwrap_or(ORCH_EXPLICIT_FATAL));
            }
            if self.shared.now_ms() - start > self.tensor_wait_ms {
                let (ms, shared) = (self.tensor_wait_ms, self.shared);
                return Err(self.fail(ORCH_TENSOR_WAIT_TIMEOUT, || {
                    format!(
                        "run {}: {what} waited {ms} ms for {} to complete",
                        shared.desc.epoch,
                        super::watchdog::describe(shared, t, None)
                    )
                }));
            }
            self.bell.prepare_park();
            if self.shared.task(t).is_done(t) {
                self.bell.cancel_park();
            } else {
                self.park();
            }
        }
    }

    /// A host build runs no task before the orchestration returns: a tensor-data call that
    /// would wait for one (or reads a runtime allocation, which nothing has written yet)
    /// fails at once, naming the task.
    fn refuse_unrun(&self, waits: &[TaskId], owner: u64, what: &str) -> Result<(), i32> {
        let shared = self.shared;
        let unrun = waits.iter().find(|&&t| !shared.task(t).is_done(t));
        match unrun {
            Some(&t) => Err(self.invalid(|| {
                format!(
                    "{what}: under host_build_graph the tensor's producer, {}, has not run (the graph runs after the orchestration returns); use tensormap_and_ringbuffer",
                    super::watchdog::describe(shared, t, None)
                )
            })),
            None if owner != NO_OWNER_TASK && owner != NO_TASK => Err(self.invalid(|| {
                format!("{what}: under host_build_graph the tensor is a runtime allocation of task {owner:#x} that nothing has written yet; use tensormap_and_ringbuffer")
            })),
            None => Ok(()),
        }
    }

    /// Shared front of get/set tensor data: checks the view and waits for the tasks it
    /// conflicts with (writers for a read; readers and writers for a write).
    pub(super) fn tensor_access(
        &mut self,
        t: Option<&ChipTensor>,
        bytes: u64,
        write: bool,
    ) -> Result<ChipTensor, i32> {
        self.tensor_data_calls += 1;
        let what = if write {
            "set_tensor_data"
        } else {
            "get_tensor_data"
        };
        let Some(&t) = t else {
            return Err(self.invalid(|| format!("{what} was passed a null tensor")));
        };
        let Some(dt) = t
            .data_type()
            .filter(|_| (1..=MAX_TENSOR_DIMS as u32).contains(&t.ndims))
        else {
            return Err(self.invalid(|| {
                format!(
                    "{what}: the tensor has ndims {} and dtype {}",
                    t.ndims, t.dtype
                )
            }));
        };
        let elem = dt.size_bytes() as u64;
        let region = Region::of(&t, elem).filter(|r| {
            r.lo >= t.buffer_addr && r.hi <= t.buffer_addr.saturating_add(t.buffer_size)
        });
        let Some(region) = region else {
            return Err(self.invalid(|| format!("{what}: the view reaches outside its buffer")));
        };
        let need = t.checked_numel().and_then(|n| n.checked_mul(elem));
        if need != Some(bytes) || usize::try_from(bytes).is_err() {
            let need = need.map_or("more than 2^64".to_string(), |n| n.to_string());
            return Err(self.invalid(|| {
                format!("{what}: the host buffer has {bytes} bytes, the view needs {need}")
            }));
        }
        let mut waits = std::mem::take(&mut self.deps);
        waits.clear();
        let owner = t.owner_task_id;
        if owner != NO_OWNER_TASK && owner != NO_TASK {
            if !self
                .shared
                .live_task(owner)
                .is_some_and(|o| o.in_open_scope.load(Ordering::Acquire))
            {
                self.deps = waits;
                return Err(self.invalid(|| {
                    format!("{what}: the tensor is an output of task {owner:#x}, whose scope has ended (outputs are valid only inside their scope)")
                }));
            }
            waits.push(owner);
        }
        let shared = self.shared;
        self.map.conflicts(
            t.buffer_addr,
            &region,
            write,
            |id| shared.task(id).is_done(id),
            &mut waits,
        );
        let r = if self.shared.build {
            self.refuse_unrun(&waits, owner, what)
        } else {
            self.wait_done(&waits, what)
        };
        self.deps = waits;
        r.map(|_| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aicpu::tests::Run;

    /// A dummy task that reads and writes one u32 of its own buffer at `addr`.
    fn touching(addr: u64) -> Box<TaskDesc> {
        // SAFETY: TaskDesc is plain data; all-zero is a valid starting point.
        let mut d: Box<TaskDesc> = Box::new(unsafe { std::mem::zeroed() });
        d.size = std::mem::size_of::<TaskDesc>() as u32;
        d.kernel_ids = [NO_KERNEL; 3];
        d.block_num = 1;
        d.tensors[0] = ChipTensor::contiguous(addr, &[1], DataType::Uint32);
        d.tags[0] = TensorArgType::Inout as u32;
        d.tensor_count = 1;
        d
    }

    #[test]
    fn tasks_without_heap_outputs_leave_open_scopes_with_their_tensor_map_entries() {
        let run = Run::new();
        let shared = RunShared::new(run.mem(), 1, 1, [16; RING_COUNT], [64; RING_COUNT]);
        let mut o = Orchestrator::new(&shared, Arc::new(Doorbell::new()), 1);
        o.scopes.push(Scope {
            mode: SCOPE_AUTO,
            begin: 0,
            opened_after: 0,
        });
        // 1,000 tasks in the open outer scope of a 16-slot ring, each on a buffer no later
        // task touches (dummies: each completes as it is submitted).
        for i in 0..1000u64 {
            assert_eq!(o.submit(&touching(0x10_0000 + 64 * i), None), 0, "task {i}");
            let id = i; // ring 0, local index i
            assert!(shared.task(id).consumed.load(Ordering::Acquire), "task {i}");
            assert!(
                o.map.len() <= 2 * 16 + 16,
                "after task {i}: {} tensor-map entries for 15 live tasks",
                o.map.len()
            );
        }
        assert!(o.scope_tasks.is_empty(), "the scope pins none of them");
        assert!(shared.errors.verdict().is_none());
    }
}
