//! A small SVG plotter for the lab: offset (log scale, |ns|) and frequency (linear, ppb) over
//! time, one line per host. Hand-written to keep the lab free of heavy dependencies.

use std::fmt::Write;

/// One host's samples: (t seconds, offset ns, frequency ppb).
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64, f64)>,
}

const W: f64 = 900.0;
const PANEL_H: f64 = 260.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const GAP: f64 = 60.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Renders both panels.
pub fn render(title: &str, series: &[Series]) -> String {
    let t_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(1.0f64, f64::max);
    let mut svg = String::new();
    let h = TOP + 2.0 * PANEL_H + GAP + 50.0;
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        W / 2.0,
        esc(title)
    );
    // Panel 1: |offset| in ns, log10 from 1 ns to the largest seen.
    let max_off = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1.abs()))
        .fold(10.0f64, f64::max);
    let decades = max_off.log10().ceil().max(1.0);
    let y0 = TOP;
    panel(&mut svg, y0, "|offset from master| (ns, log)", t_max);
    for d in 0..=decades as i32 {
        let y = y0 + PANEL_H - PANEL_H * d as f64 / decades;
        gridline(&mut svg, y, &format!("1e{d}"));
    }
    lines(&mut svg, series, t_max, y0, |p| {
        (p.1.abs().max(1.0).log10() / decades).min(1.0)
    });
    // Panel 2: frequency in ppb, linear.
    let (fmin, fmax) = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.2))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
    let (fmin, fmax) = if fmin.is_finite() && fmax > fmin {
        (fmin, fmax)
    } else {
        (-1.0, 1.0)
    };
    let y1 = TOP + PANEL_H + GAP;
    panel(&mut svg, y1, "frequency adjustment (ppb)", t_max);
    for k in 0..=4 {
        let v = fmin + (fmax - fmin) * k as f64 / 4.0;
        let y = y1 + PANEL_H - PANEL_H * k as f64 / 4.0;
        gridline(&mut svg, y, &format!("{v:.0}"));
    }
    lines(&mut svg, series, t_max, y1, |p| {
        (p.2 - fmin) / (fmax - fmin)
    });
    // Legend and time axis.
    for (i, s) in series.iter().enumerate() {
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" fill="{}">{}</text>"#,
            LEFT + 10.0 + 120.0 * i as f64,
            h - 12.0,
            COLORS[i % COLORS.len()],
            esc(&s.name)
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="end">time (s), 0 … {t_max:.0}</text>"#,
        W - RIGHT,
        h - 12.0
    );
    svg.push_str("</svg>\n");
    svg
}

/// A horizontal grid line at `y` with its label on the left.
fn gridline(svg: &mut String, y: f64, label: &str) {
    let _ = writeln!(
        svg,
        r##"<line x1="{LEFT}" x2="{}" y1="{y}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{label}</text>"##,
        W - RIGHT,
        LEFT - 6.0,
        y + 4.0
    );
}

/// One line per series in the panel at `top`; `level` maps a sample to 0 (bottom) … 1 (top).
fn lines(
    svg: &mut String,
    series: &[Series],
    t_max: f64,
    top: f64,
    level: impl Fn(&(f64, f64, f64)) -> f64,
) {
    for (i, s) in series.iter().enumerate() {
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|p| (x(p.0, t_max), top + PANEL_H - PANEL_H * level(p)))
            .collect();
        line(svg, &pts, COLORS[i % COLORS.len()]);
    }
}

fn x(t: f64, t_max: f64) -> f64 {
    LEFT + (W - LEFT - RIGHT) * (t / t_max).clamp(0.0, 1.0)
}

fn panel(svg: &mut String, y: f64, label: &str, t_max: f64) {
    let _ = writeln!(
        svg,
        r##"<rect x="{LEFT}" y="{y}" width="{}" height="{PANEL_H}" fill="none" stroke="#888"/><text x="{LEFT}" y="{}">{}</text>"##,
        W - LEFT - RIGHT,
        y - 6.0,
        esc(label)
    );
    for k in 0..=5 {
        let t = t_max * k as f64 / 5.0;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{t:.0}</text>"#,
            x(t, t_max),
            y + PANEL_H + 14.0
        );
    }
}

fn line(svg: &mut String, pts: &[(f64, f64)], color: &str) {
    if pts.is_empty() {
        return;
    }
    let mut d = String::new();
    for (i, (px, py)) in pts.iter().enumerate() {
        let _ = write!(d, "{}{px:.1},{py:.1}", if i == 0 { "M" } else { " L" });
    }
    let _ = writeln!(
        svg,
        r#"<path d="{d}" fill="none" stroke="{color}" stroke-width="1.3"/>"#
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_well_formed_svg_with_every_series() {
        let s = vec![
            Series {
                name: "host1 <slave>".into(),
                points: vec![
                    (0.0, 1e6, 0.0),
                    (10.0, -50.0, 12_000.0),
                    (20.0, 3.0, 11_990.0),
                ],
            },
            Series {
                name: "host0".into(),
                points: vec![],
            },
        ];
        let svg = render("lab", &s);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("host1 &lt;slave&gt;"));
        assert_eq!(
            svg.matches("<path").count(),
            2,
            "two lines for the one series with points"
        );
        assert!(!svg.contains("NaN"));
    }
}
