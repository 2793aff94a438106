//! Throughput per path over time, anomalies (red), recoveries (green) and transitions
//! (orange) as vertical lines, with axis labels, caption and legend in PNG and SVG alike.

use std::collections::BTreeMap;
use std::path::Path;

use ccl_monitor::export::{JsonLine, LineKind};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::Error;

const SIZE: (u32, u32) = (1200, 600);

/// Line colours for paths, none of them the markers' red, green or orange.
const PATH_COLORS: [RGBColor; 6] = [
    RGBColor(0, 90, 200),
    RGBColor(145, 30, 180),
    RGBColor(0, 150, 150),
    RGBColor(20, 20, 20),
    RGBColor(200, 0, 170),
    RGBColor(120, 90, 40),
];

/// What is drawn, in milliseconds and GB/s.
#[derive(Debug, Default, PartialEq)]
pub struct PlotData {
    /// Throughput per key of the drawn scope (paths by default), by key id.
    pub paths: BTreeMap<u64, Vec<(f64, f64)>>,
    pub anomalies: Vec<f64>,
    pub recoveries: Vec<f64>,
    pub transitions: Vec<f64>,
    /// The scope the series are of (`path` when empty).
    pub scope: String,
}

/// Which part of a file is drawn.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// The keys drawn (`path`, `nic`, `peer`), and whose alerts and transitions are marked;
    /// `None`: paths, with every transition marked.
    pub scope: Option<String>,
    /// Samples averaged over buckets of this many milliseconds (0: drawn as they are). The
    /// windows of a busy key can be a fraction of a millisecond long, and a timeline of
    /// seconds drawn from them is mostly noise.
    pub bucket_ms: f64,
    /// The time span drawn, in milliseconds.
    pub from_ms: f64,
    pub to_ms: f64,
}

impl Default for View {
    fn default() -> Self {
        View {
            scope: None,
            bucket_ms: 0.0,
            from_ms: f64::NEG_INFINITY,
            to_ms: f64::INFINITY,
        }
    }
}

impl PlotData {
    /// The scope the series are of, as the caption and legend name it.
    fn scope_name(&self) -> &str {
        if self.scope.is_empty() {
            "path"
        } else {
            &self.scope
        }
    }

    pub fn from_lines(lines: &[JsonLine]) -> Self {
        Self::from_lines_in(lines, &View::default())
    }

    /// What `view` shows of `lines`.
    pub fn from_lines_in(lines: &[JsonLine], view: &View) -> Self {
        let scope = view.scope.as_deref().unwrap_or("path");
        let mut d = PlotData {
            scope: scope.to_owned(),
            ..PlotData::default()
        };
        for l in lines {
            let ms = l.ts_ns as f64 / 1e6;
            if ms < view.from_ms || ms > view.to_ms {
                continue;
            }
            let mine = l.scope == scope;
            match l.kind {
                Some(LineKind::Sample) if mine => {
                    let gbps = l.tput_bps.unwrap_or(0.0) / 1e9;
                    d.paths.entry(l.id).or_default().push((ms, gbps));
                }
                Some(LineKind::Anomaly) if mine => d.anomalies.push(ms),
                Some(LineKind::Recovered) if mine => d.recoveries.push(ms),
                Some(LineKind::Transition) if mine || view.scope.is_none() => {
                    d.transitions.push(ms)
                }
                _ => {}
            }
        }
        if view.bucket_ms > 0.0 {
            for pts in d.paths.values_mut() {
                *pts = bucketed(pts, view.bucket_ms);
            }
        }
        d
    }

    /// Time and throughput ranges, never empty.
    fn ranges(&self) -> (std::ops::Range<f64>, std::ops::Range<f64>) {
        let times = self.paths.values().flatten().map(|p| p.0);
        let marks = self
            .anomalies
            .iter()
            .chain(&self.recoveries)
            .chain(&self.transitions);
        let all: Vec<f64> = times.chain(marks.copied()).collect();
        let t0 = all.iter().copied().fold(f64::INFINITY, f64::min);
        let t1 = all.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let top = self
            .paths
            .values()
            .flatten()
            .map(|p| p.1)
            .fold(0.0, f64::max);
        // Nothing to draw leaves t0 infinite: an unbounded axis never finishes its mesh.
        let (t0, t1) = if t0 < t1 {
            (t0, t1)
        } else if t0.is_finite() {
            (0.0, t0.max(0.0) + 1.0)
        } else {
            (0.0, 1.0)
        };
        (t0..t1, 0.0..if top > 0.0 { top * 1.1 } else { 1.0 })
    }
}

/// The mean of the points in each `ms`-long bucket, at the bucket's middle.
fn bucketed(pts: &[(f64, f64)], ms: f64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    let mut cur: Option<(f64, f64, u32)> = None;
    for &(t, v) in pts {
        let b = (t / ms).floor();
        match cur {
            Some((cb, sum, n)) if cb == b => cur = Some((cb, sum + v, n + 1)),
            _ => {
                if let Some((cb, sum, n)) = cur {
                    out.push(((cb + 0.5) * ms, sum / f64::from(n)));
                }
                cur = Some((b, v, 1));
            }
        }
    }
    if let Some((cb, sum, n)) = cur {
        out.push(((cb + 0.5) * ms, sum / f64::from(n)));
    }
    out
}

fn draw_err(e: impl std::fmt::Display) -> Error {
    Error::Plot(e.to_string())
}

/// Writes the plot of `lines` to `out`, PNG or SVG by its extension.
pub fn plot(lines: &[JsonLine], out: &Path) -> Result<(), Error> {
    plot_view(lines, &View::default(), out)
}

/// [`plot`] of what `view` shows.
pub fn plot_view(lines: &[JsonLine], view: &View, out: &Path) -> Result<(), Error> {
    ccl_plot::use_embedded_font();
    let data = PlotData::from_lines_in(lines, view);
    match out.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("svg") => {
            draw(SVGBackend::new(out, SIZE).into_drawing_area(), &data)
        }
        Some(e) if e.eq_ignore_ascii_case("png") => write_png(&data, out),
        _ => Err(Error::Format(out.to_owned())),
    }
}

fn write_png(data: &PlotData, out: &Path) -> Result<(), Error> {
    let (w, h) = SIZE;
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    draw(
        BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area(),
        data,
    )?;
    Ok(ccl_plot::write_png(&rgb, SIZE, out)?)
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, d: &PlotData) -> Result<(), Error>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(draw_err)?;
    chart(&root, d, &format!("throughput per {}", d.scope_name()))?;
    root.present().map_err(draw_err)
}

/// Writes one panel per set of lines, side by side (the same run's analyses with different
/// windows, say), each captioned with its label.
pub fn plot_panels(sets: &[(String, Vec<JsonLine>)], view: &View, out: &Path) -> Result<(), Error> {
    ccl_plot::use_embedded_font();
    let data: Vec<(String, PlotData)> = sets
        .iter()
        .map(|(l, lines)| (l.clone(), PlotData::from_lines_in(lines, view)))
        .collect();
    let size = (PANEL_W * data.len().max(1) as u32, SIZE.1);
    match out.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("svg") => {
            panels(SVGBackend::new(out, size).into_drawing_area(), &data)
        }
        Some(e) if e.eq_ignore_ascii_case("png") => {
            let mut rgb = vec![0u8; size.0 as usize * size.1 as usize * 3];
            panels(
                BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area(),
                &data,
            )?;
            Ok(ccl_plot::write_png(&rgb, size, out)?)
        }
        _ => Err(Error::Format(out.to_owned())),
    }
}

/// Width of one panel of [`plot_panels`].
const PANEL_W: u32 = 600;

fn panels<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    data: &[(String, PlotData)],
) -> Result<(), Error>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(draw_err)?;
    let areas = root.split_evenly((1, data.len().max(1)));
    for (area, (label, d)) in areas.iter().zip(data) {
        chart(area, d, label)?;
    }
    root.present().map_err(draw_err)
}

fn chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    d: &PlotData,
    caption: &str,
) -> Result<(), Error>
where
    DB::ErrorType: 'static,
{
    let (xs, ys) = d.ranges();
    let ymax = ys.end;
    let mut builder = ChartBuilder::on(root);
    builder
        .margin(20)
        .caption(caption, ("sans-serif", 22))
        .x_label_area_size(40)
        .y_label_area_size(60);
    let mut chart = builder.build_cartesian_2d(xs, ys).map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc("time (ms)")
        .y_desc("GB/s")
        .draw()
        .map_err(draw_err)?;
    let scope = d.scope_name();
    for (i, (path, pts)) in d.paths.iter().enumerate() {
        let color = PATH_COLORS[i % PATH_COLORS.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(draw_err)?
            .label(format!("{scope} {path}"))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(3)));
    }
    let marks = [
        (&d.anomalies, RED, "anomaly"),
        (&d.recoveries, GREEN, "recovery"),
        (&d.transitions, RGBColor(255, 140, 0), "transition"),
    ];
    for (times, color, what) in marks {
        let lines = times
            .iter()
            .map(|&t| PathElement::new([(t, 0.0), (t, ymax)], color.stroke_width(1)));
        let drawn = chart.draw_series(lines).map_err(draw_err)?;
        // The legend says what a vertical line means, for the kinds this plot has.
        if !times.is_empty() {
            drawn.label(what).legend(move |(x, y)| {
                PathElement::new([(x, y), (x + 20, y)], color.stroke_width(3))
            });
        }
    }
    if !d.paths.is_empty() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(draw_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn line(ms: u64, kind: LineKind, scope: &str, id: u64, gbps: f64) -> JsonLine {
        JsonLine {
            ts_ns: ms * 1_000_000,
            kind: Some(kind),
            scope: scope.to_owned(),
            id,
            tput_bps: Some(gbps * 1e9),
            ..JsonLine::default()
        }
    }

    #[test]
    fn a_view_picks_its_scope_span_and_buckets() {
        let lines = vec![
            line(1, LineKind::Sample, "nic", 1, 1.0),
            line(3, LineKind::Sample, "nic", 1, 3.0),
            line(12, LineKind::Sample, "nic", 1, 5.0),
            line(12, LineKind::Sample, "path", 0, 9.0),
            line(13, LineKind::Anomaly, "nic", 1, 0.1),
            line(14, LineKind::Anomaly, "path", 0, 0.1),
            line(15, LineKind::Transition, "path", 0, 0.0),
            line(16, LineKind::Transition, "nic", 1, 0.0),
            line(50, LineKind::Sample, "nic", 1, 7.0),
        ];
        let view = View {
            scope: Some("nic".into()),
            bucket_ms: 10.0,
            from_ms: 0.0,
            to_ms: 40.0,
        };
        let d = PlotData::from_lines_in(&lines, &view);
        assert_eq!(d.scope, "nic");
        assert_eq!(d.paths[&1], vec![(5.0, 2.0), (15.0, 5.0)]);
        assert_eq!(
            (d.anomalies.clone(), d.transitions.clone()),
            (vec![13.0], vec![16.0])
        );
        // The default view: paths, every transition.
        let d = PlotData::from_lines(&lines);
        assert_eq!(d.paths[&0], vec![(12.0, 9.0)]);
        assert_eq!(d.transitions, vec![15.0, 16.0]);
    }

    #[test]
    fn panels_write_png_and_svg() {
        let dir = tempfile::tempdir().unwrap();
        let lines = vec![
            line(1, LineKind::Sample, "nic", 0, 1.0),
            line(2, LineKind::Sample, "nic", 0, 2.0),
        ];
        // The second panel has nothing to draw (and must not hang doing so).
        let sets = vec![("a".to_owned(), lines), ("b".to_owned(), Vec::new())];
        let view = View {
            scope: Some("nic".into()),
            ..View::default()
        };
        for ext in ["png", "svg"] {
            let out = dir.path().join(format!("p.{ext}"));
            plot_panels(&sets, &view, &out).unwrap();
            assert!(std::fs::metadata(&out).unwrap().len() > 0);
        }
    }
}
