//! Byte views of the plain `#[repr(C)]` ABI records the host writes to and reads from device
//! memory. Only types listed here (all-integer records without padding or pointers with
//! validity rules) can be viewed, so every bit pattern read back is a valid value.

use simpler_abi::{
    OrchArgs, RunLaunchDesc, RunResult, TraceBufferHeader, TraceControl, TraceRecord,
};

/// A record that is plain bytes: `#[repr(C)]`, integers and integer arrays only, no padding.
///
/// # Safety
/// Implement only for types for which every bit pattern is valid and which have no padding.
pub(crate) unsafe trait Plain: Copy {}

// SAFETY: all three are #[repr(C)] records of u32/u64/i32/u8 fields and arrays thereof whose
// layouts are asserted in simpler-abi to have no gaps.
unsafe impl Plain for OrchArgs {}
// SAFETY: as above.
unsafe impl Plain for RunLaunchDesc {}
// SAFETY: as above.
unsafe impl Plain for RunResult {}
// SAFETY: the trace records are #[repr(C)] u32/u64 records whose layouts are asserted in
// simpler-abi to have no gaps (explicit `reserved` words fill the alignment holes).
unsafe impl Plain for TraceControl {}
// SAFETY: as above.
unsafe impl Plain for TraceBufferHeader {}
// SAFETY: as above.
unsafe impl Plain for TraceRecord {}

/// The bytes of a plain record.
pub(crate) fn bytes_of<T: Plain>(v: &T) -> &[u8] {
    // SAFETY: `T: Plain` has no padding, so all `size_of::<T>()` bytes are initialized.
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>()) }
}

/// A plain record read from bytes of exactly its size.
pub(crate) fn from_bytes<T: Plain>(b: &[u8]) -> Option<T> {
    if b.len() != std::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: the length matches and every bit pattern is a valid `T`; `read_unaligned`
    // makes no alignment assumption about the slice.
    Some(unsafe { std::ptr::read_unaligned(b.as_ptr() as *const T) })
}

/// The bytes of a slice of plain records, writable: how records are read back in place.
pub(crate) fn slice_bytes_mut<T: Plain>(v: &mut [T]) -> &mut [u8] {
    // SAFETY: `T: Plain` has no padding and every bit pattern is a valid `T`, so any bytes
    // written through the view leave valid records; the view covers exactly the slice.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(v)) }
}
