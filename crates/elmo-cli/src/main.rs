//! The `elmo` command line: ELMo embeddings from pretrained bilm-tf / AllenNLP weights.

mod backend;
mod embed;
mod hdf5_output;
mod input;
mod model_source;

use clap::{Parser, Subcommand};

/// ELMo (deep contextualized word representations) on burn.
#[derive(Debug, Parser)]
#[command(
    name = "elmo",
    version,
    about,
    after_help = "Example: elmo embed --options options.json --weights weights.hdf5 input.txt output.hdf5"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write ELMo vectors for every line of a text file (AllenNLP `elmo` command layout).
    Embed(embed::EmbedArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Embed(args) => embed::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
