//! Batches of runs (`docs/l3-worker.md` §4): the runs queued on a busy lane go to its
//! endpoint together, each once, in the order they became ready; a run of a batch that
//! fails fails alone; an endpoint that dies mid-batch fails the rest with its death and is
//! not called again; chips in this process (pipelined) and in child processes (one request
//! per batch) keep every task's own verdict.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::common::*;
use simpler_host::CallConfig;
use simpler_worker::*;

/// Scalars with a meaning to the recording endpoint; any other runs at once.
const HOLD: u64 = 1000;
const FAIL_RUN: u64 = 1001;
const DIE: u64 = 1002;

/// What the recording endpoint saw, shared with the test.
#[derive(Default)]
struct Seen {
    /// Each batch's runs, by their first scalar.
    batches: Mutex<Vec<Vec<u64>>>,
    /// Opened by the test: a HOLD run waits for it.
    open: Mutex<bool>,
    opened: Condvar,
    /// Set once a HOLD run has begun.
    held: Mutex<bool>,
    holding: Condvar,
}

impl Seen {
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }

    /// Waits until a HOLD run has begun: what is submitted after queues behind it.
    fn wait_held(&self) {
        let mut held = self.held.lock().unwrap();
        while !*held {
            held = self.holding.wait(held).unwrap();
        }
    }

    fn batches(&self) -> Vec<Vec<u64>> {
        self.batches.lock().unwrap().clone()
    }
}

/// A next-level endpoint that records the batches it is handed.
struct Recorder {
    seen: Arc<Seen>,
}

fn scalar(args: &[TaskArg]) -> u64 {
    match args.first() {
        Some(TaskArg::Scalar(v)) => *v,
        _ => panic!("a recorder task's first argument is its scalar"),
    }
}

impl Endpoint for Recorder {
    fn kind(&self) -> EndpointKind {
        EndpointKind::Chip
    }

    fn describe(&self) -> String {
        "recorder".into()
    }

    fn register(&mut self, _: CallableKey, _: &Callable) -> Result<(), EndpointError> {
        Ok(())
    }

    fn unregister(&mut self, _: CallableKey) -> Result<(), EndpointError> {
        Ok(())
    }

    fn run(&mut self, _: CallableKey, _: &[TaskArg], _: &CallConfig) -> Result<(), EndpointError> {
        unreachable!("the engine hands runs over in batches")
    }

    fn run_batch(
        &mut self,
        runs: &[BatchRun<'_>],
        done: &mut dyn FnMut(usize, Result<RunFacts, EndpointError>),
    ) {
        let scalars: Vec<u64> = runs.iter().map(|r| scalar(r.args)).collect();
        self.seen.batches.lock().unwrap().push(scalars.clone());
        for (i, s) in scalars.into_iter().enumerate() {
            let outcome = match s {
                HOLD => {
                    *self.seen.held.lock().unwrap() = true;
                    self.seen.holding.notify_all();
                    let mut open = self.seen.open.lock().unwrap();
                    while !*open {
                        open = self.seen.opened.wait(open).unwrap();
                    }
                    Ok(RunFacts::default())
                }
                FAIL_RUN => Err(EndpointError::Failed(WorkerError::InvalidState(
                    "the recorder refuses this run".into(),
                ))),
                DIE => {
                    done(
                        i,
                        Err(EndpointError::Died {
                            report: "the recorder died".into(),
                        }),
                    );
                    return;
                }
                _ => Ok(RunFacts::default()),
            };
            done(i, outcome);
        }
    }

    fn malloc(&mut self, _: u64) -> Result<simpler_device::DevicePtr, EndpointError> {
        unreachable!("no device memory in these tests")
    }

    fn free(&mut self, _: simpler_device::DevicePtr) -> Result<(), EndpointError> {
        unreachable!("no device memory in these tests")
    }

    fn copy_to(&mut self, _: simpler_device::DevicePtr, _: &[u8]) -> Result<(), EndpointError> {
        unreachable!("no copies in these tests")
    }

    fn copy_from(
        &mut self,
        _: &mut [u8],
        _: simpler_device::DevicePtr,
    ) -> Result<(), EndpointError> {
        unreachable!("no copies in these tests")
    }

    fn shutdown(&mut self) -> Result<(), EndpointError> {
        Ok(())
    }
}

/// A worker over one recording endpoint, and its callable.
fn recorder_worker() -> (Worker, CallableHandle, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    let w = Worker::new(WorkerOptions {
        level: 4,
        next_level: vec![NextLevelChild {
            describe: "recorder".into(),
            start: Arc::new(move |_| Ok(Box::new(Recorder { seen: s.clone() }))),
        }],
        heap_ring_size: 1 << 20,
        ..WorkerOptions::default()
    })
    .unwrap();
    let h = w
        .register(Callable::NextLevel {
            name: "recorded".into(),
            payload: Arc::from(&b"-"[..]),
        })
        .unwrap();
    w.init().unwrap();
    (w, h, seen)
}

fn args(s: u64) -> TaskArgs {
    TaskArgs::new().scalar(s)
}

#[test]
fn the_runs_queued_behind_a_busy_lane_go_together_each_once_in_order_of_readiness() {
    let (w, h, seen) = recorder_worker();
    let (_yr, y) = f32_buffer(&w, &[0.0; 16]);
    let cfg = CallConfig::default();
    let handle = w
        .submit(|o| {
            // 1 holds the lane and writes y; 2 and 4 are ready at once, 3 once 1 is over.
            o.submit_next_level(&h, args(HOLD).tensor(y.clone(), Tag::Output), &cfg, 0)?;
            seen.wait_held();
            o.submit_next_level(&h, args(2), &cfg, 0)?;
            o.submit_next_level(&h, args(3).tensor(y.clone(), Tag::Input), &cfg, 0)?;
            o.submit_next_level(&h, args(4), &cfg, 0)?;
            Ok(())
        })
        .unwrap();
    // Everything is submitted; 2 and 4 wait in the lane's channel behind the held run.
    seen.open();
    let report = handle.wait(Some(Duration::from_secs(20))).unwrap();
    assert_eq!((report.tasks, report.edges), (4, 1));
    assert_eq!(seen.batches(), [vec![HOLD], vec![2, 4, 3]]);
    w.close().unwrap();
}

#[test]
fn a_run_of_a_batch_that_fails_fails_alone() {
    let (w, h, seen) = recorder_worker();
    let cfg = CallConfig::default();
    let handle = w
        .submit(|o| {
            o.submit_next_level(&h, args(HOLD), &cfg, 0)?;
            seen.wait_held();
            for s in [2, FAIL_RUN, 4] {
                o.submit_next_level(&h, args(s), &cfg, 0)?;
            }
            Ok(())
        })
        .unwrap();
    seen.open();
    let err = handle.wait(Some(Duration::from_secs(20))).unwrap_err();
    assert_eq!(err.kind(), "TASK_FAILED", "{err}");
    let text = err.to_string();
    assert!(
        text.contains("#2") && text.contains("refuses this run"),
        "{text}"
    );
    assert_eq!(
        seen.batches(),
        [vec![HOLD], vec![2, FAIL_RUN, 4]],
        "the run after the failed one still ran, in its batch"
    );
    // The lane serves the next run as before.
    w.run(|o| o.submit_next_level(&h, args(5), &cfg, 0).map(|_| ()))
        .unwrap();
    assert_eq!(seen.batches().last(), Some(&vec![5]));
    w.close().unwrap();
}

#[test]
fn an_endpoint_that_dies_mid_batch_fails_the_rest_with_its_death_and_is_not_called_again() {
    let (w, h, seen) = recorder_worker();
    let cfg = CallConfig::default();
    let handle = w
        .submit(|o| {
            o.submit_next_level(&h, args(HOLD), &cfg, 0)?;
            seen.wait_held();
            for s in [2, DIE, 4, 5] {
                o.submit_next_level(&h, args(s), &cfg, 0)?;
            }
            Ok(())
        })
        .unwrap();
    seen.open();
    let err = handle.wait(Some(Duration::from_secs(20))).unwrap_err();
    assert_eq!(err.kind(), "TASK_FAILED", "{err}");
    let WorkerError::TaskFailed { task, cause, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(
        task.starts_with("#2"),
        "the dying run is the first error: {err}"
    );
    assert_eq!(cause.kind(), "ENDPOINT_FAILURE", "{err}");
    assert!(err.to_string().contains("the recorder died"), "{err}");
    assert_eq!(seen.batches(), [vec![HOLD], vec![2, DIE, 4, 5]]);
    let mut refused = None;
    w.run(|o| {
        refused = o.submit_next_level(&h, args(6), &cfg, 0).err();
        Ok(())
    })
    .unwrap();
    let refused = refused.expect("a submit to a dead endpoint is refused");
    assert_eq!(refused.kind(), "ENDPOINT_FAILURE", "{refused}");
    assert_eq!(seen.batches().len(), 2, "never called again");
    let _ = w.close();
}

#[test]
fn a_chip_in_this_process_pipelines_a_batch_and_a_failing_run_fails_alone() {
    const B: u64 = 64;
    const K: u64 = 6;
    let w = Worker::new(options(1, 0)).unwrap();
    let chip = w.register(add_one_callable("add_one")).unwrap();
    w.init().unwrap();
    let x_values: Vec<f32> = (0..K * B).map(|i| i as f32).collect();
    let (_xr, x) = f32_buffer(&w, &x_values);
    let (yr, y) = f32_buffer(&w, &vec![0.0; (K * B) as usize]);
    let gate = Gate::close();
    let cfg = CallConfig::default();
    let handle = w
        .submit(|o| {
            for c in 0..K {
                // The first holds the chip, so the others queue behind it as one batch;
                // the fourth's kernel reports a fatal code.
                let func = match c {
                    0 => u64::from(gate.func()),
                    3 => FAIL,
                    _ => 0,
                };
                let a = add_args(&block(&x, c * B, B), &block(&y, c * B, B), func);
                o.submit_next_level(&chip, a, &cfg, 0)?;
            }
            Ok(())
        })
        .unwrap();
    gate.open();
    let err = handle.wait(Some(Duration::from_secs(30))).unwrap_err();
    assert_eq!(err.kind(), "TASK_FAILED", "{err}");
    assert!(
        err.to_string().contains("#3"),
        "the failing task is named: {err}"
    );
    let out = read_f32(&*yr);
    for c in 0..K {
        let got = &out[(c * B) as usize..((c + 1) * B) as usize];
        if c == 3 {
            assert!(got.iter().all(|v| *v == 0.0), "block 3 was not written");
        } else {
            let want: Vec<f32> = (c * B..(c + 1) * B).map(|i| i as f32 + 1.0).collect();
            assert_eq!(got, &want[..], "block {c}");
        }
    }
    // The chip goes on: a run after the failed batch succeeds.
    let report = w
        .run(|o| {
            let a = add_args(&block(&x, 0, B), &block(&y, 0, B), 0);
            o.submit_next_level(&chip, a, &cfg, 0).map(|_| ())
        })
        .unwrap();
    assert_eq!(report.chip_tasks, 1);
    w.close().unwrap();
}

#[test]
fn a_chip_child_runs_a_batch_in_one_request_and_a_refused_run_fails_alone() {
    use crate::process_common::{self as pc, N};
    const K: usize = 5;
    let _serial = pc::serial();
    let w = Worker::new(WorkerOptions {
        chips: vec![pc::small_chip()],
        chip_isolation: ChipIsolation::Process,
        chip_program: Some(pc::child_program()),
        heap_ring_size: 1 << 20,
        ..WorkerOptions::default()
    })
    .unwrap();
    let chip = w.register(Callable::Chip(pc::callable())).unwrap();
    w.init().unwrap();
    let x_values: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let (_xr, x) = f32_buffer(&w, &x_values);
    let (yr, y) = f32_buffer(&w, &vec![0.0; K * N]);
    let n = N as u64;
    // The third run asks for more AICPU threads than the chip has: the chip refuses it.
    let refused = CallConfig {
        aicpu_thread_num: 64,
        ..CallConfig::default()
    };
    let err = w
        .run(|o| {
            for c in 0..K as u64 {
                let cfg = if c == 2 {
                    refused
                } else {
                    CallConfig::default()
                };
                let a = TaskArgs::new()
                    .tensor(x.clone(), Tag::Input)
                    .tensor(block(&y, c * n, n), Tag::Output)
                    .scalar(pc::AFFINE);
                o.submit_next_level(&chip, a, &cfg, 0)?;
            }
            Ok(())
        })
        .unwrap_err();
    assert_eq!(err.kind(), "TASK_FAILED", "{err}");
    let text = err.to_string();
    assert!(
        text.contains("#2") && text.contains("aicpu_thread_num"),
        "{text}"
    );
    let out = read_f32(&*yr);
    for c in 0..K {
        let got = &out[c * N..(c + 1) * N];
        if c == 2 {
            assert!(
                got.iter().all(|v| *v == 0.0),
                "the refused run wrote nothing"
            );
        } else {
            assert!(
                got.iter().zip(&x_values).all(|(g, x)| *g == 2.0 * x + 1.0),
                "run {c} ran"
            );
        }
    }
    w.close().unwrap();
}
