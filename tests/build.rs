//! Marks the tests that read the upstream corpus (`shared/conformance/upstream-sessions`) as
//! ignored when it is absent and `CI` is unset; see `dsh-shared-corpus`. Likewise cfg
//! `mcp_servers` for `e2e_mcp`: set when `DSH_MCP_SERVERS_DIR` names a folder (`.ci/run`
//! installs the real MCP servers there) or `CI` is set (then a missing install fails).

fn main() {
    dsh_shared_corpus::build::emit(&["conformance/upstream-sessions"]);
    println!("cargo::rustc-check-cfg=cfg(mcp_servers)");
    println!("cargo::rerun-if-env-changed=DSH_MCP_SERVERS_DIR");
    println!("cargo::rerun-if-env-changed=CI");
    let dir = std::env::var_os("DSH_MCP_SERVERS_DIR").filter(|d| !d.is_empty());
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
    if ci || dir.is_some_and(|d| std::path::Path::new(&d).is_dir()) {
        println!("cargo::rustc-cfg=mcp_servers");
    }
}
