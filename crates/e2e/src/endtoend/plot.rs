//! Log-log line plots as SVG, for docs/benchmarks.md: no plotting dependency, a few dozen
//! lines of markup.

use std::fmt::Write;

/// One line of a plot.
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points (x, y), both positive.
    pub points: Vec<(f64, f64)>,
    /// Stroke colour.
    pub colour: &'static str,
    /// Dashed (for baselines and targets).
    pub dashed: bool,
}

const W: f64 = 640.0;
const H: f64 = 400.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

fn decades(lo: f64, hi: f64) -> (f64, f64) {
    (lo.log10().floor(), hi.log10().ceil().max(lo.log10().floor() + 1.0))
}

/// A log-log plot of `series`.
pub fn svg(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let all: Vec<(f64, f64)> =
        series.iter().flat_map(|s| s.points.iter().copied()).filter(|(x, y)| *x > 0.0 && *y > 0.0).collect();
    let (x0, x1) = decades(
        all.iter().map(|p| p.0).fold(f64::MAX, f64::min),
        all.iter().map(|p| p.0).fold(f64::MIN_POSITIVE, f64::max),
    );
    let (y0, y1) = decades(
        all.iter().map(|p| p.1).fold(f64::MAX, f64::min),
        all.iter().map(|p| p.1).fold(f64::MIN_POSITIVE, f64::max),
    );
    let px = |x: f64| LEFT + (x.log10() - x0) / (x1 - x0) * (W - LEFT - RIGHT);
    let py = |y: f64| H - BOTTOM - (y.log10() - y0) / (y1 - y0) * (H - TOP - BOTTOM);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{title}</text>"#,
        (W - RIGHT + LEFT) / 2.0
    );
    for d in x0 as i32..=x1 as i32 {
        let x = px(10f64.powi(d));
        let _ = writeln!(s, r##"<line x1="{x}" y1="{TOP}" x2="{x}" y2="{}" stroke="#ddd"/>"##, H - BOTTOM);
        let _ = writeln!(s, r#"<text x="{x}" y="{}" text-anchor="middle">{}</text>"#, H - BOTTOM + 16.0, label(d));
    }
    for d in y0 as i32..=y1 as i32 {
        let y = py(10f64.powi(d));
        let _ = writeln!(s, r##"<line x1="{LEFT}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/>"##, W - RIGHT);
        let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#, LEFT - 6.0, y + 4.0, label(d));
    }
    let _ =
        writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">{x_label}</text>"#, (W - RIGHT + LEFT) / 2.0, H - 12.0);
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{y_label}</text>"#,
        (H - BOTTOM + TOP) / 2.0,
        (H - BOTTOM + TOP) / 2.0
    );
    for (i, line) in series.iter().enumerate() {
        let mut pts: Vec<(f64, f64)> = line.points.iter().copied().filter(|(x, y)| *x > 0.0 && *y > 0.0).collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = pts.iter().map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y))).collect();
        let dash = if line.dashed { r#" stroke-dasharray="6 4""# } else { "" };
        let colour = line.colour;
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>"#,
            path.join(" ")
        );
        for (x, y) in &pts {
            let _ = writeln!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"/>"#, px(*x), py(*y));
        }
        let ly = TOP + 10.0 + i as f64 * 20.0;
        let lx = W - RIGHT + 12.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
            lx + 24.0,
            lx + 30.0,
            ly + 4.0,
            line.name
        );
    }
    s.push_str("</svg>\n");
    s
}

fn label(decade: i32) -> String {
    let v = 10f64.powi(decade);
    if v >= 1000.0 { format!("{}k", v / 1000.0) } else { format!("{v}") }
}
