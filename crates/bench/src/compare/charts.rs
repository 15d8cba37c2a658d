//! SVG charts, written by hand: bar charts of each scenario's headline figure per server, and
//! latency-against-offered-load curves for sweeps. Hand-written SVG keeps the generator free
//! of a plotting dependency (and its build time on two shared cores); the charts need only
//! rectangles, polylines and text.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::flash_report::{FlashPhaseSummary, FlashSummary};
use super::scenarios::{Scenario, ScenarioKind};
use super::summary::ScenarioSummary;
use crate::error::BenchError;

/// Chart width, px.
const WIDTH_PX: f64 = 760.0;
/// Chart height, px.
const HEIGHT_PX: f64 = 360.0;
/// Plot-area margins: left, right, top, bottom, px.
const MARGIN_PX: (f64, f64, f64, f64) = (80.0, 200.0, 40.0, 60.0);
/// One colour per series, in order.
const COLOURS: [&str; 6] = [
    "#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#76b7b2", "#b07aa1",
];

/// A bar: label and value (`None`: not run).
pub type Bar = (String, Option<f64>);
/// A series: name and points.
pub type Series = (String, Vec<(f64, f64)>);

/// Writes one chart per scenario into `out`; returns scenario name → chart file name.
///
/// # Errors
/// When a file cannot be written.
pub fn write_all(
    out: &Path,
    scenarios: &[Scenario],
    summaries: &[ScenarioSummary],
) -> Result<Vec<(String, String)>, BenchError> {
    let mut files = Vec::new();
    for (scenario, summary) in scenarios.iter().zip(summaries) {
        if scenario.kind == ScenarioKind::Flash {
            let flash: Vec<(&str, &FlashSummary)> = summary
                .targets
                .iter()
                .filter_map(|t| Some((t.server.as_str(), t.flash.as_ref()?)))
                .collect();
            for (name, svg) in flash_charts(&scenario.name, &flash) {
                let path: PathBuf = out.join(&name);
                std::fs::write(&path, svg).map_err(|source| BenchError::File { path, source })?;
                files.push((scenario.name.clone(), name));
            }
            continue;
        }
        let (name, svg) = if scenario.kind == ScenarioKind::Sweep {
            let series: Vec<Series> = summary
                .targets
                .iter()
                .filter(|t| !t.sweep.is_empty())
                .map(|t| {
                    let points = t
                        .sweep
                        .iter()
                        .map(|p| (p.offered_per_sec, p.p999_us))
                        .collect();
                    (format!("{} {}", t.server, t.protocol), points)
                })
                .collect();
            let slo = scenario.sweep.as_ref().map(|s| s.p999_us_max);
            let title = format!("{}: p99.9 latency vs offered load", scenario.name);
            let svg = line_chart(&title, "offered requests/s", "p99.9 µs (log)", &series, slo);
            (format!("{}-latency-vs-load.svg", scenario.name), svg)
        } else {
            let bars: Vec<Bar> = summary
                .targets
                .iter()
                .map(|t| (format!("{} {}", t.server, t.protocol), t.headline))
                .collect();
            let title = format!("{}: {}", scenario.name, summary.headline_label);
            (format!("{}.svg", scenario.name), bar_chart(&title, &bars))
        };
        let path: PathBuf = out.join(&name);
        std::fs::write(&path, svg).map_err(|source| BenchError::File { path, source })?;
        files.push((scenario.name.clone(), name));
    }
    Ok(files)
}

/// The flash scenario's charts (file name, SVG) from each server's figures: requests per second
/// in each closed-loop phase, items kept after the fill, and p99 latency in each fixed-rate
/// phase, a bar per server (and phase).
#[must_use]
pub fn flash_charts(scenario: &str, flash: &[(&str, &FlashSummary)]) -> Vec<(String, String)> {
    let phase_bars = |open_loop: bool, value: &dyn Fn(&FlashPhaseSummary) -> Option<f64>| {
        flash
            .iter()
            .flat_map(|(server, f)| {
                f.phases
                    .iter()
                    .filter(move |p| p.rate_per_sec.is_some() == open_loop)
                    .map(move |p| (format!("{server} {}", p.label), value(p)))
            })
            .collect::<Vec<Bar>>()
    };
    let kept: Vec<Bar> = flash
        .iter()
        .map(|(server, f)| ((*server).to_owned(), f.items_kept))
        .collect();
    let mut charts = vec![
        (
            format!("{scenario}.svg"),
            bar_chart(
                &format!("{scenario}: requests/s, closed loop"),
                &phase_bars(false, &|p| p.requests_per_sec),
            ),
        ),
        (
            format!("{scenario}-items.svg"),
            bar_chart(&format!("{scenario}: items kept after the fill"), &kept),
        ),
    ];
    let tail = phase_bars(true, &|p| p.p99_us);
    if !tail.is_empty() {
        charts.push((
            format!("{scenario}-p99.svg"),
            bar_chart(
                &format!("{scenario}: p99 µs at a fixed rate (lower is better)"),
                &tail,
            ),
        ));
    }
    charts
}

/// A vertical bar chart; bars with no value are labelled "not run".
#[must_use]
pub fn bar_chart(title: &str, bars: &[Bar]) -> String {
    let (left, right, top, bottom) = MARGIN_PX;
    let plot_w = WIDTH_PX - left - right + 100.0;
    let plot_h = HEIGHT_PX - top - bottom;
    let max = bars
        .iter()
        .filter_map(|b| b.1)
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let mut svg = open_svg(title);
    axes(&mut svg, plot_w);
    for (tick, value) in ticks_linear(max) {
        let y = top + plot_h * (1.0 - tick);
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{y:.1}" text-anchor="end" font-size="11">{}</text>"#,
            left - 6.0,
            human(value)
        );
    }
    #[allow(clippy::cast_precision_loss)]
    let slot = plot_w / bars.len().max(1) as f64;
    for (index, (label, value)) in bars.iter().enumerate() {
        #[allow(clippy::cast_precision_loss)]
        let x = left + slot * index as f64 + slot * 0.15;
        let colour = COLOURS[index % COLOURS.len()];
        let label_y = top + plot_h + 16.0;
        let centre = x + slot * 0.35;
        match value {
            Some(value) => {
                let h = plot_h * value / max;
                let y = top + plot_h - h;
                let _ = writeln!(
                    svg,
                    r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{h:.1}" fill="{colour}"/>"#,
                    slot * 0.7
                );
                let _ = writeln!(
                    svg,
                    r#"<text x="{centre:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"#,
                    y - 4.0,
                    human(*value)
                );
            }
            None => {
                let _ = writeln!(
                    svg,
                    r##"<text x="{centre:.1}" y="{:.1}" text-anchor="middle" font-size="11" fill="#888">not run</text>"##,
                    top + plot_h - 6.0
                );
            }
        }
        let _ = writeln!(
            svg,
            r#"<text x="{centre:.1}" y="{label_y:.1}" text-anchor="middle" font-size="11">{}</text>"#,
            escape(label)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// Maps data to pixels: linear x from 0, logarithmic y between whole decades.
struct LogPlot {
    x_max: f64,
    y_min: f64,
    y_max: f64,
    plot_w: f64,
    plot_h: f64,
}

impl LogPlot {
    fn new(series: &[Series], objective: Option<f64>) -> Self {
        let (left, right, top, bottom) = MARGIN_PX;
        let points = series.iter().flat_map(|s| s.1.iter());
        let x_max = points.clone().map(|p| p.0).fold(0.0, f64::max).max(1.0);
        let y_values = points.map(|p| p.1).chain(objective).filter(|v| *v > 0.0);
        let y_low = y_values.clone().fold(f64::INFINITY, f64::min);
        let y_min = 10f64.powf(y_low.log10().floor()).min(10.0);
        let y_max = 10f64
            .powf(y_values.fold(1.0, f64::max).log10().ceil())
            .max(y_min * 10.0);
        let plot_w = WIDTH_PX - left - right;
        let plot_h = HEIGHT_PX - top - bottom;
        LogPlot {
            x_max,
            y_min,
            y_max,
            plot_w,
            plot_h,
        }
    }

    fn x(&self, x: f64) -> f64 {
        MARGIN_PX.0 + self.plot_w * x / self.x_max
    }

    fn y(&self, y: f64) -> f64 {
        let span = self.y_max.log10() - self.y_min.log10();
        MARGIN_PX.2 + self.plot_h * (1.0 - (y.max(self.y_min).log10() - self.y_min.log10()) / span)
    }

    /// Decade labels on y, five labels on x, and both axis titles.
    fn labels(&self, svg: &mut String, x_label: &str, y_label: &str) {
        let (left, _, top, _) = MARGIN_PX;
        let mut decade = self.y_min;
        while decade <= self.y_max * 1.001 {
            let (x, y) = (left - 6.0, self.y(decade) + 4.0);
            let _ = writeln!(
                svg,
                r#"<text x="{x:.1}" y="{y:.1}" text-anchor="end" font-size="11">{}</text>"#,
                human(decade)
            );
            decade *= 10.0;
        }
        for (tick, value) in ticks_linear(self.x_max) {
            let (x, y) = (left + self.plot_w * tick, top + self.plot_h + 16.0);
            let _ = writeln!(
                svg,
                r#"<text x="{x:.1}" y="{y:.1}" text-anchor="middle" font-size="11">{}</text>"#,
                human(value)
            );
        }
        let (x, y) = (left + self.plot_w / 2.0, HEIGHT_PX - 18.0);
        let _ = writeln!(
            svg,
            r#"<text x="{x:.1}" y="{y:.1}" text-anchor="middle" font-size="12">{}</text>"#,
            escape(x_label)
        );
        let middle = top + self.plot_h / 2.0;
        let _ = writeln!(
            svg,
            r#"<text x="14" y="{middle:.1}" font-size="12" transform="rotate(-90 14 {middle:.1})" text-anchor="middle">{}</text>"#,
            escape(y_label)
        );
    }

    /// One series: its line, its points and its legend entry.
    fn series(&self, svg: &mut String, index: usize, name: &str, points: &[(f64, f64)]) {
        let colour = COLOURS[index % COLOURS.len()];
        let path: Vec<String> = points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", self.x(x), self.y(y)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        for &(x, y) in points {
            let (cx, cy) = (self.x(x), self.y(y));
            let _ = writeln!(
                svg,
                r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="3" fill="{colour}"/>"#
            );
        }
        #[allow(clippy::cast_precision_loss)]
        let legend_y = MARGIN_PX.2 + 16.0 * index as f64;
        let legend_x = MARGIN_PX.0 + self.plot_w + 12.0;
        let _ = writeln!(
            svg,
            r#"<rect x="{legend_x:.1}" y="{legend_y:.1}" width="10" height="10" fill="{colour}"/>"#
        );
        let (x, y) = (legend_x + 14.0, legend_y + 9.0);
        let _ = writeln!(
            svg,
            r#"<text x="{x:.1}" y="{y:.1}" font-size="11">{}</text>"#,
            escape(name)
        );
    }
}

/// A line chart with a logarithmic y axis and an optional dashed horizontal objective line.
#[must_use]
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    objective: Option<f64>,
) -> String {
    let plot = LogPlot::new(series, objective);
    let mut svg = open_svg(title);
    axes(&mut svg, plot.plot_w);
    plot.labels(&mut svg, x_label, y_label);
    if let Some(objective) = objective {
        let (x1, x2, y) = (MARGIN_PX.0, MARGIN_PX.0 + plot.plot_w, plot.y(objective));
        let _ = writeln!(
            svg,
            r##"<line x1="{x1}" y1="{y:.1}" x2="{x2:.1}" y2="{y:.1}" stroke="#999" stroke-dasharray="4 3"/>"##
        );
    }
    for (index, (name, points)) in series.iter().enumerate() {
        plot.series(&mut svg, index, name, points);
    }
    svg.push_str("</svg>\n");
    svg
}

fn open_svg(title: &str) -> String {
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX}" height="{HEIGHT_PX}" font-family="sans-serif">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="22" text-anchor="middle" font-size="14">{}</text>"#,
        WIDTH_PX / 2.0,
        escape(title)
    );
    svg
}

fn axes(svg: &mut String, plot_w: f64) {
    let (left, _, top, bottom) = MARGIN_PX;
    let base = HEIGHT_PX - bottom;
    let _ = writeln!(
        svg,
        r#"<line x1="{left}" y1="{top}" x2="{left}" y2="{base}" stroke="black"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<line x1="{left}" y1="{base}" x2="{:.1}" y2="{base}" stroke="black"/>"#,
        left + plot_w
    );
}

/// Five ticks at 0, 25, 50, 75, 100% of `max`, as (fraction, value).
fn ticks_linear(max: f64) -> impl Iterator<Item = (f64, f64)> {
    (0..=4).map(move |i| {
        let fraction = f64::from(i) / 4.0;
        (fraction, max * fraction)
    })
}

/// 1234567 → "1.23M"; 0.5 → "0.50".
#[must_use]
pub fn human(value: f64) -> String {
    match value.abs() {
        v if v >= 1e6 => format!("{:.2}M", value / 1e6),
        v if v >= 1e4 => format!("{:.0}K", value / 1e3),
        v if v >= 1e3 => format!("{:.1}K", value / 1e3),
        v if v >= 10.0 => format!("{value:.0}"),
        _ => format!("{value:.2}"),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_chart_marks_missing_bars() {
        let bars = vec![
            ("memcached".to_owned(), Some(100.0)),
            ("strata".to_owned(), None),
        ];
        let svg = bar_chart("t <1>", &bars);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("not run") && svg.contains("t &lt;1&gt;"));
        assert_eq!(svg.matches("<rect").count(), 2, "background plus one bar");
    }

    #[test]
    fn line_chart_draws_each_series() {
        let series = vec![
            ("a".to_owned(), vec![(1000.0, 50.0), (2000.0, 80.0)]),
            ("b".to_owned(), vec![(1000.0, 40.0), (2000.0, 5000.0)]),
        ];
        let svg = line_chart("t", "x", "y", &series, Some(1000.0));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 4);
        assert!(svg.contains("stroke-dasharray"));
    }

    #[test]
    fn flash_charts_draw_closed_loop_rates_items_and_fixed_rate_tails() {
        let phase = |label: &str, rate: Option<f64>, rps: f64, p99: f64| FlashPhaseSummary {
            label: label.into(),
            requests_per_sec: Some(rps),
            hit_ratio: None,
            p50_us: None,
            p99_us: Some(p99),
            p999_us: None,
            server_cpu_us_per_request: None,
            disk_read_bytes_per_get: None,
            flash_reads_per_flash_hit: None,
            steal_percent: None,
            rate_per_sec: rate,
        };
        let figures = |kept: f64| FlashSummary {
            items_kept: Some(kept),
            phases: vec![
                phase("zipf:0.9", None, 200_000.0, 900.0),
                phase("uniform", None, 80_000.0, 1_500.0),
                phase("zipf:0.9 at 20000/s", Some(20_000.0), 20_000.0, 120.0),
            ],
            ..FlashSummary::default()
        };
        let (memcached, strata) = (figures(0.9e6), figures(4.1e6));
        let charts = flash_charts(
            "flash-1k",
            &[("memcached", &memcached), ("strata", &strata)],
        );
        let names: Vec<&str> = charts.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["flash-1k.svg", "flash-1k-items.svg", "flash-1k-p99.svg"]
        );
        // Background plus a bar per server and closed-loop phase; per server; per fixed rate.
        assert_eq!(charts[0].1.matches("<rect").count(), 1 + 4);
        assert!(charts[0].1.contains("strata uniform") && !charts[0].1.contains("at 20000"));
        assert_eq!(charts[1].1.matches("<rect").count(), 1 + 2);
        assert!(charts[1].1.contains("4.10M"));
        assert_eq!(charts[2].1.matches("<rect").count(), 1 + 2);
        assert!(charts[2].1.contains("memcached zipf:0.9 at 20000/s"));
    }

    #[test]
    fn human_numbers() {
        assert_eq!(human(1_234_567.0), "1.23M");
        assert_eq!(human(466_000.0), "466K");
        assert_eq!(human(1500.0), "1.5K");
        assert_eq!(human(0.5), "0.50");
    }
}
