//! Task submission (`docs/chip-runtime.md`): check the descriptor, discover the
//! task's dependencies (explicit, creator retention through `owner_task_id`, and the tensor
//! map's RAW/WAW/WAR conflicts), wait for room in its ring (task slot, dependency pool,
//! output heap) with back-pressure, write the slot, wire the producers and, when nothing is
//! left to wait for, make it ready.
//!
//! Only a task with runtime-allocated (heap) outputs is pinned by its scope; any other task
//! leaves its slot once it and its consumers have completed, so a flat orchestration may
//! submit any number of them.
//!
//! Back-pressure never hangs: a ring whose oldest live task (or heap block) is pinned by an
//! open scope can never advance (SCOPE_DEADLOCK / HEAP_RING_DEADLOCK at once, naming the
//! scope, how many tasks it pins and the fix), and a wait with no progress anywhere in the
//! run for the watchdog period fails with the ring's error code.

use std::sync::atomic::Ordering;

use simpler_abi::*;

use super::orchestrator::Orchestrator;
use super::ring::{HEAP_ALIGN, RING_COUNT};
use super::task::{lane_core_type, local_of, ring_of, Shape, TaskId, LANE_BITS, NO_TASK};
use super::tensormap::{ConflictKind, Region};
use crate::trace::{self, NONE32};

/// What `check_desc` resolved.
struct Kind {
    shape: Shape,
    kernels: [u64; 3],
    func_ids: [i32; 3],
    lanes: u8,
    block_num: u32,
    sync_start: bool,
}

/// Which resource a back-pressure wait is for.
#[derive(Clone, Copy)]
enum Resource {
    Slot,
    DepPool(u32),
    Heap(u64),
}

impl<'a> Orchestrator<'a> {
    fn check_desc(&self, d: &TaskDesc) -> Result<Kind, i32> {
        if d.tensor_count as usize > MAX_TASK_TENSORS
            || d.scalar_count as usize > MAX_TASK_SCALARS
            || d.dep_count as usize > MAX_TASK_DEPS
        {
            return Err(self.invalid(|| {
                format!(
                    "a task has {} tensors, {} scalars and {} dependencies; the limits are {MAX_TASK_TENSORS}, {MAX_TASK_SCALARS} and {MAX_TASK_DEPS}",
                    d.tensor_count, d.scalar_count, d.dep_count
                )
            }));
        }
        if !(1..=i16::MAX as i32).contains(&d.block_num) {
            return Err(self.invalid(|| format!("block_num {} is outside 1..=32767", d.block_num)));
        }
        let mut ids = d.kernel_ids;
        let used = ids.iter().filter(|&&f| f != NO_KERNEL).count();
        if used == 1 && ids[LANE_AIV1] != NO_KERNEL {
            // A task that uses only AIV1 is an AIV task.
            ids.swap(LANE_AIV0, LANE_AIV1);
        }
        let shape = match (used, ids[LANE_AIC] != NO_KERNEL) {
            (0, _) => Shape::Dummy,
            (1, true) => Shape::Aic,
            (1, false) => Shape::Aiv,
            _ => Shape::Mix,
        };
        let mut kind = Kind {
            shape,
            kernels: [0; 3],
            func_ids: [-1; 3],
            lanes: 0,
            block_num: d.block_num as u32,
            sync_start: d.flags & TASK_FLAG_REQUIRE_SYNC_START != 0,
        };
        for (lane, &func) in ids.iter().enumerate() {
            if func == NO_KERNEL {
                continue;
            }
            let want = lane_core_type(lane);
            let idx = usize::try_from(func)
                .ok()
                .filter(|&i| i < self.shared.func_addrs.len());
            let Some(idx) = idx else {
                return Err(self
                    .invalid(|| format!("func id {func} is outside the callable's kernel table")));
            };
            let (addr, registered) = (self.shared.func_addrs[idx], self.shared.func_types[idx]);
            if addr == 0 || registered == 0 {
                return Err(
                    self.invalid(|| format!("no kernel is registered under func id {func}"))
                );
            }
            if registered != want as u32 + 1 {
                let lane_name = ["aic", "aiv0", "aiv1"][lane];
                let is =
                    CoreType::from_raw(registered - 1).map_or("an unknown core type", |t| t.name());
                return Err(self.invalid(|| format!("func id {func} is registered for core type {is} but was submitted on the {lane_name} lane, which runs {want} kernels")));
            }
            kind.kernels[lane] = addr;
            kind.func_ids[lane] = func;
            kind.lanes |= LANE_BITS[lane];
        }
        if kind.sync_start {
            let limit = match shape {
                Shape::Aiv => self.clusters * 2,
                _ => self.clusters,
            };
            if kind.block_num > limit || shape == Shape::Dummy {
                let n = kind.block_num;
                return Err(self.fail(ORCH_REQUIRE_SYNC_START_INVALID, || {
                    format!("require_sync_start with {n} blocks of a {shape:?} task; at most {limit} can start together")
                }));
            }
        }
        Ok(kind)
    }

    /// Submits one task; returns 0 or an orchestrator error code.
    pub(crate) fn submit(&mut self, d: &TaskDesc, outputs: Option<&mut TaskOutputs>) -> i32 {
        if let Some(code) = self.shared.errors.code() {
            return code;
        }
        self.submit_calls += 1;
        self.submitting = Some((self.submit_calls, d.kernel_ids));
        let t0 = trace::start(&self.tracer, TRACE_LEVEL_ORCHESTRATOR);
        let rc = match self.try_submit(d, outputs) {
            Ok(()) => 0,
            Err(code) => code,
        };
        if let (Some(t), Some(t0)) = (self.tracer.as_mut(), t0) {
            t.phase(TRACE_PHASE_SUBMIT, trace::NONE64, NONE32, t0);
        }
        self.submitting = None;
        rc
    }

    fn try_submit(&mut self, d: &TaskDesc, outputs: Option<&mut TaskOutputs>) -> Result<(), i32> {
        let kind = self.check_desc(d)?;
        let n = d.tensor_count as usize;
        let has_outputs = d.tags[..n].contains(&(TensorArgType::Output as u32));
        if has_outputs && outputs.is_none() {
            return Err(self.invalid(|| {
                "the task has OUTPUT arguments but no TaskOutputs to return them in (outputs is NULL)".into()
            }));
        }
        let mut tags = [TensorArgType::Input; MAX_TASK_TENSORS];
        for (i, &raw) in d.tags[..n].iter().enumerate() {
            tags[i] = TensorArgType::from_raw(raw).ok_or_else(|| {
                self.invalid(|| format!("tensor argument {i} has unknown tag {raw}"))
            })?;
        }
        // Output sizes (packed, aligned) and views of existing buffers.
        let mut out_bytes = [0u64; MAX_TASK_TENSORS];
        let mut heap_bytes = 0u64;
        let mut regions: [Option<Region>; MAX_TASK_TENSORS] = [None; MAX_TASK_TENSORS];
        for i in 0..n {
            let t = &d.tensors[i];
            let dt = t
                .data_type()
                .filter(|_| (1..=MAX_TENSOR_DIMS as u32).contains(&t.ndims));
            let Some(dt) = dt else {
                return Err(self.invalid(|| format!("tensor argument {i} has ndims {} and dtype {}; need 1..=5 dims and a known dtype", t.ndims, t.dtype)));
            };
            if tags[i] == TensorArgType::Output {
                let bytes = t
                    .shape()
                    .iter()
                    .try_fold(dt.size_bytes() as u64, |a, &s| a.checked_mul(s))
                    .filter(|&b| b > 0);
                let Some(bytes) = bytes else {
                    return Err(self.invalid(|| {
                        format!(
                            "output argument {i} has an empty or overflowing shape {:?}",
                            t.shape()
                        )
                    }));
                };
                let aligned = bytes.div_ceil(HEAP_ALIGN).checked_mul(HEAP_ALIGN);
                let total = aligned.and_then(|a| heap_bytes.checked_add(a));
                let (Some(aligned), Some(total)) = (aligned, total) else {
                    return Err(self.invalid(|| {
                        format!("output argument {i} of shape {:?} is too large", t.shape())
                    }));
                };
                out_bytes[i] = aligned;
                heap_bytes = total;
                continue;
            }
            let region = Region::of(t, dt.size_bytes() as u64).filter(|r| {
                r.lo >= t.buffer_addr && r.hi <= t.buffer_addr.saturating_add(t.buffer_size)
            });
            if region.is_none() {
                return Err(self.invalid(|| {
                    format!("tensor argument {i} (shape {:?}, start offset {}) reaches outside its buffer of {} bytes", t.shape(), t.start_offset, t.buffer_size)
                }));
            }
            regions[i] = region;
        }
        // A host build has one forward-only ring.
        let r = if self.shared.build {
            0
        } else {
            self.depth().min(RING_COUNT - 1)
        };
        if heap_bytes > self.heaps[r].size {
            let size = self.heaps[r].size;
            return Err(self.fail(ORCH_HEAP_RING_DEADLOCK, || {
                format!("the task's outputs need {heap_bytes} bytes; ring {r}'s heap has {size}")
            }));
        }
        // Only a task with heap outputs is pinned by its scope.
        let scoped = heap_bytes > 0;
        if scoped && self.scope_tasks.len() >= self.scope_tasks_cap {
            let cap = self.scope_tasks_cap;
            return Err(self.fail(ORCH_SCOPE_TASKS_OVERFLOW, || {
                format!("more than {cap} tasks with OUTPUT buffers are held by open scopes")
            }));
        }

        // Dependencies: explicit, creator retention, then the tensor map.
        let mut deps = std::mem::take(&mut self.deps);
        deps.clear();
        self.dep_kinds.clear();
        let t0 = trace::start(&self.tracer, TRACE_LEVEL_ORCHESTRATOR);
        let result = self.collect_deps(d, &tags, &regions, &mut deps);
        if let (Some(t), Some(t0)) = (self.tracer.as_mut(), t0) {
            t.phase(TRACE_PHASE_TENSOR_MAP_LOOKUP, trace::NONE64, NONE32, t0);
        }
        let result = result
            .and_then(|_| self.check_fanin(&deps))
            .and_then(|_| self.wait_for_room(r, Resource::Slot))
            .and_then(|_| self.wait_for_room(r, Resource::DepPool(deps.len() as u32)));
        if let Err(code) = result {
            self.deps = deps;
            return Err(code);
        }

        // Claim the slot and carve the outputs.
        let ring = &self.shared.rings[r];
        let local = ring.next.load(Ordering::Relaxed);
        let id: TaskId = (r as u64) << 32 | u64::from(local);
        let mut heap_at = 0;
        if heap_bytes > 0 {
            match self.wait_for_room(r, Resource::Heap(heap_bytes)).map(|_| {
                let t0 = trace::start(&self.tracer, TRACE_LEVEL_ORCHESTRATOR);
                let at = self.heaps[r].alloc(id, heap_bytes);
                if let (Some(t), Some(t0)) = (self.tracer.as_mut(), t0) {
                    t.phase(TRACE_PHASE_HEAP_ALLOC, id, NONE32, t0);
                }
                at
            }) {
                Ok(Some(addr)) => heap_at = addr,
                Ok(None) => unreachable!("wait_for_room returned with room"),
                Err(code) => {
                    self.deps = deps;
                    return Err(code);
                }
            }
        }
        ring.ensure(local);
        let slot = ring.slot(local);
        // SAFETY: the slot is free — `wait_for_room(Slot)` guaranteed fewer than window − 1
        // live tasks, so this slot's previous task was reclaimed (consumed) — and we are the
        // orchestrator thread; the reference is dropped before the task is published.
        let body = unsafe { slot.body_mut() };
        body.shape = kind.shape;
        body.kernels = kind.kernels;
        body.func_ids = kind.func_ids;
        body.submit = self.submit_calls;
        body.lanes = kind.lanes;
        body.block_num = kind.block_num;
        body.sync_start = kind.sync_start;
        body.tensors.clear();
        body.tensors.extend_from_slice(&d.tensors[..n]);
        body.retained.clear();
        for i in 0..n {
            if tags[i] == TensorArgType::Output {
                let t = &mut body.tensors[i];
                let (shapes, nd) = (t.shapes, t.shape().len());
                let dt = t.data_type().expect("checked above");
                *t = ChipTensor::contiguous(heap_at, &shapes[..nd], dt);
                t.owner_task_id = id;
                heap_at += out_bytes[i];
            }
        }
        body.bind_args(&d.scalars[..d.scalar_count as usize]);
        slot.arm(id, scoped);
        ring.next.store(local.wrapping_add(1), Ordering::Release);
        self.shared.submitted.fetch_add(1, Ordering::AcqRel);
        if scoped {
            self.scope_tasks.push(id);
        }

        // Record this task's accesses for later submissions and tensor-data waits. Inside a
        // MANUAL scope nothing is looked up, but the accesses are still recorded, so that
        // get/set_tensor_data and tasks after the scope see them.
        {
            for i in 0..n {
                if let (Some(region), tag) = (regions[i], tags[i]) {
                    if tag != TensorArgType::NoDep {
                        self.map
                            .record(d.tensors[i].buffer_addr, region, tag.writes(), id);
                    }
                }
            }
        }

        self.trace_task(id, &kind, &deps);
        // Wire: pin each live producer until this task completes; wait for those not done.
        let t0 = trace::start(&self.tracer, TRACE_LEVEL_ORCHESTRATOR);
        let mut edges = 0;
        for &p in &deps {
            let producer = self.shared.task(p);
            if producer.id.load(Ordering::Acquire) != p || !producer.try_pin() {
                continue;
            }
            body.retained.push(p);
            let mut f = producer.fanout.lock();
            if !f.completed {
                f.consumers.push(id);
                slot.fanin.fetch_add(1, Ordering::AcqRel);
                edges += 1;
            }
        }
        body.edges = edges;
        ring.edges_live.fetch_add(edges, Ordering::AcqRel);
        if let (Some(t), Some(t0)) = (self.tracer.as_mut(), t0) {
            t.phase(TRACE_PHASE_DEPENDENCY_WIRING, id, NONE32, t0);
        }
        self.deps = deps;

        if let Some(out) = outputs {
            out.task_id = id;
            out.count = 0;
            for (t, _) in body
                .tensors
                .iter()
                .zip(&tags[..n])
                .filter(|(_, &tag)| tag == TensorArgType::Output)
            {
                out.tensors[out.count as usize] = *t;
                out.count += 1;
            }
        }
        // The coarse clock, advanced here every 64 submits too: the schedulers advance it on
        // every pass, but they may all be parked while the orchestrator submits.
        if self
            .shared
            .submitted
            .load(Ordering::Relaxed)
            .is_multiple_of(64)
        {
            self.shared.tick();
        }
        self.shared.progress_coarse();
        // Publish: drop the wiring guard.
        if slot.fanin.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.make_ready(id);
        }
        Ok(())
    }

    /// Gathers every task the new one must wait for or retain.
    fn collect_deps(
        &mut self,
        d: &TaskDesc,
        tags: &[TensorArgType],
        regions: &[Option<Region>],
        deps: &mut Vec<TaskId>,
    ) -> Result<(), i32> {
        for &dep in &d.deps[..d.dep_count as usize] {
            let issued = self
                .shared
                .rings
                .get(ring_of(dep))
                .is_some_and(|r| r.issued(local_of(dep)));
            if !issued {
                return Err(self.invalid(|| {
                    format!("explicit dependency on task {dep:#x}, which was not submitted before")
                }));
            }
            if !deps.contains(&dep) {
                deps.push(dep);
                self.note_kind(TRACE_EDGE_EXPLICIT);
            }
        }
        let n = d.tensor_count as usize;
        for (i, (t, &tag)) in d.tensors[..n].iter().zip(tags).enumerate() {
            let owner = t.owner_task_id;
            if tag == TensorArgType::Output || owner == NO_OWNER_TASK || owner == NO_TASK {
                continue;
            }
            // Outputs are valid only while the scope of the task that made them is open (and
            // only a task with OUTPUT arguments makes any).
            let live = self
                .shared
                .live_task(owner)
                .is_some_and(|t| t.in_open_scope.load(Ordering::Acquire));
            if !live {
                return Err(self.invalid(|| {
                    format!("tensor argument {i} is an output of task {owner:#x} (its owner_task_id), but that task's scope has ended or it allocated no OUTPUT buffer (outputs are valid only inside their scope)")
                }));
            }
            if !deps.contains(&owner) {
                deps.push(owner);
                // Creator retention: the task uses the owner's output.
                self.note_kind(if tag == TensorArgType::OutputExisting {
                    TRACE_EDGE_WAW
                } else {
                    TRACE_EDGE_RAW
                });
            }
        }
        if !self.manual() {
            let shared = self.shared;
            let traced = self.tracer.is_some();
            let kinds = &mut self.dep_kinds;
            for i in 0..n {
                let (Some(region), tag) = (regions[i], tags[i]) else {
                    continue;
                };
                if tag == TensorArgType::NoDep {
                    continue;
                }
                self.map.conflicts_by_kind(
                    d.tensors[i].buffer_addr,
                    &region,
                    tag.writes(),
                    |t| shared.task(t).is_done(t),
                    deps,
                    |k| {
                        if traced {
                            kinds.push(match k {
                                ConflictKind::Raw => TRACE_EDGE_RAW,
                                ConflictKind::Waw => TRACE_EDGE_WAW,
                                ConflictKind::War => TRACE_EDGE_WAR,
                            });
                        }
                    },
                );
            }
        }
        Ok(())
    }

    /// Notes the kind of the dependency just added (traced runs only).
    fn note_kind(&mut self, kind: u32) {
        if self.tracer.is_some() {
            self.dep_kinds.push(kind);
        }
    }

    /// Level tasks: the task just published (its func ids, submit number and blocks) and
    /// its dependency edges with their kinds.
    fn trace_task(&mut self, id: TaskId, kind: &Kind, deps: &[TaskId]) {
        let Some(t) = trace::at(&mut self.tracer, TRACE_LEVEL_TASKS) else {
            return;
        };
        let f = kind.func_ids.map(|f| if f < 0 { NONE32 } else { f as u32 });
        t.push(
            TRACE_TASK,
            f,
            id,
            self.submit_calls,
            u64::from(kind.block_num),
        );
        for (i, &p) in deps.iter().enumerate() {
            let k = self
                .dep_kinds
                .get(i)
                .copied()
                .unwrap_or(TRACE_EDGE_EXPLICIT);
            t.push(TRACE_EDGE, [k, 0, 0], id, p, 0);
        }
    }

    /// Whether ring `r` has room for `res` right now (without reclaiming).
    fn has_room(&self, r: usize, res: Resource) -> bool {
        let ring = &self.shared.rings[r];
        match res {
            Resource::Slot => ring.has_room(),
            Resource::DepPool(e) => ring.edges_live.load(Ordering::Acquire) + e <= ring.dep_pool,
            Resource::Heap(bytes) => self.heaps[r].fits(bytes),
        }
    }

    /// A host build: the task may wait for at most [`HBG_MAX_FANIN`] producers.
    fn check_fanin(&self, deps: &[TaskId]) -> Result<(), i32> {
        if !self.shared.build {
            return Ok(());
        }
        let waits = deps
            .iter()
            .filter(|&&p| !self.shared.task(p).is_done(p))
            .count();
        if waits > HBG_MAX_FANIN as usize {
            return Err(self.fail(ORCH_DEPENDENCY_OVERFLOW, || {
                format!("the task waits for {waits} producers; host_build_graph allows {HBG_MAX_FANIN} (HBG_MAX_FANIN). Fix: join them through a dummy task, or use tensormap_and_ringbuffer")
            }));
        }
        Ok(())
    }

    /// A host build reclaims nothing and waits for nothing: a graph that does not fit its
    /// one ring fails at once, naming the limit and the variable that raises it.
    fn graph_does_not_fit(&self, res: Resource) -> i32 {
        let ring = &self.shared.rings[0];
        match res {
            Resource::Slot => {
                let window = ring.window;
                self.fail(ORCH_FLOW_CONTROL_DEADLOCK, || {
                    format!("host_build_graph: the graph has more than {} tasks, what its one ring holds; raise PTO2_RING_TASK_WINDOW (runtime_env.ring_task_window, now {window})", window - 1)
                })
            }
            Resource::DepPool(e) => {
                let (live, pool) = (ring.edges_live.load(Ordering::Relaxed), ring.dep_pool);
                self.fail(ORCH_DEPENDENCY_OVERFLOW, || {
                    format!("host_build_graph: the graph's {} dependency edges exceed the pool of {pool}; raise PTO2_RING_DEP_POOL (runtime_env.ring_dep_pool)", live + e)
                })
            }
            Resource::Heap(bytes) => {
                let size = self.heaps[0].size;
                self.fail(ORCH_HEAP_RING_DEADLOCK, || {
                    format!("host_build_graph: the graph's OUTPUTs need {bytes} more bytes of the {size}-byte output heap (nothing is reclaimed mid-run); raise PTO2_RING_HEAP (runtime_env.ring_heap) or the worker's heap_size")
                })
            }
        }
    }

    /// Waits until ring `r` has room for `res`, reclaiming as it goes.
    fn wait_for_room(&mut self, r: usize, res: Resource) -> Result<(), i32> {
        if self.shared.build {
            return match self.has_room(r, res) {
                true => Ok(()),
                false => Err(self.graph_does_not_fit(res)),
            };
        }
        if let Resource::DepPool(edges) = res {
            let pool = self.shared.rings[r].dep_pool;
            if edges > pool {
                return Err(self.fail(ORCH_DEP_POOL_OVERFLOW, || format!("a task with {edges} dependencies exceeds ring {r}'s dependency pool of {pool}")));
            }
        }
        let mut announced = false;
        let mut reclaimed = false;
        // Level orchestrator: when room first ran short (read then, not on every call).
        let mut t0 = None;
        let mut parked = false;
        loop {
            // Reclaiming scans the rings: do it only once room runs short.
            if reclaimed || !self.has_room(r, res) {
                self.reclaim();
            }
            reclaimed = true;
            let ring = &self.shared.rings[r];
            let room = self.has_room(r, res);
            if room {
                if announced {
                    self.bell.cancel_park();
                }
                if let (Some(t), Some(t0), true) = (self.tracer.as_mut(), t0, parked) {
                    t.phase(TRACE_PHASE_BACK_PRESSURE, trace::NONE64, NONE32, t0);
                }
                return Ok(());
            }
            if t0.is_none() {
                t0 = trace::start(&self.tracer, TRACE_LEVEL_ORCHESTRATOR);
            }
            if let Some(code) = self.shared.errors.code() {
                return Err(code);
            }
            // Structural deadlock: rings and heaps reclaim in task order, and the oldest live
            // task (or the owner of the oldest heap block) is pinned by a scope that cannot
            // close while we wait.
            let oldest = match res {
                Resource::Slot => {
                    Some((r as u64) << 32 | u64::from(ring.last_alive.load(Ordering::Relaxed)))
                }
                Resource::Heap(_) => self.heaps[r].oldest_task(),
                Resource::DepPool(_) => None,
            };
            let stuck = oldest.filter(|&t| {
                self.shared
                    .live_task(t)
                    .is_some_and(|slot| slot.in_open_scope.load(Ordering::Acquire))
            });
            let stalled = self.shared.stalled_for_ms() > self.shared.scheduler_timeout_ms;
            if stuck.is_some() || stalled {
                let window = ring.window;
                return Err(match (res, stuck) {
                    (Resource::Slot, Some(t)) => {
                        let holder = self.pinned_by(t);
                        self.fail(ORCH_SCOPE_DEADLOCK, || {
                            format!("ring {r} is full ({} tasks): {holder}; at most {} tasks fit behind the first. Fix: inner scopes, or raise PTO2_RING_TASK_WINDOW ({window})", window - 1, window - 1)
                        })
                    }
                    (Resource::Slot, None) => self.fail(ORCH_FLOW_CONTROL_DEADLOCK, || format!("ring {r}'s task window ({window}) stayed full with no progress in the run")),
                    (Resource::DepPool(e), _) => self.fail(ORCH_DEP_POOL_OVERFLOW, || format!("ring {r}'s dependency pool stayed full ({e} more entries needed) with no progress in the run")),
                    (Resource::Heap(bytes), Some(t)) => {
                        let holder = self.pinned_by(t);
                        self.fail(ORCH_HEAP_RING_DEADLOCK, || {
                            format!("ring {r}'s output heap cannot fit {bytes} more bytes: {holder}. Fix: inner scopes, or raise PTO2_RING_HEAP")
                        })
                    }
                    (Resource::Heap(bytes), None) => self.fail(ORCH_HEAP_RING_DEADLOCK, || {
                        format!("ring {r}'s output heap cannot fit {bytes} bytes and nothing progressed in the run")
                    }),
                });
            }
            if !announced {
                self.bell.prepare_park();
                announced = true;
                continue;
            }
            self.park();
            parked = true;
            announced = false;
        }
    }

    /// Says which open scope pins task `t` and how many tasks of `t`'s ring it pins, for a
    /// deadlock message (which holds 256 bytes: every word counts).
    fn pinned_by(&self, t: TaskId) -> String {
        match self.holder(t) {
            Some(h) => {
                let scope = if h.depth == 0 {
                    "the outer scope (depth 0)".to_string()
                } else {
                    format!(
                        "the depth-{} scope opened after submit #{}",
                        h.depth, h.opened_after
                    )
                };
                let tasks = if h.pinned == 1 { "task" } else { "tasks" };
                format!("{scope} pins {} {tasks} with OUTPUT buffers", h.pinned)
            }
            None => format!("task {t:#x}, with OUTPUT buffers, is pinned by an open scope"),
        }
    }
}
