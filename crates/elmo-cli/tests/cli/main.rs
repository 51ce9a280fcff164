//! End-to-end tests of the `elmo` binary, in one test program (one link): `embed` and `merge`,
//! `tokens`, the training commands, and the task commands.

mod common;
mod embed;
mod task;
mod tokens;
mod train;
