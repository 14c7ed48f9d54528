//! Small SVG charts: lines (throughput over time, latency percentile curves)
//! and grouped bars (the paper comparison).
//!
//! Hand-written rather than plotters: SVG is text, needs no font files or
//! system libraries at render time, and these three chart shapes are all
//! loadgen draws.

use std::fmt::Write as _;

const WIDTH: f64 = 1040.0;
const HEIGHT: f64 = 520.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 340.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

/// One named line.
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points in order.
    pub points: Vec<(f64, f64)>,
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn header(out: &mut String, title: &str) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="13">"#
    );
    let _ = write!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = write!(
        out,
        r#"<text x="{}" y="28" text-anchor="middle" font-size="17" font-weight="bold">{}</text>"#,
        (LEFT + WIDTH - RIGHT) / 2.0,
        escape(title)
    );
}

/// A y axis, linear or log10, from 0 (or the smallest decade) to a nice top.
struct YAxis {
    log: bool,
    low: f64,
    high: f64,
}

impl YAxis {
    fn new(values: impl Iterator<Item = f64>, log: bool) -> YAxis {
        let values: Vec<f64> = values
            .filter(|v| v.is_finite() && (!log || *v > 0.0))
            .collect();
        let max = values.iter().copied().fold(0.0f64, f64::max).max(1e-9);
        if log {
            let min = values
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min)
                .min(max);
            YAxis {
                log,
                low: 10f64.powf(min.log10().floor()),
                high: 10f64.powf(max.log10().ceil().max(min.log10().floor() + 1.0)),
            }
        } else {
            let step = nice_step(max / 5.0);
            YAxis {
                log,
                low: 0.0,
                high: (max / step).ceil().max(1.0) * step,
            }
        }
    }

    fn y(&self, value: f64) -> f64 {
        let plot = HEIGHT - TOP - BOTTOM;
        let fraction = if self.log {
            (value.max(self.low).log10() - self.low.log10())
                / (self.high.log10() - self.low.log10())
        } else {
            (value - self.low) / (self.high - self.low)
        };
        HEIGHT - BOTTOM - fraction.clamp(0.0, 1.0) * plot
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            // Over a few decades, 2 and 5 of each are labelled too: an axis
            // from 1M to 10M with two labels cannot be read.
            let decades = (self.high / self.low).log10().round();
            let steps: &[f64] = if decades <= 3.0 {
                &[1.0, 2.0, 5.0]
            } else {
                &[1.0]
            };
            let mut ticks = Vec::new();
            let mut decade = self.low;
            while decade <= self.high * 1.0001 {
                for step in steps {
                    let t = decade * step;
                    if t <= self.high * 1.0001 {
                        ticks.push(t);
                    }
                }
                decade *= 10.0;
            }
            ticks
        } else {
            let step = nice_step((self.high - self.low) / 5.0);
            (0..=((self.high - self.low) / step).round() as usize)
                .map(|i| self.low + i as f64 * step)
                .collect()
        }
    }

    fn draw(&self, out: &mut String, label: &str) {
        for tick in self.ticks() {
            let y = self.y(tick);
            let _ = write!(
                out,
                r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                WIDTH - RIGHT,
                LEFT - 8.0,
                y + 4.0,
                format_number(tick)
            );
        }
        let _ = write!(
            out,
            r#"<text transform="translate(22 {}) rotate(-90)" text-anchor="middle">{}</text>"#,
            (TOP + HEIGHT - BOTTOM) / 2.0,
            escape(label)
        );
    }
}

fn nice_step(raw: f64) -> f64 {
    let raw = raw.max(1e-12);
    let magnitude = 10f64.powf(raw.log10().floor());
    let fraction = raw / magnitude;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// 1234567 -> "1.2M", 1200 -> "1.2k", 22000 -> "22k", 0.25 -> "0.25".
pub fn format_number(value: f64) -> String {
    // One decimal below 10 of a unit (so axis ticks 1000, 1200, 1400 stay
    // apart), none above; a trailing ".0" is dropped.
    let scaled = |v: f64, unit: &str| {
        let text = if v.abs() < 10.0 {
            format!("{v:.1}")
        } else {
            format!("{v:.0}")
        };
        format!("{}{unit}", text.strip_suffix(".0").unwrap_or(&text))
    };
    let abs = value.abs();
    if abs >= 1e9 {
        scaled(value / 1e9, "G")
    } else if abs >= 1e6 {
        scaled(value / 1e6, "M")
    } else if abs >= 1e3 {
        scaled(value / 1e3, "k")
    } else if abs >= 10.0 || value.fract() == 0.0 {
        format!("{value:.0}")
    } else if abs >= 1.0 {
        format!("{value:.1}")
    } else {
        let text = format!("{value:.2}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn legend(out: &mut String, names: &[String]) {
    for (i, name) in names.iter().enumerate() {
        let y = TOP + 10.0 + i as f64 * 20.0;
        let color = COLORS[i % COLORS.len()];
        let _ = write!(
            out,
            r#"<rect x="{}" y="{}" width="14" height="10" fill="{color}"/><text x="{}" y="{}">{}</text>"#,
            WIDTH - RIGHT + 15.0,
            y - 9.0,
            WIDTH - RIGHT + 35.0,
            y,
            escape(name)
        );
    }
}

/// The most points a line chart draws per series. A 20-minute run sampled
/// every second would be 1,200 zig-zagging points; longer series are
/// averaged over consecutive windows instead.
const MAX_POINTS: usize = 300;

/// Lines are also marked with dots when no series has more points than this.
const MAX_DOTS: usize = 150;

/// A series this short is always dotted.
const SHORT_SERIES: usize = 20;

/// Means of consecutive runs of `window` points (x and y alike).
fn window_means(points: &[(f64, f64)], window: usize) -> Vec<(f64, f64)> {
    points
        .chunks(window.max(1))
        .map(|chunk| {
            let n = chunk.len() as f64;
            let (x, y) = chunk
                .iter()
                .fold((0.0, 0.0), |(x, y), p| (x + p.0, y + p.1));
            (x / n, y / n)
        })
        .collect()
}

/// A line chart with automatic x ticks; `log_y` uses a log10 axis. Series
/// longer than `MAX_POINTS` are drawn as window means, and the x label says
/// how many samples each point averages.
pub fn lines(title: &str, x_label: &str, y_label: &str, series: &[Series], log_y: bool) -> String {
    let longest = series.iter().map(|s| s.points.len()).max().unwrap_or(0);
    if longest < 3 {
        // One or two dots are not a line: say so rather than draw them.
        let title = format!("{title} — run too short to chart ({longest} samples)");
        return lines_with_ticks(&title, x_label, y_label, series, log_y, &[]);
    }
    let window = longest.div_ceil(MAX_POINTS).max(1);
    if window == 1 {
        return lines_with_ticks(title, x_label, y_label, series, log_y, &[]);
    }
    let averaged: Vec<Series> = series
        .iter()
        .map(|s| Series {
            name: s.name.clone(),
            points: window_means(&s.points, window),
        })
        .collect();
    let x_label = format!("{x_label} (each point: the mean of {window} samples)");
    lines_with_ticks(title, &x_label, y_label, &averaged, log_y, &[])
}

/// Latency by percentile, HdrHistogram style: the x axis counts nines
/// (x = -log10(1 - p)), so 90%, 99%, 99.9% and 99.99% are evenly spaced.
pub fn percentiles(title: &str, series: &[Series]) -> String {
    let nines = |p: f64| -(1.0 - p / 100.0).max(1e-6).log10();
    let transformed: Vec<Series> = series
        .iter()
        .map(|s| Series {
            name: s.name.clone(),
            points: s.points.iter().map(|&(p, ms)| (nines(p), ms)).collect(),
        })
        .collect();
    let ticks: Vec<(f64, String)> = [0.0, 50.0, 90.0, 99.0, 99.9, 99.99, 99.999]
        .iter()
        .map(|&p| (nines(p), format!("{p}%")))
        .collect();
    lines_with_ticks(
        title,
        "percentile",
        "milliseconds (log scale)",
        &transformed,
        true,
        &ticks,
    )
}

fn lines_with_ticks(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_y: bool,
    x_ticks: &[(f64, String)],
) -> String {
    let mut out = String::new();
    header(&mut out, title);
    let axis = YAxis::new(
        series.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
        log_y,
    );
    axis.draw(&mut out, y_label);
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    let x_min = xs.iter().copied().fold(f64::INFINITY, f64::min).min(0.0);
    let x_max = xs.iter().copied().fold(0.0f64, f64::max).max(x_min + 1e-9);
    let x = |v: f64| LEFT + (v - x_min) / (x_max - x_min) * (WIDTH - LEFT - RIGHT);
    let ticks: Vec<(f64, String)> = if x_ticks.is_empty() {
        let step = nice_step((x_max - x_min) / 8.0);
        let mut tick = (x_min / step).ceil() * step;
        let mut auto = Vec::new();
        while tick <= x_max + 1e-9 {
            auto.push((tick, format_number(tick)));
            tick += step;
        }
        auto
    } else {
        x_ticks
            .iter()
            .filter(|(v, _)| *v <= x_max + 1e-9)
            .cloned()
            .collect()
    };
    for (value, text) in &ticks {
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            x(*value),
            HEIGHT - BOTTOM + 18.0,
            escape(text)
        );
    }
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (LEFT + WIDTH - RIGHT) / 2.0,
        HEIGHT - 15.0,
        escape(x_label)
    );
    // Dots on every line or on none, so no series looks sampled differently.
    let dots = series.iter().all(|s| s.points.len() <= MAX_DOTS);
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<String> = s
            .points
            .iter()
            .filter(|p| p.1.is_finite())
            .map(|p| format!("{:.1},{:.1}", x(p.0), axis.y(p.1)))
            .collect();
        let _ = write!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
        // A run of a few seconds beside 20-minute ones would be an
        // invisible stub without its dots.
        let dotted = dots || points.len() <= SHORT_SERIES;
        for p in points.iter().filter(|_| dotted) {
            let mut xy = p.split(',');
            if let (Some(px), Some(py)) = (xy.next(), xy.next()) {
                let _ = write!(
                    out,
                    r#"<circle cx="{px}" cy="{py}" r="2.5" fill="{color}"/>"#
                );
            }
        }
    }
    frame(&mut out);
    legend(
        &mut out,
        &series.iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
    );
    out.push_str("</svg>\n");
    out
}

/// A grouped bar chart: one group per category, one bar per name in
/// `bar_names` (missing values are drawn as "not run").
pub fn grouped_bars(
    title: &str,
    y_label: &str,
    bar_names: &[String],
    groups: &[(String, Vec<Option<f64>>)],
    log_y: bool,
) -> String {
    let mut out = String::new();
    header(&mut out, title);
    let axis = YAxis::new(
        groups.iter().flat_map(|g| g.1.iter().flatten().copied()),
        log_y,
    );
    axis.draw(&mut out, y_label);
    let plot_width = WIDTH - LEFT - RIGHT;
    let group_width = plot_width / groups.len().max(1) as f64;
    let bar_width = (group_width * 0.8) / bar_names.len().max(1) as f64;
    for (g, (name, values)) in groups.iter().enumerate() {
        let group_x = LEFT + g as f64 * group_width + group_width * 0.1;
        for (b, value) in values.iter().enumerate() {
            let bx = group_x + b as f64 * bar_width;
            let color = COLORS[b % COLORS.len()];
            match value {
                Some(v) => {
                    let y = axis.y(*v);
                    let _ = write!(
                        out,
                        r#"<rect x="{bx:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{color}"/><text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{}</text>"#,
                        bar_width - 2.0,
                        HEIGHT - BOTTOM - y,
                        bx + bar_width / 2.0,
                        y - 3.0,
                        format_number(*v)
                    );
                }
                None => {
                    let _ = write!(
                        out,
                        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10" fill="#888">n/r</text>"##,
                        bx + bar_width / 2.0,
                        HEIGHT - BOTTOM - 4.0
                    );
                }
            }
        }
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            LEFT + (g as f64 + 0.5) * group_width,
            HEIGHT - BOTTOM + 18.0,
            escape(name)
        );
    }
    frame(&mut out);
    legend(&mut out, bar_names);
    out.push_str("</svg>\n");
    out
}

fn frame(out: &mut String) {
    let _ = write!(
        out,
        r##"<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="none" stroke="#333"/>"##,
        WIDTH - LEFT - RIGHT,
        HEIGHT - TOP - BOTTOM
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_axis_over_few_decades_labels_twos_and_fives() {
        let axis = YAxis::new([1.5e6, 8e6].into_iter(), true);
        let labels: Vec<String> = axis.ticks().into_iter().map(format_number).collect();
        assert_eq!(labels, ["1M", "2M", "5M", "10M"]);
        let wide = YAxis::new([1.0, 5e5].into_iter(), true);
        let labels: Vec<String> = wide.ticks().into_iter().map(format_number).collect();
        assert_eq!(labels, ["1", "10", "100", "1k", "10k", "100k", "1M"]);
    }

    #[test]
    fn charts_are_well_formed_svg() {
        let svg = lines(
            "t",
            "x",
            "y",
            &[Series {
                name: "a<b".into(),
                points: vec![(0.0, 1.0), (1.0, 3.0)],
            }],
            false,
        );
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("a&lt;b"));
        let bars = grouped_bars(
            "t",
            "msg/s",
            &["x".into(), "y".into()],
            &[("g".into(), vec![Some(10.0), None])],
            true,
        );
        assert!(bars.contains("n/r"));
        assert_eq!(format_number(1_234_567.0), "1.2M");
        assert_eq!(format_number(22_000.0), "22k");
        assert_eq!(format_number(1_200.0), "1.2k");
        assert_eq!(format_number(2_000_000.0), "2M");
        assert_eq!(format_number(15_188.0), "15k");
        assert_eq!(format_number(0.1), "0.1");
        assert_eq!(format_number(0.25), "0.25");
    }

    #[test]
    fn long_series_are_drawn_as_window_means() {
        let points: Vec<(f64, f64)> = (0..1200).map(|i| (i as f64, (i % 2) as f64)).collect();
        let means = window_means(&points, 4);
        assert_eq!(means.len(), 300);
        assert_eq!(means[0], (1.5, 0.5));
        let svg = lines(
            "t",
            "seconds",
            "y",
            &[Series {
                name: "a".into(),
                points,
            }],
            false,
        );
        assert!(svg.contains("seconds (each point: the mean of 4 samples)"));
        assert!(!svg.contains("<circle"));
    }
}
