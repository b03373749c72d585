//! dsh-shared-corpus: honest skips for the tests that read the upstream reference corpus.
//!
//! The corpus (upstream session logs, wire fixtures) is data the repository does not ship: it
//! lives in a `shared/` folder beside the repository (or wherever `DSH_SHARED_DIR` points). A
//! test that needs it must be *reported as skipped* when it is absent — never return early and
//! count as passed — and must *fail* in CI (`CI` set), where its absence is a setup error.
//!
//! The mechanism has two halves:
//!
//! * **Build time** — the crate's `build.rs` calls [`build::emit`] with the corpus
//!   sub-folders its tests need. It prints `cargo::rustc-cfg=shared_corpus` when every one of
//!   them exists, or when `CI` is set (so the tests run and fail loudly), plus the matching
//!   `rustc-check-cfg` and `rerun-if` lines.
//! * **Test time** — each such test carries
//!   `#[cfg_attr(not(shared_corpus), ignore = "needs the shared corpus …")]`, and
//!   reads its data through [`require`], which panics with the searched locations when the
//!   folder is missing.
//!
//! Adding the mechanism to a crate is: `dsh-shared-corpus` as a build- and dev-dependency, a
//! three-line `build.rs` (`dsh_shared_corpus::build::emit(&["conformance/upstream-sessions"]);`),
//! the `cfg_attr` line on each test, and [`require`] instead of a hand-written lookup.
//!
//! Location rule (build and test time alike): `$DSH_SHARED_DIR` when that variable is set and
//! non-empty (even if it does not exist — that is how the skip is tested:
//! `DSH_SHARED_DIR=/nonexistent cargo nextest run -p dsh-session`); otherwise the first
//! `shared/` folder holding the requested sub-folder found walking up from the crate's
//! manifest directory (the repository's parent in the project's layout).

use std::path::{Path, PathBuf};

/// The environment variable that overrides where the `shared/` folder is (an absolute path to
/// the folder itself, e.g. `/work/shared`).
pub const SHARED_DIR_ENV: &str = "DSH_SHARED_DIR";

/// The cfg name [`build::emit`] sets: `#[cfg_attr(not(shared_corpus), ignore = "…")]`.
pub const CFG: &str = "shared_corpus";

/// Where `rel` (a path relative to `shared/`, e.g. `"conformance/upstream-sessions"`) is, by
/// the location rule in the crate docs, starting from `manifest_dir` (pass
/// `env!("CARGO_MANIFEST_DIR")`). `None` when it is not a directory there.
#[must_use]
pub fn locate(manifest_dir: &str, rel: &str) -> Option<PathBuf> {
    locate_with(
        std::env::var_os(SHARED_DIR_ENV).map(PathBuf::from),
        manifest_dir,
        rel,
    )
}

fn locate_with(over: Option<PathBuf>, manifest_dir: &str, rel: &str) -> Option<PathBuf> {
    if let Some(dir) = over.filter(|d| !d.as_os_str().is_empty()) {
        let candidate = dir.join(rel);
        return candidate.is_dir().then_some(candidate);
    }
    Path::new(manifest_dir)
        .ancestors()
        .map(|a| a.join("shared").join(rel))
        .find(|c| c.is_dir())
}

/// The directory `rel` of the corpus, for a test that needs it.
///
/// # Panics
/// When it cannot be found (by [`locate`]), with a message naming the sub-folder, the override
/// variable and the search start. This is deliberate: a test reaching this point without the
/// corpus is a failure (it only runs without the corpus when `CI` is set), never a silent pass.
#[must_use]
pub fn require(manifest_dir: &str, rel: &str) -> PathBuf {
    match locate(manifest_dir, rel) {
        Some(dir) => dir,
        None => panic!(
            "the upstream corpus folder `shared/{rel}` is missing: looked in ${SHARED_DIR_ENV} \
             ({}) or, unset, in every `shared/` above {manifest_dir}. Put the corpus beside the \
             repository (CI must have it), or unset CI to have these tests reported as skipped",
            std::env::var(SHARED_DIR_ENV).unwrap_or_else(|_| "unset".to_owned())
        ),
    }
}

/// The build-script half (call from `build.rs`).
pub mod build {
    use super::{CFG, SHARED_DIR_ENV, locate};

    /// Prints the cargo directives for a crate whose tests need the corpus folders `needs`
    /// (paths relative to `shared/`): always `rustc-check-cfg=cfg(shared_corpus)` and
    /// `rerun-if-env-changed` for `CI` and [`SHARED_DIR_ENV`]; `rustc-cfg=shared_corpus` when
    /// every folder is found or `CI` is set (non-empty); `rerun-if-changed` on each found
    /// folder, else on `build.rs` (cargo cannot watch for a folder appearing: after adding the
    /// corpus, touch `build.rs` or set the variable).
    pub fn emit(needs: &[&str]) {
        let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
        let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
        let mut lines = vec![
            format!("cargo::rustc-check-cfg=cfg({CFG})"),
            "cargo::rerun-if-env-changed=CI".to_owned(),
            format!("cargo::rerun-if-env-changed={SHARED_DIR_ENV}"),
        ];
        let found: Vec<_> = needs.iter().map(|r| locate(&manifest_dir, r)).collect();
        let all = found.iter().all(Option::is_some);
        for dir in found.iter().flatten() {
            lines.push(format!("cargo::rerun-if-changed={}", dir.display()));
        }
        if !all {
            lines.push("cargo::rerun-if-changed=build.rs".to_owned());
        }
        if all || ci {
            lines.push(format!("cargo::rustc-cfg={CFG}"));
        }
        print(&lines);
    }

    #[allow(clippy::print_stdout)]
    fn print(lines: &[String]) {
        for l in lines {
            println!("{l}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::locate_with;
    use std::path::PathBuf;

    #[test]
    fn an_override_is_used_even_when_it_does_not_exist() {
        let here = env!("CARGO_MANIFEST_DIR");
        assert_eq!(
            locate_with(Some(PathBuf::from("/nonexistent")), here, "src"),
            None
        );
        let crate_parent = PathBuf::from(here);
        assert_eq!(
            locate_with(Some(crate_parent.clone()), here, "src"),
            Some(crate_parent.join("src"))
        );
    }

    #[test]
    fn without_an_override_the_first_shared_folder_above_is_found() {
        let tmp = std::env::temp_dir().join(format!("dsh-shared-corpus-{}", std::process::id()));
        let deep = tmp.join("repo").join("crates").join("c");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::create_dir_all(tmp.join("shared").join("conformance")).unwrap();
        let found = locate_with(None, &deep.display().to_string(), "conformance");
        let missing = locate_with(None, &deep.display().to_string(), "fixtures");
        let _ = std::fs::remove_dir_all(&tmp);
        assert_eq!(found, Some(tmp.join("shared").join("conformance")));
        // `fixtures` exists in no `shared/` above this temporary tree (the walk reaches `/`).
        assert_eq!(missing, None);
    }
}
