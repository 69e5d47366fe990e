//! A static SVG swimlane of a trace, for readers without Perfetto at hand.
//!
//! Owns the picture's layout (docs/tracing.md, "SVG"): per process a title, then one lane per
//! AICore and AICPU thread in track order (host threads too when they have spans), each
//! subtask a box coloured by kernel (AICPU phases by phase; waiting phases — ready-queue
//! waits, idle turns, parks, back-pressure, the host's wait — as a thin strip), a time axis in host-clock µs from
//! the first event shown, and a legend of the colours. Plain SVG 1.1 text; no renderer.

use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::model::{AicpuPhase, ProcessTrace, Trace};
use crate::summary::fmt_ns;
use crate::tracks::{self, aicpu_label, ThreadKind};

/// Picture geometry, px.
const WIDTH: f64 = 1200.0;
const LABEL_W: f64 = 170.0;
const LANE_H: f64 = 18.0;
const LANE_GAP: f64 = 4.0;
const TITLE_H: f64 = 24.0;
const AXIS_H: f64 = 28.0;

/// A fixed palette, cycled by kernel (or phase) order of first appearance.
const PALETTE: [&str; 12] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac", "#1f77b4", "#8c564b",
];

/// Escapes `s` for XML text and attribute values.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// One box to draw, host clock.
struct Bar {
    lane: usize,
    start: u64,
    end: u64,
    key: String,
    title: String,
    /// A waiting phase: drawn as a thin strip at the lane's foot so busy boxes stay visible.
    thin: bool,
}

/// Writes the swimlane SVG of `trace` (all processes, stacked).
///
/// Errors: those of `w`.
pub fn write(trace: &Trace, w: impl Write) -> io::Result<()> {
    let mut w = io::BufWriter::new(w);
    let mut colours: BTreeMap<String, &'static str> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut sections = Vec::new();
    for p in &trace.processes {
        let (lanes, bars) = layout(p);
        for b in &bars {
            if !colours.contains_key(&b.key) {
                colours.insert(b.key.clone(), PALETTE[order.len() % PALETTE.len()]);
                order.push(b.key.clone());
            }
        }
        sections.push((p, lanes, bars));
    }
    let legend_rows = order.len().div_ceil(6).max(1);
    let body: f64 = sections
        .iter()
        .map(|(_, lanes, _)| TITLE_H + lanes.len() as f64 * (LANE_H + LANE_GAP) + AXIS_H)
        .sum();
    let height = body + 12.0 + legend_rows as f64 * 18.0 + 8.0;
    writeln!(
        w,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif" font-size="11">"#
    )?;
    writeln!(w, r#"<rect width="100%" height="100%" fill="white"/>"#)?;
    let mut y = 0.0;
    for (p, lanes, bars) in &sections {
        let lo = bars.iter().map(|b| b.start).min().unwrap_or(0);
        let hi = bars.iter().map(|b| b.end).max().unwrap_or(lo).max(lo + 1);
        let span = (hi - lo) as f64;
        let plot_w = WIDTH - LABEL_W - 20.0;
        let x_of = |t: u64| LABEL_W + (t.saturating_sub(lo)) as f64 / span * plot_w;
        writeln!(
            w,
            r#"<text x="4" y="{:.1}" font-size="13" font-weight="bold">{}</text>"#,
            y + 16.0,
            esc(&p.name)
        )?;
        y += TITLE_H;
        let top = y;
        for (i, lane) in lanes.iter().enumerate() {
            let ly = top + i as f64 * (LANE_H + LANE_GAP);
            writeln!(
                w,
                r##"<rect x="{LABEL_W}" y="{ly:.1}" width="{plot_w:.1}" height="{LANE_H}" fill="#f4f4f4"/>"##
            )?;
            writeln!(
                w,
                r#"<text x="4" y="{:.1}">{}</text>"#,
                ly + 13.0,
                esc(lane)
            )?;
        }
        for b in bars {
            let (dy, h) = if b.thin {
                (LANE_H * 2.0 / 3.0, LANE_H / 3.0)
            } else {
                (0.0, LANE_H)
            };
            let ly = top + b.lane as f64 * (LANE_H + LANE_GAP) + dy;
            let x = x_of(b.start);
            let bw = (x_of(b.end) - x).max(0.5);
            writeln!(
                w,
                r#"<rect x="{x:.2}" y="{ly:.1}" width="{bw:.2}" height="{h:.1}" fill="{}"><title>{}</title></rect>"#,
                colours[&b.key],
                esc(&b.title)
            )?;
        }
        y = top + lanes.len() as f64 * (LANE_H + LANE_GAP);
        writeln!(
            w,
            r##"<line x1="{LABEL_W}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#333"/>"##,
            LABEL_W + plot_w
        )?;
        for k in 0..=5 {
            let t = lo + (span * f64::from(k) / 5.0) as u64;
            let x = x_of(t);
            writeln!(
                w,
                r##"<line x1="{x:.1}" y1="{y:.1}" x2="{x:.1}" y2="{:.1}" stroke="#333"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                y + 4.0,
                y + 16.0,
                esc(&fmt_ns(t - lo))
            )?;
        }
        y += AXIS_H;
    }
    y += 12.0;
    for (i, key) in order.iter().enumerate() {
        let x = 4.0 + (i % 6) as f64 * 196.0;
        let ly = y + (i / 6) as f64 * 18.0;
        writeln!(
            w,
            r#"<rect x="{x:.1}" y="{ly:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            colours[key],
            x + 16.0,
            ly + 10.0,
            esc(key)
        )?;
    }
    writeln!(w, "</svg>")?;
    w.flush()
}

/// The lanes of `p` (AICores, AICPU threads, host threads with spans) and its boxes.
fn layout(p: &ProcessTrace) -> (Vec<String>, Vec<Bar>) {
    let names = tracks::threads(p);
    let lanes: std::collections::HashMap<&str, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let lane_of = |n: &str| lanes.get(n).copied();
    let mut bars = Vec::new();
    for run in &p.runs {
        let index = crate::model::TaskIndex::new(run);
        for s in &run.subtasks {
            let kernel = index.kernel_name(s.task, s.func_id);
            bars.push(Bar {
                lane: lane_of(&s.core_name()).expect("listed"),
                start: p.clock.to_host(s.start_ns),
                end: p.clock.to_host(s.end_ns),
                title: format!(
                    "{kernel}: task {} block {} ({})",
                    s.task,
                    s.block,
                    fmt_ns(s.duration_ns())
                ),
                key: kernel,
                thin: false,
            });
        }
        for a in run.aicpu.iter().filter(|a| a.end_ns > a.start_ns) {
            bars.push(Bar {
                lane: lane_of(&a.thread_name()).expect("listed"),
                start: p.clock.to_host(a.start_ns),
                end: p.clock.to_host(a.end_ns),
                key: a.phase.name().to_string(),
                title: format!("{} ({})", a.phase, fmt_ns(a.duration_ns())),
                thin: matches!(
                    a.phase,
                    AicpuPhase::ReadyWait
                        | AicpuPhase::SchedIdle
                        | AicpuPhase::SchedPark
                        | AicpuPhase::BackPressure
                ),
            });
        }
    }
    for h in &p.host_spans {
        bars.push(Bar {
            lane: lane_of(&h.thread).expect("listed"),
            start: h.start_ns,
            end: h.end_ns,
            key: format!("host: {}", h.name),
            title: format!("{} ({})", h.name, fmt_ns(h.duration_ns())),
            thin: h.name == "wait",
        });
    }
    let labels = names
        .iter()
        .map(|n| match ThreadKind::of(n) {
            ThreadKind::Aicpu(t) => aicpu_label(t),
            _ => n.clone(),
        })
        .collect();
    (labels, bars)
}
