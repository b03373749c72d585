//! dsh-token-meter: how many tokens a model request built from a session log will cost, without
//! a tokenizer.
//!
//! - [`estimate`]: upstream's heuristic (`ceil(len/4) + 4` per block, `+4` per message, where
//!   `len` counts UTF-16 code units as JavaScript's `String.length` does).
//! - [`TokenMeter`]: an incremental measurement of one session — system prompt and tool schemas
//!   of the latest `request/header`, every current surface node priced once, and the provider's
//!   reported usage as the anchor when it applies. Each [`TokenMeter::measure`] reads only the
//!   events appended since the previous call, so its cost per step does not grow with the log
//!   (a surface replace re-indexes the node list once).
//!
//! See docs/upstream/compaction.md (Token meter).

pub mod estimate;
mod meter;

pub use estimate::{
    estimate_content, estimate_header, estimate_message, estimate_system, estimate_text,
    estimate_tools, js_len,
};
pub use meter::{Baseline, NodeCost, TokenMeasurement, TokenMeter};
