//! Cross-crate and end-to-end tests of the dsh workspace. The library is empty; each test
//! binary under this folder names the plugin crates it links.
