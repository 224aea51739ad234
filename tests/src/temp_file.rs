//! A file that exists for one test.

use std::{io::Write, path::PathBuf};

/// Writes `text` to a fresh file and returns its path (removed with the returned guard).
pub struct TempFile(pub PathBuf);

impl TempFile {
    pub fn new(name: &str, text: &str) -> Self {
        let path = std::env::temp_dir().join(format!("limiter-{}-{name}", std::process::id()));
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .unwrap();
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
