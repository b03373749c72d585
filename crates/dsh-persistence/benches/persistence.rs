//! Placeholder while this target is being written.
fn main() {}
