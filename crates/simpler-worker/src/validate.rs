//! The argument checks made when a task is submitted, before anything runs
//! (`docs/l3-worker.md` §8): worker ids, group members, a chip task against its callable's
//! signature, and each tensor against where the task will run. Pure functions of the
//! arguments, the signature and the worker's shape; the checks that need the engine's state
//! (is this allocation live?) are the orchestrator's.

use simpler_host::{
    ArgDirection, ArgError, ArgOffer, HostMemory as OfferedMemory, ScalarValue, Signature,
};

use simpler_abi::DataType;

use crate::tensor::{Memory, Tag, TaskArg, TaskArgs, Tensor};
use crate::WorkerError;

/// Where a task's tensors go, for the checks.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Dest {
    /// A next-level task on worker `w`; `process` when it runs in a child process;
    /// `contiguous` when it takes C-order contiguous tensors only (a chip; a child of a
    /// level-4 worker takes any view).
    Chip {
        w: usize,
        process: bool,
        contiguous: bool,
    },
    /// A sub task; `process` when sub workers are child processes.
    Sub { process: bool },
}

fn bad(arg: &str, reason: String) -> WorkerError {
    WorkerError::InvalidArgument {
        arg: arg.into(),
        reason,
    }
}

/// Bytes of `shape` × `dtype`.
///
/// # Errors
/// [`WorkerError::InvalidArgument`] (`shape`) for no dimensions, a zero extent or overflow.
pub(crate) fn nbytes(shape: &[u64], dtype: DataType) -> Result<u64, WorkerError> {
    let n = shape
        .iter()
        .try_fold(dtype.size_bytes() as u64, |acc, e| acc.checked_mul(*e));
    match n {
        Some(n) if n > 0 && !shape.is_empty() => Ok(n),
        _ => Err(bad(
            "shape",
            format!("{shape:?} of {dtype} has no elements or too many bytes"),
        )),
    }
}

/// Checks next-level worker id `w` against `chips` of them, called `kind` in messages
/// (`chip`, or `child worker` at level 4 and above).
///
/// # Errors
/// [`WorkerError::UnknownWorker`].
pub(crate) fn chip_id(w: usize, chips: usize, kind: &'static str) -> Result<(), WorkerError> {
    if w >= chips {
        return Err(WorkerError::UnknownWorker {
            id: i64::try_from(w).unwrap_or(i64::MAX),
            kind,
            count: chips,
        });
    }
    Ok(())
}

/// Checks a chip group's members and argument lists.
///
/// # Errors
/// [`WorkerError::InvalidArgument`] naming `workers` (empty, a repeated id) or `args_list`
/// (another length), [`WorkerError::UnknownWorker`].
pub(crate) fn chip_group(
    workers: &[usize],
    args: usize,
    chips: usize,
    kind: &'static str,
) -> Result<(), WorkerError> {
    if workers.is_empty() {
        return Err(bad("workers", "a group needs at least one worker".into()));
    }
    for (i, w) in workers.iter().enumerate() {
        chip_id(*w, chips, kind)?;
        if workers[..i].contains(w) {
            return Err(bad(
                "workers",
                format!("worker {w} appears twice in {workers:?}; group members must be distinct"),
            ));
        }
    }
    if args != workers.len() {
        return Err(bad(
            "args_list",
            format!(
                "has {args} argument lists for {} workers; give one per worker",
                workers.len()
            ),
        ));
    }
    Ok(())
}

/// Checks a sub group's size against the sub workers there are.
///
/// # Errors
/// [`WorkerError::InvalidArgument`] naming `args_list`.
pub(crate) fn sub_group(members: usize, subs: usize) -> Result<(), WorkerError> {
    if members == 0 || members > subs {
        return Err(bad(
            "args_list",
            format!(
                "has {members} argument lists; a sub group runs each on its own sub worker, and \
                 this worker has {subs}"
            ),
        ));
    }
    Ok(())
}

/// Checks one tensor `t` named `arg` of a task going to `dest`.
///
/// # Errors
/// [`WorkerError::InvalidArgument`] naming `arg`: a view past its memory, a view that is
/// not C-order contiguous going to a chip, device memory of another chip (or in a sub
/// task), host memory a child process cannot see (the fix: a `create_buffer` buffer or an
/// `orch.alloc` tensor), a written tensor over read-only memory.
pub(crate) fn tensor(arg: &str, t: &Tensor, writes: bool, dest: Dest) -> Result<(), WorkerError> {
    match t.byte_span() {
        Some((_, end)) if end <= t.memory_len() => {}
        _ => {
            return Err(bad(
                arg,
                format!(
                    "a view of shape {:?}, strides {:?} at byte {} exceeds its {} bytes of memory",
                    t.shape(),
                    t.strides(),
                    t.byte_offset(),
                    t.memory_len()
                ),
            ))
        }
    }
    if matches!(
        dest,
        Dest::Chip {
            contiguous: true,
            ..
        }
    ) && !t.is_contiguous()
    {
        return Err(bad(
            arg,
            format!(
                "a chip task takes C-order contiguous tensors; this view of shape {:?} has \
                 strides {:?} (elements); give the chip a contiguous copy",
                t.shape(),
                t.strides()
            ),
        ));
    }
    match (t.memory(), dest) {
        (Memory::Child(c), Dest::Sub { .. }) => Err(bad(
            arg,
            format!(
                "device memory of chip {} cannot go to a sub task; copy it to the host first \
                 (orch.copy_from)",
                c.worker
            ),
        )),
        (Memory::Child(c), Dest::Chip { w, .. }) if c.worker != w => Err(bad(
            arg,
            format!(
                "device memory of chip {} cannot be passed to a task on chip {w}; copy it \
                 through the host (orch.copy_from, then orch.copy_to)",
                c.worker
            ),
        )),
        (Memory::Child(_), _) => Ok(()),
        (Memory::Host(m), dest) => {
            let process = match dest {
                Dest::Chip { process, .. } | Dest::Sub { process } => process,
            };
            if process && m.shared().is_none() {
                let who = match dest {
                    Dest::Chip { w, .. } => format!("chip {w} runs"),
                    Dest::Sub { .. } => "sub workers run".into(),
                };
                return Err(bad(
                    arg,
                    format!(
                        "this host memory is private to this process and {who} in a child \
                         process that cannot see it; use shared memory: a create_buffer buffer \
                         or an orch.alloc tensor (or a view of one)"
                    ),
                ));
            }
            if writes && m.read_only() {
                return Err(bad(
                    arg,
                    "is written by the task but its memory is read-only".into(),
                ));
            }
            Ok(())
        }
    }
}

/// Checks every tensor of `args` going to `dest`; `prefix` names the list (`args`,
/// `args_list[1]`).
///
/// # Errors
/// As [`tensor`], naming `prefix[i]`.
pub(crate) fn task_args(prefix: &str, args: &TaskArgs, dest: Dest) -> Result<(), WorkerError> {
    for (i, a) in args.args.iter().enumerate() {
        if let TaskArg::Tensor(t, tag) = a {
            tensor(&format!("{prefix}[{i}]"), t, tag.writes(), dest)?;
        }
    }
    Ok(())
}

/// True when a tensor tagged `tag` may stand for a signature argument of `direction`
/// (`NO_DEP` stands for any: the caller orders it).
fn tag_agrees(tag: Tag, direction: ArgDirection) -> bool {
    matches!(
        (tag, direction),
        (Tag::NoDep, _)
            | (Tag::Input, ArgDirection::In)
            | (Tag::Output | Tag::OutputExisting, ArgDirection::Out)
            | (Tag::InOut, ArgDirection::InOut)
    )
}

/// How the chip's own argument check sees `arg`: host memory by address, device memory by
/// shape, a scalar as its raw bits.
fn offer(arg: &TaskArg) -> ArgOffer {
    match arg {
        TaskArg::Scalar(v) => ArgOffer::Scalar(ScalarValue::Bits(*v)),
        TaskArg::Tensor(t, _) => match t.memory() {
            Memory::Child(_) => ArgOffer::Device {
                shape: t.shape().to_vec(),
                dtype: t.dtype(),
            },
            Memory::Host(m) => ArgOffer::Host(OfferedMemory {
                addr: (m.as_ptr() as usize).wrapping_add(t.byte_offset() as usize),
                len: t.nbytes() as usize,
                writable: !m.read_only(),
                shape: t.shape().to_vec(),
                dtype: t.dtype(),
            }),
        },
    }
}

/// Checks a chip task's `args` (named `prefix`) against the signature of the chip callable
/// `callable`: the count, each argument's kind (tensor or scalar), a tensor's tag against
/// the declared direction (a tag that says less than the chip does would leave the
/// tensor map unaware of a write), then the chip's own check
/// ([`Signature::check_offers`]): dtype, a declared shape, byte length, written arguments
/// sharing memory with another. The chip checks the same when it runs; this refuses the
/// task before it enters the graph.
///
/// # Errors
/// [`WorkerError::InvalidArgument`] naming `prefix` (the count) or `prefix[i]` with the
/// signature's name for it.
pub(crate) fn signature(
    prefix: &str,
    args: &TaskArgs,
    callable: &str,
    sig: &Signature,
) -> Result<(), WorkerError> {
    if args.len() != sig.args.len() {
        let names: Vec<&str> = sig.args.iter().map(|a| a.name.as_str()).collect();
        return Err(bad(
            prefix,
            format!(
                "`{callable}` takes {} arguments ({}), got {}",
                sig.args.len(),
                names.join(", "),
                args.len()
            ),
        ));
    }
    for (i, (spec, arg)) in sig.args.iter().zip(&args.args).enumerate() {
        let arg_name = format!("{prefix}[{i}]");
        let wrong = |what: String| {
            bad(
                &arg_name,
                format!("(`{}` of `{callable}`) {what}", spec.name),
            )
        };
        match arg {
            TaskArg::Scalar(_) if spec.direction.is_tensor() => {
                return Err(wrong(format!(
                    "the signature declares an {} tensor, got a scalar",
                    spec.direction.name()
                )))
            }
            TaskArg::Scalar(_) => {}
            TaskArg::Tensor(..) if !spec.direction.is_tensor() => {
                return Err(wrong(
                    "the signature declares a scalar, got a tensor".into(),
                ))
            }
            TaskArg::Tensor(_, tag) => {
                if !tag_agrees(*tag, spec.direction) {
                    return Err(wrong(format!(
                        "tag {} does not agree with the signature's direction {}",
                        tag.name(),
                        spec.direction.name()
                    )));
                }
            }
        }
    }
    // The rest is the chip's own check, on descriptions of the memory: dtype, rank, a
    // declared shape, byte length, a scalar's encoding, and written arguments sharing
    // memory with another.
    let offers: Vec<ArgOffer> = args.args.iter().map(offer).collect();
    sig.check_offers(callable, &offers).map_err(|e| match e {
        ArgError::Invalid { arg, problem } => {
            let i = sig.args.iter().position(|a| a.name == arg).unwrap_or(0);
            bad(
                &format!("{prefix}[{i}]"),
                format!("(`{arg}` of `{callable}`) {problem}"),
            )
        }
        other => bad(prefix, other.to_string()),
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{HostMemory, SharedRegion, VecMemory};
    use crate::tensor::ChildAllocation;
    use crate::Tag;
    use simpler_abi::DataType;
    use simpler_device::DevicePtr;
    use std::sync::Arc;

    fn private() -> Tensor {
        let m: Arc<dyn HostMemory> = Arc::new(VecMemory::new(vec![0; 64]));
        Tensor::new(Memory::Host(m), &[16], DataType::Float32).unwrap()
    }

    #[test]
    fn private_host_memory_is_refused_for_child_processes_with_the_fix() {
        let args = TaskArgs::new().scalar(1).tensor(private(), Tag::Input);
        let chip = Dest::Chip {
            w: 0,
            process: true,
            contiguous: true,
        };
        let err = task_args("args", &args, chip).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("`args[1]`"), "{text}");
        assert!(
            text.contains("a create_buffer buffer or an orch.alloc tensor"),
            "{text}"
        );
        assert!(!text.contains("::"), "names valid in every binding: {text}");
        let err = task_args("args_list[2]", &args, Dest::Sub { process: true }).unwrap_err();
        assert!(err.to_string().contains("`args_list[2][1]`"), "{err}");
        // In threads, or over shared memory, it is fine.
        assert!(task_args(
            "args",
            &args,
            Dest::Chip {
                w: 0,
                process: false,
                contiguous: true,
            }
        )
        .is_ok());
        let shared: Arc<dyn HostMemory> = Arc::new(SharedRegion::new(64, "t").unwrap());
        let t = Tensor::new(Memory::Host(shared), &[16], DataType::Float32).unwrap();
        assert!(task_args("args", &TaskArgs::new().tensor(t, Tag::Output), chip).is_ok());
    }

    #[test]
    fn device_memory_goes_only_to_its_own_chip() {
        let c = ChildAllocation {
            worker: 1,
            ptr: DevicePtr::from_raw(1 << 20),
            nbytes: 64,
            generation: 0,
        };
        let t = Tensor::new(Memory::Child(c), &[16], DataType::Float32).unwrap();
        let err = tensor(
            "args[0]",
            &t,
            false,
            Dest::Chip {
                w: 0,
                process: false,
                contiguous: true,
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("chip 1") && err.to_string().contains("chip 0"));
        let err = tensor("args[0]", &t, false, Dest::Sub { process: false }).unwrap_err();
        assert!(err.to_string().contains("sub task"), "{err}");
        assert!(tensor(
            "args[0]",
            &t,
            true,
            Dest::Chip {
                w: 1,
                process: true,
                contiguous: true,
            }
        )
        .is_ok());
    }

    #[test]
    fn groups_name_workers_and_args_list() {
        let err = chip_group(&[0, 1, 0], 3, 4, "chip").unwrap_err();
        assert!(err.to_string().contains("`workers`") && err.to_string().contains("twice"));
        let err = chip_group(&[0, 1], 3, 4, "chip").unwrap_err();
        assert!(err.to_string().contains("`args_list`"), "{err}");
        assert_eq!(
            chip_group(&[0, 9], 2, 4, "chip").unwrap_err().kind(),
            "UNKNOWN_WORKER"
        );
        assert!(chip_group(&[], 0, 4, "chip").is_err());
        assert!(sub_group(3, 2)
            .unwrap_err()
            .to_string()
            .contains("`args_list`"));
        assert!(sub_group(2, 2).is_ok());
    }
}
