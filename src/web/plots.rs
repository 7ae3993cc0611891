//! The metrics page's plots: each figure of a [`Portfolio`](crate::runtime::portfolio::Portfolio) drawn on the server as an SVG
//! document with `plotters` (its SVG backend: text is SVG `<text>`, which plotters escapes, so
//! plan and spec text cannot break out of it), so the page needs no JavaScript.
//!
//! Owns the drawing only: every number comes from `runtime::portfolio`; nothing here reads
//! the store or decides anything. Every plot labels its values (bar tops, legends) so a reader
//! (and a test) finds the figures in the picture; the page repeats them in tables.

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::runtime::portfolio::{CumulativeFlow, CycleTimes, ForecastAccuracy, GateFailures, WeeklySpend};

/// Width of every plot, SVG units (the page scales it to the screen).
pub const WIDTH: u32 = 720;
/// Height of every plot, SVG units.
pub const HEIGHT: u32 = 340;

/// Most bars a bar plot draws (the newest); the page's table lists every one.
pub const MAX_BARS: usize = 30;

type Drawn = Result<(), Box<dyn std::error::Error>>;

/// Colours of the series, in order (Okabe–Ito, readable by the colour-blind).
const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(240, 228, 66),
    RGBColor(90, 90, 90),
];

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

const FONT: &str = "sans-serif";

/// The style of a value label: centred above the point it is drawn at.
fn value_style(size: u32) -> TextStyle<'static> {
    TextStyle::from((FONT, size).into_font()).color(&BLACK).pos(Pos::new(HPos::Center, VPos::Bottom))
}

/// Draws with `draw` on a fresh SVG canvas; a failure (which the SVG backend only has when
/// the figures are degenerate) becomes a plot saying so.
fn svg(draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Drawn) -> String {
    let mut buf = String::new();
    let result = {
        let root = SVGBackend::with_string(&mut buf, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(Into::into).and_then(|()| draw(&root)).and_then(|()| Ok(root.present()?))
    };
    match result {
        Ok(()) => buf,
        Err(e) => message(&format!("this plot could not be drawn: {e}")),
    }
}

/// A plot holding only `text` (no data in the range).
pub fn message(text: &str) -> String {
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (WIDTH, 60)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let _ = root.draw(&Text::new(text.to_string(), (10, 24), (FONT, 16).into_font().color(&BLACK)));
        let _ = root.present();
    }
    buf
}

/// Bars' x range for `n` bars: bar `i` stands on `[i, i + 1)`.
fn bar_range(n: usize) -> std::ops::Range<f64> {
    0.0..(n.max(1) as f64)
}

/// The y range of a plot whose largest value is `max`: headroom for the value labels.
fn y_range(max: f64) -> std::ops::Range<f64> {
    0.0..if max > 0.0 { max * 1.2 } else { 1.0 }
}

/// A bar chart on `root`: `labels.len()` slots (slot `i` stands on `[i, i + 1)`, named by
/// `labels[i]` under its centre; an empty label leaves it unnamed), values up to `max`, the y
/// axis described by `y_desc`.
fn bar_chart<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    labels: &[String],
    max: f64,
    y_desc: &str,
) -> Result<BarChart<'a, 'b>, Box<dyn std::error::Error>> {
    let mut chart = ChartBuilder::on(root)
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(52)
        .build_cartesian_2d(bar_range(labels.len()), y_range(max))?;
    let name = |x: &f64| {
        let i = x.floor();
        if (x - i - 0.5).abs() < 1e-6 {
            labels.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(labels.len() * 2 + 1)
        .x_label_formatter(&name)
        .y_desc(y_desc)
        .light_line_style(WHITE.mix(0.0))
        .label_style((FONT, 13))
        .draw()?;
    Ok(chart)
}

/// A chart of two `f64` axes on an SVG canvas.
type BarChart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Draws the legend box of `chart`'s labelled series at `position`.
fn legend<'a, 'b: 'a>(chart: &mut BarChart<'a, 'b>, position: SeriesLabelPosition) -> Drawn {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font((FONT, 13))
        .draw()?;
    Ok(())
}

/// Cumulative flow: specs per stage at the end of each day, stacked (finished work at the
/// bottom, new work on top).
pub fn cumulative_flow(flow: &CumulativeFlow) -> String {
    let n = flow.days.len();
    let total = |i: usize| flow.series.iter().map(|s| f64::from(s.counts.get(i).copied().unwrap_or(0))).sum::<f64>();
    let max = (0..n).map(total).fold(0.0, f64::max);
    if max == 0.0 {
        return message("No specs in this range.");
    }
    svg(|root| {
        let x_max = (n.saturating_sub(1)).max(1) as f64;
        let mut chart = ChartBuilder::on(root)
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(44)
            .build_cartesian_2d(0f64..x_max, y_range(max))?;
        let day = |x: &f64| flow.days.get(x.round().max(0.0) as usize).cloned().unwrap_or_default();
        chart
            .configure_mesh()
            .x_labels(6)
            .x_label_formatter(&day)
            .y_label_formatter(&|y: &f64| if y.fract().abs() < 1e-9 { format!("{y:.0}") } else { String::new() })
            .y_desc("specs")
            .light_line_style(WHITE.mix(0.0))
            .label_style((FONT, 13))
            .draw()?;
        let mut lower = vec![0f64; n];
        // Stacked from the last stage (merged, failed) up to the first (queued).
        for (k, series) in flow.series.iter().enumerate().rev() {
            if series.counts.iter().all(|c| *c == 0) {
                continue;
            }
            let upper: Vec<f64> = lower
                .iter()
                .enumerate()
                .map(|(i, l)| l + f64::from(series.counts.get(i).copied().unwrap_or(0)))
                .collect();
            let mut points: Vec<(f64, f64)> = upper.iter().enumerate().map(|(i, y)| (i as f64, *y)).collect();
            if n == 1 {
                points.push((x_max, upper[0]));
                points.push((x_max, lower[0]));
            }
            points.extend(lower.iter().enumerate().rev().map(|(i, y)| (i as f64, *y)));
            if n == 1 {
                points.insert(0, (0.0, lower[0]));
            }
            let c = colour(k);
            let last = series.counts.last().copied().unwrap_or(0);
            chart
                .draw_series(std::iter::once(Polygon::new(points, c.mix(0.85).filled())))?
                .label(format!("{} ({last})", series.title))
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
            lower = upper;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    })
}

/// Vertical bars with a value label on each; `labels` name the bars on the x axis.
fn bars(labels: &[String], values: &[f64], value_labels: &[String], y_desc: &str, c: RGBColor) -> String {
    let max = values.iter().copied().fold(0.0, f64::max);
    svg(|root| {
        let mut chart = bar_chart(root, labels, max, y_desc)?;
        chart.draw_series(
            values
                .iter()
                .enumerate()
                .map(|(i, v)| Rectangle::new([(i as f64 + 0.15, 0.0), (i as f64 + 0.85, *v)], c.filled())),
        )?;
        chart.draw_series(
            values
                .iter()
                .zip(value_labels)
                .enumerate()
                .map(|(i, (v, text))| Text::new(text.clone(), (i as f64 + 0.5, v + max * 0.02), value_style(13))),
        )?;
        Ok(())
    })
}

/// Cycle time: one bar per merged spec (hours from fire to merge), the newest [`MAX_BARS`].
pub fn cycle_time(c: &CycleTimes) -> String {
    if c.specs.is_empty() {
        return message("No spec was merged in this range.");
    }
    let shown = &c.specs[c.specs.len().saturating_sub(MAX_BARS)..];
    let labels: Vec<String> = shown.iter().map(|s| format!("#{}", s.spec_id)).collect();
    let values: Vec<f64> = shown.iter().map(|s| s.hours).collect();
    let texts: Vec<String> = values.iter().map(|h| format!("{h:.1} h")).collect();
    bars(&labels, &values, &texts, "hours from fire to merge", colour(0))
}

/// Forecast against actual spend: a pair of bars per execution (forecast, actual), the newest
/// [`MAX_BARS`].
pub fn forecast_vs_actual(f: &ForecastAccuracy) -> String {
    if f.executions.is_empty() {
        return message("No execution started in this range.");
    }
    let shown = &f.executions[f.executions.len().saturating_sub(MAX_BARS)..];
    let max = shown.iter().map(|e| e.actual_usd.max(e.forecast_usd.unwrap_or(0.0))).fold(0.0, f64::max);
    let labels: Vec<String> = shown.iter().map(|e| short_id(&e.task_id)).collect();
    svg(|root| {
        let mut chart = bar_chart(root, &labels, max, "USD")?;
        let (fc, ac) = (colour(7), colour(1));
        chart
            .draw_series(shown.iter().enumerate().filter_map(|(i, e)| {
                let f = e.forecast_usd?;
                Some(Rectangle::new([(i as f64 + 0.1, 0.0), (i as f64 + 0.48, f)], fc.mix(0.6).filled()))
            }))?
            .label("forecast")
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], fc.mix(0.6).filled()));
        chart
            .draw_series(
                shown.iter().enumerate().map(|(i, e)| {
                    Rectangle::new([(i as f64 + 0.52, 0.0), (i as f64 + 0.9, e.actual_usd)], ac.filled())
                }),
            )?
            .label("actual")
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], ac.filled()));
        chart.draw_series(shown.iter().enumerate().flat_map(|(i, e)| {
            let f = e
                .forecast_usd
                .map(|f| Text::new(format!("${f:.2}"), (i as f64 + 0.29, f + max * 0.02), value_style(12)));
            let a = Text::new(
                format!("${:.2}", e.actual_usd),
                (i as f64 + 0.71, e.actual_usd + max * 0.02),
                value_style(12),
            );
            f.into_iter().chain(std::iter::once(a))
        }))?;
        legend(&mut chart, SeriesLabelPosition::UpperRight)
    })
}

/// Spend per week, stacked by agent and model.
pub fn weekly_spend(s: &WeeklySpend) -> String {
    if s.series.is_empty() {
        return message("No recorded spend in this range.");
    }
    let n = s.weeks.len();
    let totals: Vec<f64> =
        (0..n).map(|w| s.series.iter().map(|x| x.usd.get(w).copied().unwrap_or(0.0)).sum()).collect();
    let max = totals.iter().copied().fold(0.0, f64::max);
    // Weeks are named while there are few enough to read.
    let labels: Vec<String> = s
        .weeks
        .iter()
        .map(|w| if n <= 14 { format!("wk {}", w.get(5..).unwrap_or(w)) } else { String::new() })
        .collect();
    svg(|root| {
        let mut chart = bar_chart(root, &labels, max, "USD")?;
        let mut lower = vec![0f64; n];
        for (k, series) in s.series.iter().enumerate() {
            let c = colour(k);
            let bars: Vec<Rectangle<(f64, f64)>> = (0..n)
                .filter(|w| series.usd.get(*w).copied().unwrap_or(0.0) > 0.0)
                .map(|w| {
                    let top = lower[w] + series.usd[w];
                    Rectangle::new([(w as f64 + 0.15, lower[w]), (w as f64 + 0.85, top)], c.filled())
                })
                .collect();
            for (w, l) in lower.iter_mut().enumerate() {
                *l += series.usd.get(w).copied().unwrap_or(0.0);
            }
            chart
                .draw_series(bars)?
                .label(format!("{} · {} (${:.2})", series.agent, series.model, series.total_usd))
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        chart.draw_series(
            totals
                .iter()
                .enumerate()
                .filter(|(_, t)| **t > 0.0)
                .map(|(w, t)| Text::new(format!("${t:.2}"), (w as f64 + 0.5, t + max * 0.02), value_style(12))),
        )?;
        legend(&mut chart, SeriesLabelPosition::UpperRight)
    })
}

/// Gate failure rate per gate type (percent), labelled `failed/runs (rate)`.
pub fn gate_failures(gates: &[GateFailures]) -> String {
    if gates.is_empty() {
        return message("No gate ran in this range.");
    }
    let labels: Vec<String> = gates.iter().map(|g| g.gate_type.clone()).collect();
    let values: Vec<f64> = gates.iter().map(|g| g.failure_rate * 100.0).collect();
    let texts: Vec<String> =
        gates.iter().map(|g| format!("{}/{} ({:.0}%)", g.failed, g.runs, g.failure_rate * 100.0)).collect();
    bars(&labels, &values, &texts, "% of runs failed", colour(5))
}

/// A task id short enough for an axis label (its first 12 characters).
fn short_id(task_id: &str) -> String {
    match task_id.char_indices().nth(12) {
        Some((i, _)) => format!("{}…", &task_id[..i]),
        None => task_id.to_string(),
    }
}
