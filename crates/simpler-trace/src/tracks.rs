//! The track layout shared by every exporter: which threads a process shows, in what order.
//!
//! Owns the naming and ordering of thread tracks ("AIC 0".."AIV n", "AICPU 0".., then host
//! threads) and the mapping of a track name back to its kind. Holds no format code.

use std::collections::BTreeSet;

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
    }
}
