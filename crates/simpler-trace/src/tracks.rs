//! The track layout shared by every exporter: which threads a process shows, in what order.
//!
//! Owns the naming and ordering of thread tracks ("AIC 0".."AIV n", "AICPU 0".., then host
//! threads), their shown labels, the mapping of a track name back to its kind, and the lookup
//! of an event's track position ([`ThreadIndex`]). Holds no format code.

use std::collections::BTreeSet;

use crate::export::FastMap;

use crate::model::{CoreKind, ProcessTrace};

/// The kind of a thread track, parsed from its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ThreadKind {
    /// An AICore, "AIC {core}" or "AIV {core}".
    Core(CoreKind, u32),
    /// An AICPU thread, "AICPU {thread}" (0 = orchestrator, 1.. = schedulers).
    Aicpu(u32),
    /// Any other name: a host thread.
    Host,
}

impl ThreadKind {
    /// The kind of the track named `name`.
    pub fn of(name: &str) -> ThreadKind {
        let mut it = name.split_whitespace();
        let (Some(head), Some(num)) = (it.next(), it.next()) else {
            return ThreadKind::Host;
        };
        let Ok(n) = num.parse::<u32>() else {
            return ThreadKind::Host;
        };
        match head {
            "AIC" => ThreadKind::Core(CoreKind::Aic, n),
            "AIV" => ThreadKind::Core(CoreKind::Aiv, n),
            "AICPU" => ThreadKind::Aicpu(n),
            _ => ThreadKind::Host,
        }
    }
}

/// The label shown for AICPU thread `thread`: "AICPU 0 (orchestrator)" or "AICPU k (scheduler)".
pub fn aicpu_label(thread: u32) -> String {
    if thread == 0 {
        format!("AICPU {thread} (orchestrator)")
    } else {
        format!("AICPU {thread} (scheduler)")
    }
}

/// The label shown for thread track `name`: [`aicpu_label`] for an AICPU thread, else the
/// name itself.
pub fn thread_label(name: &str) -> String {
    match ThreadKind::of(name) {
        ThreadKind::Aicpu(n) => aicpu_label(n),
        _ => name.to_string(),
    }
}

/// Every thread track of `p`, in display order: AIC cores, AIV cores (each by core id), AICPU
/// threads (by number), then host threads (by first appearance). Includes the threads named
/// only by a drop count.
pub fn threads(p: &ProcessTrace) -> Vec<String> {
    let mut cores: BTreeSet<(CoreKind, u32)> = BTreeSet::new();
    let mut aicpu: BTreeSet<u32> = BTreeSet::new();
    let mut host: Vec<String> = Vec::new();
    let note = |name: &str,
                cores: &mut BTreeSet<(CoreKind, u32)>,
                aicpu: &mut BTreeSet<u32>,
                host: &mut Vec<String>| match ThreadKind::of(name) {
        ThreadKind::Core(k, c) => {
            cores.insert((k, c));
        }
        ThreadKind::Aicpu(t) => {
            aicpu.insert(t);
        }
        ThreadKind::Host => {
            if !host.iter().any(|h| h == name) {
                host.push(name.to_string());
            }
        }
    };
    for r in &p.runs {
        for s in &r.subtasks {
            cores.insert((s.core_kind, s.core));
        }
        for a in &r.aicpu {
            aicpu.insert(a.thread);
        }
        for d in &r.dropped {
            note(&d.thread, &mut cores, &mut aicpu, &mut host);
        }
    }
    for h in &p.host_spans {
        note(&h.thread, &mut cores, &mut aicpu, &mut host);
    }
    let mut out: Vec<String> = cores.into_iter().map(|(k, c)| format!("{k} {c}")).collect();
    out.extend(aicpu.into_iter().map(crate::model::aicpu_thread_name));
    out.extend(host);
    out
}

/// The thread tracks of one process ([`threads`]' order) and the position of each, looked up
/// by core, AICPU thread or name without building the track's name (the exporters look up one
/// per event).
pub(crate) struct ThreadIndex {
    names: Vec<String>,
    cores: FastMap<(CoreKind, u32), usize>,
    aicpu: FastMap<u32, usize>,
    host: FastMap<String, usize>,
}

impl ThreadIndex {
    /// Indexes [`threads`] of `p`.
    pub(crate) fn new(p: &ProcessTrace) -> ThreadIndex {
        let names = threads(p);
        let (mut cores, mut aicpu, mut host) =
            (FastMap::default(), FastMap::default(), FastMap::default());
        for (i, n) in names.iter().enumerate() {
            match ThreadKind::of(n) {
                ThreadKind::Core(k, c) => {
                    cores.insert((k, c), i);
                }
                ThreadKind::Aicpu(t) => {
                    aicpu.insert(t, i);
                }
                ThreadKind::Host => {
                    host.insert(n.clone(), i);
                }
            }
        }
        ThreadIndex {
            names,
            cores,
            aicpu,
            host,
        }
    }

    /// The track names, in display order.
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// The position of core `core` of kind `kind`. Panics when the process ran nothing there
    /// ([`threads`] lists every core a subtask ran on).
    pub(crate) fn core(&self, kind: CoreKind, core: u32) -> usize {
        *self
            .cores
            .get(&(kind, core))
            .expect("tracks::threads lists every core that ran a subtask")
    }

    /// The position of AICPU thread `thread`. Panics when the process has no span there.
    pub(crate) fn aicpu(&self, thread: u32) -> usize {
        *self
            .aicpu
            .get(&thread)
            .expect("tracks::threads lists every AICPU thread with a span")
    }

    /// The position of the thread named `name` (any kind). Panics when the process names no
    /// such thread.
    pub(crate) fn named(&self, name: &str) -> usize {
        let at = match ThreadKind::of(name) {
            ThreadKind::Core(k, c) => self.cores.get(&(k, c)),
            ThreadKind::Aicpu(t) => self.aicpu.get(&t),
            ThreadKind::Host => self.host.get(name),
        };
        *at.expect("tracks::threads lists every thread the process names")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_to_kinds() {
        assert_eq!(ThreadKind::of("AIC 0"), ThreadKind::Core(CoreKind::Aic, 0));
        assert_eq!(
            ThreadKind::of("AIV 17"),
            ThreadKind::Core(CoreKind::Aiv, 17)
        );
        assert_eq!(ThreadKind::of("AICPU 2"), ThreadKind::Aicpu(2));
        assert_eq!(
            ThreadKind::of("AICPU 0 (orchestrator)"),
            ThreadKind::Aicpu(0)
        );
        assert_eq!(ThreadKind::of("host lane"), ThreadKind::Host);
        assert_eq!(ThreadKind::of("AIC x"), ThreadKind::Host);
        assert_eq!(aicpu_label(0), "AICPU 0 (orchestrator)");
        assert_eq!(aicpu_label(3), "AICPU 3 (scheduler)");
        assert_eq!(thread_label("AICPU 0"), "AICPU 0 (orchestrator)");
        assert_eq!(thread_label("host lane"), "host lane");
    }

    #[test]
    fn thread_index_finds_each_track_by_kind_and_name() {
        let p = crate::sample::synthetic(&crate::sample::SampleSpec {
            tasks: 6,
            dropped: 3,
            ..Default::default()
        });
        let p = &p.processes[0];
        let index = ThreadIndex::new(p);
        assert_eq!(index.names(), threads(p).as_slice());
        for s in &p.runs[0].subtasks {
            assert_eq!(
                index.names()[index.core(s.core_kind, s.core)],
                s.core_name()
            );
        }
        for (i, n) in index.names().iter().enumerate() {
            assert_eq!(index.named(n), i, "{n}");
        }
        assert_eq!(index.names()[index.aicpu(1)], "AICPU 1");
        assert_eq!(index.named("host lane"), index.names().len() - 1);
    }
}
