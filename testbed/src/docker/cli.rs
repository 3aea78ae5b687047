//! Running the `docker` command line (and `nsenter`) with a deadline: a
//! hung engine fails the call with the command it was running, never
//! hangs the testbed.

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::TestbedError;

/// How long one ordinary command may take (`docker kill`, `inspect`, …).
pub(crate) const COMMAND_LIMIT: Duration = Duration::from_secs(30);

/// Runs `program args…` for at most `limit`; returns its standard output.
/// A non-zero exit or a timeout is [`TestbedError::Docker`] with the
/// command line and what it printed on standard error.
pub(crate) fn run(program: &str, args: &[&str], limit: Duration) -> Result<String, TestbedError> {
    run_with(program, args, &[], limit)
}

/// [`run`] with `envs` added to the command's environment.
pub(crate) fn run_with(
    program: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    limit: Duration,
) -> Result<String, TestbedError> {
    let shown = std::iter::once(program)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    let failed = |status: String, stderr: String| TestbedError::Docker {
        command: shown.clone(),
        status,
        stderr,
    };
    let mut child = Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed("could not start".into(), e.to_string()))?;
    // Drained on threads of their own, so a chatty command never blocks on
    // a full pipe while we wait for it.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let end = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if Instant::now() < end => thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                // Our own child, by its handle.
                let _ = child.kill();
                let _ = child.wait();
                break Err(format!("no answer within {limit:?}"));
            }
            Err(e) => break Err(e.to_string()),
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    match status {
        Ok(status) if status.success() => Ok(stdout),
        Ok(status) => Err(failed(status.to_string(), stderr.trim().to_string())),
        Err(reason) => Err(failed(reason, stderr.trim().to_string())),
    }
}

/// `docker args…` with the ordinary limit.
pub(crate) fn docker(args: &[&str]) -> Result<String, TestbedError> {
    run("docker", args, COMMAND_LIMIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_command_is_named_with_its_stderr() {
        let err = run("sh", &["-c", "echo boom >&2; exit 3"], COMMAND_LIMIT).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("sh -c"), "{text}");
        assert!(text.contains("boom"), "{text}");
    }

    #[test]
    fn a_command_past_its_limit_is_stopped() {
        let started = Instant::now();
        let err = run("sleep", &["5"], Duration::from_millis(100)).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(4));
        assert!(err.to_string().contains("no answer"), "{err}");
    }

    #[test]
    fn output_is_returned() {
        assert_eq!(run("echo", &["hi"], COMMAND_LIMIT).unwrap(), "hi\n");
    }
}
