//! Progress bars (indicatif) shared by the commands.

use indicatif::{ProgressBar, ProgressStyle};

/// A bar of `total` units with an indicatif `template`, or a hidden one when `quiet`.
pub fn bar(total: u64, quiet: bool, template: &str) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    bar.set_style(ProgressStyle::with_template(template).expect("valid progress template"));
    bar
}
