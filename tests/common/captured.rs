//! The `tracing` events of a test binary, captured as the text a `fmt`
//! subscriber writes (for tests of what the library logs; each such test
//! is a binary of its own, since the subscriber is global).

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

/// Collects everything the subscriber writes.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Installs the global subscriber, writing every event at `level` or
    /// above (without colours) to the returned capture.
    pub fn install(level: tracing::Level) -> Captured {
        let captured = Captured::default();
        let writer = captured.clone();
        tracing_subscriber::fmt()
            .with_max_level(level)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        captured
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}
