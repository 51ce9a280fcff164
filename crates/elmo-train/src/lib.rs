//! elmo-train
