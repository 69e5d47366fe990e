//! The one [`Endpoint`] trait every kind of next-level or sub worker implements: a chip in
//! this process, a chip in a child process, a sub worker (a Rust closure on a thread, or a
//! Python callable in a child process), and a next-level child a binding makes at level 4
//! and above (`docs/l3-worker.md` §4, `docs/l4-worker.md` §2).
//!
//! An endpoint is driven by exactly one thread, its lane (`crate::lane`): every call is
//! `&mut self`, synchronous, and returns when the operation is over. The engine never
//! calls an endpoint from two threads and never calls it again after
//! [`EndpointError::Died`]. This module defines the contract only; the kinds live in
//! their own modules.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use simpler_device::DevicePtr;
use simpler_host::{CallConfig, CallableSpec};

use crate::tensor::TaskArg;
use crate::WorkerError;

/// A callable's key, the same in every endpoint of one worker (and in its children).
pub type CallableKey = u32;

/// What a chip endpoint reports of one run besides its verdict
/// ([`Endpoint::take_run_facts`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunFacts {
    /// Tasks the chip run's orchestration submitted (`simpler_host::RunReport::tasks`);
    /// `None` where the endpoint does not know (sub workers).
    pub tasks: Option<u64>,
    /// The chip run's trace, when its `CallConfig::trace_level` was not Off
    /// (`docs/tracing.md`).
    pub trace: Option<Box<simpler_host::trace_model::Trace>>,
}

/// One run of a batch ([`Endpoint::run_batch`]): what [`Endpoint::run`] takes.
#[derive(Clone, Copy)]
pub struct BatchRun<'a> {
    /// The callable.
    pub key: CallableKey,
    /// Its arguments, in signature order.
    pub args: &'a [TaskArg],
    /// The run's options.
    pub config: &'a CallConfig,
}

/// What kind of worker an endpoint is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EndpointKind {
    /// A next-level worker: a chip at level 3 (runs chip callables, holds device memory);
    /// at level 4 and above a child worker of the level below (runs
    /// [`Callable::NextLevel`] callables, holds no device memory).
    Chip,
    /// A sub worker: runs sub callables (closures, Python functions).
    Sub,
}

/// The arguments a sub callable sees: the task's tensors (host memory) and scalars, in
/// order.
pub struct SubArgs<'a> {
    /// The task's arguments.
    pub args: &'a [TaskArg],
}

/// A Rust sub callable: runs on a sub worker thread; an `Err` fails the task with its text.
pub type SubClosure = Arc<dyn Fn(&SubArgs<'_>) -> Result<(), String> + Send + Sync>;

/// A registered callable as endpoints receive it.
#[derive(Clone)]
pub enum Callable {
    /// A chip callable (code images and signature).
    Chip(Arc<CallableSpec>),
    /// A Rust closure, run by sub worker threads.
    SubClosure(SubClosure),
    /// A callable serialized by a binding (a pickled Python function), run by sub worker
    /// processes that binding starts; `name` labels it in messages.
    SubSerialized {
        /// The function's qualified name.
        name: String,
        /// The serialized function.
        payload: Arc<[u8]>,
    },
    /// A callable a binding serialized for the next-level children it made (level 4 and
    /// above: an orchestration function of the level below, or a chip callable shipped to
    /// the children); the engine never looks inside `payload`.
    NextLevel {
        /// The name shown in messages.
        name: String,
        /// What the children decode.
        payload: Arc<[u8]>,
    },
}

impl Callable {
    /// The kind of endpoint that runs it.
    pub fn runs_on(&self) -> EndpointKind {
        match self {
            Callable::Chip(_) | Callable::NextLevel { .. } => EndpointKind::Chip,
            Callable::SubClosure(_) | Callable::SubSerialized { .. } => EndpointKind::Sub,
        }
    }

    /// The name shown in messages.
    pub fn name(&self) -> String {
        match self {
            Callable::Chip(spec) => spec.name.clone(),
            Callable::SubClosure(_) => "closure".into(),
            Callable::SubSerialized { name, .. } | Callable::NextLevel { name, .. } => name.clone(),
        }
    }
}

impl std::fmt::Debug for Callable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Callable({:?}, {})", self.runs_on(), self.name())
    }
}

/// Why an endpoint operation failed.
#[derive(Clone, Debug)]
pub enum EndpointError {
    /// The operation failed; the endpoint is fine and takes more work.
    Failed(WorkerError),
    /// The endpoint is gone (its process died, its mailbox broke); `report` says what is
    /// known. The engine fails the operation with [`WorkerError::EndpointFailure`] and
    /// refuses later work to this endpoint.
    Died {
        /// Exit status or signal, the child's last output.
        report: String,
    },
}

impl From<WorkerError> for EndpointError {
    fn from(e: WorkerError) -> EndpointError {
        EndpointError::Failed(e)
    }
}

impl From<simpler_host::HostError> for EndpointError {
    fn from(e: simpler_host::HostError) -> EndpointError {
        EndpointError::Failed(WorkerError::Host(e))
    }
}

/// A way for another thread to end an endpoint's call in flight: tripping it makes the call
/// under way (and only that one) end with [`EndpointError::Died`], the endpoint killed. A
/// child process endpoint has one (its call kills the child within a wait slice, about
/// 20 ms); a level-4 child a binding made has one with a hook (which kills its actor); a chip
/// in this process has none. `close()` trips the switches of the lanes still busy when its
/// `close_timeout` has passed (`docs/l3-worker.md` §1).
#[derive(Clone, Debug, Default)]
pub struct KillSwitch {
    inner: Arc<KillInner>,
}

/// What a switch calls when it is tripped, with the reason.
type TripHook = Box<dyn Fn(&str) + Send + Sync>;

#[derive(Default)]
struct KillInner {
    trips: AtomicU64,
    reason: Mutex<String>,
    hook: Option<TripHook>,
}

impl std::fmt::Debug for KillInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KillInner")
            .field("trips", &self.trips)
            .field("hook", &self.hook.is_some())
            .finish_non_exhaustive()
    }
}

impl KillSwitch {
    /// A switch not yet tripped.
    pub fn new() -> KillSwitch {
        KillSwitch::default()
    }

    /// A switch that also calls `hook` with the reason each time it is tripped, for an
    /// endpoint whose call in flight ends when something is done to it (a level-4 child's
    /// actor killed). `trip` may be called under the engine's lock: `hook` must not block on
    /// anything the engine waits for (hand the work to another thread).
    pub fn with_hook(hook: impl Fn(&str) + Send + Sync + 'static) -> KillSwitch {
        KillSwitch {
            inner: Arc::new(KillInner {
                hook: Some(Box::new(hook)),
                ..KillInner::default()
            }),
        }
    }

    /// Ends the call in flight now (if any), saying `reason` in its death report.
    pub fn trip(&self, reason: &str) {
        *self.inner.reason.lock() = reason.to_string();
        self.inner.trips.fetch_add(1, Ordering::AcqRel);
        if let Some(hook) = &self.inner.hook {
            hook(reason);
        }
    }

    /// How many times it was tripped: a call records it when it starts and is killed once
    /// the count moves (so a trip while no call is under way kills nothing later).
    pub fn trips(&self) -> u64 {
        self.inner.trips.load(Ordering::Acquire)
    }

    /// The reason of the last trip.
    pub fn reason(&self) -> String {
        self.inner.reason.lock().clone()
    }
}

/// A next-level or sub worker, driven by one lane thread (see the module docs).
pub trait Endpoint: Send + 'static {
    /// Which kind it is.
    fn kind(&self) -> EndpointKind;

    /// How messages name it: `chip 1 (device 3)`, `chip 0 (device 0, pid 4242)`,
    /// `sub worker 2`.
    fn describe(&self) -> String;

    /// The child process's id, for endpoints that are one.
    fn pid(&self) -> Option<u32> {
        None
    }

    /// The switch that ends this endpoint's call in flight from another thread; `None`
    /// for endpoints whose calls cannot be cut short (in this process).
    fn kill_switch(&self) -> Option<KillSwitch> {
        None
    }

    /// Makes `callable` runnable here under `key` (a key is registered once; the engine
    /// only registers callables of this endpoint's kind).
    ///
    /// # Errors
    /// The callable is refused (malformed, cannot cross to a child process) or the
    /// endpoint died.
    fn register(&mut self, key: CallableKey, callable: &Callable) -> Result<(), EndpointError>;

    /// Forgets `key`.
    ///
    /// # Errors
    /// The endpoint died.
    fn unregister(&mut self, key: CallableKey) -> Result<(), EndpointError>;

    /// Runs the callable `key` on `args` (signature order) and returns when it is over.
    ///
    /// # Errors
    /// [`EndpointError::Failed`] with the task's own error (a chip run's, a sub callable's
    /// text), or [`EndpointError::Died`].
    fn run(
        &mut self,
        key: CallableKey,
        args: &[TaskArg],
        config: &CallConfig,
    ) -> Result<(), EndpointError>;

    /// Runs `runs` in order, each as [`run`](Endpoint::run) would: one that fails fails
    /// alone, the later ones still run. Calls `done(i, outcome)` once per run, in order,
    /// as soon as run `i` is over, with what [`take_run_facts`](Endpoint::take_run_facts)
    /// would answer after it or with its error; after an outcome of
    /// [`EndpointError::Died`] it stops (the engine fails the runs left with that death).
    /// The engine batches only runs of tasks that were ready together — none waits for
    /// another — so an endpoint may start a run before the ones ahead of it are over (a
    /// chip pipelines them). The default calls `run` and `take_run_facts` for each in turn.
    fn run_batch(
        &mut self,
        runs: &[BatchRun<'_>],
        done: &mut dyn FnMut(usize, Result<RunFacts, EndpointError>),
    ) {
        for (i, r) in runs.iter().enumerate() {
            let outcome = self
                .run(r.key, r.args, r.config)
                .map(|()| self.take_run_facts());
            let died = matches!(outcome, Err(EndpointError::Died { .. }));
            done(i, outcome);
            if died {
                return;
            }
        }
    }

    /// What the endpoint knows of its last successful [`run`](Endpoint::run) (chips: the
    /// chip run's task count, and its trace when its config asked for one;
    /// `docs/tracing.md`), taken: a second call answers [`RunFacts::default`]. The default
    /// knows nothing.
    fn take_run_facts(&mut self) -> RunFacts {
        RunFacts::default()
    }

    /// Allocates `nbytes` of zeroed device memory (chips only).
    ///
    /// # Errors
    /// The device's error, or the endpoint is not a chip.
    fn malloc(&mut self, nbytes: u64) -> Result<DevicePtr, EndpointError>;

    /// Frees an allocation made by [`malloc`](Endpoint::malloc).
    ///
    /// # Errors
    /// An unknown pointer, or the endpoint is not a chip.
    fn free(&mut self, ptr: DevicePtr) -> Result<(), EndpointError>;

    /// Maps the whole of `region` (a comm domain's shared windows, `docs/comm.md` §2) into
    /// the chip's address space and makes it device memory there; answers its first byte's
    /// device address. The endpoint keeps the mapping until
    /// [`unmap_window`](Endpoint::unmap_window). The default refuses (not a chip).
    ///
    /// # Errors
    /// The region cannot be mapped or imported; the endpoint is not a chip; it died.
    fn map_window(
        &mut self,
        region: &std::sync::Arc<crate::memory::SharedRegion>,
    ) -> Result<DevicePtr, EndpointError> {
        let _ = region;
        Err(EndpointError::Failed(WorkerError::InvalidArgument {
            arg: "workers".into(),
            reason: format!(
                "{} holds no device memory for a comm window",
                self.describe()
            ),
        }))
    }

    /// Forgets the window [`map_window`](Endpoint::map_window) answered `base` for, and
    /// unmaps it.
    ///
    /// # Errors
    /// An unknown window, one a run still uses, the endpoint died.
    fn unmap_window(&mut self, base: DevicePtr) -> Result<(), EndpointError> {
        let _ = base;
        Ok(())
    }

    /// Copies host bytes `src` to device memory at `dst`.
    ///
    /// # Errors
    /// An address outside the chip's allocations, the device's error.
    fn copy_to(&mut self, dst: DevicePtr, src: &[u8]) -> Result<(), EndpointError>;

    /// Copies device memory at `src` into host bytes `dst`.
    ///
    /// # Errors
    /// As [`copy_to`](Endpoint::copy_to).
    fn copy_from(&mut self, dst: &mut [u8], src: DevicePtr) -> Result<(), EndpointError>;

    /// Stops the endpoint: closes the chip, tells the child to exit and reaps it. Called
    /// once, last.
    ///
    /// # Errors
    /// The shutdown could not be proven clean (the child had to be killed).
    fn shutdown(&mut self) -> Result<(), EndpointError>;
}
