//! A Python that can import the ringlog package from the source tree: a
//! virtualenv under `target/tools/`, with the package's one dependency
//! (the `flatbuffers` runtime, from PyPI) installed. A machine without
//! `python3 -m venv` fails loudly, naming the package to install.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or_else(|| panic!("tests/ has a parent"))
        .to_path_buf()
}

fn run(command: &mut Command, what: &str) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A `python` command that imports `ringlog` from `protocol/python`, in
/// its own virtualenv `target/tools/python-venv-<label>` (one per test, so
/// tests running at once never install into the same one).
pub fn command(label: &str) -> Command {
    command_with(label, &[])
}

/// [`command`] with more packages from PyPI in its virtualenv (e.g.
/// `kafka-python==3.0.12`, pinned).
pub fn command_with(label: &str, packages: &[&str]) -> Command {
    let root = repo_root();
    let venv = root.join(format!("target/tools/python-venv-{label}"));
    let python = venv.join("bin/python");
    if !python.exists() {
        run(
            Command::new("python3").arg("-m").arg("venv").arg(&venv),
            "creating a virtualenv (Debian: apt-get install python3-venv)",
        );
    }
    run(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "flatbuffers==25.12.19",
            ])
            .args(packages),
        "installing the flatbuffers runtime and the packages asked for",
    );
    let mut command = Command::new(python);
    command.env("PYTHONPATH", root.join("protocol/python"));
    command
}
