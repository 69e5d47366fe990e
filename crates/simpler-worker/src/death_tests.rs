//! An endpoint that dies (as a chip child killed by a signal does): its in-flight task
//! fails with ENDPOINT_FAILURE and the report, its dependents are poisoned, a task queued
//! for it fails, later submits to it are refused, its control calls fail, and the other
//! chip and the sub worker go on. Drives the engine over a fake chip endpoint.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use simpler_abi::{DataType, OrchArgs, OrchOps};
use simpler_device::DevicePtr;
use simpler_host::{
    ArgDirection, ArgSpec, CallConfig, CallableSpec, CodeImage, Signature, WorkerConfig,
};

use crate::endpoint::{Callable, CallableKey, Endpoint, EndpointError, EndpointKind};
use crate::sub_thread::SubThread;
use crate::tensor::{Memory, Tag, TaskArg, TaskArgs, Tensor};
use crate::{SubWorkers, Worker, WorkerError, WorkerOptions};

#[derive(Default)]
struct Counters {
    runs: AtomicUsize,
    shutdowns: AtomicUsize,
}

/// A chip endpoint whose run of a task with scalar 1 "dies".
struct FakeChip {
    index: usize,
    counters: Arc<Counters>,
}

const REPORT: &str = "killed by signal 9 (SIGKILL); stderr tail: \"working...\"";

impl Endpoint for FakeChip {
    fn kind(&self) -> EndpointKind {
        EndpointKind::Chip
    }
    fn describe(&self) -> String {
        format!("chip {} (fake)", self.index)
    }
    fn register(&mut self, _key: CallableKey, _c: &Callable) -> Result<(), EndpointError> {
        Ok(())
    }
    fn unregister(&mut self, _key: CallableKey) -> Result<(), EndpointError> {
        Ok(())
    }
    fn run(
        &mut self,
        _k: CallableKey,
        args: &[TaskArg],
        _c: &CallConfig,
    ) -> Result<(), EndpointError> {
        self.counters.runs.fetch_add(1, Ordering::SeqCst);
        if args.iter().any(|a| matches!(a, TaskArg::Scalar(1))) {
            return Err(EndpointError::Died {
                report: REPORT.into(),
            });
        }
        Ok(())
    }
    fn malloc(&mut self, _n: u64) -> Result<DevicePtr, EndpointError> {
        Ok(DevicePtr::from_raw(1 << 30))
    }
    fn free(&mut self, _p: DevicePtr) -> Result<(), EndpointError> {
        Ok(())
    }
    fn copy_to(&mut self, _d: DevicePtr, _s: &[u8]) -> Result<(), EndpointError> {
        Ok(())
    }
    fn copy_from(&mut self, _d: &mut [u8], _s: DevicePtr) -> Result<(), EndpointError> {
        Ok(())
    }
    fn shutdown(&mut self) -> Result<(), EndpointError> {
        self.counters.shutdowns.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

unsafe extern "C-unwind" fn no_orchestration(_ops: *const OrchOps, _args: *const OrchArgs) -> i32 {
    0
}

fn fake_spec() -> Callable {
    Callable::Chip(Arc::new(CallableSpec {
        name: "fake".into(),
        signature: Signature::new(vec![
            ArgSpec {
                name: "out".into(),
                direction: ArgDirection::Out,
                dtype: DataType::Float32,
                shape: None,
            },
            ArgSpec {
                name: "mode".into(),
                direction: ArgDirection::Scalar,
                dtype: DataType::Uint64,
                shape: None,
            },
        ])
        .unwrap(),
        orchestration: CodeImage::Orchestration(no_orchestration),
        kernels: vec![],
        runtime: None,
    }))
}

#[test]
fn a_dead_endpoint_fails_its_task_poisons_dependents_and_is_refused_after() {
    let w = Worker::new(WorkerOptions {
        chips: vec![WorkerConfig::default(); 2],
        sub_workers: SubWorkers::Threads(1),
        heap_ring_size: 1 << 20,
        ..WorkerOptions::default()
    })
    .unwrap();
    let chip = w.register(fake_spec()).unwrap();
    let consumer_ran = Arc::new(AtomicBool::new(false));
    let c2 = consumer_ran.clone();
    let consumer = w
        .register(Callable::SubClosure(Arc::new(move |_| {
            c2.store(true, Ordering::SeqCst);
            Ok(())
        })))
        .unwrap();
    let counters: [Arc<Counters>; 2] = Default::default();
    let endpoints: Vec<Box<dyn Endpoint>> = vec![
        Box::new(FakeChip {
            index: 0,
            counters: counters[0].clone(),
        }),
        Box::new(FakeChip {
            index: 1,
            counters: counters[1].clone(),
        }),
        Box::new(SubThread::new(0)),
    ];
    w.init_with(endpoints).unwrap();
    let out = w.create_buffer(64).unwrap();
    let out = Tensor::new(Memory::Host(out), &[16], DataType::Float32).unwrap();
    let cfg = CallConfig::default();
    // A task of the fake callable on memory of its own (no dependency on another task).
    let alone = |mode: u64| {
        let m = w.create_buffer(64).unwrap();
        let t = Tensor::new(Memory::Host(m), &[16], DataType::Float32).unwrap();
        TaskArgs::new().tensor(t, Tag::Output).scalar(mode)
    };

    let err = w
        .run(|o| {
            let dies = TaskArgs::new().tensor(out.clone(), Tag::Output).scalar(1);
            o.submit_next_level(&chip, dies, &cfg, 0)?;
            // Queued behind the dying task on chip 0: fails when its turn comes, or is
            // refused here already when chip 0 died first.
            if let Err(e) = o.submit_next_level(&chip, alone(0), &cfg, 0) {
                assert_eq!(e.kind(), "ENDPOINT_FAILURE", "{e}");
            }
            o.submit_sub(&consumer, TaskArgs::new().tensor(out.clone(), Tag::Input))?;
            o.submit_next_level(&chip, alone(0), &cfg, 1)?;
            Ok(())
        })
        .unwrap_err();
    let WorkerError::TaskFailed {
        task,
        worker,
        cause,
    } = &err
    else {
        panic!("a task failure, got {err}")
    };
    assert_eq!(
        (task.as_str(), worker.as_str()),
        ("#0 fake", "chip 0 (fake)")
    );
    assert_eq!(cause.kind(), "ENDPOINT_FAILURE");
    assert!(err.to_string().contains("SIGKILL"), "{err}");
    assert_eq!(
        counters[0].runs.load(Ordering::SeqCst),
        1,
        "the queued task never ran"
    );
    assert_eq!(counters[1].runs.load(Ordering::SeqCst), 1, "chip 1 went on");
    assert!(
        !consumer_ran.load(Ordering::SeqCst),
        "the dependent was poisoned"
    );

    // Later: chip 0 is refused at submit, chip 1 and the sub worker work.
    let refused = w
        .run(|o| {
            let e = o.submit_next_level(&chip, alone(0), &cfg, 0).unwrap_err();
            assert_eq!(e.kind(), "ENDPOINT_FAILURE");
            assert!(e.to_string().contains("chip 0 (fake)") && e.to_string().contains("refused"));
            o.submit_next_level(&chip, alone(0), &cfg, 1)?;
            o.submit_sub(&consumer, TaskArgs::new())?;
            Ok(())
        })
        .unwrap();
    assert_eq!(refused.tasks, 2);
    assert!(consumer_ran.load(Ordering::SeqCst));
    let err = w
        .alloc_child_tensor(0, &[4], DataType::Float32)
        .unwrap_err();
    assert_eq!(err.kind(), "ENDPOINT_FAILURE");
    assert!(w.alloc_child_tensor(1, &[4], DataType::Float32).is_ok());

    w.close().unwrap();
    assert_eq!(
        counters[0].shutdowns.load(Ordering::SeqCst),
        0,
        "a dead endpoint is not called"
    );
    assert_eq!(counters[1].shutdowns.load(Ordering::SeqCst), 1);
}
