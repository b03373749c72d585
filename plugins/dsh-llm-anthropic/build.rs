//! Marks the tests that read the upstream corpus (`shared/fixtures/wire`) as ignored when it is absent
//! and `CI` is unset; see `dsh-shared-corpus`.

fn main() {
    dsh_shared_corpus::build::emit(&["fixtures/wire"]);
}
