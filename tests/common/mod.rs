//! Helpers shared by the test binaries that drive the built `dsh` binary (`e2e_exec`,
//! `loop_torture`, the `faults_*` files); [`e2e`] has the replay provider, the sandbox and the
//! hang-guarded runner.
//!
//! Locating the binary: cargo does not build the binaries of other packages for an integration
//! test, so the first caller in a test process runs `$CARGO build -p dsh --bin dsh` into the
//! target directory the test executable lives in, unless `DSH_E2E_BIN` names an existing binary
//! (`cargo xtask ci` points it at the binary its workspace test build produced).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test harness")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub mod e2e;

/// Path of the `dsh` binary (built once per test process; see below).
pub fn dsh_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        // `cargo xtask ci` points this at the `dsh` binary its workspace test build produced
        // (built with the workspace's unified features); a `cargo build -p dsh` here would
        // resolve features differently and rebuild much of the dependency graph.
        if let Some(p) = std::env::var_os("DSH_E2E_BIN").map(PathBuf::from)
            && p.is_file()
        {
            return p;
        }
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
        let target_dir = profile_dir.parent().unwrap();
        let profile = match profile_dir.file_name().and_then(|s| s.to_str()).unwrap() {
            "debug" => "dev".to_owned(),
            other => other.to_owned(),
        };
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "dsh", "--bin", "dsh", "--profile"])
            .arg(&profile)
            .arg("--target-dir")
            .arg(target_dir)
            .arg("--manifest-path")
            .arg(&manifest)
            .status()
            .expect("running cargo build -p dsh");
        assert!(status.success(), "cargo build -p dsh failed: {status}");
        let bin = profile_dir.join("dsh");
        assert!(bin.is_file(), "{} missing after the build", bin.display());
        bin
    })
}
