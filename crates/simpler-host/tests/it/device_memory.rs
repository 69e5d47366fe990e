//! Device memory handed out by `ChipWorker::malloc` on the sim device: a run's in-place
//! device tensors must lie inside one live allocation (else the submit is refused with
//! `InvalidDevicePointer` naming the argument), and `free` of memory a queued or running run
//! uses is refused with `DeviceMemoryInUse` until the run is finalized.

use crate::common::*;
use simpler_abi::DataType;
use simpler_device::{Device, DevicePtr};
use simpler_host::*;

fn device_tensor(ptr: DevicePtr, elements: usize) -> OwnedArg {
    OwnedArg::Device {
        ptr,
        shape: vec![elements as u64],
        dtype: DataType::Float32,
    }
}

#[test]
fn device_tensors_outside_this_workers_allocations_are_refused_naming_the_argument() {
    let (dev, w, id) = worker();
    let n = (N * 4) as u64;
    let (x, y) = (w.malloc(n).unwrap(), w.malloc(n).unwrap());
    let foreign = dev.malloc(n).unwrap(); // the device's, not this worker's
    let freed = w.malloc(n).unwrap();
    w.free(freed).unwrap();
    // (name, x, y, refused argument)
    let rows = [
        ("inside both allocations", x, y, None),
        (
            "one element past the end of y",
            x,
            DevicePtr::from_raw(y.addr() + 4),
            Some("y"),
        ),
        ("not from this worker's malloc", foreign, y, Some("x")),
        ("freed", x, freed, Some("y")),
        (
            "no allocation at all",
            DevicePtr::from_raw(16),
            y,
            Some("x"),
        ),
    ];
    for (name, px, py, refused) in rows {
        let args = vec![
            device_tensor(px, N),
            device_tensor(py, N),
            OwnedArg::Scalar(0),
        ];
        match (w.submit(id, args), refused) {
            (Ok(h), None) => h.wait(None).unwrap(),
            (
                Err(HostError::InvalidDevicePointer {
                    arg, ptr, bytes, ..
                }),
                Some(want),
            ) => {
                assert_eq!(arg, want, "{name}");
                assert_eq!(bytes, n, "{name}");
                assert_eq!(
                    ptr,
                    if want == "x" { px.addr() } else { py.addr() },
                    "{name}"
                );
            }
            (got, want) => panic!("{name}: expected refusal of {want:?}, got {got:?}"),
        }
    }
    let e = w
        .submit(
            id,
            vec![
                device_tensor(x, N),
                device_tensor(DevicePtr::from_raw(y.addr() + 4), N),
                OwnedArg::Scalar(0),
            ],
        )
        .unwrap_err();
    assert!(e.is_invalid_argument(), "{e}");
    assert!(e.to_string().contains("argument `y`"), "{e}");
    assert!(e.to_string().contains("past the end"), "{e}");
    // A smaller tensor at an offset inside the allocation is fine.
    w.submit(
        id,
        vec![
            device_tensor(DevicePtr::from_raw(x.addr() + 64), N / 2),
            device_tensor(DevicePtr::from_raw(y.addr() + 64), N / 2),
            OwnedArg::Scalar(0),
        ],
    )
    .unwrap()
    .wait(None)
    .unwrap();
    dev.free(foreign).unwrap();
    w.close().unwrap();
}

#[test]
fn memory_a_queued_or_running_run_uses_is_not_freed() {
    let (_dev, w, id) = worker();
    let n = (N * 4) as u64;
    let (x, y, spare) = (
        w.malloc(n).unwrap(),
        w.malloc(n).unwrap(),
        w.malloc(n).unwrap(),
    );
    w.copy_to(x, &f32_bytes(&input(2.0))).unwrap();
    let gate = Gate::close();
    // Running (held by the gate), and queued behind it on the same memory.
    let running = w.submit(id, device_args(x, y, gate.func().into())).unwrap();
    let queued = w.submit(id, device_args(x, y, 0)).unwrap();
    for (what, ptr) in [("x", x), ("y", y)] {
        match w.free(ptr) {
            Err(e @ HostError::DeviceMemoryInUse { .. }) => {
                assert!(
                    matches!(e, HostError::DeviceMemoryInUse { ptr: p, runs: 2 } if p == ptr.addr()),
                    "{what}: {e}"
                );
                assert!(e.is_invalid_state(), "{e}");
            }
            other => panic!("{what}: expected DeviceMemoryInUse, got {other:?}"),
        }
    }
    // Memory no run uses is freed at once.
    w.free(spare).unwrap();
    gate.open();
    running.wait(None).unwrap();
    queued.wait(None).unwrap();
    let mut out = vec![0u8; N * 4];
    w.copy_from(&mut out, y).unwrap();
    check_bytes(&out, 2.0);
    // Finalized: the memory is free to go (and nothing was freed while in use).
    w.free(x).unwrap();
    w.free(y).unwrap();
    assert!(w.free(y).is_err(), "a double free is the device's error");
    w.close().unwrap();
}

#[test]
fn memory_of_a_run_given_up_on_stays_allocated_until_a_confirmed_reset() {
    use simpler_device::sim::{FaultAction, FaultPoint};
    let (dev, w, id) = worker();
    let n = (N * 4) as u64;
    let (x, y) = (w.malloc(n).unwrap(), w.malloc(n).unwrap());
    // Nothing can prove the run finished: its boundaries cannot be read and the fallback
    // synchronize times out, so the lane gives it up and the device may still touch x and y.
    dev.inject(always(FaultPoint::QueryEvent, FaultAction::Refuse));
    dev.inject(always(FaultPoint::SynchronizeEvent, FaultAction::Refuse));
    dev.inject(next(FaultPoint::SynchronizeStream, FaultAction::TimeOut));
    let r = w.submit(id, device_args(x, y, 0)).unwrap().wait(None);
    assert!(matches!(r, Err(HostError::Timeout(_))), "{r:?}");
    assert!(matches!(
        w.free(y),
        Err(HostError::DeviceMemoryInUse { runs: 1, .. })
    ));
    dev.clear_faults();
    w.recover_device().unwrap();
    w.free(x).unwrap();
    w.free(y).unwrap();
    w.close().unwrap();
}
