//! The ratio against message size, one line per op, a grey line at 1 and a dashed one at the
//! 0.95 noise floor, with the axes' labels, the caption and the legend in PNG and SVG alike
//! (colours: [`OP_COLORS`] in the ops' alphabetical order).

use std::path::Path;

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

use crate::{size_name, Error, Ratios};

const SIZE: (u32, u32) = (1200, 700);

/// One colour per op (nine ops: nccl-tests' whole set).
pub const OP_COLORS: [(&str, RGBColor); 9] = [
    ("blue", RGBColor(0, 90, 200)),
    ("orange", RGBColor(230, 120, 0)),
    ("green", RGBColor(0, 150, 60)),
    ("red", RGBColor(200, 30, 30)),
    ("purple", RGBColor(130, 60, 180)),
    ("brown", RGBColor(120, 80, 40)),
    ("pink", RGBColor(220, 90, 170)),
    ("olive", RGBColor(120, 120, 0)),
    ("cyan", RGBColor(0, 160, 170)),
];

fn draw_err(e: impl std::fmt::Display) -> Error {
    Error::Plot(e.to_string())
}

/// Writes the plot of `r` to `out`, PNG or SVG by its extension.
pub fn plot(r: &Ratios, caption: &str, out: &Path) -> Result<(), Error> {
    ccl_plot::use_embedded_font();
    match out.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("svg") => {
            chart(SVGBackend::new(out, SIZE).into_drawing_area(), r, caption)
        }
        Some(e) if e.eq_ignore_ascii_case("png") => {
            let mut rgb = vec![0u8; SIZE.0 as usize * SIZE.1 as usize * 3];
            chart(
                BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area(),
                r,
                caption,
            )?;
            Ok(ccl_plot::write_png(&rgb, SIZE, out)?)
        }
        _ => Err(Error::Format(out.to_owned())),
    }
}

/// The chart: x is log2 of the size, y the ratio (0 to a bit over the highest).
fn chart<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    r: &Ratios,
    caption: &str,
) -> Result<(), Error>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(draw_err)?;
    let pts = |v: &[(u64, f64)]| -> Vec<(f64, f64)> {
        v.iter()
            .map(|&(s, x)| ((s.max(1) as f64).log2(), x))
            .collect()
    };
    let all: Vec<(f64, f64)> = r.values().flat_map(|v| pts(v)).collect();
    let x0 = all
        .iter()
        .map(|p| p.0)
        .fold(f64::INFINITY, f64::min)
        .min(3.0);
    let x1 = all.iter().map(|p| p.0).fold(0.0, f64::max).max(x0 + 1.0);
    let y1 = all.iter().map(|p| p.1).fold(1.2, f64::max) * 1.05;
    let mut chart = ChartBuilder::on(&root)
        .margin(20)
        .caption(caption, ("sans-serif", 22))
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, 0.0..y1)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc("message size")
        .y_desc("NCCL's time / libccl's (above 1: libccl faster)")
        .x_label_formatter(&|x| size_name(2f64.powf(x.round()) as u64))
        .draw()
        .map_err(draw_err)?;
    chart
        .draw_series(std::iter::once(PathElement::new(
            [(x0, 1.0), (x1, 1.0)],
            ShapeStyle::from(BLACK.mix(0.5)).stroke_width(2),
        )))
        .map_err(draw_err)?;
    // Dashed, so that the noise floor stands apart from the mesh's lines.
    chart
        .draw_series(std::iter::once(DashedPathElement::new(
            [(x0, 0.95), (x1, 0.95)],
            6,
            4,
            ShapeStyle::from(BLACK.mix(0.6)).stroke_width(1),
        )))
        .map_err(draw_err)?;
    for (i, (op, v)) in r.iter().enumerate() {
        let color = OP_COLORS[i % OP_COLORS.len()].1;
        chart
            .draw_series(LineSeries::new(pts(v), color.stroke_width(2)))
            .map_err(draw_err)?
            .label(op.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(3)));
    }
    if !r.is_empty() {
        chart
            .configure_series_labels()
            // Ratios sit around 1: the bottom right is where no line runs.
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(draw_err)?;
    }
    root.present().map_err(draw_err)
}
