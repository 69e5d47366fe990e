//! Reading and writing the caller's memory at the boundary: the versioned config structs,
//! argument arrays, byte ranges, C strings and out-parameters. Every raw pointer a C caller
//! passes (other than host tensors, [`crate::host_buffer`]) is turned into a Rust value
//! here, after a NULL check that names the parameter. The safety contract of every function
//! is the header's: a non-NULL pointer points to what the entry documents.

use std::ffi::{c_char, CStr};

use crate::status::Failure;

/// A versioned struct: a `u32` size then a `u32` version first, zero meaning "default" for
/// every later field.
pub trait Versioned: Copy + Default {
    /// The C name, for messages.
    const NAME: &'static str;
    /// The only version this library reads.
    const VERSION: u32;
}

/// Reads a versioned struct: at most `size` bytes of it (a field past `size` stays zero);
/// NULL gives the defaults with `size` and `version` filled in.
///
/// # Errors
/// `SIMPLER_STATUS_INVALID_ARGUMENT` naming `param` when `size` is below 8 or `version` is
/// not `T::VERSION`.
///
/// # Safety
/// `ptr` is NULL or points to at least `min(size, size_of::<T>())` readable bytes whose
/// first 4 bytes are the `size`.
pub unsafe fn read_versioned<T: Versioned>(
    ptr: *const T,
    param: &str,
) -> Result<Option<T>, Failure> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract: `ptr` points to a struct that starts with its size.
    let size = unsafe { ptr.cast::<u32>().read_unaligned() } as usize;
    if size < 8 {
        return Err(Failure::invalid(
            &format!("{param}->size"),
            format!("{size} is not the size of a {} (set it to sizeof)", T::NAME),
        ));
    }
    let mut out = T::default();
    let n = size.min(std::mem::size_of::<T>());
    // SAFETY: `n` bytes are readable (the contract), `out` has room for `size_of::<T>() ≥ n`,
    // and `T` is plain data (integers), valid for any bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(ptr.cast::<u8>(), (&mut out as *mut T).cast::<u8>(), n);
    }
    // SAFETY: the version is the second `u32` and `size ≥ 8`.
    let version = unsafe { ptr.cast::<u32>().add(1).read_unaligned() };
    if version != T::VERSION {
        return Err(Failure::invalid(
            &format!("{param}->version"),
            format!(
                "{version} is not a {} version this library reads (use {})",
                T::NAME,
                T::VERSION
            ),
        ));
    }
    Ok(Some(out))
}

/// `len` bytes at `ptr` (`len == 0` allows NULL).
///
/// # Errors
/// `SIMPLER_STATUS_NULL_POINTER` naming `param`.
///
/// # Safety
/// A non-NULL `ptr` points to `len` readable bytes that stay unchanged during the call.
pub unsafe fn bytes<'a>(ptr: *const u8, len: usize, param: &str) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Failure::null(param));
    }
    check_extent(ptr, len, param)?;
    // SAFETY: the caller's contract; `check_extent` keeps the range within what a slice
    // can describe.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// `len` writable bytes at `ptr` (`len == 0` allows NULL).
///
/// # Errors
/// `SIMPLER_STATUS_NULL_POINTER` naming `param`.
///
/// # Safety
/// A non-NULL `ptr` points to `len` writable bytes nothing else uses during the call.
pub unsafe fn bytes_mut<'a>(
    ptr: *mut u8,
    len: usize,
    param: &str,
) -> Result<&'a mut [u8], Failure> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(Failure::null(param));
    }
    check_extent(ptr, len, param)?;
    // SAFETY: the caller's contract; `check_extent` keeps the range within what a slice
    // can describe.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// The `n` elements at `ptr` (`n == 0` allows NULL).
///
/// # Errors
/// `SIMPLER_STATUS_NULL_POINTER` naming `param`.
///
/// # Safety
/// A non-NULL `ptr` points to `n` initialized `T`s that stay unchanged during the call.
pub unsafe fn array<'a, T>(ptr: *const T, n: usize, param: &str) -> Result<&'a [T], Failure> {
    if n == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(Failure::null(param));
    }
    if !ptr.is_aligned() {
        return Err(Failure::invalid(
            param,
            format!(
                "{ptr:p} is not aligned to {} bytes",
                std::mem::align_of::<T>()
            ),
        ));
    }
    check_extent(
        ptr.cast::<u8>(),
        n.saturating_mul(std::mem::size_of::<T>()),
        param,
    )?;
    // SAFETY: the caller's contract; the pointer is aligned and `check_extent` keeps the
    // range within what a slice can describe.
    Ok(unsafe { std::slice::from_raw_parts(ptr, n) })
}

/// Refuses a range no Rust slice can describe: more than `isize::MAX` bytes, or one that
/// wraps past the end of the address space (a count a caller got wrong, never memory it
/// has). The one check of a caller's host range: the copy entries ([`bytes`],
/// [`bytes_mut`]) and `simpler_prepare_run`'s host tensors apply it.
///
/// # Errors
/// `SIMPLER_STATUS_INVALID_ARGUMENT` naming `param`.
pub fn check_extent(ptr: *const u8, len: usize, param: &str) -> Result<(), Failure> {
    if len > isize::MAX as usize || (ptr as usize).checked_add(len).is_none() {
        return Err(Failure::invalid(
            param,
            format!("{len} bytes at {ptr:p} run past the end of the address space"),
        ));
    }
    Ok(())
}

/// The NUL-terminated string at `ptr`, as UTF-8.
///
/// # Errors
/// `SIMPLER_STATUS_NULL_POINTER` or `SIMPLER_STATUS_INVALID_ARGUMENT` (not UTF-8), naming
/// `param`.
///
/// # Safety
/// A non-NULL `ptr` points to a NUL-terminated string.
pub unsafe fn c_str<'a>(ptr: *const c_char, param: &str) -> Result<&'a str, Failure> {
    if ptr.is_null() {
        return Err(Failure::null(param));
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(ptr) }
        .to_str()
        .map_err(|e| Failure::invalid(param, format!("not UTF-8: {e}")))
}

/// An out-parameter: checked for NULL up front, written once the entry knows the value.
pub struct Out<T: Copy>(*mut T);

impl<T: Copy> Out<T> {
    /// The out-parameter `ptr`, written with `initial` at once (a failure leaves it so).
    ///
    /// # Errors
    /// `SIMPLER_STATUS_NULL_POINTER` naming `param`.
    ///
    /// # Safety
    /// A non-NULL `ptr` points to a writable `T` for the whole entry call.
    pub unsafe fn new(ptr: *mut T, initial: T, param: &str) -> Result<Out<T>, Failure> {
        if ptr.is_null() {
            return Err(Failure::null(param));
        }
        // SAFETY: the caller's contract.
        unsafe { ptr.write_unaligned(initial) };
        Ok(Out(ptr))
    }

    /// Writes the value.
    pub fn set(&self, value: T) {
        // SAFETY: `new`'s contract covers the whole entry call, which `self` does not outlive
        // (it is never stored).
        unsafe { self.0.write_unaligned(value) };
    }
}

/// A C function and its argument, to be called once on another thread (a host function on
/// a stream).
pub struct ForeignCall {
    f: extern "C" fn(*mut std::ffi::c_void),
    user: *mut std::ffi::c_void,
}

// SAFETY: `new`'s contract: the caller allows `f(user)` on another thread.
unsafe impl Send for ForeignCall {}

impl ForeignCall {
    /// `f(user)`, to be sent to another thread.
    ///
    /// # Safety
    /// `f` may be called once with `user` from any thread.
    pub unsafe fn new(
        f: extern "C" fn(*mut std::ffi::c_void),
        user: *mut std::ffi::c_void,
    ) -> ForeignCall {
        ForeignCall { f, user }
    }

    /// Calls `f(user)`.
    pub fn invoke(self) {
        (self.f)(self.user)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::SimplerStatus;
    use crate::types::SimplerContextConfig;

    #[test]
    fn a_shorter_struct_reads_its_prefix_and_the_rest_as_zero() {
        let full = SimplerContextConfig {
            size: 16,
            version: 1,
            clusters: 3,
            aicpu_threads: 4,
            sim_memcheck: 2,
            heap_size: 99,
            ..Default::default()
        };
        // SAFETY: `full` is a whole, readable struct.
        let got = unsafe { read_versioned(&full, "config") }.unwrap().unwrap();
        assert_eq!((got.clusters, got.aicpu_threads), (3, 4));
        assert_eq!(got.sim_memcheck, 0, "past `size`: zero");
        assert_eq!(got.heap_size, 0, "past `size`: zero");
        // SAFETY: NULL is allowed.
        let none = unsafe { read_versioned::<SimplerContextConfig>(std::ptr::null(), "c") };
        assert_eq!(none, Ok(None));
    }

    #[test]
    fn a_bad_size_or_version_is_refused_by_name() {
        let mut c = SimplerContextConfig {
            size: 4,
            version: 1,
            ..Default::default()
        };
        // SAFETY: `c` is a whole, readable struct.
        let e = unsafe { read_versioned(&c, "config") }.unwrap_err();
        assert_eq!(e.status, SimplerStatus::InvalidArgument);
        assert!(e.message.contains("config->size"), "{}", e.message);
        c.size = 72;
        c.version = 2;
        // SAFETY: as above.
        let e = unsafe { read_versioned(&c, "config") }.unwrap_err();
        assert!(e.message.contains("config->version"), "{}", e.message);
    }

    #[test]
    fn null_pointers_are_named() {
        // SAFETY: NULL is checked before any access.
        let e = unsafe { bytes(std::ptr::null(), 3, "src") }.unwrap_err();
        assert_eq!(e.status, SimplerStatus::NullPointer);
        assert!(e.message.contains("`src`"));
        // SAFETY: a zero length never reads.
        assert!(unsafe { bytes(std::ptr::null(), 0, "src") }
            .unwrap()
            .is_empty());
    }
}
