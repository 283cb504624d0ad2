//! A self-contained HTML page of a comparison: the tables of the text form
//! and plots drawn with plotters' SVG backend, inlined (no scripts, no
//! external files). Baseline is always blue, current always orange.
use std::fmt::Write as _;

use plotters::prelude::*;

use super::{
    Comparison, Lat, Metrics, Status, WorkloadCmp,
    sections::{Section, sections},
};
use crate::units::{axis_bytes, ns as fmt_ns};

/// Series colours (also what the screenshot test looks for).
pub const BASELINE_RGB: (u8, u8, u8) = (31, 119, 180);
pub const CURRENT_RGB: (u8, u8, u8) = (255, 127, 14);
const BASE: RGBColor = RGBColor(BASELINE_RGB.0, BASELINE_RGB.1, BASELINE_RGB.2);
const CUR: RGBColor = RGBColor(CURRENT_RGB.0, CURRENT_RGB.1, CURRENT_RGB.2);
const W: u32 = 560;
const H: u32 = 300;

type Draw = Result<(), Box<dyn std::error::Error>>;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn svg(draw: impl FnOnce(DrawingArea<SVGBackend<'_>, plotters::coord::Shift>) -> Draw) -> String {
    let mut out = String::new();
    let result = {
        let root = SVGBackend::with_string(&mut out, (W, H)).into_drawing_area();
        draw(root)
    };
    match result {
        Ok(()) => out,
        Err(e) => format!("<p class=\"err\">plot not drawn: {}</p>", esc(&e.to_string())),
    }
}

/// Shares (percent of calls) per log2 slot.
fn shares(l: &Lat) -> Vec<(u32, f64)> {
    let total: u64 = l.buckets.iter().map(|b| b.2).sum();
    l.buckets
        .iter()
        .map(|&(min, _, n)| (min.max(1).ilog2(), n as f64 * 100.0 / total.max(1) as f64))
        .collect()
}

/// Baseline and current latency histograms of one (operation, transport),
/// overlaid as paired bars per power-of-two bucket.
fn latency_plot(key: &str, a: &Lat, b: &Lat) -> String {
    let (sa, sb) = (shares(a), shares(b));
    let slots = sa.iter().chain(&sb).map(|s| s.0);
    let lo = slots.clone().min().unwrap_or(0);
    let hi = slots.max().unwrap_or(1) + 1;
    let ymax = sa.iter().chain(&sb).map(|s| s.1).fold(1.0, f64::max) * 1.15;
    svg(|root| {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{key} latency"), ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(44)
            .build_cartesian_2d(lo as f64..hi as f64, 0f64..ymax)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels((hi - lo + 1) as usize)
            .x_label_formatter(&|x| {
                let s = x.round();
                if (x - s).abs() < 1e-6 && (0.0..64.0).contains(&s) {
                    fmt_ns(1u64 << (s as u32))
                } else {
                    String::new()
                }
            })
            .x_desc("latency (power-of-two buckets)")
            .y_desc("% of calls")
            .draw()?;
        let bar = |side: f64, color: RGBColor, s: &[(u32, f64)]| {
            s.iter()
                .map(move |&(slot, pct)| {
                    let x = slot as f64 + 0.05 + side * 0.45;
                    Rectangle::new([(x, 0.0), (x + 0.45, pct)], color.filled())
                })
                .collect::<Vec<_>>()
        };
        chart
            .draw_series(bar(0.0, BASE, &sa))?
            .label(format!("baseline ({} calls)", a.count))
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], BASE.filled()));
        chart
            .draw_series(bar(1.0, CUR, &sb))?
            .label(format!("current ({} calls)", b.count))
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], CUR.filled()));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    })
}

/// Bandwidth per message size, every series of the workload: baseline
/// dashed blue, current solid orange.
fn bandwidth_plot(name: &str, a: &Metrics, b: &Metrics) -> Option<String> {
    let series: Vec<&String> = a.bandwidth.keys().filter(|k| b.bandwidth.contains_key(*k)).collect();
    if series.is_empty() {
        return None;
    }
    let pts = series
        .iter()
        .flat_map(|s| a.bandwidth[*s].iter().chain(&b.bandwidth[*s]))
        .collect::<Vec<_>>();
    let xmin = pts.iter().map(|p| p.size).min().unwrap_or(1).max(1) as f64 / 2.0;
    let xmax = pts.iter().map(|p| p.size).max().unwrap_or(1).max(1) as f64 * 2.0;
    let ymax = pts.iter().map(|p| p.gbps).fold(0.1, f64::max) * 1.15;
    Some(svg(|root| {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("{name}: bandwidth per size"), ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(48)
            .build_cartesian_2d((xmin..xmax).log_scale(), 0f64..ymax)?;
        chart
            .configure_mesh()
            .x_label_formatter(&|x| axis_bytes(*x))
            .x_desc("bytes per call")
            .y_desc("GB/s")
            .draw()?;
        for (i, s) in series.iter().enumerate() {
            let line = |m: &Metrics| {
                m.bandwidth[*s]
                    .iter()
                    .map(|p| (p.size as f64, p.gbps))
                    .collect::<Vec<_>>()
            };
            let (la, lb) = (line(a), line(b));
            let base = chart.draw_series(DashedLineSeries::new(la.clone(), 6, 4, BASE.stroke_width(2)))?;
            if i == 0 {
                base.label("baseline")
                    .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], BASE.stroke_width(3)));
            }
            chart.draw_series(la.iter().map(|&p| Circle::new(p, 3, BASE.filled())))?;
            let cur = chart.draw_series(LineSeries::new(lb.clone(), CUR.stroke_width(2)))?;
            if i == 0 {
                cur.label("current")
                    .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], CUR.stroke_width(3)));
            }
            chart.draw_series(lb.iter().map(|&p| Circle::new(p, 3, CUR.filled())))?;
            if let Some(&(x, y)) = lb.last().or(la.last()) {
                chart.draw_series(std::iter::once(Text::new(
                    s.to_string(),
                    (x, y),
                    ("sans-serif", 11).into_font().color(&BLACK),
                )))?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    }))
}

/// Host-staged share of moved bytes per workload, baseline vs current.
fn staged_plot(ws: &[WorkloadCmp]) -> Option<String> {
    let rows: Vec<(&str, f64, f64)> = ws
        .iter()
        .filter_map(|w| Some((w.name.as_str(), w.base.staged_pct()?, w.cur.staged_pct()?)))
        .collect();
    if rows.is_empty() {
        return None;
    }
    let n = rows.len();
    Some(svg(|root| {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("host-staged share of bytes moved", ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(44)
            .build_cartesian_2d(0f64..n as f64, 0f64..105f64)?;
        let names: Vec<String> = rows.iter().map(|r| r.0.to_string()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n * 2 + 1)
            .x_label_formatter(&|x| {
                let i = (x - 0.5).round();
                if (x - 0.5 - i).abs() < 1e-6 && i >= 0.0 {
                    names.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc("% of bytes")
            .draw()?;
        // A zero share still shows a sliver, so both series are visible.
        let h = |v: f64| v.max(0.8);
        chart
            .draw_series(
                rows.iter()
                    .enumerate()
                    .map(|(i, r)| Rectangle::new([(i as f64 + 0.1, 0.0), (i as f64 + 0.48, h(r.1))], BASE.filled())),
            )?
            .label("baseline")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], BASE.filled()));
        chart
            .draw_series(
                rows.iter()
                    .enumerate()
                    .map(|(i, r)| Rectangle::new([(i as f64 + 0.52, 0.0), (i as f64 + 0.9, h(r.2))], CUR.filled())),
            )?
            .label("current")
            .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], CUR.filled()));
        for (i, r) in rows.iter().enumerate() {
            for (x, v) in [(i as f64 + 0.12, r.1), (i as f64 + 0.54, r.2)] {
                chart.draw_series(std::iter::once(Text::new(
                    format!("{v:.1}%"),
                    (x, h(v) + 4.0),
                    ("sans-serif", 11).into_font().color(&BLACK),
                )))?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    }))
}

/// The (operation, transport) keys worth plotting: on both sides, most calls first.
fn latency_keys(w: &WorkloadCmp, max: usize) -> Vec<&String> {
    let mut keys: Vec<&String> = w
        .base
        .latency
        .keys()
        .filter(|k| w.cur.latency.contains_key(*k) && !w.base.latency[*k].buckets.is_empty())
        .collect();
    keys.sort_by_key(|k| std::cmp::Reverse(w.base.latency[*k].count.min(w.cur.latency[*k].count)));
    keys.truncate(max);
    keys
}

const STYLE: &str = "body{font-family:sans-serif;margin:24px;color:#222;max-width:1240px}\
h1{font-size:22px}h2{font-size:18px;margin-top:28px}\
table{border-collapse:collapse;margin:8px 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}\
th{background:#f2f2f2}.reg{color:#b00020;font-weight:bold}.ok{color:#2e7d32}.better{color:#1565c0}\
.plots{display:flex;flex-wrap:wrap;gap:12px}.plots svg{border:1px solid #ddd}\
.headline{font-size:16px;padding:8px;border-left:6px solid #888;background:#fafafa}\
.headline.fail{border-color:#b00020}.headline.pass{border-color:#2e7d32}.key span{display:inline-block;width:14px;height:10px;margin:0 4px 0 12px}";

pub fn page(c: &Comparison) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>gdrtrace compare</title><style>{STYLE}</style></head><body>\n"
    );
    let _ = writeln!(o, "<h1>gdrtrace compare</h1>");
    let _ = writeln!(
        o,
        "<p>Baseline <code>{}</code> vs current <code>{}</code>.<span class=\"key\"><span style=\"background:rgb{BASELINE_RGB:?}\"></span>baseline<span style=\"background:rgb{CURRENT_RGB:?}\"></span>current</span></p>",
        esc(&c.baseline),
        esc(&c.current)
    );
    let _ = writeln!(
        o,
        "<p class=\"headline {}\">{} (exit {})</p>",
        if c.exit_code() == 0 { "pass" } else { "fail" },
        esc(&c.headline()),
        c.exit_code()
    );
    for s in sections(c) {
        let title = esc(&s.title());
        match s {
            Section::Profile(diffs) => {
                let _ = writeln!(
                    o,
                    "<h2>{title}</h2><table><tr><th>field</th><th>baseline</th><th>current</th></tr>"
                );
                for d in diffs {
                    let _ = writeln!(
                        o,
                        "<tr><td>{}</td><td>{}</td><td>{}{}</td></tr>",
                        esc(&d.field),
                        esc(&d.baseline),
                        esc(&d.current),
                        if d.unknown { " (not known on both sides)" } else { "" }
                    );
                }
                let _ = writeln!(o, "</table>");
            }
            Section::LostProbes { probes, .. } => {
                let _ = writeln!(o, "<h2>{title}</h2><ul>");
                for p in probes {
                    let _ = writeln!(
                        o,
                        "<li class=\"reg\">{}: was {}, now {}</li>",
                        esc(&p.point),
                        esc(&p.baseline),
                        esc(&p.current)
                    );
                }
                let _ = writeln!(o, "</ul>");
            }
            Section::TransportChanges(changes) => {
                let _ = writeln!(o, "<h2>{title}</h2><ul>");
                for t in changes {
                    let _ = writeln!(
                        o,
                        "<li class=\"reg\">{} {}: {} &rarr; {}</li>",
                        esc(&t.workload),
                        esc(&t.what),
                        esc(&t.baseline),
                        esc(&t.current)
                    );
                }
                let _ = writeln!(o, "</ul>");
            }
            Section::Note(n) => {
                let _ = writeln!(o, "<p><i>note: {}</i></p>", esc(n));
            }
            Section::Missing { .. } | Section::OverThreshold(_) => {}
            Section::Staging(ws) => {
                if let Some(s) = staged_plot(ws) {
                    let _ = writeln!(o, "<h2>{title}</h2><div class=\"plots\">{s}</div>");
                }
            }
            Section::Workload(w) => workload(&mut o, &title, w),
        }
    }
    let _ = writeln!(o, "</body></html>");
    o
}

/// A workload's plots and its table of rows.
fn workload(o: &mut String, title: &str, w: &WorkloadCmp) {
    let _ = writeln!(o, "<h2>{title}</h2><div class=\"plots\">");
    if let Some(s) = bandwidth_plot(&w.name, &w.base, &w.cur) {
        o.push_str(&s);
    }
    for k in latency_keys(w, 4) {
        o.push_str(&latency_plot(k, &w.base.latency[k], &w.cur.latency[k]));
    }
    let _ = writeln!(o, "</div>");
    let _ = writeln!(
        o,
        "<table><tr><th>metric</th><th>baseline</th><th>current</th><th>change</th><th>limit</th><th>status</th></tr>"
    );
    for r in &w.rows {
        let class = match r.status {
            Status::Regression => "reg",
            Status::Ok => "ok",
            Status::Better => "better",
            Status::Info => "",
        };
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{}</td></tr>",
            esc(&r.metric),
            esc(&r.baseline),
            esc(&r.current),
            esc(&r.change),
            esc(&r.limit),
            r.status.name()
        );
    }
    let _ = writeln!(o, "</table>");
}
