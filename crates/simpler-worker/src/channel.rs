//! The L3↔L2 region (`docs/comm.md` §7): shared memory between a level-3 orchestration and
//! a task running on one chip, described to the chip by six scalars
//! (`simpler_abi::region::RegionDescriptor`). The host side is [`WorkerChipRegion`]:
//! payload reads and writes, and 32-bit counters it notifies (set, atomic add), tests and
//! waits on with a finite timeout. This module owns the region's making (through the
//! chip's lane, like a comm window), its host-side operations and its validity; the region's
//! memory is freed with its run (`crate::comm::free`). The chip side is
//! `simpler/region.h`.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use simpler_abi::region::{self as abi, RegionDescriptor};

use crate::comm::{attach, record};
use crate::engine::{DomainRec, Engine};
use crate::memory::{HostMemory, SharedRegion};
use crate::{validate, WorkerError};

/// Most payload or counter bytes of one region (1 GiB each).
pub const MAX_REGION_PART: u64 = 1 << 30;

/// How a notify changes a counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notify {
    /// `counter = value`.
    Set,
    /// `counter += value`, atomic and wrapping.
    Add,
}

/// A wait's comparison of the counter (as `u32`) with the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compare {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
}

impl Compare {
    fn code(self) -> u32 {
        match self {
            Compare::Eq => abi::CMP_EQ,
            Compare::Ne => abi::CMP_NE,
            Compare::Gt => abi::CMP_GT,
            Compare::Ge => abi::CMP_GE,
            Compare::Lt => abi::CMP_LT,
            Compare::Le => abi::CMP_LE,
        }
    }

    /// Whether `counter <self> value` holds.
    pub fn holds(self, counter: u32, value: u32) -> bool {
        abi::holds(counter, self.code(), value).expect("a known comparison")
    }
}

struct Inner {
    worker: usize,
    region: Arc<SharedRegion>,
    descriptor: RegionDescriptor,
    counter_offset: u64,
    /// Cleared by `free` and when the orchestration that made it returns.
    open: AtomicBool,
}

/// A region between this orchestration and chip `worker` (see the module docs). `Clone`;
/// valid until [`free`](WorkerChipRegion::free) or the end of the orchestration that made
/// it, after which every operation is refused. Its memory stays mapped on the chip until
/// the run is over, so a chip task still reading it never faults.
#[derive(Clone)]
pub struct WorkerChipRegion {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for WorkerChipRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerChipRegion")
            .field("worker", &self.inner.worker)
            .field("descriptor", &self.inner.descriptor)
            .field("open", &self.inner.open.load(Ordering::Acquire))
            .finish()
    }
}

fn bad(arg: &str, reason: String) -> WorkerError {
    WorkerError::InvalidArgument {
        arg: arg.into(),
        reason,
    }
}

/// Makes a region on chip `worker` for run `run` (see `Orchestrator::create_worker_chip_region`).
pub(crate) fn create(
    engine: &Engine,
    run: u64,
    worker: usize,
    payload_bytes: u64,
    counter_bytes: u64,
) -> Result<WorkerChipRegion, WorkerError> {
    if engine.children {
        return Err(WorkerError::InvalidState(
            "a worker-chip region needs a chip; this worker's next level is child workers".into(),
        ));
    }
    validate::chip_id(worker, engine.chips, engine.next_kind())?;
    if payload_bytes > MAX_REGION_PART {
        return Err(bad(
            "payload_bytes",
            format!("{payload_bytes} is above the {MAX_REGION_PART} bytes a region may hold"),
        ));
    }
    if counter_bytes == 0 || !counter_bytes.is_multiple_of(4) || counter_bytes > MAX_REGION_PART {
        return Err(bad(
            "counter_bytes",
            format!(
                "{counter_bytes} is not a positive multiple of 4 (one u32 per counter) up to \
                 {MAX_REGION_PART}"
            ),
        ));
    }
    {
        let st = engine.state.lock();
        if let Some(report) = &st.lanes[worker].dead {
            return Err(WorkerError::EndpointFailure {
                endpoint: st.lanes[worker].describe.clone(),
                report: report.clone(),
            });
        }
    }
    let counter_offset = abi::counter_offset(payload_bytes).expect("bounded above");
    let len = (counter_offset + counter_bytes).next_multiple_of(4096);
    let region = SharedRegion::new(len, &format!("simpler-region-chip{worker}"))
        .map(Arc::new)
        .map_err(|e| bad("payload_bytes", format!("the region's {len} bytes: {e}")))?;
    let bases = attach(engine, &[worker], &region)?;
    let base = bases[0].1;
    let (id, _generation) = record(
        engine,
        run,
        "create_worker_chip_region",
        DomainRec {
            name: String::new(),
            members: bases,
            region: region.clone(),
            released: false,
            abortable: false,
        },
    )?;
    let descriptor = RegionDescriptor {
        magic_version: abi::MAGIC_VERSION,
        region_id: id,
        payload_base: base,
        payload_bytes,
        counter_base: base + counter_offset,
        counter_bytes,
    };
    let inner = Inner {
        worker,
        region,
        descriptor,
        counter_offset,
        open: AtomicBool::new(true),
    };
    Ok(WorkerChipRegion {
        inner: Arc::new(inner),
    })
}

impl WorkerChipRegion {
    /// The chip's worker id.
    pub fn worker(&self) -> usize {
        self.inner.worker
    }

    /// The descriptor the chip task takes as six scalars (`RegionDescriptor::words`), in its
    /// own addresses.
    pub fn descriptor(&self) -> RegionDescriptor {
        self.inner.descriptor
    }

    /// True until [`free`](WorkerChipRegion::free) or the end of its orchestration.
    pub fn is_open(&self) -> bool {
        self.inner.open.load(Ordering::Acquire)
    }

    /// Ends the host's use: every later operation is refused. The chip side stays mapped
    /// until the run is over. Idempotent.
    pub fn free(&self) {
        self.inner.open.store(false, Ordering::Release);
    }

    fn check_open(&self, op: &str) -> Result<(), WorkerError> {
        if self.is_open() {
            Ok(())
        } else {
            Err(WorkerError::InvalidState(format!(
                "region.{op}(): this worker-chip region was freed, or its orchestration \
                 returned; make a new one in the orchestration that uses it"
            )))
        }
    }

    fn payload_span(&self, op: &str, offset: u64, len: usize) -> Result<*mut u8, WorkerError> {
        self.check_open(op)?;
        let size = self.inner.descriptor.payload_bytes;
        match offset.checked_add(len as u64) {
            Some(end) if end <= size => {
                // SAFETY: `offset + len <= payload_bytes`, inside the mapping, which lives
                // while `self.inner.region` does.
                Ok(unsafe { self.inner.region.as_ptr().add(offset as usize) })
            }
            _ => Err(bad(
                "offset",
                format!("{len} bytes at offset {offset} run past the {size}-byte payload"),
            )),
        }
    }

    /// Writes `data` into the payload at byte `offset`.
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] (`offset`) past the payload;
    /// [`WorkerError::InvalidState`] once freed.
    pub fn payload_write(&self, offset: u64, data: &[u8]) -> Result<(), WorkerError> {
        let at = self.payload_span("payload_write", offset, data.len())?;
        // SAFETY: `payload_span` checked the span; the chip reads these bytes only after a
        // counter the host notifies afterwards (release), by the region's protocol.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), at, data.len()) };
        std::sync::atomic::fence(Ordering::Release);
        Ok(())
    }

    /// Reads `out.len()` payload bytes at byte `offset`.
    ///
    /// # Errors
    /// As [`payload_write`](WorkerChipRegion::payload_write).
    pub fn payload_read(&self, offset: u64, out: &mut [u8]) -> Result<(), WorkerError> {
        let at = self.payload_span("payload_read", offset, out.len())?;
        std::sync::atomic::fence(Ordering::Acquire);
        // SAFETY: as in `payload_write`; the chip wrote them before the counter the host
        // waited for.
        unsafe { std::ptr::copy_nonoverlapping(at, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// The payload's first byte in this process (for layouts built on the region:
    /// `crate::queue`); `payload_bytes` bytes from there are mapped while `self` lives.
    pub(crate) fn payload_ptr(&self) -> *mut u8 {
        self.inner.region.as_ptr()
    }

    /// The counter at byte `offset`, for layouts built on the region (checked as `test`).
    pub(crate) fn counter_word(&self, op: &str, offset: u64) -> Result<&AtomicU32, WorkerError> {
        self.counter(op, offset)
    }

    fn counter(&self, op: &str, offset: u64) -> Result<&AtomicU32, WorkerError> {
        self.check_open(op)?;
        let size = self.inner.descriptor.counter_bytes;
        if !offset.is_multiple_of(4) || offset >= size {
            return Err(bad(
                "offset",
                if offset.is_multiple_of(4) {
                    format!(
                        "counter offset {offset} is past the {size} counter bytes (make the \
                         region with a larger counter_bytes)"
                    )
                } else {
                    format!("counter offset {offset} is not a multiple of 4 (counters are u32)")
                },
            ));
        }
        // SAFETY: the counter lies inside the mapping (checked), 4-byte aligned (the area
        // starts on a 64-byte line); the chip accesses it only atomically too.
        Ok(unsafe {
            &*(self
                .inner
                .region
                .as_ptr()
                .add((self.inner.counter_offset + offset) as usize)
                as *const AtomicU32)
        })
    }

    /// Changes the counter at byte `offset` of the counter area: `Set` stores `value`,
    /// `Add` adds it atomically (wrapping). Both release what the host wrote before.
    ///
    /// # Errors
    /// [`WorkerError::InvalidArgument`] (`offset`) for an offset that is not a counter;
    /// [`WorkerError::InvalidState`] once freed.
    pub fn notify(&self, offset: u64, value: u32, op: Notify) -> Result<(), WorkerError> {
        let c = self.counter("notify", offset)?;
        match op {
            Notify::Set => c.store(value, Ordering::SeqCst),
            Notify::Add => {
                c.fetch_add(value, Ordering::SeqCst);
            }
        }
        Ok(())
    }

    /// The counter at byte `offset` now, without waiting.
    ///
    /// # Errors
    /// As [`notify`](WorkerChipRegion::notify).
    pub fn test(&self, offset: u64) -> Result<u32, WorkerError> {
        Ok(self.counter("test", offset)?.load(Ordering::SeqCst))
    }

    /// Waits until the counter at byte `offset` satisfies `cmp` against `value`, at most
    /// `timeout` (finite and non-zero); answers the counter's value then. Polls briefly,
    /// then sleeps in growing slices of at most 200 µs.
    ///
    /// # Errors
    /// [`WorkerError::WaitTimeout`] with `timeout` when it did not hold in time;
    /// [`WorkerError::InvalidArgument`] (`timeout`) for a zero timeout; as
    /// [`notify`](WorkerChipRegion::notify).
    pub fn wait(
        &self,
        offset: u64,
        value: u32,
        cmp: Compare,
        timeout: Duration,
    ) -> Result<u32, WorkerError> {
        let c = self.counter("wait", offset)?;
        poll_until(timeout, || {
            let v = c.load(Ordering::SeqCst);
            Ok(cmp.holds(v, value).then_some(v))
        })
    }
}

/// Calls `ready` until it answers `Some` (or an error), at most `timeout` (finite and
/// non-zero): polls briefly, then yields, then sleeps in growing slices of at most 200 µs.
///
/// # Errors
/// [`WorkerError::WaitTimeout`] with `timeout`; [`WorkerError::InvalidArgument`]
/// (`timeout`) for a zero timeout; `ready`'s error.
pub(crate) fn poll_until<T>(
    timeout: Duration,
    mut ready: impl FnMut() -> Result<Option<T>, WorkerError>,
) -> Result<T, WorkerError> {
    if timeout.is_zero() {
        return Err(bad(
            "timeout",
            "is 0; a wait needs a finite, positive timeout (use test() to look once)".into(),
        ));
    }
    let deadline = Instant::now() + timeout;
    let mut polls = 0u32;
    loop {
        if let Some(v) = ready()? {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            return Err(WorkerError::WaitTimeout(timeout));
        }
        polls += 1;
        match polls {
            0..=64 => std::hint::spin_loop(),
            65..=128 => std::thread::yield_now(),
            n => std::thread::sleep(Duration::from_micros(u64::from((n - 128).min(200)))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_follow_their_names() {
        assert!(Compare::Ge.holds(3, 3) && !Compare::Gt.holds(3, 3));
        assert!(Compare::Lt.holds(2, 3) && Compare::Le.holds(3, 3));
        assert!(Compare::Eq.holds(7, 7) && Compare::Ne.holds(7, 8));
    }

    #[test]
    fn a_wait_that_runs_out_says_it_timed_out_not_that_a_run_did_not_finish() {
        let e = poll_until(Duration::from_millis(5), || Ok(None::<()>)).unwrap_err();
        assert!(matches!(e, WorkerError::WaitTimeout(t) if t == Duration::from_millis(5)));
        let text = e.to_string();
        assert!(text.starts_with("timed out after 5ms"), "{text}");
        assert!(!text.contains("did not finish"), "{text}");
    }
}
