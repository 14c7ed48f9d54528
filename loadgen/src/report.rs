//! What a report records besides the figures: the machine and the build.

use serde::{Deserialize, Serialize};

/// Where and with what a benchmark ran.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Environment {
    /// Host name.
    pub hostname: String,
    /// Kernel release.
    pub kernel: String,
    /// Available cores.
    pub cores: usize,
    /// CPU model.
    pub cpu: String,
    /// Memory in GiB.
    pub memory_gib: f64,
    /// The ringlog git revision loadgen was built from.
    pub git_revision: String,
    /// loadgen's version.
    pub loadgen_version: String,
    /// When the report was written (seconds since the epoch).
    pub unix_time: u64,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .trim()
        .to_string()
}

impl Environment {
    /// Reads this machine's description.
    pub fn detect() -> Environment {
        let cpuinfo = read("/proc/cpuinfo");
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default();
        let memory_kib: f64 = read("/proc/meminfo")
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        Environment {
            hostname: read("/proc/sys/kernel/hostname"),
            kernel: read("/proc/sys/kernel/osrelease"),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu,
            memory_gib: (memory_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            git_revision: env!("RINGLOG_GIT_REVISION").to_string(),
            loadgen_version: env!("CARGO_PKG_VERSION").to_string(),
            unix_time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }
}

/// Writes `value` as pretty JSON to `path`.
pub fn write_json(path: &std::path::Path, value: &impl Serialize) -> anyhow::Result<()> {
    use anyhow::Context;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}
