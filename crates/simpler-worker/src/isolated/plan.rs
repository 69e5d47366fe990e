//! A level-2 run's arguments checked against its callable's signature, before anything is
//! submitted (`docs/l3-worker.md` §9): the host's own check (`Signature::check_offers`:
//! count, kinds, dtypes, shapes, writability, aliasing, scalar encoding — the same
//! refusals as a chip in this process), then what only this worker can tell: host tensors
//! must be C-order contiguous host memory (private memory is fine: it is copied through
//! the mailbox), device tensors must lie inside one live `malloc` allocation of this
//! worker. Pure: nothing here touches the chip.

use std::collections::BTreeMap;

use simpler_abi::DataType;
use simpler_device::DevicePtr;
use simpler_host::{ArgDirection, ArgOffer, CallableSpec, HostError, Passing, ScalarValue};

use crate::tensor::{c_strides, ChildAllocation, Memory, Tensor};
use crate::WorkerError;

/// One argument of a level-2 run, in signature order.
#[derive(Clone, Debug)]
pub enum IsolatedArg {
    /// A host tensor (any host memory, private to this process or shared), C-order
    /// contiguous; staged through the chip's device memory by the signature's direction.
    Host(Tensor),
    /// Device memory from [`IsolatedChip::malloc`](super::IsolatedChip::malloc): `shape`
    /// elements of `dtype` (C order) from `ptr`, passed to the chip task in place.
    Device {
        /// The first byte (inside one allocation).
        ptr: DevicePtr,
        /// Shape, in elements.
        shape: Vec<u64>,
        /// Element type.
        dtype: DataType,
    },
    /// A scalar, encoded by the signature's dtype.
    Scalar(ScalarValue),
}

impl IsolatedArg {
    /// What the host's signature check (`Signature::check_offers`) sees of the argument:
    /// a host tensor's address, length, writability, shape and dtype; a device tensor's
    /// shape and dtype; a scalar's value. A binding that raises the host's own argument
    /// errors checks these itself first.
    pub fn offer(&self) -> ArgOffer {
        match self {
            IsolatedArg::Host(t) => match t.memory() {
                Memory::Host(m) => ArgOffer::Host(simpler_host::HostMemory {
                    addr: m.as_ptr() as usize + t.byte_offset() as usize,
                    len: t.nbytes() as usize,
                    writable: !m.read_only(),
                    shape: t.shape().to_vec(),
                    dtype: t.dtype(),
                }),
                Memory::Child(_) => ArgOffer::Device {
                    shape: t.shape().to_vec(),
                    dtype: t.dtype(),
                },
            },
            IsolatedArg::Device { shape, dtype, .. } => ArgOffer::Device {
                shape: shape.clone(),
                dtype: *dtype,
            },
            IsolatedArg::Scalar(v) => ArgOffer::Scalar(*v),
        }
    }
}

/// One checked argument.
#[derive(Clone, Debug)]
pub(crate) enum Planned {
    /// A host tensor to stage: copied in when `direction` copies in, back when it copies
    /// back.
    Host {
        tensor: Tensor,
        direction: ArgDirection,
    },
    /// A view of device memory, passed in place.
    Device {
        tensor: Tensor,
        direction: ArgDirection,
    },
    /// A scalar's encoded bits.
    Scalar(u64),
}

/// The live `malloc` allocations of one chip, by first byte.
pub(crate) type Allocations = BTreeMap<u64, ChildAllocation>;

fn bad(arg: &str, reason: String) -> WorkerError {
    WorkerError::InvalidArgument {
        arg: arg.into(),
        reason,
    }
}

/// The allocation of `allocations` holding `nbytes` from `ptr`, and `ptr`'s offset in it.
///
/// # Errors
/// [`WorkerError::InvalidArgument`] naming `arg` when no live allocation holds them.
pub(crate) fn device_span(
    allocations: &Allocations,
    arg: &str,
    ptr: DevicePtr,
    nbytes: u64,
) -> Result<(ChildAllocation, u64), WorkerError> {
    let addr = ptr.addr();
    let Some((_, alloc)) = allocations.range(..=addr).next_back() else {
        return Err(not_allocated(arg, addr));
    };
    let offset = addr - alloc.ptr.addr();
    if offset >= alloc.nbytes {
        return Err(not_allocated(arg, addr));
    }
    if offset.saturating_add(nbytes) > alloc.nbytes {
        return Err(bad(
            arg,
            format!(
                "{nbytes} bytes from device address {addr:#x} run past the end of its \
                 {}-byte malloc allocation at {:#x}",
                alloc.nbytes,
                alloc.ptr.addr()
            ),
        ));
    }
    Ok((*alloc, offset))
}

fn not_allocated(arg: &str, addr: u64) -> WorkerError {
    bad(
        arg,
        format!(
            "device address {addr:#x} is not inside a live malloc allocation of this worker \
             (malloc it on this worker, and do not free it while it is used)"
        ),
    )
}

/// Checks `args` for a run of `spec` (see the module docs) against `allocations`.
///
/// # Errors
/// [`WorkerError::Host`] with the host's argument error (`ARGUMENT_COUNT`, an invalid
/// argument naming it); [`WorkerError::InvalidArgument`] naming the argument for a host
/// tensor over device memory or not contiguous, and device memory outside this worker's
/// allocations.
pub(crate) fn plan(
    spec: &CallableSpec,
    args: Vec<IsolatedArg>,
    allocations: &Allocations,
) -> Result<Vec<Planned>, WorkerError> {
    let sig = &spec.signature;
    let name = |i: usize| {
        sig.args
            .get(i)
            .map_or_else(|| format!("#{i}"), |a| a.name.clone())
    };
    let mut offers = Vec::with_capacity(args.len());
    for (i, arg) in args.iter().enumerate() {
        if let IsolatedArg::Host(t) = arg {
            if !matches!(t.memory(), Memory::Host(_)) {
                return Err(bad(
                    &name(i),
                    "is device memory given as a host tensor; pass malloc memory as a device \
                     tensor"
                        .into(),
                ));
            }
            if !t.is_contiguous() {
                return Err(bad(
                    &name(i),
                    format!(
                        "a host tensor must be C-contiguous; this view of shape {:?} has \
                         strides {:?}",
                        t.shape(),
                        t.strides()
                    ),
                ));
            }
        }
        offers.push(arg.offer());
    }
    let passing = sig
        .check_offers(&spec.name, &offers)
        .map_err(|e| WorkerError::Host(HostError::from(e)))?;
    args.into_iter()
        .zip(passing)
        .enumerate()
        .map(|(i, (arg, passing))| {
            let direction = sig.args[i].direction;
            match (arg, passing) {
                (_, Passing::Scalar(bits)) => Ok(Planned::Scalar(bits)),
                (IsolatedArg::Host(tensor), _) => Ok(Planned::Host { tensor, direction }),
                (IsolatedArg::Device { ptr, shape, dtype }, _) => {
                    let arg = name(i);
                    let nbytes = shape
                        .iter()
                        .product::<u64>()
                        .saturating_mul(dtype.size_bytes() as u64);
                    let (alloc, offset) = device_span(allocations, &arg, ptr, nbytes)?;
                    let tensor = Tensor::view(
                        Memory::Child(alloc),
                        offset,
                        &shape,
                        &c_strides(&shape),
                        dtype,
                    )
                    .map_err(|e| match e {
                        WorkerError::InvalidArgument { reason, .. } => bad(&arg, reason),
                        other => other,
                    })?;
                    Ok(Planned::Device { tensor, direction })
                }
                (IsolatedArg::Scalar(_), _) => {
                    unreachable!("check_offers answers a scalar with Passing::Scalar")
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{HostMemory, VecMemory};
    use simpler_host::{ArgSpec, CodeImage, Signature};
    use std::sync::Arc;

    fn spec() -> CallableSpec {
        let arg = |name: &str, direction| ArgSpec {
            name: name.into(),
            direction,
            dtype: DataType::Float32,
            shape: None,
        };
        CallableSpec {
            name: "k".into(),
            signature: Signature::new(vec![
                arg("a", ArgDirection::In),
                arg("c", ArgDirection::Out),
                ArgSpec {
                    dtype: DataType::Uint32,
                    ..arg("n", ArgDirection::Scalar)
                },
            ])
            .unwrap(),
            orchestration: CodeImage::Library {
                bytes: Vec::new(),
                entry: "e".into(),
            },
            kernels: Vec::new(),
            runtime: None,
        }
    }

    fn host(n: usize) -> Tensor {
        let m: Arc<dyn HostMemory> = Arc::new(VecMemory::new(vec![0; 4 * n]));
        Tensor::new(Memory::Host(m), &[n as u64], DataType::Float32).unwrap()
    }

    fn allocations() -> Allocations {
        let c = ChildAllocation {
            worker: 0,
            ptr: DevicePtr::from_raw(0x10_0000),
            nbytes: 256,
            generation: 0,
        };
        [(c.ptr.addr(), c)].into_iter().collect()
    }

    #[test]
    fn the_host_check_names_the_argument_and_private_memory_is_staged() {
        let args = vec![
            IsolatedArg::Host(host(16)),
            IsolatedArg::Host(host(16)),
            IsolatedArg::Scalar(ScalarValue::Int(3)),
        ];
        let planned = plan(&spec(), args, &allocations()).unwrap();
        assert!(matches!(
            planned[0],
            Planned::Host {
                direction: ArgDirection::In,
                ..
            }
        ));
        assert!(matches!(planned[2], Planned::Scalar(3)));
        let err = plan(&spec(), vec![IsolatedArg::Host(host(4))], &allocations()).unwrap_err();
        assert!(err.to_string().contains("takes 3 arguments"), "{err}");
        let err = plan(
            &spec(),
            vec![
                IsolatedArg::Host(host(4)),
                IsolatedArg::Host(host(4)),
                IsolatedArg::Scalar(ScalarValue::Int(-1)),
            ],
            &allocations(),
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("argument `n`"), "{err}");
        let m: Arc<dyn HostMemory> = Arc::new(VecMemory::new(vec![0; 64]));
        let strided = Tensor::view(Memory::Host(m), 0, &[4], &[2], DataType::Float32).unwrap();
        let err = plan(
            &spec(),
            vec![
                IsolatedArg::Host(strided),
                IsolatedArg::Host(host(4)),
                IsolatedArg::Scalar(ScalarValue::Int(1)),
            ],
            &allocations(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("`a`") && err.to_string().contains("C-contiguous"));
    }

    #[test]
    fn device_tensors_must_lie_inside_an_allocation() {
        let device = |addr: u64, n: u64| IsolatedArg::Device {
            ptr: DevicePtr::from_raw(addr),
            shape: vec![n],
            dtype: DataType::Float32,
        };
        let args = |d| {
            vec![
                IsolatedArg::Host(host(8)),
                d,
                IsolatedArg::Scalar(ScalarValue::Int(1)),
            ]
        };
        let planned = plan(&spec(), args(device(0x10_0000 + 32, 8)), &allocations()).unwrap();
        let Planned::Device { tensor, .. } = &planned[1] else {
            panic!("a device tensor")
        };
        assert_eq!(tensor.byte_offset(), 32);
        let err = plan(&spec(), args(device(0x10_0000 + 32, 64)), &allocations()).unwrap_err();
        assert!(err.to_string().contains("`c`") && err.to_string().contains("past the end"));
        let err = plan(&spec(), args(device(0x20_0000, 4)), &allocations()).unwrap_err();
        assert!(
            err.to_string()
                .contains("not inside a live malloc allocation"),
            "{err}"
        );
        let err = plan(&spec(), args(device(0x8_0000, 4)), &allocations()).unwrap_err();
        assert!(err.to_string().contains("0x80000"), "{err}");
    }
}
