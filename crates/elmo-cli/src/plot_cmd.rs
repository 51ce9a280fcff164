//! `elmo plot`: training and validation perplexity curves of a run, as SVG.

use std::path::PathBuf;

use anyhow::Result;
use elmo_train::checkpoint::RunDirectory;
use elmo_train::metrics::read_metrics;
use elmo_train::plot::plot_curves;

/// Arguments of `elmo plot`.
#[derive(Debug, clap::Args)]
pub struct PlotArgs {
    /// A training run directory.
    #[arg(long, value_name = "RUN_DIR")]
    pub model: PathBuf,
    /// Output SVG (default: RUN_DIR/curves.svg).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// Runs `elmo plot`.
pub fn run(args: &PlotArgs) -> Result<()> {
    let run = RunDirectory::new(&args.model);
    let out = args.out.clone().unwrap_or_else(|| run.curves_file());
    plot_curves(&read_metrics(run.metrics_file())?, &out)?;
    eprintln!("wrote {}", out.display());
    Ok(())
}
