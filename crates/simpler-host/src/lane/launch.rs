//! Launch: the graded launch transaction of a prepared run ([`crate::launch`]) — arming
//! prologue (fence events, join-proof and caller-order events; admission re-checked), the
//! zero result marker, the crossed join behind a launched predecessor, the caller-order
//! edges of a caller launch, then the AICore kernel + `core_done` and the AICPU kernel +
//! `cpu_done` (`docs/lane.md` §5).
//!
//! NotStarted rolls back (the run ends at the front with the launch error); Partial keeps
//! every resource and poisons the lane: queued runs end with [`HostError::LanePoisoned`] and
//! admission stays closed (a submit is refused at once) until the drain proves quiescence.
//!
//! The launch submits and records; it never waits on the device (completion is the drain's).

use std::cell::RefCell;
use std::time::Instant;

use simpler_abi::RunResult;

use crate::caller_stream::{self, CallerOrder};
use crate::fence::FenceError;
use crate::identity::StreamRole;
use crate::join::{self, JoinRefs};
use crate::launch::{launch_transaction, LaunchGrade, LaunchPermit};
use crate::HostError;

use super::run::{FailedRun, LaunchState, LaunchedRun, PreparedRun, Stage};
use super::LaneEngine;

impl LaneEngine {
    /// The launch transaction of prepared run `id` in `slot_idx`, graded; see the module doc.
    pub(super) fn launch(&mut self, id: u64, slot_idx: usize) {
        // The predecessor to join: the launched run ahead of this one, if its fence is armed.
        let pred = self
            .queue
            .phases()
            .into_iter()
            .take_while(|&(d, _)| d != id)
            .last()
            .and_then(|(d, _)| self.queue.get_mut(d))
            .and_then(|p| p.identity());
        let pred = pred.map(|p| (p, self.slots[p.slot as usize].fence.clone()));
        let run = self.queue.get_mut(id).expect("a prepared run");
        let threads = run.request.plan.aicpu_threads;
        let caller = run.request.caller;
        let launch_start = run.request.capture.now();
        let Stage::Prepared(PreparedRun { identity, staging }) =
            std::mem::replace(&mut run.stage, Stage::Queued)
        else {
            unreachable!("only a prepared run is launched")
        };
        let streams = self.resources.streams;
        // The streams this run's boundaries are recorded on belong to the generation's history.
        self.health.note_stream(Some(streams.aicore));
        self.health.note_stream(Some(streams.aicpu));
        if let Some(c) = caller {
            self.health.note_stream(Some(c));
        }
        // Admission is re-checked around the launch claim: a device that turned suspect (or a
        // lane that turned unusable) since preparation refuses before anything is submitted.
        let refusal = self.admission_refusal();
        let LaneEngine {
            device,
            kernels,
            slots,
            ..
        } = self;
        let device = &*device;
        let dev = &**device;
        let slot = &mut slots[slot_idx];
        let fence = slot.fence.clone();
        let (desc, result_addr, initialized) = (slot.desc, slot.result, slot.result_initialized);
        let mut join: Option<JoinRefs> = None;
        let mut marker_published = false;
        let order: RefCell<Option<CallerOrder>> = RefCell::new(None);
        let started = Instant::now();
        let outcome = launch_transaction(
            LaunchPermit::new(identity),
            &identity,
            || HostError::RunUndecided("launch permit for another run".into()),
            |what| HostError::DeviceUnusable(what.into()),
            |sink| {
                if let Some(why) = refusal {
                    return Err(HostError::DeviceUnusable(why));
                }
                // Arming prologue: nothing device-visible yet, a failure costs nothing.
                fence
                    .arm(dev, identity)
                    .map_err(fence_err("arming the completion fence"))?;
                let proofs = match &pred {
                    Some(_) => Some(slot.ensure_proofs(device)?),
                    None => None,
                };
                let zero = (!initialized).then(|| vec![0u8; std::mem::size_of::<RunResult>()]);
                if let Some(c) = caller {
                    let events = slot.caller_events.ensure(dev)?;
                    let mut o = order.borrow_mut();
                    let o = o.insert(CallerOrder::new(c, events));
                    // Partial from the first caller-edge attempt (the sink is marked inside).
                    marker_published = caller_stream::queue_entry(
                        dev,
                        streams,
                        o,
                        zero.map(|z| (result_addr, z)),
                        sink,
                    )?;
                } else if let Some(zero) = zero {
                    // An attempted asynchronous copy is device-visible even if the call fails.
                    sink.mark_submitted();
                    dev.copy_to_device_async(streams.aicpu, result_addr, zero)
                        .map_err(HostError::device("publishing the zero result marker"))?;
                    marker_published = true;
                }
                if let (Some((pid, pfence)), Some(proofs)) = (&pred, proofs) {
                    let (refs, r) =
                        join::queue_crossed_join(dev, streams, pfence, *pid, proofs, sink);
                    join = Some(refs);
                    r.map_err(|e| match e {
                        join::JoinError::Fence(f) => fence_err("joining the predecessor")(f),
                        join::JoinError::Device(what, e) => HostError::device(what)(e),
                    })?;
                }
                // Lazily: a core starts on its first dispatch, so cores a run never
                // dispatches to take no slice (docs/sim-device.md §13); COND reads the run's
                // READY from the arm on, as if the core had started.
                let armed = simpler_runtime::handshake::ready(identity.epoch);
                // SAFETY: `desc` is this run's launch descriptor; the lane keeps it and the slot
                // regions it names allocated until the run's boundaries are proven
                // (docs/lane.md).
                unsafe { dev.launch_aicore_lazy(streams.aicore, kernels.aicore, desc, armed) }
                    .map_err(HostError::device("launching the AICore kernel"))?;
                sink.mark_submitted();
                fence.note_kernel_submitted(&identity, StreamRole::Aicore);
                fence
                    .record(dev, &identity, StreamRole::Aicore, Some(streams.aicore))
                    .map_err(fence_err("recording the AICore boundary"))
            },
            |sink| {
                // SAFETY: as for the AICore kernel above.
                unsafe { dev.launch_aicpu(streams.aicpu, kernels.aicpu, desc, threads) }
                    .map_err(HostError::device("launching the AICPU kernel"))?;
                sink.mark_submitted();
                fence.note_kernel_submitted(&identity, StreamRole::Aicpu);
                let mut order = order.borrow_mut();
                if let Some(o) = order.as_mut() {
                    caller_stream::queue_own_wait(dev, streams, &fence, &identity, o)?;
                }
                fence
                    .record(dev, &identity, StreamRole::Aicpu, Some(streams.aicpu))
                    .map_err(fence_err("recording the AICPU boundary"))?;
                if let Some(o) = order.as_mut() {
                    caller_stream::queue_exit(dev, &fence, &identity, o)?;
                }
                Ok(())
            },
        );
        let order = order.into_inner();
        if marker_published {
            slot.result_initialized = true;
        }
        let run = self.queue.get_mut(id).expect("a launched run");
        run.request
            .capture
            .span("launch", identity.epoch, launch_start);
        run.request.capture.launched();
        match outcome.grade {
            LaunchGrade::NotStarted => {
                // Nothing reached the device: roll back. A reservation never attempted is
                // revoked.
                if let Some(j) = join.as_mut() {
                    for r in j.refs.iter_mut() {
                        let _ = j.pred_fence.revoke_wait_reference(r);
                    }
                }
                let _ = fence.retire(&identity);
                self.slots[slot_idx].occupant = None;
                self.slots[slot_idx]
                    .staging
                    .put_back(staging.into_iter().flatten());
                run.stage = Stage::Failed(FailedRun {
                    error: outcome
                        .error
                        .expect("a launch that did not start has an error"),
                    args_retained: false,
                });
            }
            grade => {
                debug_assert!(
                    grade != LaunchGrade::Complete
                        || outcome.receipt.map(|r| r.identity) == Some(identity),
                    "a complete launch carries this run's receipt"
                );
                let launch = match (grade, outcome.error) {
                    (LaunchGrade::Complete, _) => LaunchState::Complete,
                    (_, error) => LaunchState::Partial(error.unwrap_or_else(|| {
                        HostError::DeviceUnusable("a launch was partial".into())
                    })),
                };
                let why = launch.error().map(|e| e.to_string());
                if why.is_some() {
                    self.background_drains.push(run.request.cell.clone());
                }
                run.stage = Stage::Launched(LaunchedRun {
                    identity,
                    staging,
                    launch,
                    started,
                    join,
                    order,
                    failure_seen: None,
                });
                if let Some(why) = why {
                    // Close admission: queued runs end with the launch error; the drain
                    // decides whether the device recovers.
                    for (_, run) in self.queue.poison() {
                        self.end_unlaunched(
                            run,
                            HostError::LanePoisoned(format!(
                                "an earlier run's launch failed: {why}"
                            )),
                        );
                    }
                }
            }
        }
    }
}

fn fence_err(what: &'static str) -> impl Fn(FenceError) -> HostError {
    move |e| match e {
        FenceError::Device(d) => HostError::device(what)(d),
        other => HostError::RunUndecided(format!("{what}: {other}")),
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use simpler_abi::DataType;
    use simpler_device::sim::SimDevice;
    use simpler_device::{Device, Topology};

    use super::*;
    use crate::args::OwnedArg;
    use crate::config::CallConfig;
    use crate::identity::RunIdentity;
    use crate::lane::queue::Phase;
    use crate::lane::run::{RunCell, RunRequest, RunState};
    use crate::lane::LaneHandle;
    use crate::lifecycle::EnvironmentIdentity;
    use crate::registry::{self, ImageCache};
    use crate::worker::tests::empty_spec;
    use crate::worker_config::WorkerConfig;

    /// Admission is checked at prepare and again around the launch claim: a device that
    /// turns suspect between the two refuses in the launch prologue (NotStarted: nothing
    /// submitted, the preparation rolled back).
    #[test]
    fn admission_is_rechecked_at_launch() {
        // (device turns suspect between prepare and launch, launched)
        for (suspect_between, launched) in [(false, true), (true, false)] {
            let topology = Topology {
                clusters: 1,
                aicpu_threads: 2,
            };
            let device: Arc<dyn Device> = Arc::new(SimDevice::new(topology).unwrap());
            let config = WorkerConfig {
                topology,
                heap_size: 1 << 16,
                run_timeout: Duration::from_secs(30),
                ..WorkerConfig::default()
            };
            let identity = EnvironmentIdentity::new(device.device_id(), None);
            let plan = CallConfig::default().plan(&config).unwrap();
            let lane = LaneHandle::open(device, config, identity).unwrap();
            let callable =
                Arc::new(registry::build(&mut ImageCache::default(), &empty_spec(), 1).unwrap());
            let mut engine = lane.lock_for_tests();
            let dispatch = engine.next_dispatch;
            engine.next_dispatch += 1;
            let epoch = crate::lane::EPOCHS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let cell = Arc::new(RunCell::new(epoch, dispatch));
            let run = RunState::queued(RunRequest {
                cell: cell.clone(),
                callable,
                plan,
                args: vec![OwnedArg::Tensor {
                    buffer: Box::new(vec![0u8; 64]),
                    shape: vec![16],
                    dtype: DataType::Float32,
                }],
                caller: None,
                host_ranges: Vec::new(),
                device_ranges: Vec::new(),
                capture: crate::trace::RunCapture::default(),
                graph: crate::lane::graph::GraphPlan::Device,
                graph_image: None,
            });
            engine.queue.admit(dispatch, run).unwrap();
            engine.queue.advance(dispatch, Phase::Prepared).unwrap();
            assert!(engine.admission_refusal().is_none(), "admitted at prepare");
            engine.prepare(dispatch, 0).map_err(|(e, _)| e).unwrap();
            let identity = RunIdentity {
                epoch: cell.epoch,
                generation: engine.generation,
                dispatch_id: dispatch,
                slot: 0,
            };
            engine.queue.advance(dispatch, Phase::Launched).unwrap();
            if suspect_between {
                engine.health.note_own_device_fault(-1, None);
            }
            engine.launch(dispatch, 0);
            {
                let run = engine.queue.get_mut(dispatch).unwrap();
                assert_eq!(
                    run.launched().map(|l| l.identity),
                    launched.then_some(identity),
                    "{suspect_between}"
                );
                if !launched {
                    assert!(
                        matches!(&run.stage, Stage::Failed(FailedRun { error: HostError::DeviceUnusable(m), .. }) if m.contains("suspect")),
                        "the launch prologue refused"
                    );
                }
            }
            assert_eq!(
                engine.slots[0].fence.fenced(&identity),
                launched,
                "nothing was submitted when refused"
            );
            assert_eq!(engine.slots[0].occupant.is_some(), launched);
            engine.pump();
            drop(engine);
            let r = lane
                .wait_for(&cell, None, None)
                .and_then(|()| cell.outcome());
            assert_eq!(r.is_ok(), launched, "{r:?}");
            lane.detach();
        }
    }
}
