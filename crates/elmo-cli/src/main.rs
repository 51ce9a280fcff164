//! The `elmo` command line: ELMo embeddings from pretrained bilm-tf / AllenNLP weights, and
//! training, evaluation and export of new biLMs (the commands live in the `elmo_cli` library).

fn main() -> std::process::ExitCode {
    elmo_cli::main()
}
