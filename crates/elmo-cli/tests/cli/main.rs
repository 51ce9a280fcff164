//! End-to-end tests of the `elmo` binary, in one test program (one link): `embed`, the training
//! commands, and the task commands.

mod common;
mod embed;
mod task;
mod train;
