//! A run's dependency graph as Graphviz dot or JSON.
//!
//! Owns the two graph files (docs/tracing.md, "Dependency graph"): dot with one node per task
//! (labelled with its submit index and kernel names) and one edge per dependency labelled by
//! its kind; JSON with the run's epoch, callable, tasks and edges in the model's serde form.

use std::io::{self, Write};

use serde::Serialize;

use crate::model::{DepEdge, EdgeKind, RunTrace, TaskInfo};

/// Escapes `s` for a dot double-quoted string.
fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Writes `run`'s task graph as a Graphviz `digraph`. Nodes are `t{task}`; tasks named only by
/// an edge get a node too.
///
/// Errors: those of `w`.
pub fn write_dot(run: &RunTrace, w: impl Write) -> io::Result<()> {
    let mut w = io::BufWriter::new(w);
    writeln!(
        w,
        "digraph \"{}\" {{",
        esc(&format!("{} (run {})", run.callable, run.epoch))
    )?;
    writeln!(
        w,
        "  rankdir=TB;\n  node [shape=box, fontname=\"sans-serif\"];"
    )?;
    let mut seen = std::collections::BTreeSet::new();
    for t in &run.tasks {
        seen.insert(t.task);
        let kernels: Vec<&str> = t.kernels.iter().map(|k| k.name.as_str()).collect();
        let label = format!(
            "#{} task {}\\n{}",
            t.submit_index,
            t.task,
            esc(&kernels.join(", "))
        );
        writeln!(w, "  t{} [label=\"{label}\"];", t.task)?;
    }
    for e in &run.edges {
        for t in [e.producer, e.consumer] {
            if seen.insert(t) {
                writeln!(w, "  t{t} [label=\"task {t}\"];")?;
            }
        }
    }
    for e in &run.edges {
        let style = match e.kind {
            EdgeKind::Raw => "solid",
            EdgeKind::Waw | EdgeKind::War => "dashed",
            EdgeKind::Explicit => "dotted",
        };
        writeln!(
            w,
            "  t{} -> t{} [label=\"{}\", style={style}];",
            e.producer, e.consumer, e.kind
        )?;
    }
    writeln!(w, "}}")?;
    w.flush()
}

/// The JSON form of a run's graph.
#[derive(Serialize)]
struct Graph<'a> {
    epoch: u64,
    callable: &'a str,
    tasks: &'a [TaskInfo],
    edges: &'a [DepEdge],
}

/// Writes `run`'s task graph as JSON: `{"epoch", "callable", "tasks": [TaskInfo], "edges":
/// [DepEdge]}` (edge kinds "RAW", "WAW", "WAR", "explicit").
///
/// Errors: those of `w`.
pub fn write_json(run: &RunTrace, w: impl Write) -> io::Result<()> {
    let mut w = io::BufWriter::new(w);
    let g = Graph {
        epoch: run.epoch,
        callable: &run.callable,
        tasks: &run.tasks,
        edges: &run.edges,
    };
    serde_json::to_writer_pretty(&mut w, &g).map_err(io::Error::other)?;
    writeln!(w)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::{synthetic, SampleSpec};

    #[test]
    fn dot_has_every_task_and_labelled_edge() {
        let t = synthetic(&SampleSpec {
            tasks: 6,
            ..Default::default()
        });
        let run = &t.processes[0].runs[0];
        let mut out = Vec::new();
        write_dot(run, &mut out).unwrap();
        let dot = String::from_utf8(out).unwrap();
        assert!(dot.starts_with("digraph \"gemm (run 1)\" {"), "{dot}");
        for task in &run.tasks {
            assert!(
                dot.contains(&format!("  t{} [label=\"#{}", task.task, task.submit_index)),
                "{dot}"
            );
        }
        for e in &run.edges {
            assert!(
                dot.contains(&format!(
                    "t{} -> t{} [label=\"{}\"",
                    e.producer, e.consumer, e.kind
                )),
                "{dot}"
            );
        }
        assert!(dot.contains("gemm_tile") && dot.trim_end().ends_with('}'));
    }

    #[test]
    fn json_round_trips_tasks_and_edges() {
        let t = synthetic(&SampleSpec {
            tasks: 6,
            ..Default::default()
        });
        let run = &t.processes[0].runs[0];
        let mut out = Vec::new();
        write_json(run, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let tasks: Vec<TaskInfo> = serde_json::from_value(v["tasks"].clone()).unwrap();
        let edges: Vec<DepEdge> = serde_json::from_value(v["edges"].clone()).unwrap();
        assert_eq!(tasks, run.tasks);
        assert_eq!(edges, run.edges);
        assert_eq!(v["callable"], "gemm");
        assert!(v["edges"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "WAR"));
    }
}
