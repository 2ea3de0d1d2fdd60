//! The overview's charts: plain SVG drawn on the server (no script needed to see
//! them), each an image with a name and a summary for screen readers, and the
//! same figures as a table behind a "Show as table" toggle.

use leptos::prelude::*;

/// The drawing's size in SVG units; it scales to the panel's width.
const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 180.0;
/// Room for the y axis' labels on the left and the time labels below.
const LEFT: f64 = 64.0;
const BOTTOM: f64 = 24.0;
const TOP: f64 = 10.0;

/// One coloured series of a chart.
#[derive(Clone)]
pub struct Series {
    pub name: &'static str,
    /// The CSS class that colours it (`series-ok`, `series-bad`, …).
    pub class: &'static str,
    pub values: Vec<Option<i64>>,
}

/// How a chart writes its values.
#[derive(Clone, Copy)]
pub enum Unit {
    Count,
    Millis,
}

impl Unit {
    pub fn format(self, value: i64) -> String {
        match self {
            Unit::Count => group_digits(value),
            Unit::Millis => format_duration(value),
        }
    }
}

/// A count with thousands separated: `12,345`.
pub fn group_digits(value: i64) -> String {
    let digits = value.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    if value < 0 {
        out.insert(0, '-');
    }
    out
}

/// A duration for people: `850 ms`, `2.4 s`, `3 min`, `2.5 h`.
pub fn format_duration(ms: i64) -> String {
    match ms {
        ms if ms < 1_000 => format!("{ms} ms"),
        ms if ms < 60_000 => format!("{:.1} s", ms as f64 / 1_000.0),
        ms if ms < 3_600_000 => format!("{} min", ms / 60_000),
        ms => format!("{:.1} h", ms as f64 / 3_600_000.0),
    }
}

/// How the series are drawn.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Bars stacked on each other (counts that add up).
    StackedBars,
    /// One line each (values that do not add up, like percentiles).
    Lines,
}

fn plot_height() -> f64 {
    HEIGHT - TOP - BOTTOM
}

/// The top of the y axis: the largest value (stacked or not), never 0.
fn scale_max(series: &[Series], shape: Shape, points: usize) -> i64 {
    let per_point = (0..points).map(|i| {
        let values = series
            .iter()
            .filter_map(|s| s.values.get(i).copied().flatten());
        match shape {
            Shape::StackedBars => values.sum::<i64>(),
            Shape::Lines => values.max().unwrap_or(0),
        }
    });
    per_point.max().unwrap_or(0).max(1)
}

fn y_of(value: i64, max: i64) -> f64 {
    TOP + plot_height() * (1.0 - value as f64 / max as f64)
}

/// A chart of `series` over `labels` (one per bar), with its table.
#[component]
pub fn Chart(
    /// An id unique on the page (for its title and test hooks).
    id: &'static str,
    title: &'static str,
    /// One sentence that says what the chart shows, in words.
    summary: String,
    labels: Vec<String>,
    series: Vec<Series>,
    shape: Shape,
    unit: Unit,
) -> impl IntoView {
    let points = labels.len().max(1);
    let max = scale_max(&series, shape, points);
    let step = (WIDTH - LEFT) / points as f64;
    let title_id = format!("{id}-title");
    let desc_id = format!("{id}-desc");
    let described_by = desc_id.clone();
    let labelled_by = title_id.clone();
    let drawing = match shape {
        Shape::StackedBars => bars(&series, points, step, max).into_any(),
        Shape::Lines => lines(&series, points, step, max).into_any(),
    };
    // Time labels under the first, middle and last bars.
    let ticks = [0, points / 2, points - 1]
        .into_iter()
        .filter_map(|i| labels.get(i).map(|l| (i, l.clone())))
        .map(|(i, label)| {
            let x = LEFT + step * (i as f64 + 0.5);
            // The first and last labels stay inside the drawing.
            let anchor = match i {
                0 => "start",
                i if i + 1 == points => "end",
                _ => "middle",
            };
            let x = match anchor {
                "start" => LEFT,
                "end" => WIDTH,
                _ => x,
            };
            view! { <text class="tick" x=format!("{x:.1}") y=format!("{:.1}", HEIGHT - 4.0) text-anchor=anchor>{label}</text> }
        })
        .collect_view();
    let legend = series
        .iter()
        .map(|s| view! { <li><span class=format!("swatch {}", s.class) aria-hidden="true"></span>{s.name}</li> })
        .collect_view();
    view! {
        <figure class="panel chart" data-testid=id>
            <figcaption id=title_id>{title}</figcaption>
            <svg
                viewBox=format!("0 0 {WIDTH} {HEIGHT}")
                role="img"
                aria-labelledby=labelled_by
                aria-describedby=described_by
            >
                <desc id=desc_id>{summary}</desc>
                <line class="axis" x1=LEFT y1=TOP x2=LEFT y2=HEIGHT - BOTTOM />
                <line class="axis" x1=LEFT y1=HEIGHT - BOTTOM x2=WIDTH y2=HEIGHT - BOTTOM />
                <text class="tick" x=LEFT - 6.0 y=TOP + 10.0 text-anchor="end">{unit.format(max)}</text>
                <text class="tick" x=LEFT - 6.0 y=HEIGHT - BOTTOM text-anchor="end">"0"</text>
                {drawing}
                {ticks}
            </svg>
            <ul class="legend">{legend}</ul>
            <ChartTable title labels series unit />
        </figure>
    }
}

fn bars(series: &[Series], points: usize, step: f64, max: i64) -> impl IntoView {
    let width = (step * 0.8).max(1.0);
    let mut rects = Vec::new();
    for i in 0..points {
        let mut stacked = 0;
        for s in series {
            let value = s.values.get(i).copied().flatten().unwrap_or(0);
            if value <= 0 {
                continue;
            }
            let top = y_of(stacked + value, max);
            let bottom = y_of(stacked, max);
            stacked += value;
            let x = LEFT + step * i as f64 + (step - width) / 2.0;
            rects.push(view! {
                <rect
                    class=s.class
                    x=format!("{x:.1}")
                    y=format!("{top:.1}")
                    width=format!("{width:.1}")
                    height=format!("{:.1}", (bottom - top).max(0.5))
                />
            });
        }
    }
    view! { <g aria-hidden="true">{rects}</g> }
}

fn lines(series: &[Series], points: usize, step: f64, max: i64) -> impl IntoView {
    let drawn = series
        .iter()
        .map(|s| {
            let coords: Vec<String> = (0..points)
                .filter_map(|i| {
                    let value = s.values.get(i).copied().flatten()?;
                    let x = LEFT + step * (i as f64 + 0.5);
                    Some(format!("{x:.1},{:.1}", y_of(value, max)))
                })
                .collect();
            let dots = coords
                .iter()
                .map(|c| {
                    let (x, y) = c.split_once(',').unwrap_or(("0", "0"));
                    view! { <circle class=s.class cx=x.to_string() cy=y.to_string() r="2" /> }
                })
                .collect_view();
            view! {
                <polyline class=format!("line {}", s.class) points=coords.join(" ") />
                {dots}
            }
        })
        .collect_view();
    view! { <g aria-hidden="true">{drawn}</g> }
}

/// The chart's figures as a table, collapsed until asked for.
#[component]
fn ChartTable(
    title: &'static str,
    labels: Vec<String>,
    series: Vec<Series>,
    unit: Unit,
) -> impl IntoView {
    let heads = series
        .iter()
        .map(|s| view! { <th scope="col">{s.name}</th> })
        .collect_view();
    let rows = labels
        .into_iter()
        .enumerate()
        .map(|(i, label)| {
            let cells = series
                .iter()
                .map(|s| {
                    let text = s
                        .values
                        .get(i)
                        .copied()
                        .flatten()
                        .map(|v| unit.format(v))
                        .unwrap_or_else(|| "—".into());
                    view! { <td>{text}</td> }
                })
                .collect_view();
            view! { <tr><th scope="row">{label}</th>{cells}</tr> }
        })
        .collect_view();
    view! {
        <details class="chart-table">
            <summary>"Show as table"</summary>
            <table>
                <caption class="visually-hidden">{title}</caption>
                <thead><tr><th scope="col">"Time (UTC)"</th>{heads}</tr></thead>
                <tbody>{rows}</tbody>
            </table>
        </details>
    }
}
