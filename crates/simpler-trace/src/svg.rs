//! A static SVG swimlane of a trace, for readers without Perfetto at hand.
//!
//! Owns the picture's layout (docs/tracing.md, "SVG"): per process a title, then one lane per
//! AICore and AICPU thread in track order (host threads too when they have spans), each
//! subtask a box coloured by kernel (AICPU phases by phase; waiting phases — ready-queue
//! waits, idle turns, parks, back-pressure, the host's wait — as a thin strip), a time axis
//! in host-clock time from the trace's first event — one axis for every process, so an
//! instant is at the same x in each section — and a legend with a colour of its own per key.
//! Text is fitted by an upper bound of its width (cut with an ellipsis, the whole in a
//! `<title>`), so every label lies inside the picture. Plain SVG 1.1 text; no renderer.

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
/// The plot's width: from the lane labels to a right margin.
const PLOT_W: f64 = WIDTH - LABEL_W - 20.0;
/// Left and right margin of every text line, px.
const MARGIN: f64 = 4.0;
/// Font sizes, px: titles (bold) and everything else.
const TITLE_FONT: f64 = 13.0;
const FONT: f64 = 11.0;
/// A legend entry: swatch, gap to its text, the widest text before it is cut, the gap to the
/// next entry and the row pitch.
const SWATCH: f64 = 12.0;
const SWATCH_GAP: f64 = 4.0;
const LEGEND_TEXT_MAX: f64 = 360.0;
const LEGEND_GAP: f64 = 14.0;
const LEGEND_ROW: f64 = 18.0;
/// Ticks on each time axis (the first at the axis's start, the last at its end).
const TICKS: u32 = 5;

/// A fixed palette for the first keys, by order of first appearance; later keys get
/// generated colours ([`candidate`]).
const PALETTE: [&str; 12] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac", "#1f77b4", "#8c564b",
];

/// Advance widths of the printable ASCII characters (`' '..='~'`), 1/1000 em: those of
/// DejaVu Sans Bold, which are at least those of DejaVu Sans and of the common narrower sans
/// fonts (Liberation Sans, Helvetica, Arial), so a width estimated from them bounds the
/// rendered one. Any other character counts as 1 em.
const ADVANCE: [u16; 95] = [
    348, 456, 521, 838, 696, 1002, 872, 306, 457, 457, 523, 838, 380, 415, 380, 365, 696, 696, 696,
    696, 696, 696, 696, 696, 696, 696, 400, 400, 838, 838, 838, 580, 1000, 774, 762, 734, 830, 683,
    683, 821, 837, 372, 372, 775, 637, 995, 837, 850, 733, 850, 770, 720, 682, 812, 774, 1103, 771,
    724, 725, 457, 365, 457, 838, 500, 500, 675, 716, 593, 716, 678, 435, 716, 712, 343, 343, 665,
    343, 1042, 712, 687, 716, 716, 493, 595, 478, 712, 652, 924, 645, 652, 582, 712, 365, 712, 838,
];

/// An upper bound of the width (px) of `s` set at `size` px in a sans-serif font, 5% over
/// the [`ADVANCE`] sum for kerning and hinting.
fn text_width(s: &str, size: f64) -> f64 {
    let em: u32 = s
        .chars()
        .map(|c| match c {
            ' '..='~' => u32::from(ADVANCE[c as usize - 0x20]),
            _ => 1000,
        })
        .sum();
    f64::from(em) / 1000.0 * size * 1.05
}

/// `s` cut to fit `max_w` px at `size` px (by [`text_width`]), an ellipsis marking the cut;
/// the flag says whether it was cut.
fn fit(s: &str, size: f64, max_w: f64) -> (String, bool) {
    if text_width(s, size) <= max_w {
        return (s.to_string(), false);
    }
    let room = max_w - text_width("\u{2026}", size);
    let mut out = String::new();
    let mut w = 0.0;
    for c in s.chars() {
        let cw = text_width(c.encode_utf8(&mut [0; 4]), size);
        if w + cw > room {
            break;
        }
        w += cw;
        out.push(c);
    }
    out.push('\u{2026}');
    (out, true)
}

/// Writes `<text ATTRS>s</text>`, `s` fitted to `max_w` px at `size` px; a cut one goes in a
/// group whose `<title>` holds the whole of `s`, which viewers show on hover.
///
/// Errors: those of `w`.
fn write_text(w: &mut impl Write, attrs: &str, s: &str, size: f64, max_w: f64) -> io::Result<()> {
    match fit(s, size, max_w) {
        (t, false) => write!(w, "<text {attrs}>{}</text>", esc(&t)),
        (t, true) => write!(
            w,
            "<g><title>{}</title><text {attrs}>{}</text></g>",
            esc(s),
            esc(&t)
        ),
    }
}

/// The `i`-th candidate colour: the [`PALETTE`] first, then hues a golden angle apart at four
/// lightnesses and two saturations, all mid-tone so a box stands out from the lane's light
/// grey and the white background.
fn candidate(i: usize) -> String {
    if let Some(c) = PALETTE.get(i) {
        return (*c).to_string();
    }
    let j = i - PALETTE.len();
    let hue = (j as f64 * 137.507_764) % 360.0;
    let light = [0.45, 0.62, 0.33, 0.54][j % 4];
    let sat = [0.65, 0.45][(j / 4) % 2];
    let (r, g, b) = hsl_to_rgb(hue, sat, light);
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// HSL (hue in degrees, saturation and lightness in 0..=1) to 8-bit RGB.
fn hsl_to_rgb(h: f64, s: f64, l: f64) -> (u8, u8, u8) {
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let hp = h / 60.0;
    let x = c * (1.0 - (hp % 2.0 - 1.0).abs());
    let (r, g, b) = match hp as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = l - c / 2.0;
    let to8 = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    (to8(r), to8(g), to8(b))
}

/// Colours for keys in order of first appearance, each one no earlier key has.
#[derive(Default)]
struct Colours {
    by_key: BTreeMap<String, String>,
    used: std::collections::HashSet<String>,
    order: Vec<String>,
    next: usize,
}

impl Colours {
    /// Gives `key` a colour if it has none.
    fn add(&mut self, key: &str) {
        if self.by_key.contains_key(key) {
            return;
        }
        // A rounded candidate may repeat an earlier one: skip it (bounded, so a pathological
        // number of keys repeats a colour rather than looping).
        let mut c = candidate(self.next);
        self.next += 1;
        for _ in 0..4096 {
            if !self.used.contains(&c) {
                break;
            }
            c = candidate(self.next);
            self.next += 1;
        }
        self.used.insert(c.clone());
        self.by_key.insert(key.to_string(), c);
        self.order.push(key.to_string());
    }

    fn of(&self, key: &str) -> &str {
        self.by_key.get(key).map_or("#000000", String::as_str)
    }
}

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

/// The legend entries' positions: (x, row) of each key in order, flowing left to right by
/// each entry's width and wrapping before the right margin.
fn legend_layout(keys: &[String]) -> Vec<(f64, usize)> {
    let mut out = Vec::with_capacity(keys.len());
    let (mut x, mut row) = (MARGIN, 0);
    for key in keys {
        let text_w = text_width(&fit(key, FONT, LEGEND_TEXT_MAX).0, FONT);
        let w = SWATCH + SWATCH_GAP + text_w;
        if x > MARGIN && x + w > WIDTH - MARGIN {
            x = MARGIN;
            row += 1;
        }
        out.push((x, row));
        x += w + LEGEND_GAP;
    }
    out
}

/// Writes the swimlane SVG of `trace` (all processes, stacked, on one host-clock time axis:
/// an instant is at the same x in every process's section).
///
/// Errors: those of `w`.
pub fn write(trace: &Trace, w: impl Write) -> io::Result<()> {
    let mut w = io::BufWriter::new(w);
    let mut colours = Colours::default();
    let mut sections = Vec::new();
    for p in &trace.processes {
        let (lanes, bars) = layout(p);
        for b in &bars {
            colours.add(&b.key);
        }
        sections.push((p, lanes, bars));
    }
    let all = || sections.iter().flat_map(|(_, _, bars)| bars.iter());
    let lo = all().map(|b| b.start).min().unwrap_or(0);
    let hi = all().map(|b| b.end).max().unwrap_or(lo).max(lo + 1);
    let span = (hi - lo) as f64;
    let x_of = |t: u64| LABEL_W + (t.saturating_sub(lo)) as f64 / span * PLOT_W;
    let legend = legend_layout(&colours.order);
    let legend_rows = legend.last().map_or(1, |&(_, row)| row + 1);
    let body: f64 = sections
        .iter()
        .map(|(_, lanes, _)| TITLE_H + lanes.len() as f64 * (LANE_H + LANE_GAP) + AXIS_H)
        .sum();
    let height = body + 12.0 + legend_rows as f64 * LEGEND_ROW + 8.0;
    writeln!(
        w,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="sans-serif" font-size="{FONT}">"#
    )?;
    writeln!(w, r#"<rect width="100%" height="100%" fill="white"/>"#)?;
    let mut y = 0.0;
    for (i, (p, lanes, bars)) in sections.iter().enumerate() {
        write_text(
            &mut w,
            &format!(
                r#"x="{MARGIN}" y="{:.1}" font-size="{TITLE_FONT}" font-weight="bold""#,
                y + 16.0
            ),
            &p.name,
            TITLE_FONT,
            WIDTH - 2.0 * MARGIN,
        )?;
        writeln!(w)?;
        y += TITLE_H;
        let top = y;
        for (i, lane) in lanes.iter().enumerate() {
            let ly = top + i as f64 * (LANE_H + LANE_GAP);
            writeln!(
                w,
                r##"<rect x="{LABEL_W}" y="{ly:.1}" width="{PLOT_W:.1}" height="{LANE_H}" fill="#f4f4f4"/>"##
            )?;
            write_text(
                &mut w,
                &format!(r#"x="{MARGIN}" y="{:.1}""#, ly + 13.0),
                lane,
                FONT,
                LABEL_W - 2.0 * MARGIN,
            )?;
            writeln!(w)?;
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
                colours.of(&b.key),
                esc(&b.title)
            )?;
        }
        y = top + lanes.len() as f64 * (LANE_H + LANE_GAP);
        writeln!(w, r#"<g id="axis-{i}">"#)?;
        writeln!(
            w,
            r##"<line x1="{LABEL_W}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#333"/>"##,
            LABEL_W + PLOT_W
        )?;
        for k in 0..=TICKS {
            let t = lo + (span * f64::from(k) / f64::from(TICKS)) as u64;
            let x = x_of(t);
            // The end labels align with the axis's ends so they never pass the picture's.
            let anchor = match k {
                0 => "start",
                TICKS => "end",
                _ => "middle",
            };
            writeln!(
                w,
                r##"<line x1="{x:.1}" y1="{y:.1}" x2="{x:.1}" y2="{:.1}" stroke="#333"/><text x="{x:.1}" y="{:.1}" text-anchor="{anchor}">{}</text>"##,
                y + 4.0,
                y + 16.0,
                esc(&fmt_ns(t - lo))
            )?;
        }
        writeln!(w, "</g>")?;
        y += AXIS_H;
    }
    y += 12.0;
    for (key, &(x, row)) in colours.order.iter().zip(&legend) {
        let ly = y + row as f64 * LEGEND_ROW;
        write!(
            w,
            r#"<rect x="{x:.1}" y="{ly:.1}" width="{SWATCH}" height="{SWATCH}" fill="{}"/>"#,
            colours.of(key),
        )?;
        write_text(
            &mut w,
            &format!(r#"x="{:.1}" y="{:.1}""#, x + SWATCH + SWATCH_GAP, ly + 10.0),
            key,
            FONT,
            LEGEND_TEXT_MAX,
        )?;
        writeln!(w)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thousand_keys_get_a_thousand_mid_tone_colours() {
        let mut c = Colours::default();
        for i in 0..1000 {
            c.add(&format!("k{i}"));
            c.add("k0");
        }
        assert_eq!(c.order.len(), 1000);
        assert_eq!(c.used.len(), 1000, "a colour repeats");
        for (key, hex) in &c.by_key {
            let v = u32::from_str_radix(&hex[1..], 16).unwrap();
            let (r, g, b) = (v >> 16, (v >> 8) & 0xff, v & 0xff);
            assert!(
                r.max(g).max(b) > 40 && r.min(g).min(b) < 220,
                "{key}: {hex}"
            );
        }
    }

    #[test]
    fn fitting_cuts_at_the_bound_and_marks_the_cut() {
        let (t, cut) = fit("relu", FONT, 100.0);
        assert_eq!((t.as_str(), cut), ("relu", false));
        let long = "m".repeat(200);
        let (t, cut) = fit(&long, FONT, 100.0);
        assert!(cut && t.ends_with('\u{2026}'));
        assert!(text_width(&t, FONT) <= 100.0, "{t}");
        assert!(
            text_width(&format!("m{t}"), FONT) > 100.0,
            "cut too early: {t}"
        );
        let (t, cut) = fit("\u{6f22}\u{5b57}\u{6f22}\u{5b57}", FONT, 30.0);
        assert!(cut && text_width(&t, FONT) <= 30.0, "{t}");
    }
}
