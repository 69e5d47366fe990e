//! The crash report's text, built in a fixed buffer without allocating or locking (the
//! signal handler calls it; tests call it directly): which signal, which device thread, what
//! it was running (run epoch, task, func id, kernel or orchestration name, block) and where
//! the faulting address lies among the live device allocations.
//!
//! It reads only the crash tables and, without touching them directly (so a corrupted
//! pointer cannot fault the handler), the run's func table (for the func id) and the
//! kernel's argument array and tensors (for which argument an allocation backs).

use simpler_abi::{MAX_TASK_TENSORS, TENSOR_COUNT_SLOT};

use super::peek;
use super::tables::{self, CodeKind, LiveView, ThreadKind, ThreadView, NAME_BYTES};

/// A fixed-size text buffer; what does not fit is dropped.
pub(crate) struct Buf {
    bytes: [u8; 4096],
    len: usize,
}

impl Buf {
    /// An empty buffer.
    pub(crate) const fn new() -> Buf {
        Buf {
            bytes: [0; 4096],
            len: 0,
        }
    }

    /// The text so far.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    fn bytes(&mut self, b: &[u8]) -> &mut Buf {
        let n = b.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + n].copy_from_slice(&b[..n]);
        self.len += n;
        self
    }

    fn s(&mut self, s: &str) -> &mut Buf {
        self.bytes(s.as_bytes())
    }

    fn dec(&mut self, mut v: u64) -> &mut Buf {
        let mut d = [0u8; 20];
        let mut i = d.len();
        loop {
            i -= 1;
            d[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.bytes(&d[i..])
    }

    fn idec(&mut self, v: i64) -> &mut Buf {
        if v < 0 {
            self.s("-").dec(v.unsigned_abs())
        } else {
            self.dec(v as u64)
        }
    }

    fn hex(&mut self, mut v: u64) -> &mut Buf {
        let mut d = [0u8; 16];
        let mut i = d.len();
        loop {
            i -= 1;
            d[i] = b"0123456789abcdef"[(v & 15) as usize];
            v >>= 4;
            if v == 0 {
                break;
            }
        }
        self.s("0x").bytes(&d[i..])
    }
}

/// The signal as the report needs it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fault {
    /// Signal number.
    pub(crate) signal: i32,
    /// `si_code`: > 0 raised by the CPU for the faulting instruction, ≤ 0 sent (kill,
    /// raise, abort).
    pub(crate) code: i32,
    /// `si_addr`: the data address (SIGSEGV, SIGBUS) or the instruction (SIGFPE).
    pub(crate) addr: u64,
}

/// Name and meaning of the signals the handler takes.
pub(crate) fn signal_name(signal: i32) -> (&'static str, &'static str) {
    match signal {
        libc::SIGSEGV => ("SIGSEGV", "invalid memory access"),
        libc::SIGBUS => ("SIGBUS", "bus error"),
        libc::SIGFPE => ("SIGFPE", "arithmetic fault"),
        libc::SIGABRT => ("SIGABRT", "abort"),
        _ => ("a fatal signal", "fatal signal"),
    }
}

/// What `si_code` adds, for a signal raised by the faulting instruction.
fn code_meaning(signal: i32, code: i32) -> Option<&'static str> {
    Some(match (signal, code) {
        (libc::SIGSEGV, 1) => "address not mapped",
        (libc::SIGSEGV, 2) => "page protected against this access",
        (libc::SIGBUS, 1) => "misaligned address",
        (libc::SIGBUS, 2) => "address with no physical backing",
        (libc::SIGFPE, 1) => "integer divide by zero",
        (libc::SIGFPE, 2) => "integer overflow",
        (libc::SIGFPE, 3..=8) => "floating-point exception",
        _ => return None,
    })
}

/// Where an address lies among the live allocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// Inside this allocation.
    Inside(LiveView),
    /// Past its end, within its guard page or the page after it.
    Past(LiveView),
    /// Before its base, within its guard page or the page before it.
    Before(LiveView),
    /// In none of them, nor next to one.
    Nowhere,
}

/// Where `addr` lies (an allocation containing it wins, then the nearest one it is just past
/// or before, within `page` bytes or the allocation's guard pages). Lock-free.
pub(crate) fn locate(addr: u64, page: u64) -> Place {
    let mut inside = None;
    let mut past: Option<(u64, LiveView)> = None;
    let mut before: Option<(u64, LiveView)> = None;
    tables::scan_live(|a| {
        if addr >= a.base && addr < a.end() {
            inside = Some(*a);
            return false;
        }
        if addr >= a.end() {
            let by = addr - a.end();
            let reach = a.hi.saturating_sub(a.end()).max(page);
            if by < reach && past.is_none_or(|(b, _)| by < b) {
                past = Some((by, *a));
            }
        } else {
            let by = a.base - addr;
            let reach = a.base.saturating_sub(a.lo).max(page);
            if by <= reach && before.is_none_or(|(b, _)| by < b) {
                before = Some((by, *a));
            }
        }
        true
    });
    match (inside, past, before) {
        (Some(a), _, _) => Place::Inside(a),
        (None, Some((p, a)), Some((b, c))) => {
            if p <= b {
                Place::Past(a)
            } else {
                Place::Before(c)
            }
        }
        (None, Some((_, a)), None) => Place::Past(a),
        (None, None, Some((_, a))) => Place::Before(a),
        (None, None, None) => Place::Nowhere,
    }
}

/// The u64 at `addr`, read without faulting.
fn read_u64(addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    peek::read_own(addr, &mut b).then(|| u64::from_ne_bytes(b))
}

/// The func id whose entry in the run's func table is the call's entry.
fn func_id(t: &ThreadView) -> Option<u32> {
    if t.func_table == 0 || t.func_count > 1 << 16 {
        return None;
    }
    (0..t.func_count).find(|&i| read_u64(t.func_table + 8 * u64::from(i)) == Some(t.entry))
}

/// Appends the tensor arguments of the kernel call whose buffer lies in `a` (the argument
/// array and the tensors are read without faulting: the kernel may have overwritten them).
fn tensor_args(out: &mut Buf, t: &ThreadView, a: &LiveView) {
    if t.code != CodeKind::Kernel as u32 || t.args == 0 {
        return;
    }
    let Some(count) = read_u64(t.args + 8 * TENSOR_COUNT_SLOT as u64) else {
        return;
    };
    let mut first = true;
    for i in 0..count.min(MAX_TASK_TENSORS as u64) {
        let Some(buffer) = read_u64(t.args + 8 * i).and_then(read_u64) else {
            continue;
        };
        if buffer >= a.base && buffer < a.end() {
            out.s(if first {
                "\n  tensor:  the allocation is the buffer of the kernel's tensor argument "
            } else {
                ", "
            })
            .dec(i);
            first = false;
        }
    }
}

/// Appends `task 0x… (ring r, submit #n)` for task id `task`.
fn task_ref(out: &mut Buf, task: u64) {
    out.s("task ")
        .hex(task)
        .s(" (ring ")
        .dec(task >> 32)
        .s(", submit #")
        .dec(task & 0xffff_ffff)
        .s(")");
}

/// Appends the name of the code at `entry`, or its address.
fn code_name(out: &mut Buf, entry: u64) {
    let mut name = [0u8; NAME_BYTES];
    match tables::name_of(entry, &mut name) {
        0 => out.s("unnamed code at ").hex(entry),
        n => out.bytes(&name[..n]),
    };
}

fn allocation(out: &mut Buf, a: &LiveView, addr: u64) {
    out.s("device allocation #")
        .dec(a.seq)
        .s(" of device ")
        .dec(u64::from(a.device))
        .s(" (")
        .dec(a.size)
        .s(" bytes at ")
        .hex(a.base)
        .s("; offset ")
        .idec(addr.wrapping_sub(a.base) as i64)
        .s(")");
}

/// The lines naming device thread `t` and the user call it is in: `  device:  …` and
/// `  kernel:  …` (or orchestration, copy, counter, runtime), without a final newline.
pub(crate) fn thread_lines(out: &mut Buf, t: &ThreadView) {
    out.s("  device:  ").dec(u64::from(t.device));
    if t.kind == ThreadKind::Aicore as u32 {
        out.s(", AICore ").dec(u64::from(t.index));
        match t.core_type {
            1 => out.s(" (aic)"),
            2 => out.s(" (aiv)"),
            _ => out,
        };
    } else if t.kind == ThreadKind::Sdma as u32 {
        out.s(", SDMA engine");
    } else {
        out.s(", AICPU thread ").dec(u64::from(t.index));
    }
    match t.epoch {
        0 => out.s(", no run"),
        e => out.s(", run epoch ").dec(e),
    };
    if t.code == CodeKind::Kernel as u32 {
        out.s("\n  kernel:  ");
        code_name(out, t.entry);
        if let Some(f) = func_id(t) {
            out.s("; func id ").dec(u64::from(f));
        }
        if t.task != u64::MAX {
            out.s("; ");
            task_ref(out, t.task);
        }
        out.s("; block ")
            .idec(i64::from(t.block_idx))
            .s(" of ")
            .idec(i64::from(t.block_num));
    } else if t.code == CodeKind::Orchestration as u32 {
        out.s("\n  orchestration: ");
        code_name(out, t.entry);
    } else if t.code == CodeKind::SdmaCopy as u32 {
        out.s("\n  copy:    an SDMA copy a kernel submitted (simpler_sdma_copy): ")
            .dec(t.task)
            .s(" bytes from ")
            .hex(t.entry)
            .s(" to ")
            .hex(t.args);
    } else if t.code == CodeKind::Counter as u32 {
        out.s("\n  counter: the runtime reading the deferred-completion counter at ")
            .hex(t.entry)
            .s(" that ");
        task_ref(out, t.task);
        out.s(" registered (simpler_async_wait_counter): the kernel named a bad address");
    } else {
        out.s("\n  code:    the runtime (no kernel or orchestration call in progress)");
    }
}

/// Writes the report of a user call on device thread `t` that called `exit(status)`
/// (`status` `None`: not known), ending the process.
pub(crate) fn write_exit(out: &mut Buf, status: Option<i32>, t: &ThreadView) {
    out.s("simpler: crash: exit(");
    match status {
        Some(s) => out.idec(i64::from(s)),
        None => out.s("..."),
    };
    out.s(") called on a device thread\n");
    thread_lines(out, t);
    out.s("\n  The user code ended the whole process: a kernel fails its run with")
        .s(" simpler_kernel_fail(), an orchestration by returning non-zero, never by exit()")
        .s("\n  The process now ends (exit status ");
    match status {
        Some(s) => out.dec(u64::from(s as u8)),
        None => out.s("the one exit() was given"),
    };
    out.s(isolation_hint(super::is_isolated_child()));
}

/// Writes the report of `fault` on the device thread `t`; `page` is the page size.
pub(crate) fn write(out: &mut Buf, fault: &Fault, t: &ThreadView, page: u64) {
    let (name, meaning) = signal_name(fault.signal);
    let raised = fault.code > 0;
    out.s("simpler: crash: ").s(name).s(" (").s(meaning);
    if let Some(m) = code_meaning(fault.signal, fault.code).filter(|_| raised) {
        out.s(", ").s(m);
    }
    out.s(") on a device thread\n");
    thread_lines(out, t);
    out.s("\n  address: ");
    if !raised {
        out.s("none: the signal was sent (abort(), raise() or kill), not raised by an access");
    } else if fault.signal == libc::SIGFPE {
        out.s("instruction at ").hex(fault.addr);
    } else {
        out.hex(fault.addr).s(", ");
        let (a, guard) = match locate(fault.addr, page) {
            Place::Inside(a) => {
                out.s("inside ");
                (a, false)
            }
            Place::Past(a) => {
                out.dec(fault.addr - a.end()).s(" bytes past the end of ");
                (a, a.guarded)
            }
            Place::Before(a) => {
                out.dec(a.base - fault.addr)
                    .s(" bytes before the start of ");
                (a, a.guarded)
            }
            Place::Nowhere => {
                out.s("not in any live device allocation");
                (LiveView::default(), false)
            }
        };
        if a.size > 0 {
            allocation(out, &a, fault.addr);
            if guard {
                out.s(", in its guard page (memcheck)");
            }
            tensor_args(out, t, &a);
        }
    }
    out.s("\n  The process now ends by ")
        .s(name)
        .s(" (exit status ")
        .dec(128 + fault.signal as u64)
        .s(isolation_hint(super::is_isolated_child()));
}

/// The end of a report: where the kernels ran and what follows. A chip in a child process
/// of its worker is already isolated, so the hint on isolating kernels is left out there.
fn isolation_hint(isolated_child: bool) -> &'static str {
    if isolated_child {
        "). This chip runs in a child process of its worker, which reports its death \
         (ENDPOINT_FAILURE).\n"
    } else {
        "). On the sim, kernels run inside the host process: README.md, \
         \"Kernel crashes\", says how to isolate them.\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crash::tables::{forget_live, note_live};

    #[test]
    fn a_chip_in_a_child_process_is_not_told_to_isolate_its_kernels() {
        assert!(isolation_hint(false).contains("\"Kernel crashes\""));
        let child = isolation_hint(true);
        assert!(
            !child.contains("Kernel crashes") && !child.contains("README"),
            "{child}"
        );
        assert!(child.contains("child process") && child.contains("ENDPOINT_FAILURE"));
    }

    fn text(fault: Fault, t: &ThreadView) -> String {
        let mut b = Buf::new();
        write(&mut b, &fault, t, 4096);
        String::from_utf8(b.as_bytes().to_vec()).unwrap()
    }

    fn live(base: u64, size: u64, guarded: bool) -> LiveView {
        LiveView {
            base,
            size,
            lo: if guarded { base - 4096 } else { base },
            hi: if guarded {
                base + size + 4096
            } else {
                base + size
            },
            device: 3,
            guarded,
            seq: 9,
        }
    }

    #[test]
    fn numbers_format_without_allocating() {
        let mut b = Buf::new();
        b.dec(0)
            .s(" ")
            .dec(u64::MAX)
            .s(" ")
            .idec(-12)
            .s(" ")
            .hex(0)
            .s(" ");
        b.hex(0xdead_beef);
        assert_eq!(
            b.as_bytes(),
            b"0 18446744073709551615 -12 0x0 0xdeadbeef".as_slice()
        );
        let mut full = Buf::new();
        for _ in 0..5000 {
            full.s("x");
        }
        assert_eq!(
            full.as_bytes().len(),
            4096,
            "overflow is dropped, not a panic"
        );
    }

    #[test]
    fn addresses_are_placed_inside_past_or_before_an_allocation() {
        let a = live(0x7a00_0000_0040, 100, false);
        let g = live(0x7b00_0000_0000, 64, true);
        let ids = [note_live(a).unwrap(), note_live(g).unwrap()];
        assert_eq!(locate(a.base + 99, 4096), Place::Inside(a));
        assert_eq!(locate(a.base + 100, 4096), Place::Past(a));
        assert_eq!(locate(a.base - 4, 4096), Place::Before(a));
        assert_eq!(locate(a.base + 100 + 5000, 4096), Place::Nowhere);
        assert_eq!(locate(g.end() + 4095, 4096), Place::Past(g));
        for id in ids {
            forget_live(id);
        }
        assert_eq!(locate(a.base, 4096), Place::Nowhere);
    }

    #[test]
    fn the_report_names_thread_task_code_and_allocation() {
        let out = live(0x7c00_0000_0ff0, 16, true);
        let id = note_live(out).unwrap();
        let name = tables::note_name(0x1234_5678, "`crash` kernel func 2 (entry `k`)").unwrap();
        // The call's arguments: tensor 1 is a view of the allocation; tensor 0 is not.
        let mut other = simpler_abi::ChipTensor::ZERO;
        other.buffer_addr = 0x10;
        let mut view = simpler_abi::ChipTensor::ZERO;
        view.buffer_addr = out.base;
        let mut args = [0u64; simpler_abi::KERNEL_ARG_SLOTS];
        args[0] = &other as *const _ as u64;
        args[1] = &view as *const _ as u64;
        args[TENSOR_COUNT_SLOT] = 2;
        let t = ThreadView {
            args: args.as_ptr() as u64,
            device: 3,
            kind: ThreadKind::Aicore as u32,
            index: 17,
            core_type: 2,
            epoch: 5,
            code: CodeKind::Kernel as u32,
            entry: 0x1234_5678,
            task: 1 << 32 | 6,
            block_idx: 1,
            block_num: 4,
            ..ThreadView::default()
        };
        let fault = Fault {
            signal: libc::SIGSEGV,
            code: 2,
            addr: out.end(),
        };
        let r = text(fault, &t);
        for want in [
            "simpler: crash: SIGSEGV (invalid memory access, page protected against this access)",
            "device:  3, AICore 17 (aiv), run epoch 5",
            "kernel:  `crash` kernel func 2 (entry `k`); task 0x100000006 (ring 1, submit #6); block 1 of 4",
            "address: 0x7c0000001000, 0 bytes past the end of device allocation #9 of device 3 (16 bytes at 0x7c0000000ff0; offset 16), in its guard page (memcheck)\n  tensor:  the allocation is the buffer of the kernel's tensor argument 1\n",
            "ends by SIGSEGV (exit status 139)",
        ] {
            assert!(r.contains(want), "{want:?} not in:\n{r}");
        }
        let abort = Fault {
            signal: libc::SIGABRT,
            code: -6,
            addr: 0,
        };
        let runtime = ThreadView {
            kind: ThreadKind::Aicpu as u32,
            index: 2,
            ..ThreadView::default()
        };
        let divide = Fault {
            signal: libc::SIGFPE,
            code: 1,
            addr: 0x4000_1234,
        };
        // An argument array that cannot be read names no tensor (and does not fault).
        let unreadable = ThreadView { args: 8, ..t };
        assert!(!text(fault, &unreadable).contains("tensor:"));
        let r = text(divide, &t);
        assert!(
            r.contains("SIGFPE (arithmetic fault, integer divide by zero)"),
            "{r}"
        );
        assert!(r.contains("address: instruction at 0x40001234"), "{r}");
        assert!(r.contains("(exit status 136)"), "{r}");
        let r = text(abort, &runtime);
        assert!(r.contains("SIGABRT (abort) on a device thread"), "{r}");
        assert!(r.contains("AICPU thread 2, no run"), "{r}");
        assert!(r.contains("code:    the runtime"), "{r}");
        assert!(r.contains("address: none: the signal was sent"), "{r}");
        assert!(r.contains("(exit status 134)"), "{r}");
        forget_live(id);
        tables::forget_name(name);
    }
}
