//! Integration tests of the Anthropic Messages adapter through real HTTP against the replay
//! server (`dsh-test-support`, Anthropic mode): the shared wire fixtures, recorded stream
//! shapes, HTTP failures, request mapping and replay, and the plugin's boot.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

mod common;
mod plugin;
mod requests;
mod shapes;
mod wire;
