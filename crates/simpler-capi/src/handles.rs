//! Opaque handles and the process-wide tables behind them (`docs/c-abi.md` §2).
//!
//! A `SimplerContext*`, `SimplerRun*` or `SimplerRecording*` is never a pointer to memory:
//! its value encodes the creating process id (high 24 bits), the kind of object (3 bits:
//! context, run, recording or domain) and a serial number that is never reused (low 37
//! bits), and the object lives in a per-process
//! [`Registry`]. So every entry can:
//!
//! 1. refuse a handle inherited by a **forked child** from the value alone, before any lock
//!    is taken (a lock held by a parent thread at `fork()` would hang the child forever);
//! 2. refuse a finalized, destroyed or made-up handle by a table lookup
//!    (`SIMPLER_STATUS_INVALID_HANDLE`), never dereferencing anything the caller passed;
//! 3. refuse a handle of the other kind (a context passed as a run) from its kind bits.
//!
//! A registry belongs to one process: the first use in a forked child replaces the
//! inherited table (which is leaked, never locked or dropped there) with an empty one, so a
//! child may make handles of its own. Sim caller contexts, named by their generation
//! rather than an encoded handle, use the same tables through [`Registry::insert_key`].
//!
//! This module owns the encoding and the tables; what the objects do is the other modules'.

use std::collections::HashMap;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::status::{Failure, SimplerStatus};

/// The low bits: the kind (3 bits) above the serial number (37 bits).
const SERIAL_BITS: u32 = 40;
const SERIAL_MASK: u64 = (1 << SERIAL_BITS) - 1;
const KIND_SHIFT: u32 = 37;
const NUMBER_MASK: u64 = (1 << KIND_SHIFT) - 1;
/// Linux process ids are below 2^22, so they fit the handle's 24 bits exactly.
const PID_MASK: u64 = (1 << (64 - SERIAL_BITS)) - 1;

fn this_pid() -> u64 {
    u64::from(std::process::id()) & PID_MASK
}

/// What a table holds: the handle's kind bits and the name refusals use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandleKind {
    /// `SimplerRecording*`.
    Recording = 0,
    /// `SimplerContext*`.
    Context = 1,
    /// `SimplerRun*`.
    Run = 2,
    /// Sim caller contexts (keyed by generation, never encoded handles).
    SimContext = 3,
    /// `SimplerDomain*`.
    Domain = 4,
}

impl HandleKind {
    fn name(self) -> &'static str {
        match self {
            HandleKind::Recording => "recording",
            HandleKind::Context => "context",
            HandleKind::Run => "run",
            HandleKind::SimContext => "sim context",
            HandleKind::Domain => "domain",
        }
    }

    fn of_bits(bits: u64) -> Option<HandleKind> {
        match bits {
            0 => Some(HandleKind::Recording),
            1 => Some(HandleKind::Context),
            2 => Some(HandleKind::Run),
            3 => Some(HandleKind::SimContext),
            4 => Some(HandleKind::Domain),
            _ => None,
        }
    }
}

/// The objects of one kind (contexts, runs, sim contexts) of one process.
pub struct Registry<T> {
    pid: u64,
    kind: HandleKind,
    /// This table replaced one inherited from a parent process (this process is a forked
    /// child of a process that used the library).
    inherited: bool,
    next: AtomicU64,
    live: Mutex<HashMap<u64, Arc<T>>>,
}

/// The per-process [`Registry`] of a `static`.
pub struct ProcessTable<T> {
    kind: HandleKind,
    current: AtomicPtr<Registry<T>>,
}

impl<T> ProcessTable<T> {
    /// An empty table of `kind` objects (for a `static`).
    pub const fn new(kind: HandleKind) -> ProcessTable<T> {
        ProcessTable {
            kind,
            current: AtomicPtr::new(std::ptr::null_mut()),
        }
    }
}

impl<T: Send + Sync> ProcessTable<T> {
    /// This process's registry, made on first use (and on first use in a forked child).
    /// Takes no lock.
    pub fn get(&'static self) -> &'static Registry<T> {
        loop {
            let seen = self.current.load(Ordering::Acquire);
            // SAFETY: a non-null pointer here came from `Box::leak` below and is never freed.
            if let Some(r) = unsafe { seen.as_ref() } {
                if r.pid == this_pid() {
                    return r;
                }
            }
            let fresh = Box::into_raw(Box::new(Registry {
                pid: this_pid(),
                kind: self.kind,
                inherited: !seen.is_null(),
                next: AtomicU64::new(1),
                live: Mutex::new(HashMap::new()),
            }));
            match self
                .current
                .compare_exchange(seen, fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                // The old registry (a parent's, if any) is leaked on purpose: its lock may be
                // held by a thread that does not exist in this process.
                // SAFETY: `fresh` was just published and is never freed.
                Ok(_) => return unsafe { &*fresh },
                // SAFETY: `fresh` was never published; this is its only owner.
                Err(_) => drop(unsafe { Box::from_raw(fresh) }),
            }
        }
    }
}

impl<T> Registry<T> {
    /// Adds `value` under a fresh handle of this process (never 0, never reused).
    ///
    /// # Panics
    /// After 2^37 − 1 handles of one kind in one process.
    pub fn insert(&self, value: Arc<T>) -> u64 {
        let serial = self.next.fetch_add(1, Ordering::Relaxed);
        assert!(serial <= NUMBER_MASK, "handle serial numbers exhausted");
        self.live.lock().insert(serial, value);
        (self.pid << SERIAL_BITS) | ((self.kind as u64) << KIND_SHIFT) | serial
    }

    /// Adds `value` under a key the caller chose (a sim context's generation).
    pub fn insert_key(&self, key: u64, value: Arc<T>) {
        self.live.lock().insert(key, value);
    }

    /// The object of `handle`; `what` names the parameter in the refusal.
    ///
    /// # Errors
    /// `SIMPLER_STATUS_FORKED_CHILD` (decided from the value, before any lock) or
    /// `SIMPLER_STATUS_INVALID_HANDLE`.
    pub fn lookup(&self, handle: u64, what: &str) -> Result<Arc<T>, Failure> {
        let (pid, serial) = self.decode(handle, what)?;
        debug_assert_eq!(pid, self.pid);
        match self.live.lock().get(&serial) {
            Some(v) => Ok(v.clone()),
            None => Err(self.dead(handle, serial, what)),
        }
    }

    /// Removes and returns the object of `handle`.
    ///
    /// # Errors
    /// As [`lookup`](Registry::lookup).
    pub fn remove(&self, handle: u64, what: &str) -> Result<Arc<T>, Failure> {
        let (_, serial) = self.decode(handle, what)?;
        match self.live.lock().remove(&serial) {
            Some(v) => Ok(v),
            None => Err(self.dead(handle, serial, what)),
        }
    }

    /// The object under a caller-chosen key.
    ///
    /// # Errors
    /// `SIMPLER_STATUS_FORKED_CHILD` when this process is a forked child and the key is not
    /// one of its own; otherwise `not_found`.
    pub fn lookup_key(
        &self,
        key: u64,
        not_found: impl FnOnce() -> Failure,
    ) -> Result<Arc<T>, Failure> {
        if let Some(v) = self.live.lock().get(&key) {
            return Ok(v.clone());
        }
        Err(self.missing_key(key, not_found))
    }

    /// Removes the object under a caller-chosen key.
    ///
    /// # Errors
    /// As [`lookup_key`](Registry::lookup_key).
    pub fn remove_key(
        &self,
        key: u64,
        not_found: impl FnOnce() -> Failure,
    ) -> Result<Arc<T>, Failure> {
        if let Some(v) = self.live.lock().remove(&key) {
            return Ok(v);
        }
        Err(self.missing_key(key, not_found))
    }

    /// Every live object (for a teardown).
    pub fn values(&self) -> Vec<Arc<T>> {
        self.live.lock().values().cloned().collect()
    }

    fn missing_key(&self, key: u64, not_found: impl FnOnce() -> Failure) -> Failure {
        if self.inherited {
            return Failure::new(
                SimplerStatus::ForkedChild,
                format!(
                    "{key} is not a live object of this process, a forked child: a child \
                     cannot use what its parent created"
                ),
            );
        }
        not_found()
    }

    /// The handle's process and serial, refusing another process's handle, and a handle of
    /// another kind, from the value alone.
    fn decode(&self, handle: u64, what: &str) -> Result<(u64, u64), Failure> {
        let (pid, low) = (handle >> SERIAL_BITS, handle & SERIAL_MASK);
        let (kind, serial) = (low >> KIND_SHIFT, low & NUMBER_MASK);
        if pid == self.pid && kind == self.kind as u64 {
            return Ok((pid, serial));
        }
        if pid == self.pid {
            let why = match HandleKind::of_bits(kind) {
                Some(k) => format!(
                    "is a {} handle, not a {} handle",
                    k.name(),
                    self.kind.name()
                ),
                None => "is not a handle made by this library".to_string(),
            };
            return Err(Failure::new(
                SimplerStatus::InvalidHandle,
                format!("`{what}` ({handle:#x}) {why}"),
            ));
        }
        let parent = u64::from(parent_pid()) & PID_MASK;
        if self.inherited || pid == parent {
            return Err(Failure::new(
                SimplerStatus::ForkedChild,
                format!(
                    "`{what}` ({handle:#x}) was made by process {pid}, and this is process {}, \
                     a forked child: a child cannot use its parent's handles (make new ones)",
                    self.pid
                ),
            ));
        }
        Err(Failure::new(
            SimplerStatus::InvalidHandle,
            format!("`{what}` ({handle:#x}) is not a handle made by this library in this process"),
        ))
    }

    fn dead(&self, handle: u64, serial: u64, what: &str) -> Failure {
        let why = if serial != 0 && serial < self.next.load(Ordering::Relaxed) {
            "was finalized or destroyed; it cannot be used again"
        } else {
            "is not a handle made by this library"
        };
        Failure::new(
            SimplerStatus::InvalidHandle,
            format!("`{what}` ({handle:#x}) {why}"),
        )
    }
}

fn parent_pid() -> u32 {
    // Only words the refusal: `inherited` already covers a child of a process that used
    // the library.
    std::os::unix::process::parent_id()
}

#[cfg(test)]
mod tests {
    use super::*;

    static TABLE: ProcessTable<u32> = ProcessTable::new(HandleKind::Run);
    static OTHER: ProcessTable<u32> = ProcessTable::new(HandleKind::Context);

    #[test]
    fn handles_are_live_until_removed_and_never_reused() {
        let r = TABLE.get();
        let a = r.insert(Arc::new(1));
        let b = r.insert(Arc::new(2));
        assert_ne!(a, b);
        assert_ne!(a, 0);
        assert_eq!(*r.lookup(a, "ctx").unwrap(), 1);
        assert_eq!(*r.remove(a, "ctx").unwrap(), 1);
        let e = r.lookup(a, "ctx").unwrap_err();
        assert_eq!(e.status, SimplerStatus::InvalidHandle);
        assert!(
            e.message.contains("finalized or destroyed"),
            "{}",
            e.message
        );
        let e = r.lookup(a + (1 << 30), "ctx").unwrap_err();
        assert!(e.message.contains("not a handle made"), "{}", e.message);
        assert_eq!(*r.lookup(b, "ctx").unwrap(), 2);
    }

    #[test]
    fn a_handle_of_another_kind_is_refused_even_when_its_serial_is_live() {
        let runs = TABLE.get();
        let contexts = OTHER.get();
        let run = runs.insert(Arc::new(7));
        // Make the context serial equal to the run's, so only the kind bits tell them apart.
        while contexts.next.load(Ordering::Relaxed) < run & NUMBER_MASK {
            contexts.insert(Arc::new(0));
        }
        let ctx = contexts.insert(Arc::new(8));
        assert_eq!(ctx & NUMBER_MASK, run & NUMBER_MASK);
        let e = runs.lookup(ctx, "run").unwrap_err();
        assert_eq!(e.status, SimplerStatus::InvalidHandle);
        assert!(
            e.message.contains("is a context handle, not a run handle"),
            "{}",
            e.message
        );
        let e = contexts.lookup(run, "ctx").unwrap_err();
        assert_eq!(e.status, SimplerStatus::InvalidHandle);
        assert!(e.message.contains("is a run handle"), "{}", e.message);
        assert_eq!(*runs.lookup(run, "run").unwrap(), 7);
    }

    #[test]
    fn another_process_handle_is_refused_from_its_value() {
        let r = TABLE.get();
        let foreign = ((this_pid() ^ 0x5a5a) << SERIAL_BITS) | 1;
        let e = r.lookup(foreign, "run").unwrap_err();
        assert_eq!(e.status, SimplerStatus::InvalidHandle);
        let parent = ((u64::from(parent_pid()) & PID_MASK) << SERIAL_BITS) | 1;
        let e = r.lookup(parent, "run").unwrap_err();
        assert_eq!(e.status, SimplerStatus::ForkedChild, "{}", e.message);
    }
}
