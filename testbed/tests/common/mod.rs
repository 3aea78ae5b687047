//! Helpers shared by the integration tests that include this module
//! (`mod common;`).

use std::path::Path;

use quorumlock_testbed::{RedisNode, TestbedError};
use rustix::process::{Pid, test_kill_process};

/// `SET key value` on `node`.
pub fn set(node: &RedisNode, key: &str, value: &str) -> Result<(), TestbedError> {
    let mut con = node.connection()?;
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query::<()>(&mut con)?;
    Ok(())
}

/// `GET key` on `node`.
pub fn get(node: &RedisNode, key: &str) -> Result<Option<String>, TestbedError> {
    let mut con = node.connection()?;
    Ok(redis::cmd("GET").arg(key).query(&mut con)?)
}

/// Whether a process with this pid exists (zombies count as existing).
pub fn process_exists(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    match Pid::from_raw(raw) {
        Some(pid) => test_kill_process(pid).is_ok() || Path::new(&format!("/proc/{raw}")).exists(),
        None => false,
    }
}
