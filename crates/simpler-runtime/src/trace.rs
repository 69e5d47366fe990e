//! Recording a run's trace (`docs/tracing.md`, Capture): a [`Tracer`] per recording thread
//! (every AICore, every AICPU thread) appends fixed-size records to that thread's buffer of
//! the run's trace area, stamped with the device clock.
//!
//! A thread of an untraced run holds no tracer (`Option<Tracer>` is `None`), so an
//! untraced run pays one predictable branch per recording point and reads no clock. The
//! buffers themselves are reached only through `devmem`.

use simpler_abi::*;
use simpler_device::clock;

use crate::devmem::{RunMemory, TraceBuffer};

/// "None" in a record's u32 fields (no core, no kernel on a lane).
pub(crate) const NONE32: u32 = u32::MAX;
/// "None" in a record's task field.
pub(crate) const NONE64: u64 = u64::MAX;

/// Counters a tracer remembers the last sample of (`TRACE_COUNTER_*` below this).
const COUNTERS: usize = 8;

/// One thread's recorder.
pub(crate) struct Tracer {
    level: TraceLevelRaw,
    origin: u64,
    buf: TraceBuffer,
    /// The value this thread last sampled of each counter (`None`: never sampled).
    last: [Option<i64>; COUNTERS],
}

impl Tracer {
    /// The tracer of core `core`; `None` for an untraced run.
    pub(crate) fn for_core(mem: &RunMemory, core: u32) -> Option<Tracer> {
        let c = mem.trace_control()?;
        if core >= c.core_count {
            return None;
        }
        Tracer::of(mem, &c, core)
    }

    /// The tracer of AICPU thread `thread`; `None` for an untraced run.
    pub(crate) fn for_aicpu(mem: &RunMemory, thread: u32) -> Option<Tracer> {
        let c = mem.trace_control()?;
        Tracer::of(mem, &c, c.core_count.checked_add(thread)?)
    }

    fn of(mem: &RunMemory, c: &TraceControl, index: u32) -> Option<Tracer> {
        Some(Tracer {
            level: c.level,
            origin: c.clock_origin_ns,
            buf: mem.trace_buffer(index)?,
            last: [None; COUNTERS],
        })
    }

    /// Whether the run records events of `level`.
    #[inline]
    pub(crate) fn records(&self, level: TraceLevelRaw) -> bool {
        self.level >= level
    }

    /// The device clock, ns.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        clock::device_ns(self.origin)
    }

    /// Appends one record.
    #[inline]
    pub(crate) fn push(&mut self, kind: u32, abc: [u32; 3], task: u64, start_ns: u64, end_ns: u64) {
        self.buf.push(TraceRecord {
            kind,
            a: abc[0],
            b: abc[1],
            c: abc[2],
            task,
            start_ns,
            end_ns,
        });
    }

    /// Records an AICPU phase from `start_ns` to now (level-checked by the caller).
    #[inline]
    pub(crate) fn phase(&mut self, phase: u32, task: u64, core: u32, start_ns: u64) {
        let end = self.now();
        self.push(TRACE_AICPU, [phase, core, 0], task, start_ns, end);
    }

    /// Records a sample of `counter` taken at `now`, unless this thread's last sample of
    /// it had the same value: a counter holds its value until the next sample, so an
    /// unchanged one adds nothing.
    #[inline]
    pub(crate) fn sample(&mut self, counter: u32, value: i64, now: u64) {
        if let Some(last) = self.last.get_mut(counter as usize) {
            if *last == Some(value) {
                return;
            }
            *last = Some(value);
        }
        self.push(TRACE_COUNTER, [counter, 0, 0], NONE64, now, value as u64);
    }
}

/// The tracer in `t` if it records `level`: the one branch an untraced run pays.
#[inline]
pub(crate) fn at(t: &mut Option<Tracer>, level: TraceLevelRaw) -> Option<&mut Tracer> {
    match t {
        Some(t) if t.records(level) => Some(t),
        _ => None,
    }
}

/// The device-clock start of a phase of `level`, if `t` records it.
#[inline]
pub(crate) fn start(t: &Option<Tracer>, level: TraceLevelRaw) -> Option<u64> {
    match t {
        Some(t) if t.records(level) => Some(t.now()),
        _ => None,
    }
}

/// Records the run's one simultaneous reading of both clocks (the orchestrator thread, at
/// the start of the run). On the sim both come from one host reading.
pub(crate) fn align_clocks(mem: &RunMemory) {
    if let Some(c) = mem.trace_control() {
        let host = clock::monotonic_ns();
        mem.trace_align(host.saturating_sub(c.clock_origin_ns), host);
    }
}
