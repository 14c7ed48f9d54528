//! Passwords kept in files (etcd's, a broker's own login): below the
//! registry and the security store, which both read them.

use std::path::Path;

/// The password in a file: its first line, without the line ending.
/// Refused when the file is empty or unreadable (the error names it).
pub fn read_password_file(path: &Path) -> Result<Vec<u8>, std::io::Error> {
    let text = std::fs::read(path).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("reading the password file {}: {e}", path.display()),
        )
    })?;
    let line = text.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("the password file {} is empty", path.display()),
        ));
    }
    Ok(line.to_vec())
}
