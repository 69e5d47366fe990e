//! In-process kernels over 1-D contiguous f32 tensors, and access to a kernel's arguments.
//! Kernels get the runtime's argument array (`simpler/kernel.h` layout): tensor pointers
//! first, the core's `GlobalContext` at [`GLOBAL_CONTEXT_SLOT`]. Device memory is host memory
//! on the sim device, so a tensor's address is readable here.

use simpler_abi::{ChipTensor, GlobalContext, GLOBAL_CONTEXT_SLOT};

/// Tensor argument `i` of a kernel whose arguments are `args`.
///
/// # Safety
/// `args` is a kernel argument array from the runtime with more than `i` tensors.
pub unsafe fn tensor<'a>(args: *mut i64, i: usize) -> &'a ChipTensor {
    // SAFETY: the runtime passes tensor pointers in the first slots of a kernel's arguments.
    unsafe { &*(*args.add(i) as *const ChipTensor) }
}

/// The elements of `t`, a 1-D contiguous f32 tensor (its `shapes[0]` elements from
/// `start_offset`).
pub fn data<'a>(t: &ChipTensor) -> &'a mut [f32] {
    // SAFETY: a 1-D contiguous f32 view of device (= host) memory owned by the run.
    unsafe {
        std::slice::from_raw_parts_mut(
            (t.buffer_addr as *mut f32).add(t.start_offset as usize),
            t.shapes[0] as usize,
        )
    }
}

/// `y = x + 1` element-wise, `x` tensor argument 0 and `y` tensor argument 1 (1-D f32, as
/// many elements as `y`).
///
/// # Safety
/// `args` is a kernel argument array whose first two tensors are such views.
pub unsafe extern "C-unwind" fn add_one(args: *mut i64) {
    // SAFETY: the caller passes two 1-D f32 tensors first.
    let (x, y) = unsafe { (data(tensor(args, 0)), data(tensor(args, 1))) };
    for i in 0..y.len() {
        y[i] = x[i] + 1.0;
    }
}

/// Reports fatal code 42 through the core's `GlobalContext` and touches nothing else.
///
/// # Safety
/// `args` is a kernel argument array from the runtime.
pub unsafe extern "C-unwind" fn fatal_42(args: *mut i64) {
    // SAFETY: the argument slot GLOBAL_CONTEXT_SLOT points to the core's GlobalContext.
    unsafe { (*(*args.add(GLOBAL_CONTEXT_SLOT) as *mut GlobalContext)).fatal_code = 42 };
}
