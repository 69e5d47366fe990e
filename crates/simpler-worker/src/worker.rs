//! The [`Worker`]: its life (new → initialized → closed; `init` starts endpoints and
//! lanes, and rolls back on failure), registration before and after init, runs
//! (`submit` reserves a pipeline place, runs the orchestration on the caller's thread and
//! returns a [`RunHandle`]), buffers and child tensors (`docs/l3-worker.md` §1, §2, §8).
//!
//! The worker owns the threads it starts and joins them at `close` (or drop), through
//! `crate::running`. What runs do — admission, dispatch, completion — is the orchestrator's
//! and `crate::scheduler`'s.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};
use simpler_abi::DataType;

use crate::chip_local::ChipLocal;
use crate::endpoint::{Callable, Endpoint, EndpointKind};
use crate::engine::{Engine, LaneSlot, State, CHECK_SLICE};
use crate::lane::ControlOp;
use crate::memory::SharedRegion;
use crate::options::{ChipIsolation, SubWorkers, WorkerOptions};
use crate::orchestrator::{in_orchestration, OrchestratingGuard, Orchestrator};
use crate::registry::{CallableHandle, Registry};
use crate::ring::HeapRing;
use crate::run::{Run, RunHandle, RunReport, PIPELINE_DEPTH};
use crate::running::{shut_down, stop_lanes, Running};
use crate::sub_thread::SubThread;
use crate::tensor::Tensor;
use crate::trace::RunConfig;
use crate::WorkerError;

static NEXT_WORKER: AtomicU64 = AtomicU64::new(1);

enum Life {
    /// Made, not initialized.
    New,
    /// `init` failed; `why` says how.
    Failed(String),
    /// Running.
    Running(Running),
    /// `close` is under way.
    Closing,
    /// Closed for good.
    Closed,
}

/// A level-3 (or higher) worker: chips and sub workers driven by one engine. `Send +
/// Sync`. Made with [`Worker::new`], started with [`Worker::init`], closed with
/// [`Worker::close`] (or on drop).
pub struct Worker {
    uid: u64,
    options: WorkerOptions,
    registry: Arc<Registry>,
    life: Mutex<Life>,
    /// Notified when `close` leaves [`Life::Closing`].
    closed: Condvar,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("level", &self.options.level)
            .field("chips", &self.options.chips.len())
            .field("sub_workers", &self.options.sub_workers.count())
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker with `options`, validated; nothing is started.
    ///
    /// # Errors
    /// [`WorkerError::InvalidConfig`] naming the bad option.
    pub fn new(options: WorkerOptions) -> Result<Worker, WorkerError> {
        options.validate()?;
        let uid = NEXT_WORKER.fetch_add(1, Ordering::Relaxed);
        Ok(Worker {
            uid,
            options,
            registry: Arc::new(Registry::new(uid)),
            life: Mutex::new(Life::New),
            closed: Condvar::new(),
        })
    }

    /// The options it was made with.
    pub fn options(&self) -> &WorkerOptions {
        &self.options
    }

    /// Next-level workers (worker ids `0..chip_count()`): the chips at level 3, the
    /// children at level 4 and above.
    pub fn chip_count(&self) -> usize {
        self.options.chips.len() + self.options.next_level.len()
    }

    /// Sub workers.
    pub fn sub_worker_count(&self) -> usize {
        self.options.sub_workers.count()
    }

    fn endpoints_of(&self, kind: EndpointKind) -> usize {
        match kind {
            EndpointKind::Chip => self.chip_count(),
            EndpointKind::Sub => self.sub_worker_count(),
        }
    }

    fn engine(&self) -> Result<Arc<Engine>, WorkerError> {
        match &*self.life.lock() {
            Life::Running(r) => Ok(r.engine.clone()),
            Life::New => Err(WorkerError::InvalidState(
                "the worker is not initialized; call init() first".into(),
            )),
            Life::Failed(why) => Err(WorkerError::InvalidState(format!(
                "the worker's init() failed ({why}); make a new worker"
            ))),
            Life::Closing | Life::Closed => Err(WorkerError::Closed),
        }
    }

    /// Registers `callable` and returns its handle. Before `init` it is kept and given to
    /// the endpoints when they start; after, it is given to every endpoint of its kind at
    /// once (through their lanes, behind what they are doing).
    ///
    /// # Errors
    /// After init: [`WorkerError::InvalidArgument`] (`callable`) when no endpoint can run it
    /// (a sub callable with no sub workers), an endpoint's refusal (nothing stays
    /// registered then). [`WorkerError::Closed`].
    pub fn register(&self, callable: Callable) -> Result<CallableHandle, WorkerError> {
        self.register_interruptible(callable, || Ok(()))
    }

    /// [`register`](Worker::register), calling `check` every 50 ms while it waits for an
    /// endpoint busy with a task; an `Err` from `check` ends the wait with it and nothing
    /// stays registered (how a binding lets Ctrl-C through).
    ///
    /// # Errors
    /// As [`register`](Worker::register), and `check`'s.
    pub fn register_interruptible<C>(
        &self,
        callable: Callable,
        mut check: C,
    ) -> Result<CallableHandle, WorkerError>
    where
        C: FnMut() -> Result<(), WorkerError>,
    {
        self.check_fits(&callable)?;
        let engine = match &*self.life.lock() {
            Life::New => {
                let handle = self.registry.reserve(&callable);
                self.registry.insert(&handle, callable);
                return Ok(handle);
            }
            Life::Running(r) => r.engine.clone(),
            Life::Failed(why) => {
                return Err(WorkerError::InvalidState(format!(
                    "the worker's init() failed ({why}); make a new worker"
                )))
            }
            Life::Closing | Life::Closed => return Err(WorkerError::Closed),
        };
        let kind = callable.runs_on();
        if self.endpoints_of(kind) == 0 {
            return Err(no_endpoint(&callable));
        }
        let handle = self.registry.reserve(&callable);
        let lanes = lanes_of(&engine, kind);
        let mut died = None;
        let mut taken = 0;
        for (i, &lane) in lanes.iter().enumerate() {
            let op = ControlOp::Register(handle.key(), callable.clone());
            match engine.control_checked(lane, op, &mut check) {
                Ok(_) => taken += 1,
                // An endpoint found dead now is dead for good: the live ones take it.
                Err(e @ WorkerError::EndpointFailure { .. }) => {
                    died.get_or_insert(e);
                }
                Err(e) => {
                    // Behind what each lane does (this one's registration included, when
                    // the wait was cut short): nothing stays registered.
                    for &sent in &lanes[..=i] {
                        engine.control_detached(sent, ControlOp::Unregister(handle.key()));
                    }
                    return Err(e);
                }
            }
        }
        if let (Some(e), 0) = (died, taken) {
            return Err(e); // none is left to run it
        }
        self.registry.insert(&handle, callable);
        Ok(handle)
    }

    /// Refuses a callable its next level cannot run: a chip callable where the next level
    /// is children (a binding ships it to them as [`Callable::NextLevel`]), a
    /// [`Callable::NextLevel`] where it is chips.
    fn check_fits(&self, callable: &Callable) -> Result<(), WorkerError> {
        let children = !self.options.next_level.is_empty();
        let reason = match callable {
            Callable::Chip(spec) if children => format!(
                "`{}` is a chip callable and this level-{} worker's next level is workers of \
                 the level below, not chips; register it through the binding, which ships it \
                 to them",
                spec.name, self.options.level
            ),
            Callable::NextLevel { name, .. } if !self.options.chips.is_empty() => format!(
                "`{name}` runs on next-level workers of the level below; this worker's next \
                 level is chips"
            ),
            _ => return Ok(()),
        };
        Err(WorkerError::InvalidArgument {
            arg: "callable".into(),
            reason,
        })
    }

    /// Forgets `handle`'s callable (on every endpoint of its kind, after init).
    ///
    /// # Errors
    /// [`WorkerError::UnknownCallable`]; [`WorkerError::InvalidState`] inside an
    /// orchestration or while runs are in flight (wait for them first); an endpoint's
    /// error; [`WorkerError::Closed`].
    pub fn unregister(&self, handle: &CallableHandle) -> Result<(), WorkerError> {
        let engine = match &*self.life.lock() {
            Life::New | Life::Failed(_) => return self.registry.remove(handle).map(|_| ()),
            Life::Running(r) => r.engine.clone(),
            Life::Closing | Life::Closed => return Err(WorkerError::Closed),
        };
        self.registry.check(handle)?;
        if in_orchestration(self.uid) {
            return Err(WorkerError::InvalidState(
                "unregister() cannot be called inside an orchestration function".into(),
            ));
        }
        if !engine.state.lock().runs.is_empty() {
            return Err(WorkerError::InvalidState(format!(
                "unregister(`{}`) while runs are in flight; wait for them first",
                handle.name()
            )));
        }
        self.registry.remove(handle)?;
        let mut first = Ok(());
        for lane in lanes_of(&engine, handle.kind()) {
            match engine.control(lane, ControlOp::Unregister(handle.key())) {
                // A dead endpoint runs nothing any more: forgotten there too.
                Ok(_) | Err(WorkerError::EndpointFailure { .. }) => {}
                Err(e) => {
                    if first.is_ok() {
                        first = Err(e);
                    }
                }
            }
        }
        first
    }

    /// Starts every endpoint (chips, then sub workers), gives each the callables of its
    /// kind, then starts the lanes. If anything fails, everything already
    /// started is shut down and the worker is unusable.
    ///
    /// # Errors
    /// [`WorkerError::InvalidConfig`] for a registered callable no endpoint can run (a sub
    /// callable with no sub workers); [`WorkerError::Startup`] naming the endpoint;
    /// [`WorkerError::InvalidState`] when `init` was called before; [`WorkerError::Closed`].
    pub fn init(&self) -> Result<(), WorkerError> {
        self.init_over(None)
    }

    /// [`init`](Worker::init) over endpoints the caller made (one per chip, then one per
    /// sub worker, in lane order) instead of the ones the options describe.
    #[cfg(test)]
    pub(crate) fn init_with(&self, endpoints: Vec<Box<dyn Endpoint>>) -> Result<(), WorkerError> {
        self.init_over(Some(endpoints))
    }

    fn init_over(&self, given: Option<Vec<Box<dyn Endpoint>>>) -> Result<(), WorkerError> {
        let mut life = self.life.lock();
        match &*life {
            Life::New => {}
            Life::Running(_) => {
                return Err(WorkerError::InvalidState(
                    "init() was called already".into(),
                ))
            }
            Life::Failed(why) => {
                return Err(WorkerError::InvalidState(format!(
                    "init() was called already and failed ({why}); make a new worker"
                )))
            }
            Life::Closing | Life::Closed => return Err(WorkerError::Closed),
        }
        match self.start(given) {
            Ok(running) => {
                *life = Life::Running(running);
                Ok(())
            }
            Err(e) => {
                *life = Life::Failed(e.to_string());
                Err(e)
            }
        }
    }

    fn start(&self, given: Option<Vec<Box<dyn Endpoint>>>) -> Result<Running, WorkerError> {
        let callables = self.registry.all();
        for (_, c) in &callables {
            if self.endpoints_of(c.runs_on()) == 0 {
                return Err(WorkerError::InvalidConfig(no_endpoint(c).to_string()));
            }
        }
        let deadline = Instant::now() + self.options.startup_timeout;
        let sub_ends = Arc::new(AtomicU64::new(0));
        let mut endpoints: Vec<Box<dyn Endpoint>> = Vec::new();
        let made = match given {
            Some(given) => {
                endpoints = given;
                Ok(())
            }
            None => self.start_endpoints(deadline, &sub_ends, &mut endpoints),
        };
        let started = made.and_then(|()| {
            for ep in endpoints.iter_mut() {
                let kind = ep.kind();
                for (key, c) in callables.iter().filter(|(_, c)| c.runs_on() == kind) {
                    ep.register(*key, c).map_err(|e| WorkerError::Startup {
                        endpoint: ep.describe(),
                        reason: format!("registering `{}` failed: {}", c.name(), endpoint_text(e)),
                    })?;
                }
            }
            Ok(())
        });
        if let Err(e) = started {
            for mut ep in endpoints {
                let _ = ep.shutdown();
            }
            return Err(e);
        }

        let pids = endpoints
            .iter()
            .filter_map(|ep| ep.pid().map(|p| (ep.describe(), p)))
            .collect();
        let kill = endpoints.iter().map(|ep| ep.kill_switch()).collect();
        let slots = endpoints
            .iter()
            .map(|ep| LaneSlot::new(ep.describe()))
            .collect();
        let (senders, receivers): (Vec<_>, Vec<_>) = endpoints
            .iter()
            .map(|_| crossbeam_channel::unbounded())
            .unzip();
        let engine = Arc::new(Engine {
            uid: self.uid,
            state: Mutex::new(State {
                runs: Default::default(),
                lanes: slots,
                children: Default::default(),
                domains: Default::default(),
                next_domain: 1,
                next_generation: 1,
                next_run: 1,
                closing: false,
            }),
            changed: Condvar::new(),
            orchestrating: Mutex::new(()),
            lanes: senders,
            ring: HeapRing::new(self.options.heap_ring_size, self.options.deadlock_timeout),
            registry: self.registry.clone(),
            chips: self.chip_count(),
            subs: self.sub_worker_count(),
            chip_processes: self.options.next_level.is_empty()
                && self.options.chip_isolation == ChipIsolation::Process,
            children: !self.options.next_level.is_empty(),
            sub_ends,
            sub_processes: matches!(self.options.sub_workers, SubWorkers::Processes { .. }),
        });
        let mut lanes = Vec::new();
        let mut endpoints = endpoints.into_iter().zip(receivers).enumerate();
        while let Some((i, (ep, rx))) = endpoints.next() {
            match crate::lane::spawn(engine.clone(), i, ep, rx) {
                Ok(h) => lanes.push(h),
                Err(e) => {
                    // The endpoint went down with the failed spawn's closure; stop the rest.
                    for (_, (mut rest, _)) in endpoints {
                        let _ = rest.shutdown();
                    }
                    let _ = stop_lanes(&engine.lanes[..lanes.len()], lanes);
                    return Err(WorkerError::Startup {
                        endpoint: format!("lane {i}"),
                        reason: format!("its thread could not start: {e}"),
                    });
                }
            }
        }
        Ok(Running {
            engine,
            init_thread: std::thread::current().id(),
            lanes,
            pids,
            kill,
            close_timeout: self.options.close_timeout,
        })
    }

    /// Starts the endpoints in lane order, pushing each onto `out` (so a failure leaves
    /// the started ones there to be shut down).
    fn start_endpoints(
        &self,
        deadline: Instant,
        sub_ends: &Arc<AtomicU64>,
        out: &mut Vec<Box<dyn Endpoint>>,
    ) -> Result<(), WorkerError> {
        let o = &self.options;
        for (index, child) in o.next_level.iter().enumerate() {
            let start = crate::options::ChildStart {
                index,
                deadline,
                sub_ends: sub_ends.clone(),
            };
            out.push((child.start)(start).map_err(|e| match e {
                e @ WorkerError::Startup { .. } => e,
                other => WorkerError::Startup {
                    endpoint: child.describe.clone(),
                    reason: other.to_string(),
                },
            })?);
        }
        for (i, config) in o.chips.iter().enumerate() {
            let ep: Box<dyn Endpoint> = match o.chip_isolation {
                ChipIsolation::Thread => {
                    Box::new(ChipLocal::start(i, o.device_id(i), config.clone())?)
                }
                ChipIsolation::Process => {
                    let program = match &o.chip_program {
                        Some(p) => p.clone(),
                        None => crate::process::ChildProgram::for_rust()?,
                    };
                    crate::process::spawn_chip(i, o.device_id(i), config, &program, deadline)?
                }
            };
            out.push(ep);
        }
        match &o.sub_workers {
            SubWorkers::None => {}
            SubWorkers::Threads(n) => {
                out.extend((0..*n).map(|j| Box::new(SubThread::new(j)) as Box<dyn Endpoint>))
            }
            SubWorkers::Processes { count, program } => {
                for j in 0..*count {
                    out.push(crate::process::spawn_sub(j, program, deadline)?);
                }
            }
        }
        Ok(())
    }

    /// Runs `orch` — the orchestration function — on this thread with an [`Orchestrator`]
    /// for a new run, and returns the run's handle. Blocks first while two runs are in
    /// flight. The run's tasks start as soon as it is the oldest run in flight; an `Err`
    /// from `orch` (or a panic, which is resumed after) fails the run and cancels its
    /// undispatched tasks.
    ///
    /// # Errors
    /// [`WorkerError::InvalidState`] before init or inside an orchestration function;
    /// [`WorkerError::Closed`]. The run's own failures are its handle's.
    pub fn submit<F>(&self, orch: F) -> Result<RunHandle, WorkerError>
    where
        F: FnOnce(&Orchestrator) -> Result<(), WorkerError>,
    {
        self.submit_interruptible(orch, || Ok(()))
    }

    /// [`submit`](Worker::submit), calling `check` every 50 ms while it waits for another
    /// thread's orchestration or for a pipeline place; an `Err` from `check` ends the wait
    /// with it, before anything is submitted (`orch` is not called). This is how a binding
    /// lets Ctrl-C through a submit blocked behind two runs in flight.
    ///
    /// # Errors
    /// As [`submit`](Worker::submit), and `check`'s.
    pub fn submit_interruptible<F, C>(&self, orch: F, check: C) -> Result<RunHandle, WorkerError>
    where
        F: FnOnce(&Orchestrator) -> Result<(), WorkerError>,
        C: FnMut() -> Result<(), WorkerError>,
    {
        self.submit_interruptible_with(orch, check, &RunConfig::default())
    }

    /// [`submit`](Worker::submit) with per-run options: a `config.trace_level` other than
    /// Off traces the run (`docs/tracing.md`; its report's `trace`).
    ///
    /// # Errors
    /// As [`submit`](Worker::submit).
    pub fn submit_with<F>(&self, orch: F, config: &RunConfig) -> Result<RunHandle, WorkerError>
    where
        F: FnOnce(&Orchestrator) -> Result<(), WorkerError>,
    {
        self.submit_interruptible_with(orch, || Ok(()), config)
    }

    /// [`submit_interruptible`](Worker::submit_interruptible) with per-run options.
    ///
    /// # Errors
    /// As [`submit_interruptible`](Worker::submit_interruptible).
    pub fn submit_interruptible_with<F, C>(
        &self,
        orch: F,
        mut check: C,
        config: &RunConfig,
    ) -> Result<RunHandle, WorkerError>
    where
        F: FnOnce(&Orchestrator) -> Result<(), WorkerError>,
        C: FnMut() -> Result<(), WorkerError>,
    {
        let engine = self.engine()?;
        if in_orchestration(self.uid) {
            return Err(WorkerError::InvalidState(
                "submit() cannot be called inside an orchestration function".into(),
            ));
        }
        if crate::lane::in_lane_of(self.uid) {
            return Err(crate::lane::from_a_task("Worker::submit"));
        }
        let _serial = loop {
            if let Some(serial) = engine.orchestrating.try_lock_for(CHECK_SLICE) {
                break serial;
            }
            check()?;
        };
        let (id, shared) = {
            let mut st = engine.state.lock();
            // The check runs at least every CHECK_SLICE of waiting, however often the
            // engine's state changes meanwhile (lanes notify on every progress).
            let mut checked = Instant::now();
            loop {
                if st.closing {
                    return Err(WorkerError::Closed);
                }
                if st.runs.len() < PIPELINE_DEPTH {
                    break;
                }
                engine.changed.wait_for(&mut st, CHECK_SLICE);
                if checked.elapsed() >= CHECK_SLICE {
                    parking_lot::MutexGuard::unlocked(&mut st, &mut check)?;
                    checked = Instant::now();
                }
            }
            let id = st.next_run;
            st.next_run += 1;
            let mut run = Run::new(id, engine.chips, self.uid);
            run.trace = crate::trace::RunCapture::new(config.trace_level);
            let shared = run.shared.clone();
            st.runs.push_back(run);
            (id, shared)
        };
        let orchestrator = Orchestrator::new(engine.clone(), id);
        let outcome = {
            let _inside = OrchestratingGuard::enter(self.uid);
            std::panic::catch_unwind(AssertUnwindSafe(|| orch(&orchestrator)))
        };
        match outcome {
            Ok(Ok(())) => orchestrator.finish(Ok(())),
            Ok(Err(e)) => orchestrator.finish(Err(e.to_string())),
            Err(panic) => {
                let text = crate::lane::panic_text(&*panic);
                orchestrator.finish(Err(format!("the orchestration panicked: {text}")));
                std::panic::resume_unwind(panic);
            }
        }
        Ok(RunHandle::new(shared))
    }

    /// [`submit`](Worker::submit), then waits for the run.
    ///
    /// # Errors
    /// `submit`'s, then the run's.
    pub fn run<F>(&self, orch: F) -> Result<RunReport, WorkerError>
    where
        F: FnOnce(&Orchestrator) -> Result<(), WorkerError>,
    {
        self.submit(orch)?.result()
    }

    /// [`submit_with`](Worker::submit_with), then waits for the run.
    ///
    /// # Errors
    /// `submit_with`'s, then the run's.
    pub fn run_with<F>(&self, orch: F, config: &RunConfig) -> Result<RunReport, WorkerError>
    where
        F: FnOnce(&Orchestrator) -> Result<(), WorkerError>,
    {
        self.submit_with(orch, config)?.result()
    }

    /// A zero-filled shared buffer of `nbytes` that child processes see too (make tensors
    /// over it with `Tensor::new(Memory::Host(buffer), ..)`); reusable across runs.
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] (`nbytes`) for 0 or when the system refuses;
    /// [`WorkerError::Closed`].
    pub fn create_buffer(&self, nbytes: u64) -> Result<Arc<SharedRegion>, WorkerError> {
        if matches!(*self.life.lock(), Life::Closing | Life::Closed) {
            return Err(WorkerError::Closed);
        }
        SharedRegion::new(nbytes, "buffer")
            .map(Arc::new)
            .map_err(|e| WorkerError::InvalidArgument {
                arg: "nbytes".into(),
                reason: e.to_string(),
            })
    }

    /// Persistent zeroed device memory of `shape` × `dtype` on chip `worker` (see
    /// `Orchestrator::alloc_child_tensor`).
    ///
    /// # Errors
    /// [`WorkerError::UnknownWorker`], [`WorkerError::InvalidArgument`] (`shape`), the
    /// chip's error, [`WorkerError::InvalidState`] before init.
    pub fn alloc_child_tensor(
        &self,
        worker: usize,
        shape: &[u64],
        dtype: DataType,
    ) -> Result<Tensor, WorkerError> {
        let engine = self.engine()?;
        crate::child_memory::alloc(&engine, worker, shape, dtype)
    }

    /// Frees a child tensor from `alloc_child_tensor` now.
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] (`tensor`) when it is no live child allocation;
    /// [`WorkerError::InvalidState`] while a task of a run in flight names it.
    pub fn free_child_tensor(&self, t: &Tensor) -> Result<(), WorkerError> {
        let engine = self.engine()?;
        crate::child_memory::free_now(&engine, t)
    }

    /// True once `close` has run (whether or not its shutdown reported an error: a close
    /// that was refused leaves the worker open).
    pub fn is_closed(&self) -> bool {
        matches!(*self.life.lock(), Life::Closed)
    }

    /// The live child processes of an initialized worker: (endpoint, pid), in lane order. A
    /// child the engine found dead is left out ([`Worker::endpoint_failures`] says how it
    /// ended); empty before `init` and after `close`.
    pub fn child_pids(&self) -> Vec<(String, u32)> {
        let (engine, pids) = match &*self.life.lock() {
            Life::Running(r) => (r.engine.clone(), r.pids.clone()),
            _ => return Vec::new(),
        };
        let st = engine.state.lock();
        pids.into_iter()
            .filter(|(name, _)| {
                !st.lanes
                    .iter()
                    .any(|l| l.dead.is_some() && &l.describe == name)
            })
            .collect()
    }

    /// The endpoints of an initialized worker that died, in lane order (chips, then sub
    /// workers): (endpoint, what is known of the death — for a child process its crash
    /// report). Empty when every endpoint is alive, and before `init` or after `close`.
    pub fn endpoint_failures(&self) -> Vec<(String, String)> {
        let Ok(engine) = self.engine() else {
            return Vec::new();
        };
        let st = engine.state.lock();
        st.lanes
            .iter()
            .filter_map(|l| l.dead.as_ref().map(|d| (l.describe.clone(), d.clone())))
            .collect()
    }

    /// Closes the worker: waits for the runs in flight, frees the child tensors left,
    /// shuts every endpoint down and joins every thread. Closing again does nothing. When
    /// runs are still in flight after the `close_timeout` option, the child processes
    /// still running their tasks are killed (those tasks fail with
    /// [`WorkerError::EndpointFailure`], and their runs with them); endpoints in this
    /// process are waited for.
    ///
    /// # Errors
    /// [`WorkerError::InvalidState`] inside an orchestration function, or from another
    /// thread than the one that called `init` (nothing changes then); the first error of a
    /// shutdown (the worker is closed anyway).
    pub fn close(&self) -> Result<(), WorkerError> {
        if in_orchestration(self.uid) {
            return Err(WorkerError::InvalidState(
                "close() cannot be called inside an orchestration function".into(),
            ));
        }
        self.close_from(Some(std::thread::current().id()))
    }

    /// [`close`](Worker::close) from any thread (a wrapper that starts no orchestration
    /// and owns the worker alone, such as `crate::isolated::IsolatedChip`).
    ///
    /// # Errors
    /// The first error of a shutdown (the worker is closed anyway).
    pub(crate) fn close_any_thread(&self) -> Result<(), WorkerError> {
        self.close_from(None)
    }

    /// Closes; `caller` is checked against the init thread unless `None` (drop).
    fn close_from(&self, caller: Option<ThreadId>) -> Result<(), WorkerError> {
        let running = {
            let mut life = self.life.lock();
            while matches!(*life, Life::Closing) {
                self.closed.wait(&mut life);
            }
            if let (Some(c), Life::Running(r)) = (caller, &*life) {
                if r.init_thread != c {
                    return Err(WorkerError::InvalidState(
                        "close() must be called from the thread that called init()".into(),
                    ));
                }
            }
            match std::mem::replace(&mut *life, Life::Closing) {
                Life::Running(r) => Some(r),
                _ => None,
            }
        };
        let result = running.map_or(Ok(()), shut_down);
        *self.life.lock() = Life::Closed;
        self.closed.notify_all();
        result
    }
}

/// The handles users share between threads.
#[allow(dead_code)]
fn assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Worker>();
    is::<crate::Orchestrator>();
    is::<RunHandle>();
    is::<CallableHandle>();
}

impl Drop for Worker {
    fn drop(&mut self) {
        if crate::lane::in_lane_of(self.uid) {
            // Dropped by one of its own tasks (a sub closure held the last reference):
            // closing here would wait for that very task, so another thread closes.
            let running = match std::mem::replace(&mut *self.life.lock(), Life::Closed) {
                Life::Running(r) => r,
                _ => return,
            };
            let closing = std::thread::Builder::new()
                .name("simpler-close".into())
                .spawn(move || {
                    if let Err(e) = shut_down(running) {
                        tracing::warn!(error = %e, "closing a worker dropped by its task");
                    }
                });
            if let Err(e) = closing {
                tracing::error!(error = %e, "a worker dropped by its task cannot be closed");
            }
            return;
        }
        if let Err(e) = self.close_from(None) {
            tracing::warn!(error = %e, "closing a dropped worker");
        }
    }
}

/// The lanes of `kind`'s endpoints that are alive.
fn lanes_of(engine: &Engine, kind: EndpointKind) -> Vec<usize> {
    let range = match kind {
        EndpointKind::Chip => 0..engine.chips,
        EndpointKind::Sub => engine.chips..engine.chips + engine.subs,
    };
    let st = engine.state.lock();
    range.filter(|l| st.lanes[*l].dead.is_none()).collect()
}

fn no_endpoint(c: &Callable) -> WorkerError {
    let (what, none, fix) = match c.runs_on() {
        EndpointKind::Chip if matches!(c, Callable::NextLevel { .. }) => (
            "next-level callable",
            "next-level workers",
            "give it workers of the level below (Python's `add_worker` / `add_remote_worker`)",
        ),
        EndpointKind::Chip => (
            "chip callable",
            "chips",
            "give it chips (`chips` / Python's `device_ids`, e.g. device_ids=[0])",
        ),
        EndpointKind::Sub => (
            "sub callable",
            "sub workers",
            "give it sub workers (`sub_workers` / Python's `num_sub_workers`, e.g. pass \
             num_sub_workers=1)",
        ),
    };
    WorkerError::InvalidArgument {
        arg: "callable".into(),
        reason: format!(
            "the {what} `{}` has nothing to run on: this worker has no {none}; {fix}",
            c.name()
        ),
    }
}

fn endpoint_text(e: crate::EndpointError) -> String {
    match e {
        crate::EndpointError::Failed(e) => e.to_string(),
        crate::EndpointError::Died { report } => format!("the endpoint died: {report}"),
    }
}
