//! `dsh-landlock-run`: the Landlock helper the `dsh-sandbox-linux` runner execs (restricts
//! itself, then execs the command). Contract: `dsh_sandbox_linux::helper`.

fn main() -> std::process::ExitCode {
    dsh_sandbox_linux::helper::main()
}
