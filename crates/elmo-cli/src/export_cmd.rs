//! `elmo export`: a trained run to bilm-tf / AllenNLP's `options.json` + `weights.hdf5`.

use std::path::PathBuf;

use anyhow::Result;
use burn::tensor::Device;
use elmo_train::TrainedRun;

/// Arguments of `elmo export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// A training run directory (its newest checkpoint is exported).
    #[arg(long, value_name = "RUN_DIR")]
    pub model: PathBuf,
    /// Output directory for `options.json` and `weights.hdf5`.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// Runs `elmo export`.
pub fn run(args: &ExportArgs) -> Result<()> {
    let run = TrainedRun::load(&args.model, &Device::flex())?;
    elmo_model::export::export_bilm(&run.model.bilm, &run.config.model, &args.out)?;
    eprintln!(
        "exported step {} of {} to {}/options.json and weights.hdf5",
        run.step,
        args.model.display(),
        args.out.display()
    );
    Ok(())
}
