//! Criterion benchmarks of dsh-session (filled in below).
fn main() {}
