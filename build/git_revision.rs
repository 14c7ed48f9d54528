//! Build script of the broker and loadgen (both crates name this file as
//! `build` in their Cargo.toml): records the git revision they are built
//! from as `RINGLOG_GIT_REVISION`, with `-dirty` when the sources differ from
//! that commit. Reports, `--version` and the handshake carry it: a published
//! figure must name the code that produced it.
use std::path::Path;
use std::process::Command;

/// What the binaries are built from; results and docs do not count.
const SOURCES: [&str; 7] = [
    "Cargo.toml",
    "Cargo.lock",
    "broker",
    "protocol",
    "coordinator",
    "loadgen/src",
    "loadgen/Cargo.toml",
];

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg("..")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    Some(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

fn main() {
    let revision = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(hash) => {
            let mut status = vec!["status", "--porcelain", "--untracked-files=no", "--"];
            status.extend(SOURCES);
            match git(&status) {
                Some(changes) if changes.is_empty() => hash,
                _ => format!("{hash}-dirty"),
            }
        }
        None => "unknown".into(),
    };
    println!("cargo:rustc-env=RINGLOG_GIT_REVISION={revision}");
    // A path that does not exist would make cargo rerun this every build.
    let watched = [".git/HEAD", ".git/index", ".git/refs", ".git/packed-refs"]
        .into_iter()
        .chain(SOURCES);
    for path in watched {
        let path = Path::new("..").join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
