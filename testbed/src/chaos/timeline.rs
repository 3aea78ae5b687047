//! A picture of a chaos run: an SVG timeline of the holds, the faults and
//! the violations, to look at when a check fails (or to see that a run
//! did what it should).
//!
//! Layout, top to bottom: a header (verdict, figures, legend), then a
//! panel for the whole run and, when there is something to look at, a
//! zoomed panel of four seconds around the first failing violation (or,
//! without one, around the start of the fault during which most locks
//! were won). Each panel has
//!
//! * a violation strip: a red tick per violation that fails the run, an
//!   amber one per informational violation;
//! * a fault strip: one translucent band per fault, labelled with its kind
//!   and target, stacked in rows so that neither bands nor labels hide one
//!   another; the same bands are repeated faintly across the lanes;
//! * one lane per lock name: a dark strip on top (in the whole-run panel,
//!   acquisitions per few pixels, where single holds are too thin to show
//!   gaps; in the zoom, when anyone held the key), then one row per worker
//!   with a bar per hold, from the win to the end of its interval (see
//!   [`checker`]), coloured by worker; the holds involved in a violation
//!   are outlined (red, or amber for informational ones when there are few)
//!   and a failing violation's span is tinted and marked by a dashed line;
//! * a time axis in seconds from the first event.
//!
//! Bars are at least one pixel wide, have no outline, and carry a
//! `<title>` tooltip (hold id, token, length). A run of 20,000 holds over
//! two minutes makes a file of about 2 MB, 2,570 px wide.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::ops::Range;

use super::checker::{self, CheckReport, FaultSpan, Hold, Violation, secs, thousands};
use super::history::{Event, Nanos};

/// Width of the plotting area, in pixels.
const PLOT_W: f64 = 2400.0;
/// Left margin (lane labels).
const LEFT: f64 = 130.0;
/// Right margin (room for labels running past the end).
const RIGHT: f64 = 40.0;
/// Height of one row of the fault strip.
const FAULT_ROW: f64 = 16.0;
/// The zoomed panel shows this much either side of what it is about.
const ZOOM_HALF: Nanos = 2_000_000_000;

/// Worker colours (Tableau 10 without its red, which marks violations).
const WORKER_COLOURS: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
    "#17becf", "#393b79",
];
/// Fault kind colours (ColorBrewer Set3 without its salmon).
const FAULT_COLOURS: [&str; 10] = [
    "#8dd3c7", "#bebada", "#80b1d3", "#fdb462", "#b3de69", "#fccde5", "#bc80bd", "#ccebc5",
    "#ffed6f", "#d9d9d9",
];
const RED: &str = "#e00000";
const AMBER: &str = "#f0a000";
const HELD: &str = "#444444";

/// Renders the run as a standalone SVG document. `report` is
/// [`check`](super::checker::check)'s report on the same `events`.
pub fn render_svg(events: &[Event], report: &CheckReport) -> String {
    let ctx = Context::new(events, report);
    let width = LEFT + PLOT_W + RIGHT;
    let mut body = String::with_capacity(64 * ctx.holds.len() + 65_536);
    let mut y = ctx.header(&mut body);

    let (from, to) = (report.t0, report.t_end.max(report.t0.saturating_add(1)));
    let title = format!(
        "Whole run: {:.1} s, {} holds, {} faults; dark strips on top of the lanes: acquisitions per {:.2} s",
        secs(to, from),
        thousands(ctx.holds.len() as u64),
        ctx.faults.len(),
        secs(to, from) * BUCKET_PX / PLOT_W
    );
    let overview = Style {
        row_h: 3.0,
        density: true,
    };
    y = ctx.panel(&mut body, &title, (from, to), y, overview) + 24.0;
    if let Some((title, window)) = ctx.zoom_window() {
        let zoom = Style {
            row_h: 7.0,
            density: false,
        };
        y = ctx.panel(&mut body, &title, window, y, zoom) + 24.0;
    }

    let mut out = String::with_capacity(body.len() + 2048);
    let _ = write!(
        out,
        r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" viewBox="0 0 {width} {y}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="11">
<style>
text{{fill:#222}} .h{{font-size:16px;font-weight:bold}} .s{{font-size:10px;fill:#555}} .pt{{font-size:13px;font-weight:bold}}
.grid{{stroke:#000;stroke-opacity:0.08}} .ax{{stroke:#333}} .lane{{fill:#f6f6f6}} .held{{fill:{HELD}}}
.vo{{fill:none;stroke:{RED};stroke-width:2}} .io{{fill:none;stroke:{AMBER};stroke-width:1.5}}
"#
    );
    for (i, c) in WORKER_COLOURS.iter().enumerate() {
        let _ = writeln!(out, ".c{i}{{fill:{c}}}");
    }
    for (i, c) in FAULT_COLOURS.iter().enumerate() {
        let _ = writeln!(out, ".f{i}{{fill:{c}}}");
    }
    let _ = writeln!(
        out,
        "</style>\n<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>"
    );
    out.push_str(&body);
    out.push_str("</svg>\n");
    out
}

/// What every panel draws from.
struct Context<'a> {
    report: &'a CheckReport,
    holds: Vec<Hold>,
    faults: Vec<FaultSpan>,
    /// Lock names, sorted; a lane each.
    keys: Vec<String>,
    /// Each key's holds, as a range of `holds` (sorted by key, then start).
    key_ranges: Vec<Range<usize>>,
    /// Workers, in natural order; the position picks colour and row.
    workers: Vec<String>,
    worker_index: HashMap<String, usize>,
    fault_kinds: BTreeMap<String, usize>,
    hold_index: HashMap<String, usize>,
}

impl<'a> Context<'a> {
    fn new(events: &[Event], report: &'a CheckReport) -> Context<'a> {
        let holds = checker::holds(events);
        let faults = checker::faults(events);
        let mut keys: Vec<String> = Vec::new();
        let mut key_ranges = Vec::new();
        for group in holds.chunk_by(|a, b| a.key == b.key) {
            let start = key_ranges.last().map_or(0, |r: &Range<usize>| r.end);
            keys.push(group[0].key.clone());
            key_ranges.push(start..start + group.len());
        }
        let mut workers: Vec<String> = holds.iter().map(|h| h.worker.clone()).collect();
        workers.sort_by_key(|w| (natural_key(w), w.clone()));
        workers.dedup();
        let worker_index = workers
            .iter()
            .enumerate()
            .map(|(i, w)| (w.clone(), i))
            .collect();
        let mut fault_kinds: BTreeMap<String, usize> =
            faults.iter().map(|f| (f.kind.clone(), 0)).collect();
        for (i, v) in fault_kinds.values_mut().enumerate() {
            *v = i % FAULT_COLOURS.len();
        }
        let hold_index = holds
            .iter()
            .enumerate()
            .map(|(i, h)| (h.id.clone(), i))
            .collect();
        Context {
            report,
            holds,
            faults,
            keys,
            key_ranges,
            workers,
            worker_index,
            fault_kinds,
            hold_index,
        }
    }

    fn fails(&self, v: &Violation) -> bool {
        v.kind.fails_run(&self.report.floors)
    }

    /// Title, figures and legend. Returns the height used.
    fn header(&self, out: &mut String) -> f64 {
        let r = self.report;
        let verdict_colour = match r.verdict {
            checker::Verdict::Pass => "#2a8a2a",
            checker::Verdict::Fail => RED,
            checker::Verdict::Invalid => AMBER,
        };
        let _ = writeln!(
            out,
            r#"<text class="h" x="{LEFT}" y="24">quorumlock chaos run — <tspan fill="{verdict_colour}">{}</tspan></text>"#,
            r.verdict.label()
        );
        let by_kind: Vec<String> = r
            .violation_counts
            .iter()
            .filter(|c| c.count > 0)
            .map(|c| format!("{} {}", c.kind.name(), thousands(c.count)))
            .collect();
        let s = &r.stats;
        let line = format!(
            "{} acquisitions of {} attempts ({:.0}% during faults) · {} faults · violations: {}",
            thousands(s.acquisitions),
            thousands(s.attempts),
            s.attempts_during_fault_ratio * 100.0,
            thousands(s.faults),
            if by_kind.is_empty() {
                "none".to_string()
            } else {
                by_kind.join(", ")
            }
        );
        let _ = writeln!(out, r#"<text x="{LEFT}" y="44">{}</text>"#, esc(&line));
        let mut y = 44.0;
        for reason in &r.reasons {
            y += 16.0;
            let _ = writeln!(
                out,
                r#"<text x="{LEFT}" y="{y}" fill="{verdict_colour}">– {}</text>"#,
                esc(reason)
            );
        }

        // Legend: workers, then fault kinds, then marks.
        y += 24.0;
        let mut x = LEFT;
        let _ = writeln!(out, r#"<text x="{x}" y="{y}">workers</text>"#);
        x += 60.0;
        for (i, w) in self.workers.iter().enumerate() {
            let _ = writeln!(
                out,
                r#"<rect class="c{}" x="{x}" y="{}" width="14" height="10"/><text x="{}" y="{y}">{}</text>"#,
                i % WORKER_COLOURS.len(),
                y - 9.0,
                x + 18.0,
                esc(w)
            );
            x += 26.0 + 7.0 * w.chars().count() as f64;
        }
        y += 20.0;
        let mut x = LEFT;
        let _ = writeln!(out, r#"<text x="{x}" y="{y}">faults</text>"#);
        x += 60.0;
        for (kind, i) in &self.fault_kinds {
            let _ = writeln!(
                out,
                r#"<rect class="f{i}" x="{x}" y="{}" width="14" height="10"/><text x="{}" y="{y}">{}</text>"#,
                y - 9.0,
                x + 18.0,
                esc(kind)
            );
            x += 30.0 + 6.5 * kind.chars().count() as f64;
        }
        x += 30.0;
        let marks = [
            (HELD, "lane top: acquisitions (whole run), key held (zoom)"),
            (RED, "violation that fails the run"),
            (AMBER, "informational (late write, unfenced loss)"),
        ];
        for (colour, label) in marks {
            let _ = writeln!(
                out,
                r#"<rect x="{x}" y="{}" width="14" height="10" fill="{colour}"/><text x="{}" y="{y}">{}</text>"#,
                y - 9.0,
                x + 18.0,
                esc(label)
            );
            x += 34.0 + 6.0 * label.len() as f64;
        }
        y + 16.0
    }

    /// The zoomed panel's title and window, if there is anything to zoom
    /// on: the first failing violation, or else the start of the fault
    /// during which most holds were won.
    fn zoom_window(&self) -> Option<(String, (Nanos, Nanos))> {
        let r = self.report;
        let clamp =
            |from: Nanos, to: Nanos| (from.max(r.t0), to.min(r.t_end.max(r.t0.saturating_add(1))));
        if let Some(v) = r
            .violations
            .iter()
            .filter(|v| self.fails(v))
            .min_by_key(|v| v.start)
        {
            let end = v.end.clamp(v.start, v.start.saturating_add(3 * ZOOM_HALF));
            let title = format!(
                "Zoom: first failing violation, {} on {} at {:.3} s (±2 s)",
                v.kind.name(),
                v.key,
                v.start_s
            );
            return Some((
                title,
                clamp(
                    v.start.saturating_sub(ZOOM_HALF),
                    end.saturating_add(ZOOM_HALF),
                ),
            ));
        }
        let mut starts: Vec<Nanos> = self.holds.iter().map(|h| h.start).collect();
        starts.sort_unstable();
        let won_during = |f: &FaultSpan| {
            starts.partition_point(|&t| t <= f.end) - starts.partition_point(|&t| t < f.start)
        };
        let f = self.faults.iter().max_by_key(|f| won_during(f))?;
        let title = format!(
            "Zoom: start of {} {} at {:.3} s (±2 s), the fault with the most acquisitions ({})",
            f.kind,
            f.target,
            secs(f.start, r.t0),
            thousands(won_during(f) as u64)
        );
        Some((
            title,
            clamp(
                f.start.saturating_sub(ZOOM_HALF),
                f.start.saturating_add(ZOOM_HALF),
            ),
        ))
    }

    /// Draws one panel over `[from, to]` at `top`. Returns the bottom.
    fn panel(
        &self,
        out: &mut String,
        title: &str,
        (from, to): (Nanos, Nanos),
        top: f64,
        style: Style,
    ) -> f64 {
        let row_h = style.row_h;
        let r = self.report;
        let scale = Scale::new(from, to);
        let visible = |a: Nanos, b: Nanos| b >= from && a <= to;
        let _ = writeln!(out, "<g>");
        let _ = writeln!(
            out,
            r#"<text class="pt" x="{LEFT}" y="{}">{}</text>"#,
            top + 14.0,
            esc(title)
        );

        // Geometry.
        let strip_y = top + 24.0;
        let strip_h = 22.0;
        let faults: Vec<&FaultSpan> = self
            .faults
            .iter()
            .filter(|f| visible(f.start, f.end))
            .collect();
        let rows = fault_rows(&faults, &scale);
        let n_rows = rows.iter().max().map_or(0, |m| m + 1);
        let faults_y = strip_y + strip_h + 6.0;
        let lanes_y = faults_y + (n_rows.max(1) as f64) * FAULT_ROW + 8.0;
        let held_h = if style.density { 16.0 } else { 4.0 };
        let lane_gap = 10.0;
        let lane_h = 2.0 + held_h + 2.0 + row_h * self.workers.len().max(1) as f64 + 2.0 + lane_gap;
        let lanes_bottom = lanes_y + lane_h * self.keys.len().max(1) as f64;
        let axis_y = lanes_bottom + 4.0;

        // Grid and axis.
        let step = tick_step((to - from) as f64 / 1e9, PLOT_W);
        let mut ticks = String::new();
        let first = (((secs(from, r.t0) / step).ceil() * step * 1e9) as Nanos).saturating_add(r.t0);
        let step_ns = ((step * 1e9) as Nanos).max(1);
        let mut t = first;
        while t <= to {
            let x = scale.x(t);
            let _ = writeln!(
                ticks,
                r#"<line class="grid" x1="{x:.1}" y1="{strip_y}" x2="{x:.1}" y2="{axis_y}"/><line class="ax" x1="{x:.1}" y1="{axis_y}" x2="{x:.1}" y2="{}"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"#,
                axis_y + 5.0,
                axis_y + 18.0,
                seconds_label(secs(t, r.t0), step)
            );
            let Some(next) = t.checked_add(step_ns) else {
                break;
            };
            t = next;
        }
        out.push_str(&ticks);
        let _ = writeln!(
            out,
            r#"<line class="ax" x1="{LEFT}" y1="{axis_y}" x2="{}" y2="{axis_y}"/><text x="{}" y="{}" text-anchor="end">s</text>"#,
            LEFT + PLOT_W,
            LEFT + PLOT_W + 24.0,
            axis_y + 18.0
        );

        // Violation strip.
        let _ = writeln!(
            out,
            r##"<rect x="{LEFT}" y="{strip_y}" width="{PLOT_W}" height="{strip_h}" fill="#fafafa"/><text x="{}" y="{}" text-anchor="end">violations</text>"##,
            LEFT - 8.0,
            strip_y + 15.0
        );
        for v in r.violations.iter().filter(|v| visible(v.start, v.end)) {
            let (x, w) = scale.span(v.start, v.end, 2.0);
            let (y, colour) = if self.fails(v) {
                (strip_y + 1.0, RED)
            } else {
                (strip_y + 12.0, AMBER)
            };
            let _ = writeln!(
                out,
                r#"<rect x="{x:.1}" y="{y}" width="{w:.1}" height="9" fill="{colour}"><title>{}</title></rect>"#,
                esc(&format!(
                    "{} at {:.3} s: {}",
                    v.kind.name(),
                    v.start_s,
                    v.detail
                ))
            );
        }

        // Fault strip.
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="end">faults</text>"#,
            LEFT - 8.0,
            faults_y + 12.0
        );
        for (f, row) in faults.iter().zip(&rows) {
            let (x, w) = scale.span(f.start, f.end, 2.0);
            let y = faults_y + *row as f64 * FAULT_ROW;
            let class = self.fault_kinds[&f.kind];
            let tip = format!(
                "fault {} {} {}{}{}: {:.3}–{:.3} s{}",
                f.fault,
                f.kind,
                f.target,
                if f.detail.is_empty() { "" } else { ", " },
                f.detail,
                secs(f.start, r.t0),
                secs(f.end, r.t0),
                if f.ended { "" } else { " (never ended)" }
            );
            let _ = writeln!(
                out,
                r#"<g><title>{}</title><rect class="f{class}" x="{x:.1}" y="{y}" width="{w:.1}" height="{}" fill-opacity="0.75"/><text class="s" x="{:.1}" y="{}">{} {}</text></g>"#,
                esc(&tip),
                FAULT_ROW - 2.0,
                x + 3.0,
                y + 11.0,
                esc(&f.kind),
                esc(&f.target)
            );
        }

        // Acquisitions per bucket, per lane (whole-run panel only).
        let densities: Vec<Vec<u32>> = if style.density {
            self.key_ranges
                .iter()
                .map(|range| density(&self.holds[range.clone()], &scale))
                .collect()
        } else {
            Vec::new()
        };
        let max_density = densities.iter().flatten().copied().max().unwrap_or(0);

        // Lanes: background, faint fault bands, held strip, bars.
        for (i, key) in self.keys.iter().enumerate() {
            let y = lanes_y + i as f64 * lane_h;
            let n_holds = self.key_ranges[i].len();
            let mid = y + (lane_h - lane_gap) / 2.0;
            let _ = writeln!(
                out,
                r#"<rect class="lane" x="{LEFT}" y="{y}" width="{PLOT_W}" height="{}"/><text x="{}" y="{}" text-anchor="end" font-weight="bold">{}</text><text class="s" x="{}" y="{}" text-anchor="end">{} holds</text>"#,
                lane_h - lane_gap,
                LEFT - 8.0,
                mid - 2.0,
                esc(key),
                LEFT - 8.0,
                mid + 11.0,
                thousands(n_holds as u64)
            );
        }
        for f in &faults {
            let (x, w) = scale.span(f.start, f.end, 2.0);
            let _ = writeln!(
                out,
                r#"<rect class="f{}" x="{x:.1}" y="{lanes_y}" width="{w:.1}" height="{}" fill-opacity="0.3"/>"#,
                self.fault_kinds[&f.kind],
                lanes_bottom - lanes_y
            );
        }
        for (i, range) in self.key_ranges.iter().enumerate() {
            let y = lanes_y + i as f64 * lane_h + 2.0;
            let holds = &self.holds[range.clone()];
            if let Some(counts) = densities.get(i) {
                out.push_str(&density_path(counts, y, held_h, max_density));
            } else {
                out.push_str(&held_path(holds, &scale, y, held_h));
            }
            // Bars, grouped by worker row.
            let mut by_worker: Vec<Vec<&Hold>> = vec![Vec::new(); self.workers.len()];
            for h in holds.iter().filter(|h| visible(h.start, h.end)) {
                by_worker[self.worker_index[&h.worker]].push(h);
            }
            for (wi, bars) in by_worker.iter().enumerate() {
                if bars.is_empty() {
                    continue;
                }
                let row_y = y + held_h + 2.0 + wi as f64 * row_h;
                let _ = writeln!(
                    out,
                    r#"<g class="c{}" transform="translate(0,{row_y})">"#,
                    wi % WORKER_COLOURS.len()
                );
                for h in bars {
                    let (x, w) = scale.span(h.start, h.end, 1.0);
                    let token = h
                        .token
                        .map_or_else(|| "none".to_string(), |t| t.to_string());
                    let _ = writeln!(
                        out,
                        r#"<rect x="{x:.1}" width="{w:.1}" height="{:.0}"><title>{}{} token {token} {:.1} ms</title></rect>"#,
                        (row_h - 1.0).max(1.0),
                        esc(&h.id),
                        h.mode.map_or(String::new(), |m| format!(" {}", m.name())),
                        (h.end - h.start) as f64 / 1e6
                    );
                }
                let _ = writeln!(out, "</g>");
            }
        }

        // Violations on the lanes: the span tinted, the holds outlined.
        let lane_of: HashMap<&str, usize> = self
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.as_str(), i))
            .collect();
        // Informational ones first, so the red ones are drawn on top.
        let mut marked: Vec<&Violation> = r
            .violations
            .iter()
            .filter(|v| visible(v.start, v.end))
            .collect();
        marked.sort_by_key(|v| self.fails(v));
        let failing_visible = marked.iter().filter(|v| self.fails(v)).count();
        // Many informational outlines would bury the bars: then only the
        // strip shows them.
        let informational_outlines = marked.len() - failing_visible <= 50;
        for v in marked {
            let (class, colour) = if self.fails(v) {
                ("vo", RED)
            } else {
                ("io", AMBER)
            };
            if self.fails(v) && failing_visible <= 50 {
                let x = scale.x(v.start);
                let _ = writeln!(
                    out,
                    r#"<line x1="{x:.1}" y1="{strip_y}" x2="{x:.1}" y2="{lanes_bottom}" stroke="{RED}" stroke-dasharray="4 3"/>"#
                );
            }
            if let Some(&lane) = lane_of.get(v.key.as_str())
                && self.fails(v)
            {
                let (x, w) = scale.span(v.start, v.end, 3.0);
                let _ = writeln!(
                    out,
                    r#"<rect x="{x:.1}" y="{}" width="{w:.1}" height="{}" fill="{colour}" fill-opacity="0.3"/>"#,
                    lanes_y + lane as f64 * lane_h,
                    lane_h - lane_gap
                );
            }
            if !self.fails(v) && !informational_outlines {
                continue;
            }
            for id in &v.holds {
                let Some(h) = self.hold_index.get(id).map(|&i| &self.holds[i]) else {
                    continue;
                };
                if !visible(h.start, h.end) {
                    continue;
                }
                let lane = lane_of[h.key.as_str()];
                let row = self.worker_index[&h.worker];
                let (x, w) = scale.span(h.start, h.end, 1.0);
                let y = lanes_y + lane as f64 * lane_h + 2.0 + held_h + 2.0 + row as f64 * row_h;
                let _ = writeln!(
                    out,
                    r#"<rect class="{class}" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}"/>"#,
                    x - 2.0,
                    y - 2.0,
                    w + 4.0,
                    row_h + 3.0
                );
            }
        }
        let _ = writeln!(out, "</g>");
        axis_y + 22.0
    }
}

/// How a panel draws its lanes.
#[derive(Clone, Copy)]
struct Style {
    /// Height of a worker's row of bars.
    row_h: f64,
    /// Top of each lane: acquisitions per few pixels (for a long window,
    /// where single holds are too thin to see gaps) instead of a strip
    /// showing when anyone held the key.
    density: bool,
}

/// Maps times to x in the plotting area.
struct Scale {
    from: Nanos,
    to: Nanos,
    px_per_ns: f64,
}

impl Scale {
    fn new(from: Nanos, to: Nanos) -> Scale {
        Scale {
            from,
            to,
            px_per_ns: PLOT_W / (to - from).max(1) as f64,
        }
    }

    fn x(&self, t: Nanos) -> f64 {
        LEFT + (t.clamp(self.from, self.to) - self.from) as f64 * self.px_per_ns
    }

    /// `[a, b]` clipped to the window, as (x, width) with a least width.
    fn span(&self, a: Nanos, b: Nanos, min_w: f64) -> (f64, f64) {
        let x = self.x(a);
        let w = (self.x(b) - x).max(min_w);
        (x.min(LEFT + PLOT_W - min_w), w)
    }
}

/// Pixels per bucket of the density strip.
const BUCKET_PX: f64 = 4.0;

/// Acquisitions (hold starts) per bucket of [`BUCKET_PX`] pixels.
fn density(holds: &[Hold], scale: &Scale) -> Vec<u32> {
    let n = (PLOT_W / BUCKET_PX) as usize;
    let mut counts = vec![0u32; n];
    for h in holds {
        if (scale.from..=scale.to).contains(&h.start) {
            let i = ((scale.x(h.start) - LEFT) / BUCKET_PX) as usize;
            counts[i.min(n - 1)] += 1;
        }
    }
    counts
}

/// The density strip: a step area of `counts` (acquisitions per bucket,
/// from [`density`]), scaled so that `max` (over all lanes) fills `height`.
fn density_path(counts: &[u32], y: f64, height: f64, max: u32) -> String {
    let base = y + height;
    let mut d = format!("M{LEFT} {base}");
    for (i, &c) in counts.iter().enumerate() {
        let top = base - height * c as f64 / max.max(1) as f64;
        let _ = write!(d, "V{top:.1}H{:.0}", LEFT + (i + 1) as f64 * BUCKET_PX);
    }
    let _ = write!(d, "V{base}Z");
    format!("<path class=\"held\" d=\"{d}\"/>\n")
}

/// The held strip: when anyone held the key, intervals merged down to
/// half a pixel.
fn held_path(holds: &[Hold], scale: &Scale, y: f64, height: f64) -> String {
    let mut d = String::new();
    let mut cur: Option<(f64, f64)> = None;
    let flush = |d: &mut String, (s, e): (f64, f64)| {
        let _ = write!(d, "M{s:.1} {y}h{:.1}v{height}h-{:.1}z", e - s, e - s);
    };
    for h in holds
        .iter()
        .filter(|h| h.end >= scale.from && h.start <= scale.to)
    {
        let (x, w) = scale.span(h.start, h.end, 1.0);
        match &mut cur {
            Some((_, end)) if x <= *end + 0.5 => *end = end.max(x + w),
            _ => {
                if let Some(span) = cur {
                    flush(&mut d, span);
                }
                cur = Some((x, x + w));
            }
        }
    }
    if let Some(span) = cur {
        flush(&mut d, span);
    }
    if d.is_empty() {
        String::new()
    } else {
        format!("<path class=\"held\" d=\"{d}\"/>\n")
    }
}

/// Rows for the fault bands: each goes to the first row free at its start,
/// a band occupying its row up to its end or the end of its label.
fn fault_rows(faults: &[&FaultSpan], scale: &Scale) -> Vec<usize> {
    let mut row_end: Vec<f64> = Vec::new();
    faults
        .iter()
        .map(|f| {
            let (x, w) = scale.span(f.start, f.end, 2.0);
            let label = 6.0 * (f.kind.chars().count() + f.target.chars().count() + 1) as f64 + 8.0;
            let end = x + w.max(label) + 4.0;
            match row_end.iter().position(|&e| e <= x) {
                Some(row) => {
                    row_end[row] = end;
                    row
                }
                None => {
                    row_end.push(end);
                    row_end.len() - 1
                }
            }
        })
        .collect()
}

/// A tick step (s) giving at least ~90 px between ticks.
fn tick_step(seconds: f64, width: f64) -> f64 {
    const STEPS: [f64; 16] = [
        0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
        300.0,
    ];
    let min = seconds * 90.0 / width;
    STEPS.into_iter().find(|&s| s >= min).unwrap_or(600.0)
}

fn seconds_label(s: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else if step >= 0.1 {
        1
    } else if step >= 0.01 {
        2
    } else {
        3
    };
    format!("{s:.decimals$}")
}

/// `w10` after `w9`: digits compared as numbers.
fn natural_key(s: &str) -> (String, u64, String) {
    let split = s.find(|c: char| c.is_ascii_digit()).unwrap_or(s.len());
    let (prefix, rest) = s.split_at(split);
    let digits_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let n = rest[..digits_end].parse().unwrap_or(0);
    (prefix.to_string(), n, rest[digits_end..].to_string())
}

/// Escapes text for XML content and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::checker::{Floors, check};
    use crate::chaos::synth::{self, Builder, ms};

    /// A small well-formedness check: tags nest and close, attribute
    /// values are quoted, no raw `<`, `>` or stray `&` in text or
    /// attributes.
    fn assert_well_formed(xml: &str) {
        let mut stack: Vec<&str> = Vec::new();
        let mut rest = xml;
        let check_text = |text: &str| {
            let mut t = text;
            while let Some(i) = t.find('&') {
                t = &t[i + 1..];
                let end = t.find(';').expect("& without ;");
                let entity = &t[..end];
                assert!(
                    matches!(entity, "amp" | "lt" | "gt" | "quot" | "apos")
                        || entity.starts_with('#'),
                    "bad entity &{entity};"
                );
            }
            // `esc` escapes `>` too, and the markup has none in text.
            assert!(!text.contains('>'), "raw > in {text}");
        };
        if let Some(decl) = rest.strip_prefix("<?xml") {
            rest = &decl[decl.find("?>").unwrap() + 2..];
        }
        while let Some(i) = rest.find('<') {
            check_text(&rest[..i]);
            rest = &rest[i + 1..];
            if let Some(close) = rest.strip_prefix('/') {
                let end = close.find('>').unwrap();
                let name = &close[..end];
                assert_eq!(stack.pop(), Some(name), "mismatched </{name}>");
                rest = &close[end + 1..];
                continue;
            }
            // A start tag: name, then attributes name="value".
            let name_end = rest
                .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
                .unwrap();
            let name = &rest[..name_end];
            assert!(!name.is_empty(), "empty tag name");
            let mut attrs = &rest[name_end..];
            loop {
                attrs = attrs.trim_start();
                if let Some(r) = attrs.strip_prefix("/>") {
                    rest = r;
                    break;
                }
                if let Some(r) = attrs.strip_prefix('>') {
                    stack.push(name);
                    rest = r;
                    break;
                }
                let eq = attrs.find('=').unwrap();
                let after = attrs[eq + 1..]
                    .strip_prefix('"')
                    .expect("unquoted attribute");
                let end = after.find('"').unwrap();
                let value = &after[..end];
                assert!(!value.contains('<'), "< in attribute {value}");
                check_text(value);
                attrs = &after[end + 1..];
            }
        }
        check_text(rest);
        assert!(stack.is_empty(), "unclosed {stack:?}");
    }

    #[test]
    fn text_is_escaped() {
        let mut b = Builder::new();
        let mut v = (0, 0);
        b.clean_hold("k<&>\"'", "w0-1", 10.0, 20.0, 1, &mut v)
            .clean_hold("k<&>\"'", "w1-1", 15.0, 30.0, 2, &mut v)
            .fault(ms(12.0), 1, "node_pause", "n1 <&>")
            .final_values(ms(100.0), &[], &[], &["n0:<key>&"]);
        let events = b.sorted();
        let report = check(&events, &Floors::none());
        let svg = render_svg(&events, &report);
        assert_well_formed(&svg);
        assert!(svg.contains("k&lt;&amp;&gt;&quot;&apos;"));
        assert!(!svg.contains("k<&"));
        // The overlap is marked, and zoomed on.
        assert!(svg.contains(r#"class="vo""#));
        assert!(svg.contains("Zoom: first failing violation, overlap"));
    }

    #[test]
    fn an_empty_history_renders() {
        let report = check(&[], &Floors::none());
        let svg = render_svg(&[], &report);
        assert_well_formed(&svg);
    }

    #[test]
    fn a_realistic_run_renders_small_enough() {
        let events = synth::generate(&synth::Config::realistic());
        let report = check(&events, &Floors::none());
        let svg = render_svg(&events, &report);
        assert_well_formed(&svg);
        println!("{} holds: {} bytes", report.stats.acquisitions, svg.len());
        assert!(svg.len() < 5_000_000, "{} bytes", svg.len());
        // Every hold has its bar (and tooltip) in the whole-run panel.
        assert!(svg.matches("<title>").count() >= report.stats.acquisitions as usize);
        if let Ok(path) = std::env::var("CHAOS_TIMELINE_OUT") {
            std::fs::write(&path, &svg).unwrap();
            std::fs::write(format!("{path}.txt"), report.summary_table()).unwrap();
        }

        // Without a violation, the zoom goes to the busiest fault.
        let events = synth::generate(&synth::Config {
            inject_overlap: false,
            ..synth::Config::realistic()
        });
        let report = check(&events, &Floors::none());
        assert_eq!(report.failing_violations, 0);
        let svg = render_svg(&events, &report);
        assert_well_formed(&svg);
        assert!(svg.contains("Zoom: start of "));
        assert!(svg.contains("the fault with the most acquisitions"));
        if let Ok(path) = std::env::var("CHAOS_TIMELINE_OUT") {
            std::fs::write(format!("{path}.clean.svg"), &svg).unwrap();
        }
    }

    #[test]
    fn times_near_the_end_of_the_clock_render() {
        let top = u64::MAX;
        // An overlap (zoomed on), a fault, deadlines at the very end.
        let mut b = Builder::new();
        b.won(top - 3_000, "k0", "w0-1", top)
            .won(top - 2_000, "k0", "w1-1", top)
            .fault(top - 1_000, 1, "node_pause", "n0");
        let events = b.sorted();
        let report = check(&events, &Floors::none());
        assert_eq!(report.failing_violations, 1);
        let svg = render_svg(&events, &report);
        assert_well_formed(&svg);
        assert!(svg.contains("Zoom: first failing violation"));
        // No violation: the zoom goes to the fault.
        let mut b = Builder::new();
        b.won(top - 3_000, "k0", "w0-1", top)
            .fault(top - 1_000, 1, "node_pause", "n0");
        let events = b.sorted();
        let report = check(&events, &Floors::none());
        let svg = render_svg(&events, &report);
        assert_well_formed(&svg);
        assert!(svg.contains("Zoom: start of node_pause"));
        // A single event at the last instant.
        let mut b = Builder::new();
        b.fault(top, 1, "node_pause", "n0");
        let events = b.sorted();
        let report = check(&events, &Floors::none());
        assert_well_formed(&render_svg(&events, &report));
    }

    #[test]
    fn ticks_and_workers_are_ordered_sensibly() {
        assert_eq!(tick_step(120.0, 2400.0), 5.0);
        assert_eq!(tick_step(4.0, 2400.0), 0.2);
        assert_eq!(seconds_label(1.25, 0.05), "1.25");
        let mut ws = vec!["w10", "w2", "w1", "chaos"];
        ws.sort_by_key(|w| natural_key(w));
        assert_eq!(ws, ["chaos", "w1", "w2", "w10"]);
    }
}
