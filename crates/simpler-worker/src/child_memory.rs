//! Child tensors: persistent device memory of one chip (`alloc_child_tensor`), allocated
//! and freed through that chip's lane and recorded in the engine, so that tasks naming one
//! are checked against a live allocation and `close` frees what is left
//! (`docs/l3-worker.md` §6). The engine never frees one on its own.

use simpler_abi::DataType;

use crate::engine::{ChildRec, Engine};
use crate::lane::{ControlOp, ControlReply};
use crate::tensor::{ChildAllocation, Memory, Tensor};
use crate::validate;
use crate::WorkerError;

/// Allocates a zeroed C-order tensor of `shape` × `dtype` on chip `worker`.
///
/// # Errors
/// [`WorkerError::UnknownWorker`], [`WorkerError::InvalidArgument`] (`shape`), the chip's
/// error (out of memory), [`WorkerError::EndpointFailure`] when the chip died.
pub(crate) fn alloc(
    engine: &Engine,
    worker: usize,
    shape: &[u64],
    dtype: DataType,
) -> Result<Tensor, WorkerError> {
    validate::chip_id(worker, engine.chips, engine.next_kind())?;
    let nbytes = validate::nbytes(shape, dtype)?;
    let ControlReply::Ptr(ptr) = engine.control(worker, ControlOp::Malloc(nbytes))? else {
        unreachable!("malloc answers a pointer")
    };
    let generation = {
        let mut st = engine.state.lock();
        let generation = st.next_generation;
        st.next_generation += 1;
        st.children.insert(
            (worker, ptr.addr()),
            ChildRec {
                nbytes,
                users: 0,
                released: false,
                window: false,
                generation,
            },
        );
        generation
    };
    Tensor::new(
        Memory::Child(ChildAllocation {
            worker,
            ptr,
            nbytes,
            generation,
        }),
        shape,
        dtype,
    )
}

/// Frees child tensor `t` now (outside any run's use).
///
/// # Errors
/// [`WorkerError::InvalidArgument`] (`tensor`) when it is no live child allocation (or a
/// view inside one rather than the tensor `alloc_child_tensor` gave);
/// [`WorkerError::InvalidState`] while a task of a run in flight names it; the chip's
/// error.
pub(crate) fn free_now(engine: &Engine, t: &Tensor) -> Result<(), WorkerError> {
    let bad = |reason: String| WorkerError::InvalidArgument {
        arg: "tensor".into(),
        reason,
    };
    let Memory::Child(c) = t.memory() else {
        return Err(bad(
            "is host memory; only child tensors are freed here".into()
        ));
    };
    let id = (c.worker, c.ptr.addr());
    {
        let mut st = engine.state.lock();
        match st
            .children
            .get(&id)
            .filter(|r| r.generation == c.generation)
        {
            Some(rec) if rec.window => {
                return Err(bad(
                    "is a comm domain's window; it is freed with its domain".into(),
                ));
            }
            Some(rec) if rec.released => {
                return Err(bad("was released already (orch.free)".into()));
            }
            Some(rec) if rec.users > 0 => {
                return Err(WorkerError::InvalidState(format!(
                    "device memory at {:#x} of chip {} is named by {} task(s) of a run in \
                     flight; wait for the run, then free it",
                    c.ptr.addr(),
                    c.worker,
                    rec.users
                )));
            }
            Some(_) => {
                st.children.remove(&id);
            }
            None => {
                return Err(bad(format!(
                    "device memory at {:#x} of chip {} is not a live allocation",
                    c.ptr.addr(),
                    c.worker
                )));
            }
        }
    }
    engine.control(c.worker, ControlOp::Free(c.ptr)).map(|_| ())
}

/// Frees every child allocation left (at close, once no run is in flight); returns the
/// first error.
pub(crate) fn free_all(engine: &Engine) -> Result<(), WorkerError> {
    let left: Vec<(usize, u64)> = engine
        .state
        .lock()
        .children
        .drain()
        .filter(|(_, rec)| !rec.window)
        .map(|(k, _)| k)
        .collect();
    let mut first = Ok(());
    for (w, addr) in left {
        let freed = engine.control(
            w,
            ControlOp::Free(simpler_device::DevicePtr::from_raw(addr)),
        );
        if let Err(e) = freed {
            if first.is_ok() && !matches!(e, WorkerError::EndpointFailure { .. }) {
                first = Err(e);
            }
        }
    }
    first
}
