//! The lab's SVG plot (plotters, SVG backend only): |offset| on a log scale — the TRUE offset
//! and the servo's estimate of it, per slave — and the frequency adjustment, over time.

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// One line: (t seconds, value).
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed (the servo's estimate), to tell it from the truth at a glance.
    pub dashed: bool,
}

const W: u32 = 960;
const H: u32 = 720;
const COLORS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x8c, 0x56, 0x4b),
];

/// Renders the two panels: `offsets` (absolute value, log scale from 1 ns) and `freqs` (ppb).
pub fn render(title: &str, offsets: &[Series], freqs: &[Series]) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let root = root.titled(title, ("sans-serif", 16)).map_err(err)?;
        let (top, bottom) = root.split_vertically(H * 11 / 20);
        let t_max = offsets
            .iter()
            .chain(freqs)
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .fold(1.0, f64::max);
        offset_panel(&top, offsets, t_max)?;
        freq_panel(&bottom, freqs, t_max)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

fn err(e: impl std::fmt::Display) -> String {
    format!("plot: {e}")
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

fn offset_panel(area: &Area<'_>, series: &[Series], t_max: f64) -> Result<(), String> {
    let top = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1.abs()))
        .fold(10.0f64, f64::max);
    let top = 10f64.powf(top.log10().ceil());
    let mut c = ChartBuilder::on(area)
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..t_max, (1.0..top).log_scale())
        .map_err(err)?;
    c.configure_mesh()
        .y_desc("|offset| (ns, log)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(err)?;
    for (i, s) in series.iter().enumerate() {
        // |offset| below 1 ns is drawn at 1 ns (the log axis' floor).
        let pts = s.points.iter().map(|&(t, v)| (t, v.abs().max(1.0)));
        draw(&mut c, s, pts, i)?;
    }
    legend(&mut c)
}

fn freq_panel(area: &Area<'_>, series: &[Series], t_max: f64) -> Result<(), String> {
    let (lo, hi) = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
    let (lo, hi) = if lo.is_finite() && hi > lo {
        (lo, hi)
    } else {
        (-1.0, 1.0)
    };
    let mut c = ChartBuilder::on(area)
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..t_max, lo..hi)
        .map_err(err)?;
    c.configure_mesh()
        .x_desc("time (s)")
        .y_desc("frequency adjustment (ppb)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(err)?;
    for (i, s) in series.iter().enumerate() {
        draw(&mut c, s, s.points.iter().copied(), i)?;
    }
    legend(&mut c)
}

type Chart<'a, 'b, Y> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, Y>>;

/// One series, solid or dashed, with its legend entry.
fn draw<Y, I>(c: &mut Chart<'_, '_, Y>, s: &Series, pts: I, i: usize) -> Result<(), String>
where
    Y: Ranged<ValueType = f64>,
    I: Iterator<Item = (f64, f64)> + Clone,
{
    let color = COLORS[i % COLORS.len()];
    let style = color.stroke_width(if s.dashed { 1 } else { 2 });
    let anno = if s.dashed {
        c.draw_series(DashedLineSeries::new(pts, 6, 4, style))
            .map_err(err)?
    } else {
        c.draw_series(LineSeries::new(pts, style)).map_err(err)?
    };
    anno.label(s.name.clone())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    Ok(())
}

fn legend<'a, 'b: 'a, Y>(c: &mut Chart<'a, 'b, Y>) -> Result<(), String>
where
    Y: Ranged<ValueType = f64>,
{
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(name: &str, dashed: bool, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            dashed,
        }
    }

    #[test]
    fn renders_both_offset_series_and_the_frequency_with_a_legend() {
        let offsets = vec![
            s(
                "host1 true <exact>",
                false,
                vec![(0.0, 1e6), (10.0, -50.0), (20.0, 0.0)],
            ),
            s("host1 servo estimate", true, vec![(0.0, 9e5), (20.0, 3.0)]),
        ];
        let freqs = vec![s("host1", false, vec![(0.0, 0.0), (20.0, 12_000.0)])];
        let svg = render("lab & co", &offsets, &freqs).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        for text in [
            "host1 true &lt;exact&gt;",
            "host1 servo estimate",
            "lab &amp; co",
            "frequency adjustment (ppb)",
            "|offset| (ns, log)",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        // Three data lines plus three legend swatches.
        assert!(svg.matches("<polyline").count() >= 3, "{svg}");
        assert!(!svg.contains("NaN"));
        // Empty input still renders axes.
        assert!(render("empty", &[], &[]).unwrap().contains("</svg>"));
    }
}
