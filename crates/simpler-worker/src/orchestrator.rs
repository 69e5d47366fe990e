//! The [`Orchestrator`] a user's orchestration function is given: it submits tasks to
//! chips and sub workers, opens and closes scopes, allocates heap-ring and child memory and
//! adds copy tasks — valid only while that function runs (`docs/l3-worker.md` §2, §3, §6).
//!
//! Every submit is checked first (handle, worker ids, each tensor against where it goes:
//! `crate::validate`), then admitted into the run's graph (`crate::admission`). This module
//! owns the orchestrator's validity, scopes and the run's allocations; dispatch is
//! `crate::scheduler`'s (run on this thread when a submit makes a task ready).

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use simpler_abi::DataType;
use simpler_host::CallConfig;

use crate::admission::{admit, memory_key, Submission};
use crate::endpoint::EndpointKind;
use crate::engine::{Engine, State};
use crate::graph::{Target, Work};
use crate::memory::HostMemory;
use crate::registry::CallableHandle;
use crate::run::{open_run, returned, HeapAlloc};
use crate::tensor::{Memory, Tag, TaskArg, TaskArgs, Tensor};
use crate::tensormap::TaskId;
use crate::validate::{self, Dest};
use crate::WorkerError;

/// Open scopes at most, the run's own not counted.
pub(crate) const MAX_SCOPE_DEPTH: usize = 64;

thread_local! {
    /// The workers (by uid) whose orchestration function this thread is running.
    static ORCHESTRATING: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// True when this thread is inside an orchestration function of worker `uid`.
pub(crate) fn in_orchestration(uid: u64) -> bool {
    ORCHESTRATING.with(|o| o.borrow().contains(&uid))
}

/// Marks this thread as running an orchestration of worker `uid` until dropped.
pub(crate) struct OrchestratingGuard(u64);

impl OrchestratingGuard {
    pub(crate) fn enter(uid: u64) -> OrchestratingGuard {
        ORCHESTRATING.with(|o| o.borrow_mut().push(uid));
        OrchestratingGuard(uid)
    }
}

impl Drop for OrchestratingGuard {
    fn drop(&mut self) {
        ORCHESTRATING.with(|o| {
            let mut o = o.borrow_mut();
            if let Some(i) = o.iter().rposition(|u| *u == self.0) {
                o.remove(i);
            }
        });
    }
}

struct OrchCtx {
    engine: Arc<Engine>,
    run: u64,
    open: AtomicBool,
    /// The worker-chip regions made here: closed when the orchestration returns.
    regions: parking_lot::Mutex<Vec<crate::channel::WorkerChipRegion>>,
}

/// What an orchestration function builds its run with. `Clone + Send + Sync`; every method
/// takes `&self`. Valid only while the orchestration function runs: afterwards every call
/// fails with [`WorkerError::InvalidState`].
#[derive(Clone)]
pub struct Orchestrator {
    ctx: Arc<OrchCtx>,
}

impl std::fmt::Debug for Orchestrator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Orchestrator")
            .field("run", &self.ctx.run)
            .field("open", &self.ctx.open.load(Ordering::Acquire))
            .finish()
    }
}

fn bad(arg: &str, reason: String) -> WorkerError {
    WorkerError::InvalidArgument {
        arg: arg.into(),
        reason,
    }
}

fn accesses<'a>(
    prefix: &str,
    args: &'a TaskArgs,
) -> impl Iterator<Item = (String, Tensor, Tag)> + 'a {
    let prefix = prefix.to_string();
    args.args
        .iter()
        .enumerate()
        .filter_map(move |(i, a)| match a {
            TaskArg::Tensor(t, tag) => Some((format!("{prefix}[{i}]"), t.clone(), *tag)),
            TaskArg::Scalar(_) => None,
        })
}

impl Orchestrator {
    /// The orchestrator of run `run`, open.
    pub(crate) fn new(engine: Arc<Engine>, run: u64) -> Orchestrator {
        Orchestrator {
            ctx: Arc::new(OrchCtx {
                engine,
                run,
                open: AtomicBool::new(true),
                regions: Default::default(),
            }),
        }
    }

    fn engine(&self, method: &str) -> Result<&Engine, WorkerError> {
        if !self.ctx.open.load(Ordering::Acquire) {
            return Err(returned(method));
        }
        Ok(&self.ctx.engine)
    }

    /// Submits `handle` (a chip callable) on chip `worker` with `args`.
    ///
    /// # Errors
    /// [`WorkerError::UnknownCallable`]; [`WorkerError::InvalidArgument`] naming `handle` (a
    /// sub callable) or `args[i]` (see `docs/l3-worker.md` §8); [`WorkerError::UnknownWorker`];
    /// [`WorkerError::EndpointFailure`] when the chip's endpoint died;
    /// [`WorkerError::InvalidState`] outside the orchestration function.
    pub fn submit_next_level(
        &self,
        handle: &CallableHandle,
        args: TaskArgs,
        config: &CallConfig,
        worker: usize,
    ) -> Result<TaskId, WorkerError> {
        let engine = self.engine("submit_next_level")?;
        self.check_handle(engine, handle, EndpointKind::Chip)?;
        validate::chip_id(worker, engine.chips, engine.next_kind())?;
        let dest = Dest::Chip {
            w: worker,
            process: engine.chip_processes,
            contiguous: !engine.children,
        };
        chip_signature(engine, handle, "args", &args)?;
        validate::task_args("args", &args, dest)?;
        let accesses = accesses("args", &args).collect();
        admit(
            engine,
            self.ctx.run,
            "submit_next_level",
            Submission {
                what: handle.name().to_string(),
                target: Target::Chip(worker),
                work: Work::Call {
                    key: handle.key(),
                    config: *config,
                    args: vec![args],
                },
                accesses,
            },
        )
    }

    /// Submits `handle` on every chip of `workers` at once (one graph node; member `i` runs
    /// on `workers[i]` with `args_list[i]`; all members start together, once every target
    /// is idle).
    ///
    /// # Errors
    /// As [`submit_next_level`](Orchestrator::submit_next_level), and
    /// [`WorkerError::InvalidArgument`] naming `workers` (empty, repeated ids) or
    /// `args_list` (another length).
    pub fn submit_next_level_group(
        &self,
        handle: &CallableHandle,
        args_list: Vec<TaskArgs>,
        config: &CallConfig,
        workers: &[usize],
    ) -> Result<TaskId, WorkerError> {
        let engine = self.engine("submit_next_level_group")?;
        self.check_handle(engine, handle, EndpointKind::Chip)?;
        validate::chip_group(workers, args_list.len(), engine.chips, engine.next_kind())?;
        let mut all = Vec::new();
        for (k, (args, w)) in args_list.iter().zip(workers).enumerate() {
            let prefix = format!("args_list[{k}]");
            let dest = Dest::Chip {
                w: *w,
                process: engine.chip_processes,
                contiguous: !engine.children,
            };
            chip_signature(engine, handle, &prefix, args)?;
            validate::task_args(&prefix, args, dest)?;
            all.extend(accesses(&prefix, args));
        }
        admit(
            engine,
            self.ctx.run,
            "submit_next_level_group",
            Submission {
                what: handle.name().to_string(),
                target: Target::ChipGroup(workers.to_vec()),
                work: Work::Call {
                    key: handle.key(),
                    config: *config,
                    args: args_list,
                },
                accesses: all,
            },
        )
    }

    /// Submits `handle` (a sub callable) on any idle sub worker.
    ///
    /// # Errors
    /// [`WorkerError::UnknownCallable`]; [`WorkerError::InvalidArgument`] naming `handle` (a
    /// chip callable) or `args[i]` (device memory, or host memory a sub process cannot see);
    /// [`WorkerError::InvalidState`] outside the orchestration function.
    pub fn submit_sub(
        &self,
        handle: &CallableHandle,
        args: TaskArgs,
    ) -> Result<TaskId, WorkerError> {
        self.sub(handle, vec![args], false)
    }

    /// Submits `handle` on `args_list.len()` distinct sub workers at once (one graph node).
    ///
    /// # Errors
    /// As [`submit_sub`](Orchestrator::submit_sub), and [`WorkerError::InvalidArgument`]
    /// naming `args_list` when it is empty or longer than the sub workers there are.
    pub fn submit_sub_group(
        &self,
        handle: &CallableHandle,
        args_list: Vec<TaskArgs>,
    ) -> Result<TaskId, WorkerError> {
        self.sub(handle, args_list, true)
    }

    fn sub(
        &self,
        handle: &CallableHandle,
        args_list: Vec<TaskArgs>,
        group: bool,
    ) -> Result<TaskId, WorkerError> {
        let method = if group {
            "submit_sub_group"
        } else {
            "submit_sub"
        };
        let engine = self.engine(method)?;
        self.check_handle(engine, handle, EndpointKind::Sub)?;
        if group {
            validate::sub_group(args_list.len(), engine.subs)?;
        }
        let dest = Dest::Sub {
            process: engine.sub_processes,
        };
        let mut all = Vec::new();
        for (k, args) in args_list.iter().enumerate() {
            let prefix = if group {
                format!("args_list[{k}]")
            } else {
                "args".to_string()
            };
            validate::task_args(&prefix, args, dest)?;
            all.extend(accesses(&prefix, args));
        }
        let target = if group {
            Target::SubGroup(args_list.len())
        } else {
            Target::Sub
        };
        admit(
            engine,
            self.ctx.run,
            method,
            Submission {
                what: handle.name().to_string(),
                target,
                work: Work::Call {
                    key: handle.key(),
                    config: CallConfig::default(),
                    args: args_list,
                },
                accesses: all,
            },
        )
    }

    fn check_handle(
        &self,
        engine: &Engine,
        handle: &CallableHandle,
        kind: EndpointKind,
    ) -> Result<(), WorkerError> {
        engine.registry.check(handle)?;
        if handle.kind() != kind {
            let (is, use_) = match handle.kind() {
                EndpointKind::Chip => ("a chip callable", "submit_next_level"),
                EndpointKind::Sub => ("a sub callable", "submit_sub"),
            };
            return Err(bad(
                "handle",
                format!("`{}` is {is}; submit it with {use_}", handle.name()),
            ));
        }
        Ok(())
    }

    /// Opens a scope: allocations made until its [`scope_end`](Orchestrator::scope_end)
    /// come from heap `min(depth, 3)` and are released when it ends.
    ///
    /// # Errors
    /// [`WorkerError::InvalidState`] past 64 open scopes, or outside the orchestration.
    pub fn scope_begin(&self) -> Result<(), WorkerError> {
        let engine = self.engine("scope_begin")?;
        let mut st = engine.state.lock();
        let run = open_run(&mut st.runs, self.ctx.run, "scope_begin")?;
        if run.scopes.len() > MAX_SCOPE_DEPTH {
            return Err(WorkerError::InvalidState(format!(
                "scopes nest at most {MAX_SCOPE_DEPTH} deep; close one with scope_end first"
            )));
        }
        run.scopes.push(Vec::new());
        Ok(())
    }

    /// Closes the innermost scope, releasing its allocations (each is reclaimed once every
    /// task naming it is over).
    ///
    /// # Errors
    /// [`WorkerError::InvalidState`] without an open scope, or outside the orchestration.
    pub fn scope_end(&self) -> Result<(), WorkerError> {
        let engine = self.engine("scope_end")?;
        let mut st = engine.state.lock();
        let run = open_run(&mut st.runs, self.ctx.run, "scope_end")?;
        if run.scopes.len() == 1 {
            return Err(WorkerError::InvalidState(
                "scope_end() without a matching scope_begin()".into(),
            ));
        }
        let keys = run.scopes.pop().expect("an open scope");
        for key in keys {
            release(
                engine,
                run.allocs.get_mut(&key).expect("a scope's allocation"),
            );
        }
        Ok(())
    }

    /// Runs `f` inside a scope (closed even when `f` fails).
    ///
    /// # Errors
    /// `f`'s error, or [`scope_begin`](Orchestrator::scope_begin)'s /
    /// [`scope_end`](Orchestrator::scope_end)'s.
    pub fn scope<R>(
        &self,
        f: impl FnOnce(&Orchestrator) -> Result<R, WorkerError>,
    ) -> Result<R, WorkerError> {
        self.scope_begin()?;
        let result = f(self);
        let ended = self.scope_end();
        let value = result?;
        ended.map(|_| value)
    }

    /// A C-order tensor of `shape` × `dtype` from the heap ring (heap `min(scope depth,
    /// 3)`): shared memory a child process sees too, not zeroed, reclaimed once its scope
    /// has ended (or [`free`](Orchestrator::free)) and every task naming it is over.
    ///
    /// # Errors
    /// [`WorkerError::RingFull`] (bigger than a heap, or nothing reclaimed within the
    /// deadlock timeout), [`WorkerError::InvalidArgument`] (`shape`),
    /// [`WorkerError::InvalidState`] outside the orchestration.
    pub fn alloc(&self, shape: &[u64], dtype: DataType) -> Result<Tensor, WorkerError> {
        let engine = self.engine("alloc")?;
        let n = validate::nbytes(shape, dtype)?;
        let depth = {
            let mut st = engine.state.lock();
            open_run(&mut st.runs, self.ctx.run, "alloc")?.scopes.len() - 1
        };
        let heap = depth.min(crate::ring::HEAPS - 1);
        let block = engine.ring.alloc(heap, n)?;
        let memory: Arc<dyn HostMemory> = block.clone();
        let key = memory_key(&memory);
        let tensor = match Tensor::new(Memory::Host(memory), shape, dtype) {
            Ok(t) => t,
            Err(e) => {
                engine.ring.free(heap, block.offset());
                return Err(e);
            }
        };
        let mut st = engine.state.lock();
        let run = match open_run(&mut st.runs, self.ctx.run, "alloc") {
            Ok(run) => run,
            Err(e) => {
                engine.ring.free(heap, block.offset());
                return Err(e);
            }
        };
        run.allocs.insert(
            key,
            HeapAlloc {
                block,
                users: 0,
                released: false,
                reclaimed: false,
            },
        );
        run.scopes.last_mut().expect("the run's scope").push(key);
        Ok(tensor)
    }

    /// Releases `t` early: a heap-ring tensor of this run (reclaimed once the tasks naming
    /// it are over) or a child tensor (freed on its chip once the tasks naming it are over).
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] (`tensor`) for other memory, memory of another run,
    /// or memory already released; [`WorkerError::InvalidState`] outside the orchestration.
    pub fn free(&self, t: &Tensor) -> Result<(), WorkerError> {
        let engine = self.engine("free")?;
        let mut st = engine.state.lock();
        let State { runs, children, .. } = &mut *st;
        let run = open_run(runs, self.ctx.run, "free")?;
        match t.memory() {
            Memory::Host(m) if engine.ring.contains(m.as_ptr() as usize) => {
                let key = memory_key(m);
                match run.allocs.get_mut(&key) {
                    Some(a) if !a.released => {
                        for scope in &mut run.scopes {
                            scope.retain(|k| *k != key);
                        }
                        release(engine, a);
                        Ok(())
                    }
                    Some(_) => Err(bad("tensor", "was released already".into())),
                    None => Err(bad(
                        "tensor",
                        "is heap-ring memory of another run; it was released with that run".into(),
                    )),
                }
            }
            Memory::Host(_) => Err(bad(
                "tensor",
                "is not memory from orch.alloc or alloc_child_tensor; its owner frees it".into(),
            )),
            Memory::Child(c) => {
                let id = (c.worker, c.ptr.addr());
                match children
                    .get_mut(&id)
                    .filter(|r| r.generation == c.generation)
                {
                    Some(rec) if rec.window => Err(bad(
                        "tensor",
                        "is a comm domain's window; release its domain instead".into(),
                    )),
                    Some(rec) if !rec.released => {
                        rec.released = true;
                        if rec.users == 0 {
                            children.remove(&id);
                            engine.free_child(id.0, id.1);
                        }
                        Ok(())
                    }
                    _ => Err(bad(
                        "tensor",
                        format!(
                            "device memory at {:#x} of chip {} is not a live allocation",
                            c.ptr.addr(),
                            c.worker
                        ),
                    )),
                }
            }
        }
    }

    /// Persistent device memory (zeroed) of `shape` × `dtype` on chip `worker`: never
    /// reclaimed by the engine; freed by [`free`](Orchestrator::free),
    /// `Worker::free_child_tensor` or at close.
    ///
    /// # Errors
    /// [`WorkerError::UnknownWorker`], [`WorkerError::InvalidArgument`] (`shape`), the
    /// chip's allocation error, [`WorkerError::InvalidState`] outside the orchestration.
    pub fn alloc_child_tensor(
        &self,
        worker: usize,
        shape: &[u64],
        dtype: DataType,
    ) -> Result<Tensor, WorkerError> {
        let engine = self.engine("alloc_child_tensor")?;
        crate::child_memory::alloc(engine, worker, shape, dtype)
    }

    /// A comm domain of the chips `workers` (rank = position in `workers`, at most 64), each
    /// with a zeroed window of `window_size` bytes (rounded up to 4 KiB) holding `buffers`
    /// (64-byte aligned, in order), all in one shared mapping every member chip maps
    /// (`docs/comm.md`). Everything is checked before anything is made. The domain is
    /// released by [`release_domain`](Orchestrator::release_domain) or when the
    /// orchestration returns, and freed once this run is over, failed or not.
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] naming `name` (empty, or a live domain's),
    /// `workers` (empty, more than 64, a repeated chip), `window_size` (0, too large),
    /// `buffers[i].name` (empty, repeated), `buffers[i].count` (0, too large) or `buffers`
    /// (more bytes than the window); [`WorkerError::UnknownWorker`];
    /// [`WorkerError::InvalidState`] at level 4 or outside the orchestration;
    /// [`WorkerError::EndpointFailure`] for a dead member; a chip's error mapping it.
    pub fn allocate_domain(
        &self,
        name: &str,
        workers: &[usize],
        window_size: u64,
        buffers: &[crate::comm::CommBufferSpec],
    ) -> Result<crate::comm::CommDomain, WorkerError> {
        let engine = self.engine("allocate_domain")?;
        crate::comm::allocate(engine, self.ctx.run, name, workers, window_size, buffers)
    }

    /// Releases `domain`: tasks submitted afterwards may not name its buffers (those
    /// submitted before still run); its memory is freed when this run is over. Releasing
    /// twice is fine.
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] (`domain`) for another run's domain;
    /// [`WorkerError::InvalidState`] outside the orchestration.
    pub fn release_domain(&self, domain: &crate::comm::CommDomain) -> Result<(), WorkerError> {
        let engine = self.engine("release_domain")?;
        crate::comm::release(engine, self.ctx.run, domain)
    }

    /// An L3↔L2 region with chip `worker` (`docs/comm.md` §7): `payload_bytes` of payload
    /// and `counter_bytes` (a positive multiple of 4) of `u32` counters, zeroed, mapped on
    /// the chip; pass `descriptor().words()` to the chip task as six scalars. Usable from
    /// here until freed or until this orchestration returns; its memory is freed once this
    /// run is over.
    ///
    /// # Errors
    /// [`WorkerError::UnknownWorker`]; [`WorkerError::InvalidArgument`] naming
    /// `payload_bytes` (above 1 GiB) or `counter_bytes`; [`WorkerError::EndpointFailure`]
    /// for a dead chip; [`WorkerError::InvalidState`] at level 4 or outside the
    /// orchestration.
    pub fn create_worker_chip_region(
        &self,
        worker: usize,
        payload_bytes: u64,
        counter_bytes: u64,
    ) -> Result<crate::channel::WorkerChipRegion, WorkerError> {
        let engine = self.engine("create_worker_chip_region")?;
        let region =
            crate::channel::create(engine, self.ctx.run, worker, payload_bytes, counter_bytes)?;
        self.keep_region(&region);
        Ok(region)
    }

    /// An L3↔L2 message queue with chip `worker` (`docs/comm.md` §8): input and output
    /// rings of `depth` slots (a power of two up to 2^30) and arenas of
    /// `input_arena_bytes` / `output_arena_bytes` (positive multiples of 64), on one
    /// worker-chip region whose descriptor the chip task takes.
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] naming `depth`, `input_arena_bytes` or
    /// `output_arena_bytes`; as
    /// [`create_worker_chip_region`](Orchestrator::create_worker_chip_region).
    pub fn create_worker_chip_queue(
        &self,
        worker: usize,
        depth: u64,
        input_arena_bytes: u64,
        output_arena_bytes: u64,
    ) -> Result<crate::queue::WorkerChipQueue, WorkerError> {
        let engine = self.engine("create_worker_chip_queue")?;
        let queue = crate::queue::create_queue(
            engine,
            self.ctx.run,
            worker,
            depth,
            input_arena_bytes,
            output_arena_bytes,
        )?;
        self.keep_region(queue.region());
        Ok(queue)
    }

    /// Keeps `region` to close when the orchestration returns (at once if it has already).
    fn keep_region(&self, region: &crate::channel::WorkerChipRegion) {
        self.ctx.regions.lock().push(region.clone());
        if !self.ctx.open.load(Ordering::Acquire) {
            region.free();
        }
    }

    /// A task on `dst`'s chip copying host tensor `src` into child tensor `dst` (same byte
    /// size, both contiguous); ordered like any task (`dst` written, `src` read).
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] naming `dst` or `src`; as
    /// [`submit_next_level`](Orchestrator::submit_next_level) otherwise.
    pub fn copy_to(&self, dst: &Tensor, src: &Tensor) -> Result<TaskId, WorkerError> {
        let engine = self.engine("copy_to")?;
        let (w, ptr) = copy_operands(engine.chips, ("dst", dst), ("src", src))?;
        admit(
            engine,
            self.ctx.run,
            "copy_to",
            Submission {
                what: "copy_to".into(),
                target: Target::Chip(w),
                work: Work::CopyTo {
                    dst: ptr,
                    src: src.clone(),
                },
                accesses: vec![
                    ("dst".into(), dst.clone(), Tag::Output),
                    ("src".into(), src.clone(), Tag::Input),
                ],
            },
        )
    }

    /// A task on `src`'s chip copying child tensor `src` into host tensor `dst`.
    ///
    /// # Errors
    /// As [`copy_to`](Orchestrator::copy_to).
    pub fn copy_from(&self, dst: &Tensor, src: &Tensor) -> Result<TaskId, WorkerError> {
        let engine = self.engine("copy_from")?;
        let (w, ptr) = copy_operands(engine.chips, ("src", src), ("dst", dst))?;
        if let Memory::Host(m) = dst.memory() {
            if m.read_only() {
                return Err(bad("dst", "its host memory is read-only".into()));
            }
        }
        admit(
            engine,
            self.ctx.run,
            "copy_from",
            Submission {
                what: "copy_from".into(),
                target: Target::Chip(w),
                work: Work::CopyFrom {
                    dst: dst.clone(),
                    src: ptr,
                },
                accesses: vec![
                    ("dst".into(), dst.clone(), Tag::Output),
                    ("src".into(), src.clone(), Tag::Input),
                ],
            },
        )
    }

    /// Ends the orchestration: the orchestrator closes, every open scope (and the run's
    /// own) ends, and the run's submission closes. `outcome` is the orchestration
    /// function's; an error fails the run and cancels its undispatched tasks.
    pub(crate) fn finish(&self, outcome: Result<(), String>) {
        self.ctx.open.store(false, Ordering::Release);
        for r in self.ctx.regions.lock().drain(..) {
            r.free();
        }
        let engine = &self.ctx.engine;
        let mut st = engine.state.lock();
        let State { runs, children, .. } = &mut *st;
        let run = runs
            .iter_mut()
            .find(|r| r.id == self.ctx.run)
            .expect("an open run is in flight");
        for key in std::mem::take(&mut run.scopes).into_iter().flatten() {
            release(
                engine,
                run.allocs.get_mut(&key).expect("a scope's allocation"),
            );
        }
        let domains = run.domains.clone();
        if let Err(e) = outcome {
            run.record_error(&WorkerError::Orchestration(e));
            let why = "the orchestration failed";
            run.cancelled = Some(why.into());
            let cancelled = run.graph.cancel_undispatched(why);
            engine.tasks_over(run, children, &cancelled);
        }
        run.closed = true;
        crate::comm::release_all(&mut st, &domains);
        crate::scheduler::advance(engine, &mut st);
    }
}

/// Checks `args` (named `prefix`) against the signature of the chip callable `handle`
/// names (see `validate::signature`).
///
/// # Errors
/// [`WorkerError::InvalidArgument`] naming the argument;
/// [`WorkerError::UnknownCallable`] when it was unregistered meanwhile.
fn chip_signature(
    engine: &Engine,
    handle: &CallableHandle,
    prefix: &str,
    args: &TaskArgs,
) -> Result<(), WorkerError> {
    match engine.registry.get(handle) {
        Some(crate::Callable::Chip(spec)) => {
            validate::signature(prefix, args, &spec.name, &spec.signature)
        }
        Some(_) => Ok(()),
        None => engine.registry.check(handle),
    }
}

/// Marks a heap allocation released and reclaims it if no task holds it.
fn release(engine: &Engine, alloc: &mut HeapAlloc) {
    alloc.released = true;
    engine.maybe_reclaim_heap(alloc);
}

/// Checks a copy's operands: `device` must be a child tensor of one of the `chips`,
/// `host` a host tensor, both contiguous and of one size. Returns the chip and the device
/// address.
fn copy_operands(
    chips: usize,
    (dev_arg, device): (&str, &Tensor),
    (host_arg, host): (&str, &Tensor),
) -> Result<(usize, simpler_device::DevicePtr), WorkerError> {
    let Memory::Child(c) = device.memory() else {
        return Err(bad(
            dev_arg,
            "must be a child tensor (alloc_child_tensor); this one is host memory".into(),
        ));
    };
    if c.worker >= chips {
        return Err(bad(
            dev_arg,
            format!(
                "is device memory of chip {}, and this worker has {chips} chip(s)",
                c.worker
            ),
        ));
    }
    if !matches!(host.memory(), Memory::Host(_)) {
        return Err(bad(
            host_arg,
            "must be a host tensor; this one is device memory".into(),
        ));
    }
    for (arg, t) in [(dev_arg, device), (host_arg, host)] {
        if !t.is_contiguous() {
            return Err(bad(
                arg,
                format!(
                    "a copy takes contiguous tensors; this view of shape {:?} has strides {:?}",
                    t.shape(),
                    t.strides()
                ),
            ));
        }
    }
    if device.nbytes() != host.nbytes() {
        return Err(bad(
            host_arg,
            format!(
                "holds {} bytes and `{dev_arg}` {}; a copy moves whole tensors of one size",
                host.nbytes(),
                device.nbytes()
            ),
        ));
    }
    Ok((c.worker, c.ptr.offset(device.byte_offset())))
}
