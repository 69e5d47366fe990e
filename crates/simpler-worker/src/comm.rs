//! Comm domains: a set of chips of one level-3 worker with symmetric windows in one shared
//! mapping (`docs/comm.md`). This module owns a domain's validation, its memory layout and
//! the per-rank comm contexts written into it, its attachment to each member chip (through
//! that chip's lane), and its end: released by the orchestration, freed when the run that
//! made it is over, aborted when a member chip dies. What kernels do in the windows is
//! theirs (`include/simpler/comm.h`); the tensor map sees a window buffer as device memory
//! of its chip and nothing more.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use simpler_abi::comm::{self as layout, CommContext, MAX_RANKS};
use simpler_abi::DataType;
use simpler_device::DevicePtr;

use crate::engine::{ChildRec, DomainRec, Engine, State};
use crate::lane::{ControlOp, ControlReply};
use crate::memory::{HostMemory, SharedRegion};
use crate::tensor::{c_strides, ChildAllocation, Memory, Tensor};
use crate::{validate, WorkerError};

/// One named buffer of every rank's window: `count` elements of `dtype`, at a 64-byte
/// aligned offset of the window, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommBufferSpec {
    /// Its name, unique within the domain (the key of [`RankContext::buffers`]).
    pub name: String,
    /// Element type.
    pub dtype: DataType,
    /// Elements (at least 1).
    pub count: u64,
}

/// What one member chip sees of a domain: its rank, its comm context and its window.
#[derive(Clone, Debug)]
pub struct RankContext {
    /// The chip's worker id.
    pub worker: usize,
    /// Its rank: its position in the domain's `workers`.
    pub domain_rank: u32,
    /// Ranks in the domain.
    pub domain_size: u32,
    /// Device address (in the chip's address space) of its `CommContext`
    /// (`simpler_abi::comm::CommContext`, `SimplerCommContext` in `simpler/comm.h`):
    /// pass it to the chip task as a scalar.
    pub device_ctx: u64,
    /// Device address of its own window's first byte.
    pub local_window_base: u64,
    /// Bytes of every window (the requested size rounded up to 4 KiB).
    pub actual_window_size: u64,
    /// The named buffers of its window, in the order of the specs: 1-D device tensors of
    /// this chip, usable as task arguments until the domain is released.
    pub buffers: Vec<(String, Tensor)>,
}

impl RankContext {
    /// The buffer named `name`.
    pub fn buffer(&self, name: &str) -> Option<&Tensor> {
        self.buffers.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
}

/// A comm domain made by `Orchestrator::allocate_domain`: one [`RankContext`] per member,
/// in rank order. Valid for task arguments until released (`Orchestrator::release_domain`,
/// or the end of its orchestration); its memory is freed once its run is over.
#[derive(Clone, Debug)]
pub struct CommDomain {
    pub(crate) id: u64,
    /// Its name.
    pub name: String,
    /// The member chips, in rank order.
    pub workers: Vec<usize>,
    /// Per rank, in rank order.
    pub ranks: Vec<RankContext>,
}

impl CommDomain {
    /// The context of chip `worker`, if it is a member.
    pub fn rank_of(&self, worker: usize) -> Option<&RankContext> {
        self.ranks.iter().find(|r| r.worker == worker)
    }
}

impl DomainRec {
    /// Tells every waiting kernel of the domain that a member died (the workspace's abort
    /// word; `simpler_comm_wait` then answers `SIMPLER_COMM_PEER_FAILED`).
    pub(crate) fn abort(&self, dead_rank: usize) {
        // SAFETY: the workspace header lies at the region's first byte, 4-byte aligned (a
        // page), and stays mapped while `region` lives; kernels touch the word only
        // atomically.
        let word = unsafe {
            &*(self
                .region
                .as_ptr()
                .add(std::mem::offset_of!(layout::CommWorkspace, abort))
                as *const AtomicU32)
        };
        word.store(dead_rank as u32 + 1, Ordering::SeqCst);
    }
}

fn bad(arg: &str, reason: String) -> WorkerError {
    WorkerError::InvalidArgument {
        arg: arg.into(),
        reason,
    }
}

/// Where each buffer starts in a window, and the bytes they take; checked against
/// `window_size`.
fn buffer_offsets(buffers: &[CommBufferSpec], window_size: u64) -> Result<Vec<u64>, WorkerError> {
    let mut names = HashSet::new();
    let mut offsets = Vec::with_capacity(buffers.len());
    let (mut end, mut total) = (0u64, 0u64);
    for (i, b) in buffers.iter().enumerate() {
        if b.name.is_empty() {
            return Err(bad(&format!("buffers[{i}].name"), "is empty".into()));
        }
        if !names.insert(b.name.as_str()) {
            return Err(bad(
                &format!("buffers[{i}].name"),
                format!("`{}` names two buffers of the domain", b.name),
            ));
        }
        let nbytes = b
            .count
            .checked_mul(b.dtype.size_bytes() as u64)
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                bad(
                    &format!("buffers[{i}].count"),
                    format!("{} elements of {} is no usable size", b.count, b.dtype),
                )
            })?;
        let start = end.next_multiple_of(64);
        offsets.push(start);
        end = start.saturating_add(nbytes);
        total = total.saturating_add(nbytes);
    }
    let actual = usize::try_from(window_size)
        .ok()
        .and_then(layout::window_stride);
    if total > window_size || end > actual.unwrap_or(0) as u64 {
        return Err(bad(
            "buffers",
            format!(
                "need {total} bytes ({end} with each buffer 64-byte aligned) but window_size \
                 is {window_size}"
            ),
        ));
    }
    Ok(offsets)
}

/// Checks an `allocate_domain` call before anything is made.
fn check(
    engine: &Engine,
    st: &State,
    name: &str,
    workers: &[usize],
    window_size: u64,
    buffers: &[CommBufferSpec],
) -> Result<Vec<u64>, WorkerError> {
    if engine.children {
        return Err(WorkerError::InvalidState(
            "comm domains are made of chips; this worker's next level is child workers".into(),
        ));
    }
    if name.is_empty() {
        return Err(bad("name", "is empty".into()));
    }
    if workers.is_empty() {
        return Err(bad(
            "workers",
            "is empty; a domain needs at least one chip".into(),
        ));
    }
    if workers.len() > MAX_RANKS {
        return Err(bad(
            "workers",
            format!(
                "has {} chips; a domain has at most {MAX_RANKS} ranks",
                workers.len()
            ),
        ));
    }
    let mut seen = HashSet::new();
    for &w in workers {
        validate::chip_id(w, engine.chips, engine.next_kind())?;
        if !seen.insert(w) {
            return Err(bad("workers", format!("names chip {w} twice")));
        }
    }
    if window_size == 0 {
        return Err(bad(
            "window_size",
            "is 0; give the bytes of each rank's window".into(),
        ));
    }
    if region_len(workers.len(), window_size).is_none_or(|n| n > 1 << 40) {
        return Err(bad(
            "window_size",
            format!("{window_size} bytes per rank is too large"),
        ));
    }
    let offsets = buffer_offsets(buffers, window_size)?;
    if st
        .domains
        .values()
        .any(|d| d.abortable && !d.released && d.name == name)
    {
        return Err(bad(
            "name",
            format!("a domain named `{name}` is live (not yet released)"),
        ));
    }
    for &w in workers {
        if let Some(report) = &st.lanes[w].dead {
            return Err(WorkerError::EndpointFailure {
                endpoint: st.lanes[w].describe.clone(),
                report: report.clone(),
            });
        }
    }
    Ok(offsets)
}

/// Makes the domain for run `run` (see `Orchestrator::allocate_domain`).
pub(crate) fn allocate(
    engine: &Engine,
    run: u64,
    name: &str,
    workers: &[usize],
    window_size: u64,
    buffers: &[CommBufferSpec],
) -> Result<CommDomain, WorkerError> {
    let offsets = check(
        engine,
        &engine.state.lock(),
        name,
        workers,
        window_size,
        buffers,
    )?;
    let n = workers.len();
    let len = region_len(n, window_size).expect("checked");
    // The name only labels the mapping (`/proc/<pid>/maps`); the system caps a label's length.
    let label: String = name.chars().take(32).collect();
    let region = SharedRegion::new(len, &format!("simpler-comm-{label}"))
        .map(Arc::new)
        .map_err(|e| WorkerError::InvalidArgument {
            arg: "window_size".into(),
            reason: format!("the system refused the domain's {len} bytes of shared memory: {e}"),
        })?;
    // A fresh memfd is zero-filled: every window is zero before any member maps it.
    let bases = attach(engine, workers, &region)?;
    write_contexts(&region, &bases, window_size);
    let rec = DomainRec {
        name: name.to_string(),
        members: bases.clone(),
        region,
        released: false,
        abortable: true,
    };
    let (domain_id, generation) = record(engine, run, "allocate_domain", rec)?;

    let actual = stride(window_size);
    let ranks = bases
        .iter()
        .enumerate()
        .map(|(r, &(w, base))| {
            let window = window_offset(n, r, window_size);
            let memory = Memory::Child(ChildAllocation {
                worker: w,
                ptr: DevicePtr::from_raw(base),
                nbytes: len,
                generation,
            });
            let buffers = buffers
                .iter()
                .zip(&offsets)
                .map(|(b, off)| {
                    let shape = [b.count];
                    let t = Tensor::view(
                        memory.clone(),
                        window + off,
                        &shape,
                        &c_strides(&shape),
                        b.dtype,
                    )?;
                    Ok((b.name.clone(), t))
                })
                .collect::<Result<Vec<_>, WorkerError>>()?;
            Ok(RankContext {
                worker: w,
                domain_rank: r as u32,
                domain_size: n as u32,
                device_ctx: base + context_offset(r),
                local_window_base: base + window,
                actual_window_size: actual,
                buffers,
            })
        })
        .collect::<Result<Vec<_>, WorkerError>>()?;
    Ok(CommDomain {
        id: domain_id,
        name: name.to_string(),
        workers: workers.to_vec(),
        ranks,
    })
}

/// Offset of rank `r`'s window in the region of a domain of `n` ranks (sizes checked).
fn window_offset(n: usize, r: usize, window_size: u64) -> u64 {
    (layout::window_base_offset(n).expect("checked") + r * stride(window_size) as usize) as u64
}

/// The actual window size of a requested one (checked).
fn stride(window_size: u64) -> u64 {
    layout::window_stride(window_size as usize).expect("checked") as u64
}

/// Bytes of a domain's region, if representable.
fn region_len(n: usize, window_size: u64) -> Option<u64> {
    let ws = usize::try_from(window_size).ok()?;
    layout::region_len(n, ws).map(|l| l as u64)
}

/// Maps `region` on every chip of `workers` (in order) and answers each one's base
/// address; on a failure the chips mapped so far unmap it again.
///
/// # Errors
/// The first chip's error.
pub(crate) fn attach(
    engine: &Engine,
    workers: &[usize],
    region: &Arc<SharedRegion>,
) -> Result<Vec<(usize, u64)>, WorkerError> {
    let mut bases: Vec<(usize, u64)> = Vec::with_capacity(workers.len());
    for &w in workers {
        match engine.control(w, ControlOp::MapWindow(region.clone())) {
            Ok(ControlReply::Ptr(p)) => bases.push((w, p.addr())),
            Ok(ControlReply::Done) => unreachable!("map_window answers a pointer"),
            Err(e) => {
                for &(w, base) in &bases {
                    let _ = engine.control(w, ControlOp::UnmapWindow(DevicePtr::from_raw(base)));
                }
                return Err(e);
            }
        }
    }
    Ok(bases)
}

/// Records `rec` (its members attached) as live in run `run` — its windows as child
/// memory its tasks may name — and answers its id and its windows' generation; when the run is no longer open the
/// members unmap it again.
///
/// # Errors
/// [`WorkerError::InvalidState`] naming `orch.<method>()` once the orchestration returned.
pub(crate) fn record(
    engine: &Engine,
    run: u64,
    method: &str,
    rec: DomainRec,
) -> Result<(u64, u64), WorkerError> {
    let mut st = engine.state.lock();
    let id = st.next_domain;
    st.next_domain += 1;
    let generation = st.next_generation;
    st.next_generation += 1;
    let State {
        runs,
        children,
        domains,
        ..
    } = &mut *st;
    match crate::run::open_run(runs, run, method) {
        Ok(open) => open.domains.push(id),
        Err(e) => {
            drop(st);
            for &(w, base) in &rec.members {
                engine.control_detached(w, ControlOp::UnmapWindow(DevicePtr::from_raw(base)));
            }
            return Err(e);
        }
    }
    for &(w, base) in &rec.members {
        children.insert(
            (w, base),
            ChildRec {
                nbytes: rec.region.len() as u64,
                users: 0,
                released: false,
                window: true,
                generation,
            },
        );
    }
    domains.insert(id, rec);
    Ok((id, generation))
}

/// Writes the workspace header and every rank's `CommContext`, each in its own chip's
/// addresses (`bases[r].1` is where rank `r`'s chip maps the region).
fn write_contexts(region: &SharedRegion, bases: &[(usize, u64)], window_size: u64) {
    let n = bases.len();
    let header = layout::CommWorkspace::new(n as u32);
    // SAFETY: the region holds `region_len(n, window_size)` bytes: the workspace at 0 and
    // each context at `context_offset(r)`, page and 2 KiB aligned; no member runs a task on
    // the domain yet (it is not returned to the orchestration), so nothing reads them now.
    unsafe {
        std::ptr::write(region.as_ptr() as *mut layout::CommWorkspace, header);
        for (r, &(_, base)) in bases.iter().enumerate() {
            let ctx = CommContext::for_rank(base, r as u32, n as u32, window_size as usize)
                .expect("sizes checked");
            let at = region.as_ptr().add(context_offset(r) as usize);
            std::ptr::write(at as *mut CommContext, ctx);
        }
    }
}

/// Offset of rank `r`'s context (`r` < 64, checked).
fn context_offset(r: usize) -> u64 {
    layout::context_offset(r).expect("at most 64 ranks") as u64
}

/// Releases `domain` of run `run`: no later task may name its buffers. Idempotent.
///
/// # Errors
/// [`WorkerError::InvalidArgument`] (`domain`) for a domain of another run or worker.
pub(crate) fn release(engine: &Engine, run: u64, domain: &CommDomain) -> Result<(), WorkerError> {
    let mut st = engine.state.lock();
    crate::run::open_run(&mut st.runs, run, "release_domain")?;
    let mine = st
        .runs
        .iter()
        .find(|r| r.id == run)
        .is_some_and(|r| r.domains.contains(&domain.id));
    if !mine {
        return Err(bad(
            "domain",
            format!("`{}` is not a domain of this run", domain.name),
        ));
    }
    release_locked(&mut st, domain.id);
    Ok(())
}

fn release_locked(st: &mut State, id: u64) {
    let State {
        domains, children, ..
    } = st;
    if let Some(d) = domains.get_mut(&id) {
        d.released = true;
        for key in &d.members {
            if let Some(rec) = children.get_mut(key) {
                rec.released = true;
            }
        }
    }
}

/// Releases every domain of `domains` (the end of their orchestration).
pub(crate) fn release_all(st: &mut State, ids: &[u64]) {
    for &id in ids {
        release_locked(st, id);
    }
}

/// Frees the domains `ids` of a run that is over: their windows leave the engine's records
/// and each live member chip unmaps its window (behind whatever its lane does next).
pub(crate) fn free(engine: &Engine, st: &mut State, ids: &[u64]) {
    for id in ids {
        let Some(d) = st.domains.remove(id) else {
            continue;
        };
        for &(w, base) in &d.members {
            st.children.remove(&(w, base));
            if st.lanes[w].dead.is_none() {
                engine.control_detached(w, ControlOp::UnmapWindow(DevicePtr::from_raw(base)));
            }
        }
    }
}

/// A task member naming `uses` failed: every domain whose window it named is aborted, so
/// the ranks waiting for it fail now rather than at their timeout (the domain is
/// inconsistent after a failed collective anyway, `docs/comm.md` §3).
pub(crate) fn member_failed(domains: &HashMap<u64, DomainRec>, uses: &[crate::graph::Use]) {
    for u in uses {
        let crate::graph::Use::Child(w, addr) = *u else {
            continue;
        };
        for d in domains.values().filter(|d| d.abortable) {
            if let Some(rank) = d.members.iter().position(|m| *m == (w, addr)) {
                d.abort(rank);
            }
        }
    }
}

/// Aborts every live domain (`close` giving up on runs still in flight).
pub(crate) fn abort_all(st: &State) {
    for d in st.domains.values().filter(|d| d.abortable) {
        d.abort(0);
    }
}

/// Chip `lane` died: every live domain it is a member of is aborted.
pub(crate) fn member_died(st: &State, lane: usize) {
    for d in st.domains.values().filter(|d| d.abortable) {
        if let Some(rank) = d.members.iter().position(|(w, _)| *w == lane) {
            d.abort(rank);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, dtype: DataType, count: u64) -> CommBufferSpec {
        CommBufferSpec {
            name: name.into(),
            dtype,
            count,
        }
    }

    #[test]
    fn buffers_are_aligned_and_must_fit_the_window() {
        let b = [
            spec("a", DataType::Float32, 3),
            spec("b", DataType::Int32, 16),
        ];
        assert_eq!(buffer_offsets(&b, 4096).unwrap(), vec![0, 64]);
        let err = buffer_offsets(&b, 60).unwrap_err().to_string();
        assert!(
            err.contains("buffers") && err.contains("window_size is 60"),
            "{err}"
        );
    }

    #[test]
    fn buffer_names_and_counts_are_checked() {
        let dup = [
            spec("a", DataType::Float32, 1),
            spec("a", DataType::Float32, 1),
        ];
        let err = buffer_offsets(&dup, 4096).unwrap_err().to_string();
        assert!(err.contains("buffers[1].name"), "{err}");
        let empty = [spec("", DataType::Float32, 1)];
        assert!(buffer_offsets(&empty, 4096)
            .unwrap_err()
            .to_string()
            .contains("buffers[0].name"));
        let zero = [spec("z", DataType::Float32, 0)];
        assert!(buffer_offsets(&zero, 4096)
            .unwrap_err()
            .to_string()
            .contains("buffers[0].count"));
    }
}
