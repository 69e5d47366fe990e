//! The worker's callables under one key space: chip callables and sub callables, each
//! registered once, known to every endpoint of its kind by the same [`CallableKey`], and
//! named to users by a [`CallableHandle`] (`docs/l3-worker.md` §1).
//!
//! This module keeps the table and issues handles; getting a callable to the endpoints
//! (at init, or through their lanes afterwards) is the worker's job.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::endpoint::{Callable, CallableKey, EndpointKind};
use crate::WorkerError;

/// A registered callable, as the orchestration names it. Issued by one worker; useless
/// with another.
#[derive(Clone, Debug)]
pub struct CallableHandle {
    worker: u64,
    key: CallableKey,
    kind: EndpointKind,
    name: String,
}

impl CallableHandle {
    /// The key every endpoint knows the callable by.
    pub fn key(&self) -> CallableKey {
        self.key
    }

    /// Which kind of endpoint runs it.
    pub fn kind(&self) -> EndpointKind {
        self.kind
    }

    /// The name shown in messages (`#3 <name>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    fn label(&self) -> String {
        format!("`{}` (key {})", self.name, self.key)
    }
}

/// The table of one worker.
pub(crate) struct Registry {
    worker: u64,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next_key: CallableKey,
    callables: HashMap<CallableKey, Callable>,
}

impl Registry {
    /// An empty table for the worker with process-unique id `worker`.
    pub(crate) fn new(worker: u64) -> Registry {
        Registry {
            worker,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// A fresh key and the handle it will have (nothing is registered yet).
    pub(crate) fn reserve(&self, callable: &Callable) -> CallableHandle {
        let mut inner = self.inner.lock();
        let key = inner.next_key;
        inner.next_key += 1;
        CallableHandle {
            worker: self.worker,
            key,
            kind: callable.runs_on(),
            name: callable.name(),
        }
    }

    /// Registers `callable` under the reserved `handle`.
    pub(crate) fn insert(&self, handle: &CallableHandle, callable: Callable) {
        self.inner.lock().callables.insert(handle.key, callable);
    }

    /// Forgets `handle`'s callable.
    ///
    /// # Errors
    /// [`WorkerError::UnknownCallable`] when it is not registered here.
    pub(crate) fn remove(&self, handle: &CallableHandle) -> Result<Callable, WorkerError> {
        self.check(handle)?;
        Ok(self
            .inner
            .lock()
            .callables
            .remove(&handle.key)
            .expect("checked above"))
    }

    /// Checks that `handle` names a callable registered here now.
    ///
    /// # Errors
    /// [`WorkerError::UnknownCallable`] for a handle of another worker or one unregistered.
    pub(crate) fn check(&self, handle: &CallableHandle) -> Result<(), WorkerError> {
        if handle.worker != self.worker {
            return Err(WorkerError::UnknownCallable(format!(
                "{}: it was issued by another worker",
                handle.label()
            )));
        }
        if !self.inner.lock().callables.contains_key(&handle.key) {
            return Err(WorkerError::UnknownCallable(format!(
                "{}: it was unregistered",
                handle.label()
            )));
        }
        Ok(())
    }

    /// The callable `handle` names now, if it is registered here.
    pub(crate) fn get(&self, handle: &CallableHandle) -> Option<Callable> {
        if handle.worker != self.worker {
            return None;
        }
        self.inner.lock().callables.get(&handle.key).cloned()
    }

    /// Every registered callable, by key order.
    pub(crate) fn all(&self) -> Vec<(CallableKey, Callable)> {
        let inner = self.inner.lock();
        let mut all: Vec<_> = inner
            .callables
            .iter()
            .map(|(k, c)| (*k, c.clone()))
            .collect();
        all.sort_by_key(|(k, _)| *k);
        all
    }
}
