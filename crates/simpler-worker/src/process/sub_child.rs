//! Sub workers in child processes (`docs/l3-worker.md` §7): the parent's [`Endpoint`] for
//! one, and [`SubChild`], the child side a binding's loop drives (Python's
//! `python -m simpler._child`).
//!
//! Registration sends a callable a binding serialized (name and payload; a Rust closure
//! cannot cross a process boundary and is refused); a run sends its tensors as
//! [`WireTensor`]s over shared memory and its scalars, and the child's error text fails the
//! task as [`WorkerError::SubFailed`]. A sub worker holds no device memory.

use std::time::Instant;

use simpler_device::DevicePtr;
use simpler_host::CallConfig;

use crate::endpoint::{Callable, CallableKey, Endpoint, EndpointError, EndpointKind, KillSwitch};
use crate::process::child::Connection;
use crate::process::chip_child::{expect_ok, wire_tensor};
use crate::process::link::Link;
use crate::process::mailbox::ChildState;
use crate::process::wire::{Request, Response, Start, WireArg, WireCallable, WireTensor};
use crate::process::wire_error::WireError;
use crate::process::ChildProgram;
use crate::tensor::{Memory, TaskArg};
use crate::WorkerError;

/// A sub worker served by a child process.
pub(crate) struct SubProcess {
    index: usize,
    link: Link,
}

/// Starts sub worker `index` in a child process (see [`crate::process::spawn_sub`]).
pub(crate) fn start(
    index: usize,
    program: &ChildProgram,
    deadline: Instant,
) -> Result<SubProcess, WorkerError> {
    let start = Start::Sub {
        index: index as u32,
    };
    let name = format!("sub worker {index}");
    let (link, _) = Link::start(&name, "sub", index, program, start, deadline)?;
    Ok(SubProcess { index, link })
}

impl SubProcess {
    fn no_device(&self, what: &str) -> EndpointError {
        EndpointError::Failed(WorkerError::InvalidState(format!(
            "sub worker {} holds no device memory ({what} is for chips)",
            self.index
        )))
    }
}

/// `args` as a sub worker process receives them.
///
/// # Errors
/// [`WorkerError::InvalidArgument`] naming `args[i]`: device memory, or host memory a child
/// process cannot see.
pub(crate) fn sub_args(args: &[TaskArg]) -> Result<Vec<WireArg>, WorkerError> {
    args.iter()
        .enumerate()
        .map(|(i, arg)| match arg {
            TaskArg::Scalar(v) => Ok(WireArg::Scalar(*v)),
            TaskArg::Tensor(t, tag) => match t.memory() {
                Memory::Host(m) => Ok(WireArg::Tensor(wire_tensor(i, m.as_ref(), t, *tag)?)),
                Memory::Child(c) => Err(WorkerError::InvalidArgument {
                    arg: format!("args[{i}]"),
                    reason: format!(
                        "it is device memory of chip {}, which a sub worker cannot read; copy \
                         it to host memory first (orch.copy_from)",
                        c.worker
                    ),
                }),
            },
        })
        .collect()
}

impl Endpoint for SubProcess {
    fn kind(&self) -> EndpointKind {
        EndpointKind::Sub
    }

    fn describe(&self) -> String {
        format!("sub worker {} (pid {})", self.index, self.link.pid())
    }

    fn pid(&self) -> Option<u32> {
        Some(self.link.pid())
    }

    fn kill_switch(&self) -> Option<KillSwitch> {
        Some(self.link.kill_switch())
    }

    fn register(&mut self, key: CallableKey, callable: &Callable) -> Result<(), EndpointError> {
        let callable = match callable {
            Callable::SubSerialized { name, payload } => WireCallable::Sub {
                name: name.clone(),
                payload: payload.to_vec(),
            },
            Callable::SubClosure(_) => {
                return Err(EndpointError::Failed(WorkerError::InvalidArgument {
                    arg: "callable".into(),
                    reason: "a Rust closure cannot cross to a sub worker process; closures \
                             run on sub worker threads"
                        .into(),
                }))
            }
            Callable::Chip(_) | Callable::NextLevel { .. } => {
                return Err(EndpointError::Failed(WorkerError::InvalidArgument {
                    arg: "callable".into(),
                    reason: format!(
                        "`{}` is {}; sub workers run sub callables",
                        callable.name(),
                        if matches!(callable, Callable::Chip(_)) {
                            "a chip callable"
                        } else {
                            "a next-level worker's callable"
                        }
                    ),
                }))
            }
        };
        expect_ok(
            self.link.call(&Request::Register { key, callable })?,
            "register",
        )
    }

    fn unregister(&mut self, key: CallableKey) -> Result<(), EndpointError> {
        expect_ok(self.link.call(&Request::Unregister { key })?, "unregister")
    }

    fn run(
        &mut self,
        key: CallableKey,
        args: &[TaskArg],
        _config: &CallConfig,
    ) -> Result<(), EndpointError> {
        let request = Request::RunSub {
            key,
            args: sub_args(args)?,
        };
        expect_ok(self.link.call(&request)?, "run")
    }

    fn malloc(&mut self, _nbytes: u64) -> Result<DevicePtr, EndpointError> {
        Err(self.no_device("malloc"))
    }

    fn free(&mut self, _ptr: DevicePtr) -> Result<(), EndpointError> {
        Err(self.no_device("free"))
    }

    fn copy_to(&mut self, _dst: DevicePtr, _src: &[u8]) -> Result<(), EndpointError> {
        Err(self.no_device("copy_to"))
    }

    fn copy_from(&mut self, _dst: &mut [u8], _src: DevicePtr) -> Result<(), EndpointError> {
        Err(self.no_device("copy_from"))
    }

    fn shutdown(&mut self) -> Result<(), EndpointError> {
        self.link.shutdown()
    }
}

/// A request to a sub worker process, as its loop receives it from [`SubChild::next`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubRequest {
    /// Make the serialized callable `payload` (named `name` in messages) runnable under
    /// `key`; reply `Ok` or the reason it cannot be loaded.
    Register {
        /// The engine's key.
        key: CallableKey,
        /// The function's qualified name.
        name: String,
        /// The serialized function.
        payload: Vec<u8>,
    },
    /// Forget `key`; reply `Ok`.
    Unregister {
        /// The engine's key.
        key: CallableKey,
    },
    /// Run callable `key` on `args` (signature order); reply `Ok` or the error text (a
    /// traceback), which fails the task.
    Run {
        /// The engine's key.
        key: CallableKey,
        /// The arguments: tensors over the parent's shared memory
        /// ([`SubChild::tensor_memory`]) and scalars.
        args: Vec<WireArg>,
    },
    /// Exit: already acknowledged; the loop returns and the process exits (status 0). No
    /// reply.
    Shutdown,
}

/// The child side of a sub worker process, for a binding's loop (`docs/l3-worker.md` §7):
///
/// ```text
/// let mut child = SubChild::connect()?;
/// loop {
///     match child.next()? {
///         SubRequest::Register { key, name, payload } => child.reply(load(key, payload))?,
///         SubRequest::Unregister { key } => child.reply(forget(key))?,
///         SubRequest::Run { key, args } => child.reply(call(key, args))?,
///         SubRequest::Shutdown => break,
///     }
/// }
/// ```
///
/// Every request but Shutdown gets exactly one [`reply`](SubChild::reply) before the next
/// [`next`](SubChild::next). The process ends by itself (status
/// [`EXIT_PARENT_GONE`](crate::process::EXIT_PARENT_GONE)) when its parent dies.
pub struct SubChild {
    conn: Connection,
    /// The request awaiting its reply.
    pending: Option<&'static str>,
}

impl std::fmt::Debug for SubChild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubChild")
            .field("index", &self.conn.index())
            .field("pending", &self.pending)
            .finish()
    }
}

impl SubChild {
    /// Connects to the parent that started this process as a sub worker, from the
    /// environment it set (`SIMPLER_CHILD_*`, [`mod@crate::process::env`]), and reports READY.
    /// Call it once the child's own setup is done: the parent's startup deadline runs until
    /// then.
    ///
    /// # Errors
    /// [`WorkerError::Startup`] (`sub worker`) when this process was not started as a sub
    /// worker, its mailbox cannot be mapped, or the start request is not a sub worker's.
    pub fn connect() -> Result<SubChild, WorkerError> {
        let failed = |reason: String| WorkerError::Startup {
            endpoint: "sub worker".into(),
            reason,
        };
        let mut conn = Connection::connect().map_err(failed)?;
        if conn.role() != "sub" {
            return Err(failed(format!(
                "this process was started as a `{}` child, not a sub worker",
                conn.role()
            )));
        }
        match conn.next().map_err(failed)? {
            Request::Start(Start::Sub { .. }) => {}
            other => {
                let text = format!("expected a sub worker start request, got {other:?}");
                conn.set_state(ChildState::Failed);
                conn.respond(&Response::Err(WireError::InvalidState(text.clone())));
                return Err(failed(text));
            }
        }
        conn.set_state(ChildState::Ready);
        conn.respond(&Response::Ready {
            device_id: None,
            pid: std::process::id(),
        });
        Ok(SubChild {
            conn,
            pending: None,
        })
    }

    /// This sub worker's id.
    pub fn index(&self) -> usize {
        self.conn.index()
    }

    /// Blocks until the parent's next request (bindings release their interpreter lock
    /// around it). Requests a sub worker cannot serve (a chip's) are answered with an error
    /// here and skipped.
    ///
    /// # Errors
    /// [`WorkerError::InvalidState`] when the previous request has no reply yet;
    /// [`WorkerError::EndpointFailure`] when the mailbox broke.
    // `next` is the bindings' name for it; a fallible blocking call is no iterator.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<SubRequest, WorkerError> {
        if let Some(what) = self.pending {
            return Err(WorkerError::InvalidState(format!(
                "reply to the {what} request before asking for the next one"
            )));
        }
        loop {
            let request = self
                .conn
                .next()
                .map_err(|report| WorkerError::EndpointFailure {
                    endpoint: format!("the mailbox of sub worker {}", self.conn.index()),
                    report,
                })?;
            let (what, request) = match request {
                Request::Register {
                    key,
                    callable: WireCallable::Sub { name, payload },
                } => ("register", SubRequest::Register { key, name, payload }),
                Request::Unregister { key } => ("unregister", SubRequest::Unregister { key }),
                Request::RunSub { key, args } => ("run", SubRequest::Run { key, args }),
                Request::Shutdown => {
                    self.conn.set_state(ChildState::Exiting);
                    self.conn.respond(&Response::Ok);
                    return Ok(SubRequest::Shutdown);
                }
                other => {
                    let text = format!(
                        "sub worker {} cannot serve {other:?}; it runs sub callables",
                        self.conn.index()
                    );
                    self.conn
                        .respond(&Response::Err(WireError::InvalidState(text)));
                    continue;
                }
            };
            self.pending = Some(what);
            return Ok(request);
        }
    }

    /// Answers the request [`next`](SubChild::next) returned: `Ok(())`, or the error text
    /// that fails it (cut to its first 4 KiB and last 60 KiB when longer than 64 KiB).
    ///
    /// # Errors
    /// [`WorkerError::InvalidState`] when no request awaits a reply.
    pub fn reply(&mut self, outcome: Result<(), String>) -> Result<(), WorkerError> {
        if self.pending.take().is_none() {
            return Err(WorkerError::InvalidState(
                "there is no request to reply to".into(),
            ));
        }
        let response = match outcome {
            Ok(()) => Response::Ok,
            Err(text) => Response::Err(WireError::from_worker(&WorkerError::SubFailed {
                message: text,
            })),
        };
        self.conn.respond(&response);
        Ok(())
    }

    /// The bytes of tensor `t` in this process: a pointer to its first element and the
    /// number of bytes from there to the end of its furthest element (for a C-order view,
    /// `numel × dtype size`). The parent's region is mapped on first use and kept, so the
    /// pointer stays valid at least until the reply to the request that named `t`; the
    /// view's strides (in elements) say where its other elements are.
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] (`tensor`): the region cannot be mapped (the parent
    /// is gone), or the view lies outside the shared span.
    pub fn tensor_memory(&mut self, t: &WireTensor) -> Result<(*mut u8, usize), WorkerError> {
        let tensor = self.conn.regions().tensor("tensor", t)?;
        let (start, end) = tensor
            .byte_span()
            .expect("a view checked by Tensor::view has a span");
        let Memory::Host(memory) = tensor.memory() else {
            unreachable!("a wire tensor is host memory");
        };
        // SAFETY: `start < end <= memory.len()` (checked by Tensor::view), so the pointer
        // stays inside the mapping, which the region cache keeps alive.
        let ptr = unsafe { memory.as_ptr().add(start as usize) };
        Ok((ptr, (end - start) as usize))
    }

    /// Regions of the parent this process maps now.
    pub fn mapped_regions(&self) -> usize {
        self.conn.regions_len()
    }
}
