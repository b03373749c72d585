//! Unit tests of dsh-session (one module per rule family).
