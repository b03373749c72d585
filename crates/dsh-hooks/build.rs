//! Marks the tests that read the upstream corpus (`shared/conformance/upstream-sessions`) as
//! ignored when it is absent and `CI` is unset; see `dsh-shared-corpus`.

fn main() {
    dsh_shared_corpus::build::emit(&["conformance/upstream-sessions"]);
}
