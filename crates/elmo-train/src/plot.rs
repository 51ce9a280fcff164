//! Training and validation perplexity curves of a run, drawn as SVG with `plotters`.

use std::path::Path;

use plotters::prelude::*;

use crate::error::{Result, TrainError};
use crate::metrics::MetricsRecord;

/// A curve: label, points (step, perplexity), colour.
type Series<'a> = (&'a str, &'a [(u64, f64)], RGBColor);

/// Draws the perplexity curves of `records` (log scale) into an SVG file.
pub fn plot_curves(records: &[MetricsRecord], path: &Path) -> Result<()> {
    let plot_error = |e: String| TrainError::Plot {
        path: path.to_path_buf(),
        message: e,
    };
    let mut train_f = Vec::new();
    let mut train_b = Vec::new();
    let mut valid = Vec::new();
    let mut valid_mean = Vec::new();
    for record in records {
        match *record {
            MetricsRecord::Train {
                step,
                forward_perplexity,
                backward_perplexity,
                ..
            } => {
                train_f.push((step, forward_perplexity));
                train_b.push((step, backward_perplexity));
            }
            MetricsRecord::Valid {
                step,
                perplexity,
                averaged_steps,
                ..
            } => match averaged_steps {
                None => valid.push((step, perplexity)),
                Some(_) => valid_mean.push((step, perplexity)),
            },
        }
    }
    let all = train_f
        .iter()
        .chain(&train_b)
        .chain(&valid)
        .chain(&valid_mean);
    let finite: Vec<(u64, f64)> = all
        .copied()
        .filter(|(_, p)| p.is_finite() && *p > 0.0)
        .collect();
    if finite.is_empty() {
        return Err(plot_error("the metrics log has no perplexity yet".into()));
    }
    let max_step = finite.iter().map(|p| p.0).max().unwrap_or(1).max(1);
    let min_ppl = finite.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let max_ppl = finite.iter().map(|p| p.1).fold(0.0, f64::max);

    let root = SVGBackend::new(path, (960, 540)).into_drawing_area();
    let draw = || -> std::result::Result<(), Box<dyn std::error::Error + '_>> {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("biLM perplexity", ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0u64..max_step, (min_ppl * 0.9..max_ppl * 1.1).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("step")
            .y_desc("perplexity")
            .draw()?;
        let series: [Series; 4] = [
            ("train forward", &train_f, BLUE),
            ("train backward", &train_b, GREEN),
            ("valid (mean of directions)", &valid, RED),
            ("valid, weight average", &valid_mean, MAGENTA),
        ];
        for (label, points, color) in series {
            if points.is_empty() {
                continue;
            }
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                ))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| plot_error(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(step: u64, perplexity: f64, averaged_steps: Option<u64>) -> MetricsRecord {
        MetricsRecord::Valid {
            step,
            forward_perplexity: perplexity,
            backward_perplexity: perplexity,
            perplexity,
            averaged_steps,
        }
    }

    #[test]
    fn the_weight_average_gets_its_own_curve() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("curves.svg");
        let trained = [valid(1, 300.0, None), valid(2, 250.0, None)];
        plot_curves(&trained, &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("valid (mean of directions)"));
        assert!(!svg.contains("weight average"));
        let averaged = [trained[0].clone(), valid(3, 220.0, Some(1))];
        plot_curves(&averaged, &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("valid, weight average"), "{svg}");
    }
}
