//! A chip task's arguments as its [`ChipWorker`](simpler_host::ChipWorker) run takes them:
//! each host tensor lent in place (no copy) as an [`OwnedArg`] over the task's
//! [`HostMemory`], each child tensor passed as device memory, each scalar as its bits. The
//! same conversion serves a chip in this process and one in a child process (over the
//! child's mappings of shared memory). The chip's own argument check (signature, dtype,
//! shape) runs afterwards, in the chip; the engine made the same checks at submit
//! (`crate::validate`), and the ones here stay as the chip side's guard.

use std::sync::Arc;

use simpler_host::{HostBuffer, HostInput, OwnedArg};

use crate::memory::HostMemory;
use crate::tensor::{Memory, Tag, TaskArg};
use crate::WorkerError;

/// `len` bytes at `offset` of a task's host memory, lent to one chip run.
struct Lent {
    memory: Arc<dyn HostMemory>,
    offset: usize,
    len: usize,
}

impl Lent {
    fn slice(&self) -> &[u8] {
        // SAFETY: `Tensor::view` checked `offset + len <= memory.len()`, and the memory
        // stays mapped while `self.memory` lives (the `HostMemory` contract). The engine
        // runs no task writing an overlapping footprint meanwhile (docs/l3-worker.md §3).
        unsafe { std::slice::from_raw_parts(self.memory.as_ptr().add(self.offset), self.len) }
    }
}

impl HostInput for Lent {
    fn bytes(&self) -> &[u8] {
        self.slice()
    }
}

impl HostBuffer for Lent {
    fn bytes(&self) -> &[u8] {
        self.slice()
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `slice`, and the memory is writable (`read_only` was checked when
        // the argument was converted); the engine gives this task the only write access to
        // the footprint while it runs.
        unsafe { std::slice::from_raw_parts_mut(self.memory.as_ptr().add(self.offset), self.len) }
    }
}

/// Converts a chip task's `args` for a run on chip `chip` (its worker id).
///
/// # Errors
/// [`WorkerError::InvalidArgument`] naming the argument (`args[2]`) for a tensor that is
/// not C-order contiguous, a written tensor over read-only host memory, or a child tensor
/// of another chip.
pub fn owned_args(chip: usize, args: &[TaskArg]) -> Result<Vec<OwnedArg>, WorkerError> {
    args.iter()
        .enumerate()
        .map(|(i, arg)| {
            let bad = |reason: String| WorkerError::InvalidArgument {
                arg: format!("args[{i}]"),
                reason,
            };
            let (tensor, tag) = match arg {
                TaskArg::Scalar(v) => return Ok(OwnedArg::Scalar(*v)),
                TaskArg::Tensor(t, tag) => (t, *tag),
            };
            if !tensor.is_contiguous() {
                return Err(bad(format!(
                    "a chip task takes C-order contiguous tensors; this view of shape {:?} \
                     has strides {:?}",
                    tensor.shape(),
                    tensor.strides()
                )));
            }
            let shape = tensor.shape().to_vec();
            let dtype = tensor.dtype();
            match tensor.memory() {
                Memory::Child(c) if c.worker != chip => Err(bad(format!(
                    "device memory of chip {} cannot be passed to a task on chip {chip}; copy \
                     it through the host (orch.copy_from, then orch.copy_to)",
                    c.worker
                ))),
                Memory::Child(c) => Ok(OwnedArg::Device {
                    ptr: c.ptr.offset(tensor.byte_offset()),
                    shape,
                    dtype,
                }),
                Memory::Host(m) => {
                    let lent = Lent {
                        memory: m.clone(),
                        offset: tensor.byte_offset() as usize,
                        len: tensor.nbytes() as usize,
                    };
                    if m.read_only() {
                        if tag.writes() {
                            return Err(bad(format!(
                                "tagged {} but its host memory is read-only",
                                tag.name()
                            )));
                        }
                        Ok(OwnedArg::Input {
                            buffer: Box::new(lent),
                            shape,
                            dtype,
                        })
                    } else if tag == Tag::Input {
                        Ok(OwnedArg::Input {
                            buffer: Box::new(lent),
                            shape,
                            dtype,
                        })
                    } else {
                        Ok(OwnedArg::Tensor {
                            buffer: Box::new(lent),
                            shape,
                            dtype,
                        })
                    }
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::VecMemory;
    use crate::tensor::{ChildAllocation, Tensor};
    use simpler_abi::DataType;
    use simpler_device::DevicePtr;

    #[test]
    fn host_tensors_are_lent_in_place_and_bad_ones_are_named() {
        let mem: Arc<dyn HostMemory> = Arc::new(VecMemory::new((0..64).collect()));
        let whole = Tensor::new(Memory::Host(mem.clone()), &[16], DataType::Float32).unwrap();
        let tail =
            Tensor::view(Memory::Host(mem.clone()), 32, &[8], &[1], DataType::Float32).unwrap();
        let args = [
            TaskArg::Tensor(whole, Tag::Input),
            TaskArg::Tensor(tail, Tag::Output),
            TaskArg::Scalar(5),
        ];
        let owned = owned_args(0, &args).unwrap();
        assert!(matches!(owned[0], OwnedArg::Input { .. }));
        assert!(matches!(owned[1], OwnedArg::Tensor { .. }));
        let lent = owned[1].host_bytes().unwrap();
        assert_eq!(
            lent.as_ptr() as usize,
            mem.as_ptr() as usize + 32,
            "no copy"
        );
        assert_eq!(lent[0], 32);
        assert!(matches!(owned[2], OwnedArg::Scalar(5)));

        let strided = Tensor::view(
            Memory::Host(mem.clone()),
            0,
            &[4, 2],
            &[4, 1],
            DataType::Uint8,
        )
        .unwrap();
        let err = owned_args(0, &[TaskArg::Tensor(strided, Tag::Input)]).unwrap_err();
        assert!(err.to_string().contains("args[0]") && err.to_string().contains("contiguous"));

        let other = ChildAllocation {
            worker: 1,
            ptr: DevicePtr::from_raw(4096),
            nbytes: 64,
            generation: 0,
        };
        let dev = Tensor::new(Memory::Child(other), &[16], DataType::Float32).unwrap();
        let err = owned_args(
            0,
            &[TaskArg::Scalar(1), TaskArg::Tensor(dev.clone(), Tag::Input)],
        )
        .unwrap_err();
        assert!(err.to_string().contains("args[1]") && err.to_string().contains("chip 1"));
        let ok = owned_args(1, &[TaskArg::Tensor(dev, Tag::InOut)]).unwrap();
        assert!(matches!(ok[0], OwnedArg::Device { ptr, .. } if ptr.addr() == 4096));
    }
}
