//! Access to device memory by address. Every raw-pointer access of the runtime to device
//! memory lives here, each with its justification: the launch descriptor, the run-state
//! word, the cores' mailboxes (including the call of the kernel a dispatch payload names,
//! recorded for crash reports while it runs: `simpler_device::crash`),
//! the deferred-completion slabs and the counters their conditions name, the SDMA submit
//! call kernels reach through a slab,
//! the function tables, the `host_build_graph` graph image, the result record, the trace area ([`TraceBuffer`]) and tensor views. Callers receive references,
//! copies or typed accessors; no other module of the runtime turns an address into a
//! pointer.
//!
//! The memory a run's [`RunLaunchDesc`] names is reached only through a [`RunMemory`], which
//! only the two kernels make, from their launch argument, under the contract their
//! `# Safety` states (the crate doc's "Launch argument contract"): every address in the
//! descriptor points to live device memory of the right type and size for the whole
//! duration of both kernels of the run. Tensor views come from the orchestration instead,
//! so [`read_view`] and [`write_view`] are `unsafe fn`s whose caller vouches for the view.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use simpler_abi::deferred::{
    DeferredCondition, SdmaSubmit, ASYNC_SLAB_SLOT, MAX_DEFERRED_CONDITIONS,
};
use simpler_abi::{
    graph_image_layout, ChipTensor, CoreMailbox, GraphImageHeader, GraphTask, GraphTensor,
    KernelArgs, KernelEntry, LocalContext, RunLaunchDesc, RunResult, TraceBufferHeader,
    TraceControl, TraceRecord, DISPATCH_FLAG_MAY_WAIT, GLOBAL_CONTEXT_SLOT, LOCAL_CONTEXT_SLOT,
    MAX_TENSOR_DIMS, TRACE_MAGIC,
};
use simpler_device::sdma::SdmaEngine;
use simpler_device::{crash, DevicePtr};

/// The device memory of one run, as its launch descriptor names it.
#[derive(Clone, Copy)]
pub(crate) struct RunMemory {
    desc: RunLaunchDesc,
}

impl RunMemory {
    /// Reads the launch descriptor at `arg`; `None` for a null or misaligned address.
    ///
    /// # Safety
    /// `arg` must be null, misaligned, or meet the launch argument contract (crate doc) for
    /// as long as the returned value or anything obtained from it is used.
    pub(crate) unsafe fn from_launch_arg(arg: DevicePtr) -> Option<RunMemory> {
        let addr = arg.addr();
        if addr == 0 || !addr.is_multiple_of(std::mem::align_of::<RunLaunchDesc>() as u64) {
            return None;
        }
        // SAFETY: a non-null, aligned launch argument points to a `RunLaunchDesc` the host
        // wrote before launching and keeps alive until both kernels finish (the caller's
        // contract).
        let desc = unsafe { std::ptr::read(addr as *const RunLaunchDesc) };
        Some(RunMemory { desc })
    }

    /// The descriptor's values.
    pub(crate) fn desc(&self) -> &RunLaunchDesc {
        &self.desc
    }

    /// Mailbox of core `core`, a core id of the device the kernels run on (the mailbox array
    /// has one entry per core).
    pub(crate) fn mailbox(&self, core: u32) -> Mailbox {
        Mailbox {
            ptr: (self.desc.core_mailbox_addr as *mut CoreMailbox).wrapping_add(core as usize),
        }
    }

    /// The run's orchestration arguments, as the pointer the orchestration entry takes (never
    /// dereferenced by the runtime).
    pub(crate) fn orch_args(&self) -> *const simpler_abi::OrchArgs {
        self.desc.orch_args_addr as *const simpler_abi::OrchArgs
    }

    /// The `(buffer_addr, buffer_size)` of each orchestration tensor argument, in order.
    pub(crate) fn orch_arg_buffers(&self) -> Vec<(u64, u64)> {
        let p = self.orch_args();
        if p.is_null() {
            return Vec::new();
        }
        // SAFETY: a non-null `orch_args_addr` names the run's `OrchArgs`, written before the
        // launch and alive until both kernels finish (launch argument contract).
        let args = unsafe { &*p };
        let n = (args.tensor_count as usize).min(args.tensors.len());
        args.tensors[..n]
            .iter()
            .map(|t| (t.buffer_addr, t.buffer_size))
            .collect()
    }

    /// The run's `host_build_graph` image, split into its tables; an error says what is
    /// malformed about it (no image, misaligned, sizes that do not add up). Its contents are
    /// not checked here.
    pub(crate) fn graph(&self) -> Result<GraphView<'_>, String> {
        let (addr, bytes) = (self.desc.graph_addr, self.desc.graph_bytes);
        let header_bytes = std::mem::size_of::<GraphImageHeader>() as u64;
        if addr == 0 || !addr.is_multiple_of(8) || bytes < header_bytes {
            return Err(format!(
                "the run names no usable graph image ({bytes} bytes at {addr:#x})"
            ));
        }
        // SAFETY: a non-zero, aligned `graph_addr` names `graph_bytes` bytes of a graph image
        // the host wrote before the launch and nobody writes until both kernels finish
        // (launch argument contract), at least a header long (checked above).
        let header = unsafe { std::ptr::read(addr as *const GraphImageHeader) };
        let layout = graph_image_layout(header.task_count, header.tensor_count, header.wake_count)
            .filter(|l| l.total == header.total_bytes && l.total == bytes);
        let Some(layout) = layout else {
            return Err(format!(
                "the graph image's tables ({} tasks, {} tensors, {} wake entries) do not add up to its {bytes} bytes",
                header.task_count, header.tensor_count, header.wake_count
            ));
        };
        let at = |off: u64| (addr + off) as *const u8;
        // SAFETY: as above; the layout check puts every table inside the image, each at an
        // offset that is a multiple of 8 (64-byte header, 192-byte tasks, 136-byte tensors)
        // from an 8-aligned start, and the three types are plain `repr(C)` integers for
        // which every bit pattern is valid.
        unsafe {
            Ok(GraphView {
                header,
                body: std::slice::from_raw_parts(at(header_bytes), (bytes - header_bytes) as usize),
                tasks: std::slice::from_raw_parts(
                    at(layout.tasks_at) as *const GraphTask,
                    header.task_count as usize,
                ),
                tensors: std::slice::from_raw_parts(
                    at(layout.tensors_at) as *const GraphTensor,
                    header.tensor_count as usize,
                ),
                wakes: std::slice::from_raw_parts(
                    at(layout.wakes_at) as *const u32,
                    header.wake_count as usize,
                ),
            })
        }
    }

    /// The func id → kernel entry address table, copied out (`func_count` entries).
    pub(crate) fn func_addrs(&self) -> Vec<u64> {
        // SAFETY: the host allocated `func_count` u64 entries at `func_table_addr`.
        unsafe { table(self.desc.func_table_addr, self.desc.func_count as usize) }
    }

    /// The func id → core type + 1 table, copied out (`func_count` entries).
    pub(crate) fn func_types(&self) -> Vec<u32> {
        // SAFETY: the host allocated `func_count` u32 entries at `func_core_types_addr`.
        unsafe {
            table(
                self.desc.func_core_types_addr,
                self.desc.func_count as usize,
            )
        }
    }

    /// A copy of the run's trace control block; `None` when the run records nothing (no
    /// area, or one whose magic is wrong).
    pub(crate) fn trace_control(&self) -> Option<TraceControl> {
        let addr = self.desc.trace_addr;
        if addr == 0 || !addr.is_multiple_of(8) {
            return None;
        }
        // SAFETY: a non-zero `trace_addr` names the run's trace area, which starts with a
        // `TraceControl` the host wrote before the launch (launch argument contract).
        let c = unsafe { std::ptr::read_volatile(addr as *const TraceControl) };
        (c.magic == TRACE_MAGIC).then_some(c)
    }

    /// Buffer `index` of the run's trace area (`None` without an area or past its last
    /// buffer). The caller must be the buffer's one writer: core `index` for
    /// `index < core_count`, else AICPU thread `index − core_count`.
    pub(crate) fn trace_buffer(&self, index: u32) -> Option<TraceBuffer> {
        let c = self.trace_control()?;
        if index >= c.buffer_count {
            return None;
        }
        let header = (self.desc.trace_addr + c.buffer_offset(index)) as *mut TraceBufferHeader;
        // SAFETY: the area holds `buffer_count` buffers at `buffer_offset` (host contract);
        // the header was written by the host before the launch.
        let capacity = unsafe { std::ptr::addr_of!((*header).capacity).read_volatile() };
        Some(TraceBuffer {
            header,
            capacity: u64::from(capacity.min(c.capacity)),
            len: 0,
            dropped: 0,
        })
    }

    /// Writes the run's simultaneous reading of both clocks into the trace control block
    /// (the orchestrator thread, once per run).
    pub(crate) fn trace_align(&self, device_ns: u64, host_ns: u64) {
        if self.trace_control().is_none() {
            return;
        }
        let p = self.desc.trace_addr as *mut TraceControl;
        // SAFETY: the control block is live for the run; the orchestrator thread is its only
        // writer during the run and the host reads it only after both kernels finish.
        unsafe {
            std::ptr::addr_of_mut!((*p).align_device_ns).write_volatile(device_ns);
            std::ptr::addr_of_mut!((*p).align_host_ns).write_volatile(host_ns);
        }
    }

    /// The run-state word shared by the AICPU threads of a run: zero, or the address of the
    /// run's shared state while it is handed between them (`aicpu::handoff`).
    pub(crate) fn state_word(&self) -> &AtomicU64 {
        // SAFETY: `runtime_state_addr` is a host-allocated, 8-byte aligned, zeroed word
        // reserved for the runtime; `AtomicU64` has the layout of `u64`.
        unsafe { &*(self.desc.runtime_state_addr as *const AtomicU64) }
    }

    /// Writes the run result record: every field first, then the epoch with release ordering.
    pub(crate) fn publish_result(&self, record: &RunResult) {
        let p = self.desc.result_addr as *mut RunResult;
        // SAFETY: `result_addr` is the slot's result region (a `RunResult`), owned by this
        // run until the host reads it after both kernels complete.
        unsafe {
            std::ptr::addr_of_mut!((*p).payload_bytes).write(record.payload_bytes);
            std::ptr::addr_of_mut!((*p).verdict).write(record.verdict);
            std::ptr::addr_of_mut!((*p).completion_code).write(record.completion_code);
            std::ptr::addr_of_mut!((*p).code_source).write(record.code_source);
            std::ptr::addr_of_mut!((*p).payload).write(record.payload);
            std::ptr::addr_of_mut!((*p).tasks).write(record.tasks);
            (*(std::ptr::addr_of!((*p).published) as *const AtomicU64))
                .store(record.published, Ordering::Release);
        }
    }
}

/// One recording thread's trace buffer (`docs/tracing.md`, Capture). Its thread is the one
/// writer of the buffer for the whole run; the host reads it after both kernels end.
pub(crate) struct TraceBuffer {
    header: *mut TraceBufferHeader,
    capacity: u64,
    len: u64,
    dropped: u64,
}

impl TraceBuffer {
    /// Appends `record`, or counts it dropped when the buffer is full. No lock, no
    /// allocation: one store of the record and one of the header's count.
    #[inline]
    pub(crate) fn push(&mut self, record: TraceRecord) {
        if self.len < self.capacity {
            // SAFETY: records follow the header; `len < capacity` keeps the write inside
            // this buffer, of which this thread is the only writer.
            unsafe {
                let records = self.header.add(1) as *mut TraceRecord;
                records.add(self.len as usize).write_unaligned(record);
                self.len += 1;
                std::ptr::addr_of_mut!((*self.header).len).write_volatile(self.len);
            }
        } else {
            self.dropped += 1;
            // SAFETY: as above: the header is this thread's to write.
            unsafe { std::ptr::addr_of_mut!((*self.header).dropped).write_volatile(self.dropped) };
        }
    }
}

/// One core's mailbox: its two dispatch payloads and its global context. The handshake
/// (`crate::handshake`) decides who may touch which part when: the core writes its global
/// context; the owning scheduler writes payload `id & 1` only while the core is not using
/// it, and the core reads it only after the scheduler published `id` in DMB (release, read
/// with acquire) and until it answers FIN.
#[derive(Clone, Copy)]
pub(crate) struct Mailbox {
    ptr: *mut CoreMailbox,
}

impl Mailbox {
    /// Core side, once per launch: records who the core is and clears its fatal code.
    pub(crate) fn init_global(&self, core_id: u32, core_type: u32, sub_block_id: i32) {
        // SAFETY: the mailbox is this core's entry of the run's mailbox array; the core is
        // the only writer of its global context.
        unsafe {
            let g = std::ptr::addr_of_mut!((*self.ptr).global);
            (*g).core_id = core_id;
            (*g).core_type = core_type;
            (*g).sub_block_id = sub_block_id;
            (*g).fatal_code = 0;
        }
    }

    /// Core side: runs dispatch `id` from payload `id & 1` — clears the fatal code, calls the
    /// kernel entry the payload names with the payload's argument array — and returns
    /// whether the kernel reported a fatal code.
    pub(crate) fn run_dispatch(&self, id: u32) -> bool {
        let mailbox = self.ptr;
        // SAFETY: the scheduler fully wrote payload buffer `id & 1` before publishing `id`
        // in DMB (release; the core read DMB with acquire), and will not touch it until it
        // sees this core's FIN. `kernel_addr` was resolved from the run's function table,
        // whose non-zero entries are `KernelEntry` functions (launch argument contract);
        // the entry takes the payload's own argument array.
        unsafe {
            let payload = std::ptr::addr_of_mut!((*mailbox).payloads[(id & 1) as usize]);
            std::ptr::addr_of_mut!((*mailbox).global.fatal_code).write(0);
            let entry: KernelEntry =
                std::mem::transmute::<u64, KernelEntry>((*payload).kernel_addr);
            let args = std::ptr::addr_of_mut!((*payload).args);
            let may_wait = (*payload).flags & DISPATCH_FLAG_MAY_WAIT != 0;
            let _call = crash::enter_kernel(crash::KernelCall {
                entry: (*payload).kernel_addr,
                args: args as u64,
                task: (*payload).task_id,
                block_idx: (*payload).local.block_idx,
                block_num: (*payload).local.block_num,
            });
            // A kernel that may wait for other cores runs where that cannot hold up the
            // cores it waits for (`docs/sim-device.md` §11).
            let args = args as *mut i64;
            let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if may_wait {
                    simpler_device::wait::blocking(|| entry(args));
                } else {
                    entry(args);
                }
            }));
            if let Err(payload) = called {
                if simpler_device::is_reset_unwind(&*payload) {
                    std::panic::resume_unwind(payload);
                }
                crate::panics::note(mailbox as usize, crate::panics::text(&*payload));
                std::ptr::addr_of_mut!((*mailbox).global.fatal_code)
                    .write_volatile(simpler_abi::KERNEL_PANIC_FATAL_CODE);
            }
            std::ptr::addr_of!((*mailbox).global.fatal_code).read_volatile() != 0
        }
    }

    /// Core side: the task id and block index of dispatch `id` (read while it runs, for its
    /// trace record).
    pub(crate) fn dispatch_task(&self, id: u32) -> (u64, u32) {
        // SAFETY: as for `run_dispatch`: payload `id & 1` holds dispatch `id` until this core
        // answers FIN, and nobody writes it meanwhile.
        unsafe {
            let p = std::ptr::addr_of!((*self.ptr).payloads[(id & 1) as usize]);
            ((*p).task_id, (*p).local.block_idx as u32)
        }
    }

    /// Scheduler side: a copy of the core's fatal code, read after its FIN_ERROR.
    /// Scheduler side: the text of the panic that ended the dispatch whose fatal code is
    /// [`simpler_abi::KERNEL_PANIC_FATAL_CODE`], taken once.
    pub(crate) fn take_panic(&self) -> Option<String> {
        crate::panics::take(self.ptr as usize)
    }

    pub(crate) fn fatal_code(&self) -> i32 {
        // SAFETY: the mailbox array has one entry per core for the whole run; the core wrote
        // the code before its FIN (release), which the caller observed (acquire).
        unsafe { std::ptr::addr_of!((*self.ptr).global.fatal_code).read_volatile() }
    }

    /// Scheduler side: fills payload `id & 1` with one subtask — kernel entry `kernel`, task
    /// `task`, SPMD context `local` and `args` — points the argument array's context slots
    /// at the payload's own local context and the core's global context, and empties the
    /// buffer's deferred-completion slab (slot 52; [`link_sdma`](Self::link_sdma) named the
    /// engine in it). Only the
    /// core's owning scheduler calls it, for a buffer the core is not using: the
    /// scheduler keeps at most one dispatch pending behind the running one, so the buffer's
    /// previous dispatch has finished.
    pub(crate) fn write_dispatch(
        &self,
        id: u32,
        kernel: u64,
        task: u64,
        local: LocalContext,
        flags: u64,
        args: &KernelArgs,
    ) {
        let mailbox = self.ptr;
        // SAFETY: this core's mailbox is written only by its owning scheduler (the caller);
        // buffer `id & 1` is not in use: the core reads a buffer only after its id is in DMB,
        // and the dispatch that last used this buffer has finished.
        unsafe {
            let p = std::ptr::addr_of_mut!((*mailbox).payloads[(id & 1) as usize]);
            (*p).kernel_addr = kernel;
            (*p).task_id = task;
            (*p).local = local;
            (*p).flags = flags;
            (*p).args = *args;
            (*p).args.slots[LOCAL_CONTEXT_SLOT] = std::ptr::addr_of!((*p).local) as u64;
            (*p).args.slots[GLOBAL_CONTEXT_SLOT] = std::ptr::addr_of!((*mailbox).global) as u64;
            let slab = std::ptr::addr_of_mut!((*mailbox).deferred[(id & 1) as usize]);
            (*slab).count = 0;
            (*slab).error = 0;
            (*p).args.slots[ASYNC_SLAB_SLOT] = slab as u64;
        }
    }

    /// Scheduler side, before the run's first dispatch to this core: names the chip's SDMA
    /// engine (`None`: the chip has none) in both deferred-completion slabs, for the kernels'
    /// [`sdma_copy`](simpler_abi::deferred::sdma_copy).
    pub(crate) fn link_sdma(&self, sdma: Option<&SdmaEngine>) {
        let (submit, engine) = match sdma {
            Some(e) => (
                sdma_submit as SdmaSubmit as usize as u64,
                e as *const SdmaEngine as u64,
            ),
            None => (0, 0),
        };
        // SAFETY: this core's mailbox is written only by its owning scheduler (the caller),
        // and no dispatch of the run has been published to the core yet.
        unsafe {
            for i in 0..2 {
                let slab = std::ptr::addr_of_mut!((*self.ptr).deferred[i]);
                (*slab).sdma_submit = submit;
                (*slab).sdma_engine = engine;
            }
        }
    }

    /// Scheduler side, after dispatch `id`'s FIN: the registration error and the conditions
    /// its kernel left in its slab (`None` when it registered none and no error).
    pub(crate) fn deferred(&self, id: u32) -> Option<(u32, Vec<DeferredCondition>)> {
        // SAFETY: slab `id & 1` belongs to dispatch `id`, whose kernel wrote it before the
        // core's FIN (release; the caller observed it with acquire); the scheduler empties
        // it again only when it writes the buffer's next dispatch.
        unsafe {
            let slab = std::ptr::addr_of!((*self.ptr).deferred[(id & 1) as usize]);
            let (count, error) = ((*slab).count, (*slab).error);
            if count == 0 && error == 0 {
                return None;
            }
            let n = (count as usize).min(MAX_DEFERRED_CONDITIONS);
            Some((error, (&(*slab).conditions)[..n].to_vec()))
        }
    }
}

/// The [`SdmaSubmit`] call a slab names: `engine` is the address of the chip's
/// [`SdmaEngine`], which lives as long as the device (longer than any run).
unsafe extern "C" fn sdma_submit(engine: u64, dst: u64, src: u64, bytes: u64) -> u64 {
    // SAFETY: `link_sdma` stores this function only beside the address of the live
    // engine of the chip the dispatch runs on; the kernel calling it vouches for the copy's
    // memory (`simpler_abi::deferred::sdma_copy`'s contract).
    unsafe {
        let engine = &*(engine as *const SdmaEngine);
        engine.submit(dst, src, bytes).unwrap_or(0)
    }
}

/// The current value of a COUNTER condition's counter (acquire): a `u32` when `narrow`,
/// else a `u64`.
///
/// # Safety
/// `addr` is a non-zero counter address a kernel registered, aligned to the counter's size;
/// the kernel vouches that it is live device memory until the condition holds
/// (`docs/chip-runtime.md` §18).
pub(crate) unsafe fn read_counter(addr: u64, narrow: bool) -> u64 {
    // SAFETY: the caller's contract; the atomics have the layout of their integers.
    unsafe {
        if narrow {
            u64::from((*(addr as *const AtomicU32)).load(Ordering::Acquire))
        } else {
            (*(addr as *const AtomicU64)).load(Ordering::Acquire)
        }
    }
}

/// A run's graph image in device memory, split into its tables (`simpler_abi::graph`).
pub(crate) struct GraphView<'a> {
    pub(crate) header: GraphImageHeader,
    /// Every byte after the header (what the checksum covers).
    pub(crate) body: &'a [u8],
    pub(crate) tasks: &'a [GraphTask],
    pub(crate) tensors: &'a [GraphTensor],
    pub(crate) wakes: &'a [u32],
}

/// A `[T; count]` table in device memory, copied out.
///
/// # Safety
/// `addr` must be 0 (or `count` 0), or hold `count` initialized entries of `T`.
unsafe fn table<T: Copy>(addr: u64, count: usize) -> Vec<T> {
    if addr == 0 || count == 0 {
        return Vec::new();
    }
    // SAFETY: guaranteed by the caller.
    unsafe { std::slice::from_raw_parts(addr as *const T, count).to_vec() }
}

/// Calls `f(byte address, element index)` for every element of a view, row-major.
fn for_each_element(t: &ChipTensor, elem: u64, mut f: impl FnMut(u64, usize)) {
    let nd = (t.ndims as usize).min(MAX_TENSOR_DIMS);
    let shape = &t.shapes[..nd];
    if nd == 0 || shape.contains(&0) {
        return;
    }
    let mut idx = [0u64; MAX_TENSOR_DIMS];
    let mut n = 0usize;
    loop {
        let off = t.start_offset + (0..nd).map(|d| idx[d] * t.strides[d]).sum::<u64>();
        f(t.buffer_addr + off * elem, n);
        n += 1;
        let mut d = nd;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Copies a view's elements, packed row-major, into `out` (`out.len()` = numel × elem size).
///
/// # Safety
/// Every element of the view must lie inside its buffer, a live device allocation of this
/// run that no task writes during the call, and `out` must hold numel × elem bytes.
pub(crate) unsafe fn read_view(t: &ChipTensor, out: &mut [u8]) {
    let elem = t.data_type().map_or(1, |d| d.size_bytes()) as u64;
    let e = elem as usize;
    for_each_element(t, elem, |addr, n| {
        // SAFETY: the element lies in live device memory nobody writes now (the caller's
        // contract).
        let src = unsafe { std::slice::from_raw_parts(addr as *const u8, e) };
        out[n * e..(n + 1) * e].copy_from_slice(src);
    });
}

/// Writes `data`, packed row-major, into a view's elements.
///
/// # Safety
/// Every element of the view must lie inside its buffer, a live device allocation of this
/// run that no task reads or writes during the call, and `data` must hold numel × elem
/// bytes.
pub(crate) unsafe fn write_view(t: &ChipTensor, data: &[u8]) {
    let elem = t.data_type().map_or(1, |d| d.size_bytes()) as u64;
    let e = elem as usize;
    for_each_element(t, elem, |addr, n| {
        // SAFETY: the element lies in live device memory nobody touches now (the caller's
        // contract), so the write does not race.
        let dst = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, e) };
        dst.copy_from_slice(&data[n * e..(n + 1) * e]);
    });
}
