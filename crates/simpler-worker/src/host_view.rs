//! Host tensors as byte slices: the one place the engine turns a contiguous host view into
//! `&[u8]` / `&mut [u8]` (copy tasks, and the byte accessors of [`SubArgs`] that sub
//! closures use). The engine's tensor map gives a running task exclusive write access to
//! the footprints it writes (`docs/l3-worker.md` §3); this module relies on that and on the
//! [`HostMemory`](crate::HostMemory) contract, and touches nothing else.

use simpler_abi::DataType;

use crate::endpoint::SubArgs;
use crate::tensor::{Memory, TaskArg, Tensor};

/// Why a tensor has no byte view.
fn no_view(t: &Tensor) -> Option<String> {
    match t.memory() {
        Memory::Child(c) => Some(format!(
            "it is device memory of chip {}; only host tensors have bytes here",
            c.worker
        )),
        Memory::Host(_) if !t.is_contiguous() => Some(format!(
            "a view of shape {:?} with strides {:?} is not contiguous",
            t.shape(),
            t.strides()
        )),
        Memory::Host(_) => None,
    }
}

/// The bytes of a contiguous host tensor.
///
/// # Errors
/// The reason when `t` is device memory or not contiguous.
pub(crate) fn bytes(t: &Tensor) -> Result<&[u8], String> {
    if let Some(why) = no_view(t) {
        return Err(why);
    }
    let Memory::Host(m) = t.memory() else {
        unreachable!("checked above")
    };
    // SAFETY: the view was checked to lie inside the memory (`Tensor::view`), which stays
    // mapped while `t` holds it; no task writes this footprint while the reader runs.
    Ok(unsafe {
        std::slice::from_raw_parts(
            m.as_ptr().add(t.byte_offset() as usize),
            t.nbytes() as usize,
        )
    })
}

/// The bytes of a contiguous, writable host tensor, for the one task that writes it.
///
/// # Safety
/// The caller holds the only access to these bytes for the slice's life (the engine's
/// ordering of a writing task, `docs/l3-worker.md` §3).
///
/// # Errors
/// The reason when `t` is device memory, not contiguous or read-only.
// The exclusive access is the caller's promise (the `# Safety` contract), not the borrow's.
#[allow(clippy::mut_from_ref)]
pub(crate) unsafe fn bytes_mut(t: &Tensor) -> Result<&mut [u8], String> {
    if let Some(why) = no_view(t) {
        return Err(why);
    }
    let Memory::Host(m) = t.memory() else {
        unreachable!("checked above")
    };
    if m.read_only() {
        return Err("its host memory is read-only".into());
    }
    // SAFETY: inside the memory (as in `bytes`), writable (checked), and the caller holds
    // the only access.
    Ok(unsafe {
        std::slice::from_raw_parts_mut(
            m.as_ptr().add(t.byte_offset() as usize),
            t.nbytes() as usize,
        )
    })
}

impl SubArgs<'_> {
    /// Number of arguments.
    pub fn len(&self) -> usize {
        self.args.len()
    }

    /// True with no arguments.
    pub fn is_empty(&self) -> bool {
        self.args.is_empty()
    }

    /// Argument `i` when it is a tensor.
    pub fn tensor(&self, i: usize) -> Option<&Tensor> {
        match self.args.get(i) {
            Some(TaskArg::Tensor(t, _)) => Some(t),
            _ => None,
        }
    }

    /// Argument `i` when it is a scalar (its raw 64 bits).
    pub fn scalar(&self, i: usize) -> Option<u64> {
        match self.args.get(i) {
            Some(TaskArg::Scalar(v)) => Some(*v),
            _ => None,
        }
    }

    fn host_tensor(&self, i: usize) -> Result<&Tensor, String> {
        self.tensor(i)
            .ok_or_else(|| format!("argument {i} is not a tensor"))
    }

    /// A copy of tensor argument `i`'s bytes (a contiguous host tensor), in element order.
    ///
    /// # Errors
    /// Text naming the argument when it is no tensor, device memory or not contiguous.
    pub fn read(&self, i: usize) -> Result<Vec<u8>, String> {
        let t = self.host_tensor(i)?;
        bytes(t)
            .map(<[u8]>::to_vec)
            .map_err(|why| format!("argument {i}: {why}"))
    }

    /// Tensor argument `i`'s elements as `f32` (a contiguous host tensor of 4-byte
    /// elements).
    ///
    /// # Errors
    /// As [`read`](SubArgs::read).
    pub fn read_f32(&self, i: usize) -> Result<Vec<f32>, String> {
        Ok(self
            .read(i)?
            .chunks_exact(4)
            .map(|c| f32::from_ne_bytes(c.try_into().expect("4 bytes")))
            .collect())
    }

    /// Writes `data` over tensor argument `i` (a contiguous, writable host tensor of exactly
    /// `data.len()` bytes, tagged as written or NO_DEP).
    ///
    /// # Errors
    /// Text naming the argument when it is no tensor, device memory, not contiguous,
    /// read-only, tagged INPUT, or of another size.
    pub fn write(&self, i: usize, data: &[u8]) -> Result<(), String> {
        let Some(TaskArg::Tensor(t, tag)) = self.args.get(i) else {
            return Err(format!("argument {i} is not a tensor"));
        };
        if *tag == crate::Tag::Input {
            return Err(format!(
                "argument {i} is tagged INPUT; it cannot be written"
            ));
        }
        // SAFETY: the engine ordered this task after every other access of the footprint
        // (it is tagged as written), so this task alone touches the bytes while it runs.
        let dst = unsafe { bytes_mut(t) }.map_err(|why| format!("argument {i}: {why}"))?;
        if dst.len() != data.len() {
            return Err(format!(
                "argument {i} holds {} bytes; {} were given",
                dst.len(),
                data.len()
            ));
        }
        dst.copy_from_slice(data);
        Ok(())
    }

    /// Writes `data` as `f32` elements over tensor argument `i`.
    ///
    /// # Errors
    /// As [`write`](SubArgs::write).
    pub fn write_f32(&self, i: usize, data: &[f32]) -> Result<(), String> {
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_ne_bytes()).collect();
        self.write(i, &bytes)
    }

    /// Tensor argument `i`'s elements as `f64` (a contiguous host tensor of dtype f64).
    ///
    /// # Errors
    /// As [`read`](SubArgs::read), and text naming the argument when its dtype is not f64.
    pub fn read_f64(&self, i: usize) -> Result<Vec<f64>, String> {
        self.expect_dtype(i, DataType::Float64)?;
        Ok(self
            .read(i)?
            .chunks_exact(8)
            .map(|c| f64::from_ne_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }

    /// Writes `data` as `f64` elements over tensor argument `i` (of dtype f64).
    ///
    /// # Errors
    /// As [`write`](SubArgs::write), and text naming the argument when its dtype is not f64.
    pub fn write_f64(&self, i: usize, data: &[f64]) -> Result<(), String> {
        self.expect_dtype(i, DataType::Float64)?;
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_ne_bytes()).collect();
        self.write(i, &bytes)
    }

    fn expect_dtype(&self, i: usize, dtype: DataType) -> Result<(), String> {
        let t = self.host_tensor(i)?;
        if t.dtype() == dtype {
            Ok(())
        } else {
            Err(format!("argument {i} holds {}, not {dtype}", t.dtype()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{HostMemory, VecMemory};
    use crate::Tag;
    use simpler_abi::DataType;
    use std::sync::Arc;

    #[test]
    fn sub_args_read_and_write_contiguous_host_tensors_only() {
        let mem: Arc<dyn HostMemory> = Arc::new(VecMemory::new(vec![0; 32]));
        let t = Tensor::new(Memory::Host(mem.clone()), &[8], DataType::Float32).unwrap();
        let strided = Tensor::view(
            Memory::Host(mem.clone()),
            0,
            &[2, 2],
            &[4, 1],
            DataType::Float32,
        )
        .unwrap();
        let args = [
            TaskArg::Tensor(t.clone(), Tag::Output),
            TaskArg::Tensor(t, Tag::Input),
            TaskArg::Tensor(strided, Tag::Output),
            TaskArg::Scalar(9),
        ];
        let sub = SubArgs { args: &args };
        sub.write_f32(0, &[1.5; 8]).unwrap();
        assert_eq!(sub.read_f32(1).unwrap(), [1.5; 8]);
        assert!(sub.write(1, &[0; 32]).unwrap_err().contains("INPUT"));
        assert!(sub.write(0, &[0; 4]).unwrap_err().contains("32 bytes"));
        assert!(sub.read(2).unwrap_err().contains("not contiguous"));
        assert!(sub.read(3).unwrap_err().contains("not a tensor"));
        assert_eq!(sub.scalar(3), Some(9));
        assert_eq!(sub.len(), 4);
    }
}
