//! The SVG swimlane (`simpler_trace::svg`) as a renderer sees it: usvg lays its text out with
//! the system's fonts (DejaVu Sans for `sans-serif`), and the extents are compared with the
//! picture's: every label inside the viewBox, legend entries apart, one time axis for every
//! process, a colour per key. The picture's own structure (sections, axes, swatches) is read
//! from the SVG text with roxmltree.

use std::collections::{BTreeMap, HashSet};

use simpler_trace::sample::{synthetic, SampleSpec};
use simpler_trace::{svg, Trace};

/// A kernel name longer than any legend column.
const LONG: &str = "flash_attention_softmax_update_with_online_rescaling_of_the_running_maximum_and_sum_for_every_head_of_the_batch";

/// Two chips, as a level-3 run merges them: chip 0 runs 36 tasks, each of its own kernel (so
/// 36+ legend keys, one of them [`LONG`]); chip 1 ran the second half of the same work on its
/// own device clock (another origin), so its first event is later than chip 0's and every
/// one of its events is at the host instant of its twin in chip 0.
fn two_chips() -> Trace {
    let mut t = synthetic(&SampleSpec {
        tasks: 36,
        ..Default::default()
    });
    let p0 = &mut t.processes[0];
    p0.name = "chip 0 (device 0)".into();
    for task in &mut p0.runs[0].tasks {
        for k in &mut task.kernels {
            k.name = if task.task == 5 {
                LONG.to_string()
            } else {
                format!("kernel_{:02}_{}", task.task, k.name)
            };
        }
    }
    p0.host_spans.push(simpler_trace::HostSpan {
        thread: "host lane of a worker thread with a very long name indeed".into(),
        name: "stage".into(),
        epoch: None,
        start_ns: p0.host_spans[0].start_ns,
        end_ns: p0.host_spans[0].end_ns,
    });
    let mut p1 = p0.clone();
    p1.pid = p0.pid + 1;
    p1.name = "chip 1 (device 1)".into();
    let run = &mut p1.runs[0];
    let mut starts: Vec<u64> = run.subtasks.iter().map(|s| s.start_ns).collect();
    starts.sort_unstable();
    let half = starts[starts.len() / 2];
    run.subtasks.retain(|s| s.start_ns >= half);
    run.aicpu.retain(|a| a.start_ns >= half);
    run.counters.retain(|c| c.ts_ns >= half);
    let host_half = p1.clock.to_host(half);
    p1.host_spans.retain(|h| h.start_ns >= host_half);
    // Another device clock origin, the same host instants.
    const SHIFT: u64 = 123_456_789;
    p1.clock.device_ns += SHIFT;
    for s in &mut run.subtasks {
        s.start_ns += SHIFT;
        s.end_ns += SHIFT;
    }
    for a in &mut run.aicpu {
        a.start_ns += SHIFT;
        a.end_ns += SHIFT;
    }
    for c in &mut run.counters {
        c.ts_ns += SHIFT;
    }
    t.processes.push(p1);
    t
}

fn render(trace: &Trace) -> String {
    let mut out = Vec::new();
    svg::write(trace, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// A text element of the picture: its string, the section it belongs to (`None` for the
/// legend) and whether it is an axis tick label.
#[derive(Debug)]
struct Label {
    text: String,
    section: Option<usize>,
    tick: bool,
}

/// The picture's structure from its SVG text: every `<text>` in document order, the tick x
/// positions of each section's axis, each section's subtask boxes (title → x, width), and
/// the legend swatches (x, y, fill).
struct Structure {
    width: f64,
    height: f64,
    labels: Vec<Label>,
    ticks: Vec<Vec<f64>>,
    boxes: Vec<BTreeMap<String, (f64, f64)>>,
    swatches: Vec<(f64, f64, String)>,
    box_fills: HashSet<String>,
    titles: Vec<String>,
}

fn num(n: roxmltree::Node, attr: &str) -> f64 {
    n.attribute(attr).unwrap().parse().unwrap()
}

fn structure(text: &str) -> Structure {
    let doc = roxmltree::Document::parse(text).expect("well-formed XML");
    let root = doc.root_element();
    let mut s = Structure {
        width: num(root, "width"),
        height: num(root, "height"),
        labels: Vec::new(),
        ticks: Vec::new(),
        boxes: vec![BTreeMap::new()],
        swatches: Vec::new(),
        box_fills: HashSet::new(),
        titles: Vec::new(),
    };
    // Section i runs from its title to the end of its axis group, `axis-i`.
    let mut section = 0;
    let mut sections_done = false;
    for n in root.children().filter(|n| n.is_element()) {
        let id = n.attribute("id").unwrap_or("");
        if let Some(i) = id.strip_prefix("axis-") {
            assert_eq!(i.parse::<usize>().unwrap(), section);
            let mut xs = Vec::new();
            for c in n.descendants().filter(|c| c.is_element()) {
                if c.has_tag_name("line") && c.attribute("x1") == c.attribute("x2") {
                    xs.push(num(c, "x1"));
                }
                if c.has_tag_name("text") {
                    s.labels.push(Label {
                        text: c.text().unwrap().to_string(),
                        section: Some(section),
                        tick: true,
                    });
                }
            }
            s.ticks.push(xs);
            section += 1;
            s.boxes.push(BTreeMap::new());
            continue;
        }
        // The legend starts at the first swatch (a bare 12 px square; boxes have titles and
        // widths with decimals).
        sections_done |= n.has_tag_name("rect") && n.attribute("width") == Some("12");
        for c in n.descendants().filter(|c| c.is_element()) {
            if c.has_tag_name("title") {
                s.titles.push(c.text().unwrap().to_string());
            }
            if c.has_tag_name("text") {
                s.labels.push(Label {
                    text: c.text().unwrap().to_string(),
                    section: (!sections_done).then_some(section),
                    tick: false,
                });
            }
        }
        if n.has_tag_name("rect") {
            if sections_done {
                s.swatches.push((
                    num(n, "x"),
                    num(n, "y"),
                    n.attribute("fill").unwrap().into(),
                ));
            } else if let Some(title) = n.children().find(|c| c.has_tag_name("title")) {
                s.box_fills.insert(n.attribute("fill").unwrap().into());
                let title = title.text().unwrap().to_string();
                if title.contains(": task ") {
                    s.boxes[section].insert(title, (num(n, "x"), num(n, "width")));
                }
            }
        }
    }
    s.boxes.truncate(s.ticks.len());
    s
}

/// A text node usvg laid out: its string and its box in the picture's coordinates.
struct Laid {
    text: String,
    left: f64,
    top: f64,
    right: f64,
    bottom: f64,
}

fn collect(g: &usvg::Group, out: &mut Vec<Laid>) {
    for n in g.children() {
        match n {
            usvg::Node::Group(g) => collect(g, out),
            usvg::Node::Text(t) => {
                let b = t.abs_bounding_box();
                out.push(Laid {
                    text: t.chunks().iter().map(|c| c.text()).collect(),
                    left: f64::from(b.left()),
                    top: f64::from(b.top()),
                    right: f64::from(b.right()),
                    bottom: f64::from(b.bottom()),
                });
            }
            _ => {}
        }
    }
}

/// The picture's text nodes as usvg lays them out, in document order; `None` when the
/// machine has no DejaVu Sans (the structural checks still run).
fn laid_out(text: &str) -> Option<Vec<Laid>> {
    let mut opt = usvg::Options::default();
    let db = opt.fontdb_mut();
    db.load_system_fonts();
    let dejavu = db
        .faces()
        .any(|f| f.families.iter().any(|(name, _)| name == "DejaVu Sans"));
    if !dejavu {
        eprintln!("no DejaVu Sans among the system fonts: rendered extents not checked");
        return None;
    }
    db.set_sans_serif_family("DejaVu Sans");
    let tree = usvg::Tree::from_str(text, &opt).expect("usvg parses the picture");
    let mut out = Vec::new();
    collect(tree.root(), &mut out);
    Some(out)
}

#[test]
fn every_label_lies_inside_the_picture_and_legend_entries_keep_apart() {
    let trace = two_chips();
    let text = render(&trace);
    let s = structure(&text);
    assert_eq!(s.ticks.len(), 2, "one axis per chip");
    // The long kernel name is cut in the legend, whole in its hover title.
    let legend: Vec<&Label> = s.labels.iter().filter(|l| l.section.is_none()).collect();
    assert_eq!(legend.len(), s.swatches.len());
    let cut = legend
        .iter()
        .find(|l| l.text.starts_with("flash_attention"))
        .expect("the long kernel has a legend entry");
    assert!(
        cut.text.ends_with('\u{2026}') && cut.text.len() < LONG.len(),
        "{}",
        cut.text
    );
    assert!(
        s.titles.iter().any(|t| t == LONG),
        "the whole name in a <title>"
    );
    let lane = s
        .labels
        .iter()
        .find(|l| l.text.starts_with("host lane of a worker"))
        .expect("the long lane label");
    assert!(lane.text.ends_with('\u{2026}'), "{}", lane.text);
    let Some(laid) = laid_out(&text) else { return };
    assert_eq!(
        laid.len(),
        s.labels.len(),
        "usvg laid out every <text> (a missing font drops them)"
    );
    for (l, want) in laid.iter().zip(&s.labels) {
        assert_eq!(l.text, want.text, "document order");
        assert!(
            l.right > l.left && l.bottom > l.top,
            "{}: an empty box",
            l.text
        );
        assert!(
            l.left >= 0.0 && l.top >= 0.0 && l.right <= s.width && l.bottom <= s.height,
            "{:?} ({}..{} x {}..{}) passes the picture's {}x{}",
            l.text,
            l.left,
            l.right,
            l.top,
            l.bottom,
            s.width,
            s.height
        );
    }
    // A legend entry is its swatch and its text: no two meet.
    let entries: Vec<(f64, f64, f64, f64)> = laid
        .iter()
        .zip(&s.labels)
        .filter(|(_, want)| want.section.is_none())
        .zip(&s.swatches)
        .map(|((l, _), &(x, y, _))| (x, y.min(l.top), l.right, (y + 12.0).max(l.bottom)))
        .collect();
    assert!(entries.len() > 30, "{} legend entries", entries.len());
    for (i, a) in entries.iter().enumerate() {
        for b in &entries[i + 1..] {
            let apart = a.2 <= b.0 || b.2 <= a.0 || a.3 <= b.1 || b.3 <= a.1;
            assert!(apart, "legend entries {a:?} and {b:?} overlap");
        }
    }
    // Lane labels end before the plot starts.
    let plot_left = s.ticks[0][0];
    for (l, want) in laid.iter().zip(&s.labels) {
        if want.section.is_some() && !want.tick && !want.text.starts_with("chip ") {
            assert!(
                l.right <= plot_left,
                "lane label {:?} runs into the plot",
                l.text
            );
        }
    }
}

#[test]
fn every_process_shares_one_time_axis() {
    let trace = two_chips();
    let text = render(&trace);
    let s = structure(&text);
    assert_eq!(s.ticks.len(), 2);
    assert_eq!(s.ticks[0].len(), 6);
    assert_eq!(s.ticks[0], s.ticks[1], "tick x positions");
    let tick_labels = |i| {
        s.labels
            .iter()
            .filter(|l| l.tick && l.section == Some(i))
            .map(|l| l.text.as_str())
            .collect::<Vec<_>>()
    };
    assert_eq!(tick_labels(0), tick_labels(1), "tick labels");
    // Chip 1 starts later: its boxes are where chip 0's twins are, not at the axis's start.
    assert!(!s.boxes[1].is_empty());
    let first1 = s.boxes[1].values().map(|b| b.0).fold(f64::MAX, f64::min);
    assert!(
        first1 > s.ticks[0][0] + 100.0,
        "chip 1 starts at x {first1}"
    );
    for (title, b) in &s.boxes[1] {
        let twin = s.boxes[0].get(title).expect("chip 0 ran the same subtask");
        assert_eq!(b, twin, "{title}: one instant, one x");
    }
    // Rendered, each section's tick labels sit at the same x.
    let Some(laid) = laid_out(&text) else { return };
    let ticks = |i| {
        laid.iter()
            .zip(&s.labels)
            .filter(|(_, l)| l.tick && l.section == Some(i))
            .map(|(l, _)| (l.left, l.right))
            .collect::<Vec<_>>()
    };
    assert_eq!(ticks(0), ticks(1));
}

#[test]
fn every_key_has_its_own_colour() {
    let trace = two_chips();
    let s = structure(&render(&trace));
    let fills: HashSet<&str> = s.swatches.iter().map(|(_, _, f)| f.as_str()).collect();
    assert!(s.swatches.len() > 36, "{} keys", s.swatches.len());
    assert_eq!(fills.len(), s.swatches.len(), "a colour repeats");
    for f in &s.box_fills {
        assert!(
            fills.contains(f.as_str()),
            "box colour {f} not in the legend"
        );
    }
    for f in &fills {
        assert!(
            f.len() == 7 && f.starts_with('#') && !["#ffffff", "#f4f4f4"].contains(f),
            "{f}"
        );
    }
}
