//! Integration tests of the DeepSeek adapter through real HTTP against the replay server
//! (`dsh-test-support`), plus in-process parser cases. One test binary, several modules.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap (COMMON.md)

mod common;
mod faults;
mod fixtures;
mod issue13;
mod parser;
mod plugin;
mod requests;
mod trial;
