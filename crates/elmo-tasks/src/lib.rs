//! elmo-tasks
