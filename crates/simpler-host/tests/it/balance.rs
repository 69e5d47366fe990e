//! Balanced schedulers, end to end through `ChipWorker` on the sim device: with any number
//! of scheduler threads, a ready task never waits in a busy core's pending slot while a core
//! of its type is idle anywhere on the chip (`docs/chip-runtime.md`, schedulers).
//!
//! The check is behavioural, not timed: a run submits exactly as many independent
//! subtasks of each core type as the chip has cores of that type, and every kernel waits at
//! a meeting point until all of them have arrived. They can all arrive only if each one was
//! dispatched to its own idle core; a subtask parked behind another in a pending slot
//! cannot start until the one ahead of it gives up waiting, which the run then reports (the
//! give-up bound is only how long a broken scheduler is waited for).
//!
//! The kernels wait through the device's own sleep (`simpler_device::wait::sleep`), never
//! an OS sleep: on the sim's pool executor every core is a fiber on a few worker threads,
//! and a kernel that blocked its worker would keep the cores queued behind it — and the
//! scheduler threads — from running until the pool's stall monitor replaced the worker.
//! On a loaded host that took longer than the give-up bound, the kernels dispatched first
//! gave up, and the late ones ran on the cores they left (`docs/sim-device.md` §11). With
//! fibers parking, all of a run's kernels are in flight together within microseconds.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::common::*;
use simpler_abi::*;
use simpler_device::Topology;
use simpler_host::*;

/// How long a kernel waits for the others before it gives up (a failure, never expected:
/// the kernels of a correct run meet within milliseconds even on a loaded host).
const GIVE_UP: Duration = Duration::from_secs(20);

/// Where the kernels of one run meet.
#[derive(Default)]
struct Meeting {
    /// Subtasks expected.
    parties: u32,
    arrived: AtomicU32,
    /// Kernels that gave up waiting for the others.
    gave_up: AtomicU32,
    /// Global core id of every kernel that arrived.
    cores: Mutex<Vec<u32>>,
}

impl Meeting {
    fn new(parties: u32) -> Meeting {
        Meeting {
            parties,
            ..Meeting::default()
        }
    }

    /// Arrives from core `core` and waits until all parties have arrived or [`GIVE_UP`]
    /// passes, sleeping through the device (a fiber parks; its worker runs other cores).
    fn meet(&self, core: u32) {
        self.cores.lock().unwrap().push(core);
        self.arrived.fetch_add(1, Ordering::AcqRel);
        let start = Instant::now();
        while self.arrived.load(Ordering::Acquire) < self.parties {
            if start.elapsed() > GIVE_UP {
                self.gave_up.fetch_add(1, Ordering::AcqRel);
                return;
            }
            simpler_device::wait::sleep(Duration::from_micros(200));
        }
    }
}

/// Meets at the [`Meeting`] whose address is scalar 0 (the task has no tensors).
unsafe extern "C-unwind" fn meet_kernel(args: *mut i64) {
    // SAFETY: scalar 0 of every task is the address of a Meeting that outlives the run, and
    // slot 49 points to the core's GlobalContext.
    let (meeting, g) = unsafe {
        (
            &*(*args as *const Meeting),
            *(*args.add(GLOBAL_CONTEXT_SLOT) as *const GlobalContext),
        )
    };
    meeting.meet(g.core_id);
}

/// Func ids of the meeting kernel on each core type.
const AIC_MEET: i32 = 0;
const AIV_MEET: i32 = 1;

/// The task graphs, each filling every core of the chip exactly once.
#[derive(Clone, Copy, Debug)]
enum Graph {
    /// One single-core task per core, AIV, AIV, AIC, … in submit order.
    Singles,
    /// One MIX task per cluster on all three lanes.
    Mix,
    /// One AIV task with a block per AIV core and one AIC task with a block per AIC core.
    Spmd,
    /// One MIX task per cluster on its two AIV lanes, then one AIC task per cluster.
    MixAndSingles,
}

const GRAPHS: [Graph; 4] = [
    Graph::Singles,
    Graph::Mix,
    Graph::Spmd,
    Graph::MixAndSingles,
];

fn meet_task(meeting: u64, lanes: &[usize], blocks: u32) -> Box<TaskDesc> {
    let mut d = task_desc();
    for &lane in lanes {
        d.kernel_ids[lane] = if lane == LANE_AIC { AIC_MEET } else { AIV_MEET };
    }
    d.block_num = blocks as i32;
    d.scalars[0] = meeting;
    d.scalar_count = 1;
    d
}

/// Submits `scalars[2]`'s graph (a [`Graph`] index) for a chip of `scalars[1]` clusters,
/// every kernel meeting at `scalars[0]`.
unsafe extern "C-unwind" fn balance_orch(ops: *const OrchOps, args: *const OrchArgs) -> i32 {
    // SAFETY: the runtime passes valid arguments.
    let a = unsafe { &*args };
    let (meeting, clusters) = (a.scalars[0], a.scalars[1] as u32);
    let mut tasks = Vec::new();
    match GRAPHS[a.scalars[2] as usize] {
        Graph::Singles => {
            for _ in 0..clusters {
                tasks.push(meet_task(meeting, &[LANE_AIV0], 1));
                tasks.push(meet_task(meeting, &[LANE_AIV0], 1));
                tasks.push(meet_task(meeting, &[LANE_AIC], 1));
            }
        }
        Graph::Mix => {
            for _ in 0..clusters {
                tasks.push(meet_task(meeting, &[LANE_AIC, LANE_AIV0, LANE_AIV1], 1));
            }
        }
        Graph::Spmd => {
            tasks.push(meet_task(meeting, &[LANE_AIV0], 2 * clusters));
            tasks.push(meet_task(meeting, &[LANE_AIC], clusters));
        }
        Graph::MixAndSingles => {
            for _ in 0..clusters {
                tasks.push(meet_task(meeting, &[LANE_AIV0, LANE_AIV1], 1));
            }
            for _ in 0..clusters {
                tasks.push(meet_task(meeting, &[LANE_AIC], 1));
            }
        }
    }
    for d in &tasks {
        // SAFETY: the table this entry received.
        let rc = unsafe { submit(ops, d) };
        if rc != 0 {
            return rc;
        }
    }
    0
}

fn callable() -> CallableSpec {
    let scalar = |name: &str| ArgSpec {
        name: name.into(),
        direction: ArgDirection::Scalar,
        dtype: DataType::Uint64,
        shape: None,
    };
    let kernel = |func_id: i32, core_type| KernelSpec {
        func_id: func_id as u32,
        core_type,
        image: CodeImage::Kernel(meet_kernel),
        name: None,
    };
    CallableSpec {
        name: "balance".into(),
        signature: Signature::new(vec![scalar("meeting"), scalar("clusters"), scalar("graph")])
            .unwrap(),
        orchestration: CodeImage::Orchestration(balance_orch),
        kernels: vec![
            kernel(AIC_MEET, CoreType::Aic),
            kernel(AIV_MEET, CoreType::Aiv),
        ],
        runtime: None,
    }
}

/// Runs `graph` on a worker of `clusters` clusters with `schedulers` scheduler threads and
/// returns what went wrong, if anything.
fn check_run(
    w: &ChipWorker,
    id: CallableId,
    clusters: u32,
    schedulers: u32,
    graph: usize,
) -> Option<String> {
    let cores = 3 * clusters;
    let meeting = Meeting::new(cores);
    let mut args = [
        HostArg::Scalar(&meeting as *const Meeting as u64),
        HostArg::Scalar(u64::from(clusters)),
        HostArg::Scalar(graph as u64),
    ];
    let config = CallConfig {
        aicpu_thread_num: schedulers + 1,
        ..CallConfig::default()
    };
    let case = format!(
        "{:?} on {clusters} clusters, {schedulers} schedulers",
        GRAPHS[graph]
    );
    if let Err(e) = w.run_with(id, &mut args, &config) {
        return Some(format!("{case}: the run failed: {e}"));
    }
    let mut ran = meeting.cores.lock().unwrap().clone();
    ran.sort_unstable();
    let gave_up = meeting.gave_up.load(Ordering::Acquire);
    let all: Vec<u32> = (0..cores).collect();
    if gave_up != 0 || ran != all {
        return Some(format!(
            "{case}: {gave_up} of {cores} kernels waited {GIVE_UP:?} for the others (a subtask \
             sat in a pending slot while a core was idle); cores that ran one: {ran:?}"
        ));
    }
    None
}

fn worker(clusters: u32) -> (ChipWorker, CallableId) {
    let w = ChipWorker::new(WorkerConfig {
        topology: Topology {
            clusters,
            aicpu_threads: 7,
        },
        ..config()
    })
    .expect("worker");
    let id = w.register(&callable()).expect("register");
    (w, id)
}

/// Rounds of every case: a misplaced subtask depends on how the scheduler threads happen to
/// interleave, so each case runs several times.
const ROUNDS: usize = 5;

/// Runs every graph `ROUNDS` times on `clusters` clusters with each scheduler count in
/// `schedulers`; panics at the first failure (each one costs a give-up wait).
fn check_all(clusters: u32, schedulers: impl Iterator<Item = u32> + Clone) {
    let (w, id) = worker(clusters);
    for _ in 0..ROUNDS {
        for s in schedulers.clone() {
            for graph in 0..GRAPHS.len() {
                if let Some(wrong) = check_run(&w, id, clusters, s, graph) {
                    panic!("{wrong}");
                }
            }
        }
    }
}

#[test]
fn every_subtask_gets_its_own_idle_core_whatever_the_scheduler_count() {
    for clusters in [1, 2, 3, 5, 8] {
        check_all(clusters, 1..=6);
    }
}

#[test]
fn a_full_chip_of_24_clusters_is_filled_by_any_scheduler_count() {
    check_all(24, [2, 5, 6].into_iter());
}
