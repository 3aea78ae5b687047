//! Tests for locating the redis-server binary. Kept in their own test
//! binary; they never mutate the process environment.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;

use quorumlock_testbed::{TestbedError, redis_server_binary, redis_server_binary_from};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn assert_not_found(result: Result<std::path::PathBuf, TestbedError>) {
    match result {
        Err(err @ TestbedError::RedisServerNotFound { .. }) => {
            let message = err.to_string();
            assert!(
                message.contains("apt-get install redis-server"),
                "message: {message}"
            );
            assert!(
                message.contains("QUORUMLOCK_REDIS_SERVER"),
                "message: {message}"
            );
        }
        other => panic!("expected RedisServerNotFound, got {other:?}"),
    }
}

#[test]
fn env_var_pointing_nowhere_is_not_found() {
    let result = redis_server_binary_from(
        Some(OsStr::new("/nonexistent")),
        Some(OsStr::new("/usr/bin:/bin")),
    );
    assert_not_found(result);
}

#[test]
fn env_var_pointing_at_a_directory_is_not_found() -> TestResult {
    let dir = tempfile::tempdir()?;
    assert_not_found(redis_server_binary_from(Some(dir.path().as_os_str()), None));
    Ok(())
}

#[test]
fn env_var_pointing_at_a_non_executable_file_is_not_found() -> TestResult {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("redis-server");
    fs::write(&file, "")?;
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644))?;
    assert_not_found(redis_server_binary_from(Some(file.as_os_str()), None));
    Ok(())
}

#[test]
fn env_var_wins_over_path() -> TestResult {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("my-redis");
    fs::write(&file, "#!/bin/sh\n")?;
    fs::set_permissions(&file, fs::Permissions::from_mode(0o755))?;
    let found = redis_server_binary_from(Some(file.as_os_str()), Some(OsStr::new("/usr/bin")))?;
    assert_eq!(found, file);
    Ok(())
}

#[test]
fn empty_env_var_counts_as_unset() -> TestResult {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("redis-server");
    fs::write(&file, "#!/bin/sh\n")?;
    fs::set_permissions(&file, fs::Permissions::from_mode(0o755))?;
    let found = redis_server_binary_from(Some(OsStr::new("")), Some(dir.path().as_os_str()))?;
    assert_eq!(found, file);
    Ok(())
}

#[test]
fn path_search_skips_directories_without_the_binary() -> TestResult {
    let empty = tempfile::tempdir()?;
    let with = tempfile::tempdir()?;
    let file = with.path().join("redis-server");
    fs::write(&file, "#!/bin/sh\n")?;
    fs::set_permissions(&file, fs::Permissions::from_mode(0o755))?;
    let path = std::env::join_paths([empty.path(), with.path()])?;
    assert_eq!(redis_server_binary_from(None, Some(&path))?, file);
    Ok(())
}

#[test]
fn missing_from_path_is_not_found() -> TestResult {
    let empty = tempfile::tempdir()?;
    assert_not_found(redis_server_binary_from(
        None,
        Some(empty.path().as_os_str()),
    ));
    assert_not_found(redis_server_binary_from(None, None));
    assert_not_found(redis_server_binary_from(None, Some(OsStr::new(""))));
    Ok(())
}

#[test]
fn the_installed_server_is_found() -> TestResult {
    // Uses the real environment (read only): redis-server is installed on
    // the machines this crate is tested on.
    let found = redis_server_binary()?;
    assert!(
        found.ends_with("redis-server") || std::env::var_os("QUORUMLOCK_REDIS_SERVER").is_some()
    );
    Ok(())
}
