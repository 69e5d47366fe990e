//! Completions and dispatch: what a task member's end means (completion, failure,
//! poisoning), dispatching the head run's READY tasks to lanes, and ending runs that are
//! over (`docs/l3-worker.md` §2, §4). There is no thread of its own: a lane applies its
//! members' ends itself ([`apply`]) and an orchestration dispatches the tasks it makes
//! ready ([`advance`]), each under the engine lock, so a task's hand-off costs no wake-up
//! of a third thread.
//!
//! Dispatch, in this order each pass: the chip-group FIFO's head once every target lane is
//! idle (until then its targets are reserved: no single task starts on them), then each
//! unreserved chip lane's own FIFO, up to [`CHIP_LANE_DEPTH`] members queued on the lane
//! (no stealing), then the sub FIFO's head on any idle sub lanes (a group on distinct
//! ones). A task aimed at a dead endpoint fails with [`WorkerError::EndpointFailure`].
//! Only the head run dispatches; when it is over its handle is answered and the next run
//! becomes the head.

use crate::engine::{Engine, State, CHIP_LANE_DEPTH};
use crate::graph::{Target, TaskState, Work};
use crate::lane::{Event, TaskOp, WorkItem};
use crate::run::Run;
use crate::tensormap::TaskId;
use crate::WorkerError;

/// Applies `events` (in order) under the engine lock, then dispatches what can run and
/// ends the runs that are over.
pub(crate) fn apply(engine: &Engine, events: impl IntoIterator<Item = Event>) {
    let mut st = engine.state.lock();
    for event in events {
        handle(engine, &mut st, event);
    }
    advance(engine, &mut st);
}

/// Which of `members` (run, task) lane `lane` is about to hand its endpoint may start.
/// A single chip task of a run whose orchestration failed is cancelled instead, as every
/// task not yet dispatched was (`docs/l3-worker.md` §2): it waited in the lane's channel
/// and its endpoint never saw it. A cancelled member is over here (its dependents
/// poisoned, the run ended once nothing else is left) and must not be reported again.
pub(crate) fn claim(engine: &Engine, lane: usize, members: &[(u64, TaskId)]) -> Vec<bool> {
    let mut st = engine.state.lock();
    if st.runs.iter().all(|r| r.cancelled.is_none()) {
        return vec![true; members.len()];
    }
    let mut go = Vec::with_capacity(members.len());
    let mut any = false;
    for &(run, task) in members {
        let State { runs, children, .. } = &mut *st;
        let r = runs.iter_mut().find(|r| r.id == run);
        let Some(r) = r.filter(|r| r.cancelled.is_some()) else {
            go.push(true);
            continue;
        };
        if !matches!(r.graph.task(task).target, Target::Chip(_)) {
            go.push(true);
            continue;
        }
        let why = r.cancelled.clone().unwrap_or_default();
        let name = r.graph.task(task).name.clone();
        let error = WorkerError::InvalidState(format!("task {name} was cancelled: {why}"));
        r.running -= 1;
        r.record_error(&error);
        let over = r.graph.fail(task, error);
        engine.tasks_over(r, children, &over);
        st.lanes[lane].queued -= 1;
        go.push(false);
        any = true;
    }
    if any {
        advance(engine, &mut st);
    }
    go
}

/// Applies one event.
fn handle(engine: &Engine, st: &mut State, event: Event) {
    match event {
        Event::Done {
            lane,
            run,
            task,
            result,
            took,
            trace,
            chip_tasks,
        } => {
            let facts = MemberFacts {
                took,
                chip_tasks,
                trace,
            };
            member_done(engine, st, lane, run, task, result, facts)
        }
        Event::Died { lane, report } => {
            st.lanes[lane].dead.get_or_insert(report);
            crate::comm::member_died(st, lane);
        }
    }
}

/// What a task member's lane measured and its endpoint reported, besides the verdict.
struct MemberFacts {
    /// The wall time of its callable's run (zero for a copy).
    took: std::time::Duration,
    /// The tasks a chip run's orchestration submitted.
    chip_tasks: Option<u64>,
    /// The traced call's span and chip trace.
    trace: Option<crate::lane::MemberTrace>,
}

fn member_done(
    engine: &Engine,
    st: &mut State,
    lane: usize,
    run: u64,
    task: TaskId,
    result: Result<(), WorkerError>,
    facts: MemberFacts,
) {
    st.lanes[lane].queued -= 1;
    let describe = st.lanes[lane].describe.clone();
    let State {
        runs,
        children,
        domains,
        ..
    } = st;
    let Some(r) = runs.iter_mut().find(|r| r.id == run) else {
        panic!("a member of task {task} ended for run {run}, which is not in flight");
    };
    if result.is_err() {
        // Its peers in a comm domain would wait for it until their timeout.
        crate::comm::member_failed(domains, &r.graph.task(task).uses);
    }
    if lane < engine.chips {
        r.chip_time += facts.took;
        r.chip_tasks += facts.chip_tasks.unwrap_or(0);
    } else {
        engine
            .sub_ends
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
    if let (Some(c), Some(m)) = (r.trace.as_mut(), facts.trace) {
        c.push_span(simpler_host::trace_model::HostSpan {
            thread: describe.clone(),
            name: r.graph.task(task).name.clone(),
            epoch: Some(run),
            start_ns: m.start_ns,
            end_ns: m.end_ns,
        });
        if let Some(chip) = m.chip {
            c.add_chip(lane, *chip);
        }
    }
    let t = r.graph.task_mut(task);
    if let Err(cause) = result {
        t.error.get_or_insert_with(|| WorkerError::TaskFailed {
            task: t.name.clone(),
            worker: describe,
            cause: Box::new(cause),
        });
    }
    t.members_left -= 1;
    if t.members_left > 0 {
        return;
    }
    r.running -= 1;
    let over = match t.error.take() {
        Some(error) => {
            r.record_error(&error);
            r.graph.fail(task, error)
        }
        None => {
            let ready = r.graph.complete(task);
            for id in &ready {
                r.enqueue(*id);
            }
            vec![task]
        }
    };
    engine.tasks_over(r, children, &over);
}

/// Dispatches what can run and ends the head run while it is over.
pub(crate) fn advance(engine: &Engine, st: &mut State) {
    loop {
        dispatch(engine, st);
        if !st.runs.front().is_some_and(Run::terminal) {
            return;
        }
        let mut run = st.runs.pop_front().expect("a head run");
        // The run is over: no kernel of it can touch its comm windows any more.
        crate::comm::free(engine, st, &run.domains);
        debug_assert!(
            run.allocs.values().all(|a| a.reclaimed),
            "run {}: every heap allocation is reclaimed once the run is over",
            run.id
        );
        let trace = run.trace.take().map(|c| {
            let lanes = &st.lanes;
            Box::new(c.into_trace(|l| lanes[l].describe.clone()))
        });
        run.shared.finish(run.outcome().map(|mut r| {
            r.trace = trace;
            r
        }));
        engine.changed.notify_all();
    }
}

fn dispatch(engine: &Engine, st: &mut State) {
    let State {
        runs,
        lanes,
        children,
        ..
    } = st;
    let Some(run) = runs.front_mut() else {
        return;
    };
    for l in lanes.iter_mut() {
        l.reserved = false;
    }
    let mut failed: Vec<(TaskId, WorkerError)> = Vec::new();

    // Chip groups: the head waits for all its targets, holding them.
    while let Some(&id) = run.ready_groups.front() {
        if run.graph.task(id).state != TaskState::Ready {
            run.ready_groups.pop_front();
            continue;
        }
        let Target::ChipGroup(ws) = run.graph.task(id).target.clone() else {
            unreachable!("only chip groups are queued here")
        };
        if let Some(w) = ws.iter().find(|w| lanes[**w].dead.is_some()) {
            run.ready_groups.pop_front();
            failed.push((id, dead(&lanes[*w])));
            continue;
        }
        if ws.iter().all(|w| !lanes[*w].busy()) {
            run.ready_groups.pop_front();
            start(engine, run, lanes, id, &ws);
        } else {
            for w in &ws {
                lanes[*w].reserved = true;
            }
            break;
        }
    }

    // Single chip tasks: each lane's own FIFO, several at once (the lane batches them).
    for w in 0..engine.chips {
        while lanes[w].queued < CHIP_LANE_DEPTH && !lanes[w].reserved {
            let Some(id) = run.ready_chip[w].pop_front() else {
                break;
            };
            if run.graph.task(id).state != TaskState::Ready {
                continue;
            }
            if lanes[w].dead.is_some() {
                failed.push((id, dead(&lanes[w])));
                continue;
            }
            start(engine, run, lanes, id, &[w]);
        }
    }

    // Sub tasks: any idle sub lanes, a group on distinct ones.
    let subs = engine.chips..engine.chips + engine.subs;
    while let Some(&id) = run.ready_sub.front() {
        if run.graph.task(id).state != TaskState::Ready {
            run.ready_sub.pop_front();
            continue;
        }
        let n = run.graph.task(id).target.members();
        let alive: Vec<usize> = subs.clone().filter(|l| lanes[*l].dead.is_none()).collect();
        if alive.len() < n {
            run.ready_sub.pop_front();
            let report = format!(
                "{n} sub worker(s) needed, {} alive: {}",
                alive.len(),
                subs.clone()
                    .filter_map(|l| lanes[l]
                        .dead
                        .as_ref()
                        .map(|d| format!("{}: {d}", lanes[l].describe)))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            failed.push((
                id,
                WorkerError::EndpointFailure {
                    endpoint: "the sub workers".into(),
                    report,
                },
            ));
            continue;
        }
        let idle: Vec<usize> = alive
            .into_iter()
            .filter(|l| !lanes[*l].busy())
            .take(n)
            .collect();
        if idle.len() < n {
            break;
        }
        run.ready_sub.pop_front();
        start(engine, run, lanes, id, &idle);
    }

    for (id, cause) in failed {
        let t = run.graph.task(id);
        let error = WorkerError::TaskFailed {
            task: t.name.clone(),
            worker: match &cause {
                WorkerError::EndpointFailure { endpoint, .. } => endpoint.clone(),
                _ => String::new(),
            },
            cause: Box::new(cause),
        };
        run.record_error(&error);
        let over = run.graph.fail(id, error);
        engine.tasks_over(run, children, &over);
    }
}

fn dead(lane: &crate::engine::LaneSlot) -> WorkerError {
    WorkerError::EndpointFailure {
        endpoint: lane.describe.clone(),
        report: lane.dead.clone().unwrap_or_default(),
    }
}

/// Starts READY task `id` on `targets` (one lane per member, in member order).
fn start(
    engine: &Engine,
    run: &mut Run,
    lanes: &mut [crate::engine::LaneSlot],
    id: TaskId,
    targets: &[usize],
) {
    run.graph.start(id);
    run.running += 1;
    let level = run.trace.as_ref().map(|c| c.level);
    if let Some(c) = run.trace.as_mut() {
        let now = simpler_device::clock::monotonic_ns();
        let name = format!("dispatch {}", run.graph.task(id).name);
        c.span("L3 scheduler", name, run.id, now);
    }
    let work = run
        .graph
        .task_mut(id)
        .work
        .take()
        .expect("work of a ready task");
    let ops: Vec<TaskOp> = match work {
        Work::Call {
            key,
            mut config,
            args,
        } => {
            if let Some(level) = level {
                config.trace_level = config.trace_level.max(level);
            }
            args.into_iter()
                .map(|args| TaskOp::Run { key, args, config })
                .collect()
        }
        Work::CopyTo { dst, src } => vec![TaskOp::CopyTo { dst, src }],
        Work::CopyFrom { dst, src } => vec![TaskOp::CopyFrom { dst, src }],
    };
    assert_eq!(ops.len(), targets.len(), "one member per target lane");
    for (op, &lane) in ops.into_iter().zip(targets) {
        lanes[lane].queued += 1;
        let item = WorkItem::Task {
            run: run.id,
            task: id,
            op,
        };
        if engine.lanes[lane].send(item).is_err() {
            panic!("lane {lane} stopped while its worker is running");
        }
    }
}
