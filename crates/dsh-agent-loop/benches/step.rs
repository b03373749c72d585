//! Placeholder: loop overhead benchmark (written later).
fn main() {}
