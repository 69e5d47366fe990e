//! The orchestrator: runs the user's orchestration entry on the top AICPU thread and serves
//! its calls through the [`OrchOps`] table — task submission with dependency discovery,
//! runtime-allocated outputs, scopes, fatal reports and logging.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::Ordering;

use simpler_abi::*;

use super::state::{RunShared, TaskBody};
use super::tensormap::{Region, TensorMap};

/// Most nested scopes (`PTO2_MAX_SCOPE_DEPTH`).
pub const MAX_SCOPE_DEPTH: usize = 64;
/// Alignment of runtime-allocated outputs in the heap, bytes.
pub const OUTPUT_ALIGN: u64 = 1024;

/// Orchestrator-thread state behind the `runtime` pointer of the ops table.
pub(crate) struct Orchestrator<'a> {
    shared: &'a RunShared,
    map: TensorMap,
    /// Open scopes (mode per level), innermost last.
    scopes: Vec<u32>,
    heap_next: u64,
    heap_end: u64,
    deps: Vec<u32>,
    clusters: u32,
}

impl<'a> Orchestrator<'a> {
    pub(crate) fn new(shared: &'a RunShared, clusters: u32) -> Orchestrator<'a> {
        let d = &shared.desc;
        Orchestrator {
            shared,
            map: TensorMap::default(),
            scopes: Vec::new(),
            heap_next: d.heap_addr,
            heap_end: d.heap_addr.saturating_add(d.heap_size),
            deps: Vec::with_capacity(64),
            clusters,
        }
    }

    /// Runs the orchestration entry inside an outer scope, then marks the orchestration done.
    pub(crate) fn run(&mut self) {
        let entry_addr = self.shared.desc.orch_entry;
        if entry_addr == 0 {
            self.fail(ORCH_INVALID_ARGS, || {
                "the run has no orchestration entry".into()
            });
        } else {
            let ops = OrchOps {
                size: std::mem::size_of::<OrchOps>() as u32,
                version: ORCH_OPS_VERSION,
                runtime: self as *mut Orchestrator<'a> as *mut c_void,
                submit_task: op_submit_task,
                scope_begin: op_scope_begin,
                scope_end: op_scope_end,
                report_fatal: op_report_fatal,
                is_fatal: op_is_fatal,
                log: op_log,
                cluster_count: op_cluster_count,
                aiv_count: op_aiv_count,
            };
            let args = crate::devmem::orch_args(self.shared.desc.orch_args_addr);
            self.scopes.push(SCOPE_AUTO);
            // SAFETY: `orch_entry` is the resolved entry of the registered orchestration,
            // which follows the `OrchEntry` contract; `ops` and `args` outlive the call.
            let rc = unsafe {
                let entry: OrchEntry = std::mem::transmute::<u64, OrchEntry>(entry_addr);
                entry(&ops, args)
            };
            if rc != 0 {
                self.fail(ORCH_EXPLICIT_FATAL, || {
                    format!("the orchestration returned {rc}")
                });
            }
            self.scopes.clear();
        }
        self.shared.orch_done.store(true, Ordering::Release);
        self.shared.ring_schedulers();
    }

    fn fail(&self, code: i32, message: impl FnOnce() -> String) -> i32 {
        self.shared.errors.orch_fail(code, message)
    }

    fn invalid(&self, message: impl FnOnce() -> String) -> i32 {
        self.fail(ORCH_INVALID_ARGS, message)
    }

    /// Checks a submission and resolves its kernel: (func id, address, core type).
    fn check_desc(&self, d: &TaskDesc) -> Result<(i32, u64, CoreType), i32> {
        if d.size as usize != std::mem::size_of::<TaskDesc>() {
            return Err(self.invalid(|| {
                format!(
                    "TaskDesc.size is {} but this runtime expects {}",
                    d.size,
                    std::mem::size_of::<TaskDesc>()
                )
            }));
        }
        if d.tensor_count as usize > MAX_TASK_TENSORS
            || d.scalar_count as usize > MAX_TASK_SCALARS
            || d.dep_count as usize > MAX_TASK_DEPS
        {
            return Err(self.invalid(|| {
                format!(
                    "a task has {} tensors, {} scalars and {} dependencies; the limits are {MAX_TASK_TENSORS}, {MAX_TASK_SCALARS} and {MAX_TASK_DEPS}",
                    d.tensor_count, d.scalar_count, d.dep_count
                )
            }));
        }
        if d.block_num != 1 {
            return Err(
                self.invalid(|| format!("block_num {} is not supported; use 1", d.block_num))
            );
        }
        let mut ids = d.kernel_ids;
        if ids[LANE_AIV0] == NO_KERNEL {
            ids[LANE_AIV0] = ids[LANE_AIV1];
            ids[LANE_AIV1] = NO_KERNEL;
        }
        let (func_id, core_type) = match (ids[LANE_AIC], ids[LANE_AIV0], ids[LANE_AIV1]) {
            (f, NO_KERNEL, NO_KERNEL) if f != NO_KERNEL => (f, CoreType::Aic),
            (NO_KERNEL, f, NO_KERNEL) if f != NO_KERNEL => (f, CoreType::Aiv),
            (NO_KERNEL, NO_KERNEL, NO_KERNEL) => {
                return Err(self.invalid(|| "a task names no kernel".into()));
            }
            _ => {
                return Err(self.invalid(|| {
                    format!(
                        "a task names kernels on several lanes {:?}; MIX tasks are not supported",
                        d.kernel_ids
                    )
                }));
            }
        };
        let idx = usize::try_from(func_id)
            .ok()
            .filter(|&i| i < self.shared.func_addrs.len());
        let Some(idx) = idx else {
            return Err(self
                .invalid(|| format!("func id {func_id} is outside the callable's kernel table")));
        };
        let addr = self.shared.func_addrs[idx];
        let registered = self.shared.func_types[idx];
        if addr == 0 || registered == 0 {
            return Err(self.invalid(|| format!("no kernel is registered under func id {func_id}")));
        }
        if registered != core_type as u32 + 1 {
            return Err(self.invalid(|| {
                format!("func id {func_id} is registered for another core type than {core_type}")
            }));
        }
        Ok((func_id, addr, core_type))
    }

    /// Carves an output buffer out of the heap.
    fn alloc_output(&mut self, t: &mut ChipTensor, arg: usize) -> Result<(), i32> {
        let nd = t.ndims as usize;
        let dtype = t.data_type();
        let Some(dtype) = dtype.filter(|_| (1..=MAX_TENSOR_DIMS).contains(&nd)) else {
            return Err(self.invalid(|| {
                format!("output argument {arg} has ndims {} and dtype {}; need 1..=5 dims and a known dtype", t.ndims, t.dtype)
            }));
        };
        let shape: Vec<u64> = t.shapes[..nd].to_vec();
        let bytes = shape
            .iter()
            .try_fold(dtype.size_bytes() as u64, |acc, &s| acc.checked_mul(s))
            .filter(|&b| b > 0);
        let Some(bytes) = bytes else {
            return Err(self.invalid(|| {
                format!("output argument {arg} has an empty or overflowing shape {shape:?}")
            }));
        };
        let addr = self.heap_next.div_ceil(OUTPUT_ALIGN) * OUTPUT_ALIGN;
        if addr
            .checked_add(bytes)
            .is_none_or(|end| end > self.heap_end)
        {
            let (left, total) = (
                self.heap_end.saturating_sub(addr),
                self.shared.desc.heap_size,
            );
            return Err(self.fail(ORCH_HEAP_RING_DEADLOCK, || {
                format!("the output heap cannot fit {bytes} bytes for output argument {arg} ({left} of {total} bytes left)")
            }));
        }
        self.heap_next = addr + bytes;
        *t = ChipTensor::contiguous(addr, &shape, dtype);
        Ok(())
    }

    fn submit(&mut self, d: &TaskDesc, outputs: Option<&mut TaskOutputs>) -> i32 {
        if self.shared.errors.is_fatal() {
            return self
                .shared
                .errors
                .verdict()
                .map_or(ORCH_EXPLICIT_FATAL, |(c, _)| c);
        }
        let (func_id, kernel_addr, core_type) = match self.check_desc(d) {
            Ok(k) => k,
            Err(code) => return code,
        };
        let id = self.shared.submitted.load(Ordering::Relaxed);
        if id >= self.shared.desc.task_window || !self.shared.tasks.ensure(id) {
            let window = self.shared.desc.task_window;
            return self.fail(ORCH_FLOW_CONTROL_DEADLOCK, || {
                format!("the run submitted more than {window} tasks (the task window)")
            });
        }
        let n = d.tensor_count as usize;
        let mut tensors: Box<[ChipTensor]> = d.tensors[..n].into();
        let mut tags = [TensorArgType::Input; MAX_TASK_TENSORS];
        for (i, &raw) in d.tags[..n].iter().enumerate() {
            match TensorArgType::from_raw(raw) {
                Some(tag) => tags[i] = tag,
                None => {
                    return self.invalid(|| format!("tensor argument {i} has unknown tag {raw}"))
                }
            }
        }
        // Validate existing views and allocate outputs before touching the tensor map.
        let mut regions: [Option<Region>; MAX_TASK_TENSORS] = [None; MAX_TASK_TENSORS];
        for i in 0..n {
            if tags[i] == TensorArgType::Output {
                if let Err(code) = self.alloc_output(&mut tensors[i], i) {
                    return code;
                }
                tensors[i].owner_task_id = u64::from(id);
            }
            let t = &tensors[i];
            let elem = match t.data_type() {
                Some(dt) if (1..=MAX_TENSOR_DIMS as u32).contains(&t.ndims) => dt.size_bytes() as u64,
                _ => {
                    return self.invalid(|| {
                        format!("tensor argument {i} has ndims {} and dtype {}; need 1..=5 dims and a known dtype", t.ndims, t.dtype)
                    })
                }
            };
            let region = Region::of(t, elem);
            let end = t.buffer_addr.saturating_add(t.buffer_size);
            match region {
                Some(r) if r.lo >= t.buffer_addr && r.hi <= end => regions[i] = Some(r),
                _ => {
                    return self.invalid(|| {
                        format!(
                            "tensor argument {i} (shape {:?}, start offset {}) reaches outside its buffer of {} bytes",
                            t.shape(), t.start_offset, t.buffer_size
                        )
                    })
                }
            }
        }
        // Explicit dependencies.
        let mut deps = std::mem::take(&mut self.deps);
        deps.clear();
        for &dep in &d.deps[..d.dep_count as usize] {
            if dep >= u64::from(id) {
                self.deps = deps;
                return self.invalid(|| {
                    format!("explicit dependency on task {dep}, which is not an earlier task")
                });
            }
            if !deps.contains(&(dep as u32)) {
                deps.push(dep as u32);
            }
        }
        // Discovered dependencies (none inside a MANUAL scope).
        let manual = self.scopes.last() == Some(&SCOPE_MANUAL);
        let tasks = &self.shared.tasks;
        if !manual {
            for i in 0..n {
                let (Some(r), tag) = (regions[i], tags[i]) else {
                    continue;
                };
                if matches!(tag, TensorArgType::NoDep | TensorArgType::Output) {
                    continue;
                }
                let done = |t: u32| tasks.get(t).done.load(Ordering::Acquire);
                self.map
                    .conflicts(tensors[i].buffer_addr, &r, tag.writes(), done, &mut deps);
            }
            for i in 0..n {
                if let (Some(r), tag) = (regions[i], tags[i]) {
                    if tag != TensorArgType::NoDep {
                        self.map.record(tensors[i].buffer_addr, r, tag.writes(), id);
                    }
                }
            }
        }
        // Publish the body, then wire the producers.
        let mut args = KernelArgs::default();
        for i in 0..n {
            args.slots[i] = &tensors[i] as *const ChipTensor as u64;
        }
        args.slots[n..n + d.scalar_count as usize]
            .copy_from_slice(&d.scalars[..d.scalar_count as usize]);
        if let Some(out) = outputs {
            out.task_id = u64::from(id);
            out.count = 0;
            for i in 0..n {
                if tags[i] == TensorArgType::Output {
                    out.tensors[out.count as usize] = tensors[i];
                    out.count += 1;
                }
            }
        }
        let task = tasks.get(id);
        task.fanin.store(1, Ordering::Relaxed);
        let _ = task.body.set(TaskBody {
            id,
            func_id,
            kernel_addr,
            core_type,
            tensors,
            args,
        });
        self.shared.submitted.store(id + 1, Ordering::Release);
        for &p in &deps {
            let mut f = tasks.get(p).fanout.lock();
            if !f.completed {
                f.consumers.push(id);
                task.fanin.fetch_add(1, Ordering::AcqRel);
            }
        }
        self.deps = deps;
        if task.fanin.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.shared.push_ready(id);
        }
        0
    }
}

/// Recovers the orchestrator behind the ops table's `runtime` pointer.
///
/// # Safety
/// `rt` must be the `runtime` field of a table built by [`Orchestrator::run`], called on
/// the orchestrator thread during the entry call.
unsafe fn orch<'x>(rt: *mut c_void) -> &'x mut Orchestrator<'x> {
    // SAFETY: guaranteed by the caller.
    unsafe { &mut *(rt as *mut Orchestrator<'x>) }
}

fn text(message: *const c_char) -> String {
    if message.is_null() {
        return String::new();
    }
    // SAFETY: the ops contract requires a NUL-terminated string or null.
    unsafe { CStr::from_ptr(message) }
        .to_string_lossy()
        .into_owned()
}

unsafe extern "C" fn op_submit_task(
    rt: *mut c_void,
    desc: *const TaskDesc,
    outputs: *mut TaskOutputs,
) -> i32 {
    // SAFETY: called by the orchestration through the table during the entry call.
    let o = unsafe { orch(rt) };
    if desc.is_null() {
        return o.invalid(|| "submit_task was passed a null TaskDesc".into());
    }
    // SAFETY: non-null `desc` points to a caller-owned TaskDesc (its size is checked next);
    // `outputs` is null or a caller-owned TaskOutputs.
    let (d, out) = unsafe { (&*desc, outputs.as_mut()) };
    o.submit(d, out)
}

unsafe extern "C" fn op_scope_begin(rt: *mut c_void, mode: u32) -> i32 {
    // SAFETY: called through the table during the entry call.
    let o = unsafe { orch(rt) };
    if mode != SCOPE_AUTO && mode != SCOPE_MANUAL {
        return o.invalid(|| format!("unknown scope mode {mode}"));
    }
    if mode == SCOPE_AUTO && o.scopes.contains(&SCOPE_MANUAL) {
        return o.invalid(|| "an AUTO scope cannot open inside a MANUAL scope".into());
    }
    if o.scopes.len() >= MAX_SCOPE_DEPTH {
        return o.invalid(|| format!("scopes nest deeper than {MAX_SCOPE_DEPTH}"));
    }
    o.scopes.push(mode);
    0
}

unsafe extern "C" fn op_scope_end(rt: *mut c_void) -> i32 {
    // SAFETY: called through the table during the entry call.
    let o = unsafe { orch(rt) };
    if o.scopes.len() <= 1 {
        return o.invalid(|| "scope_end without a matching scope_begin".into());
    }
    o.scopes.pop();
    0
}

unsafe extern "C" fn op_report_fatal(rt: *mut c_void, code: i32, message: *const c_char) {
    // SAFETY: called through the table during the entry call.
    let o = unsafe { orch(rt) };
    let msg = text(message);
    o.fail(ORCH_EXPLICIT_FATAL, || {
        format!("the orchestration reported a fatal error (code {code}): {msg}")
    });
}

unsafe extern "C" fn op_is_fatal(rt: *mut c_void) -> i32 {
    // SAFETY: called through the table during the entry call.
    i32::from(unsafe { orch(rt) }.shared.errors.is_fatal())
}

unsafe extern "C" fn op_log(_rt: *mut c_void, level: u32, message: *const c_char) {
    let msg = text(message);
    let tag = match level {
        LOG_ERROR => "error",
        LOG_WARN => "warn",
        LOG_INFO => "info",
        _ => "debug",
    };
    if level <= LOG_WARN || std::env::var_os("SIMPLER_ORCH_LOG").is_some() {
        eprintln!("[orchestration {tag}] {msg}");
    }
}

unsafe extern "C" fn op_cluster_count(rt: *mut c_void) -> u32 {
    // SAFETY: called through the table during the entry call.
    unsafe { orch(rt) }.clusters
}

unsafe extern "C" fn op_aiv_count(rt: *mut c_void) -> u32 {
    // SAFETY: called through the table during the entry call.
    unsafe { orch(rt) }.clusters * 2
}
