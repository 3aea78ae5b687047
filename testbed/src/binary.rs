//! Locating the `redis-server` binary.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::TestbedError;

/// Name of the environment variable that overrides the `redis-server`
/// binary location.
pub const REDIS_SERVER_ENV: &str = "QUORUMLOCK_REDIS_SERVER";

/// File name searched for in `PATH`.
const BINARY_NAME: &str = "redis-server";

/// Locates the `redis-server` binary.
///
/// If the environment variable `QUORUMLOCK_REDIS_SERVER` is set (and not
/// empty) it must name an executable file, which is returned. Otherwise the
/// directories of `PATH` are searched for an executable `redis-server`.
///
/// # Errors
///
/// [`TestbedError::RedisServerNotFound`] when no usable binary is found; its
/// message explains how to install one or point the variable at it.
pub fn redis_server_binary() -> Result<PathBuf, TestbedError> {
    let env_value = std::env::var_os(REDIS_SERVER_ENV);
    let path = std::env::var_os("PATH");
    redis_server_binary_from(env_value.as_deref(), path.as_deref())
}

/// The logic behind [`redis_server_binary`], with the values of
/// `QUORUMLOCK_REDIS_SERVER` (`env_value`) and `PATH` (`path`) passed in, so
/// it can be tested without mutating the process environment.
///
/// An empty `env_value` counts as unset. Empty `PATH` entries (which would
/// mean "current directory") are skipped.
///
/// # Errors
///
/// [`TestbedError::RedisServerNotFound`] when `env_value` does not name an
/// executable file, or when no directory of `path` holds an executable
/// `redis-server`.
pub fn redis_server_binary_from(
    env_value: Option<&OsStr>,
    path: Option<&OsStr>,
) -> Result<PathBuf, TestbedError> {
    if let Some(value) = env_value.filter(|value| !value.is_empty()) {
        let candidate = PathBuf::from(value);
        return if is_executable_file(&candidate) {
            Ok(candidate)
        } else {
            Err(TestbedError::RedisServerNotFound {
                reason: format!(
                    "{REDIS_SERVER_ENV}={} does not name an executable file",
                    candidate.display()
                ),
            })
        };
    }
    let Some(path) = path.filter(|path| !path.is_empty()) else {
        return Err(TestbedError::RedisServerNotFound {
            reason: format!("{REDIS_SERVER_ENV} is not set and PATH is empty"),
        });
    };
    std::env::split_paths(path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(BINARY_NAME))
        .find(|candidate| is_executable_file(candidate))
        .ok_or_else(|| TestbedError::RedisServerNotFound {
            reason: format!(
                "{REDIS_SERVER_ENV} is not set and no executable `{BINARY_NAME}` is in PATH ({})",
                path.to_string_lossy()
            ),
        })
}

/// Whether `path` is a regular file (after following symlinks) with at least
/// one execute bit set.
fn is_executable_file(path: &Path) -> bool {
    fs::metadata(path)
        .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}
