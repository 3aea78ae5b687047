//! The worker processes of a run, started, paused, killed and replaced by
//! pid.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rand::Rng;
use rustix::process::{Pid, Signal, kill_process};

use super::ChaosError;
use super::worker::WorkerOptions;

/// One running worker.
#[derive(Debug)]
struct Proc {
    id: String,
    child: Child,
    /// Held open: the worker stops when it closes.
    stdin: Option<ChildStdin>,
}

/// The worker processes of a run.
#[derive(Debug)]
pub struct Workers {
    bin: PathBuf,
    dir: PathBuf,
    template: WorkerOptions,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    running: Vec<Proc>,
    histories: Vec<PathBuf>,
    started: usize,
}

impl Workers {
    /// Prepares to start workers from `bin` (the chaos binary, run as
    /// `bin worker …`), with `template`'s settings; their history and output
    /// files go to `dir`.
    pub fn new(bin: &Path, dir: &Path, template: WorkerOptions) -> Workers {
        Workers {
            bin: bin.to_path_buf(),
            dir: dir.to_path_buf(),
            template,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts one more worker (ids `w1`, `w2`, … in start order) and returns
    /// its id. `adjust` may change its options (the controls use it).
    pub fn spawn_with(
        &self,
        adjust: impl FnOnce(&mut WorkerOptions),
    ) -> Result<String, ChaosError> {
        let mut state = self.state();
        state.started += 1;
        let id = format!("w{}", state.started);
        let mut options = self.template.clone();
        options.id = id.clone();
        options.history = self.dir.join(format!("history-{id}.jsonl"));
        options.seed = self.template.seed.wrapping_add(state.started as u64 * 7919);
        adjust(&mut options);
        let out = File::create(log_path(&self.dir, &id))
            .map_err(ChaosError::io(format!("creating {id}.log")))?;
        let err = out
            .try_clone()
            .map_err(ChaosError::io(format!("opening {id}.log")))?;
        let mut child = Command::new(&self.bin)
            .arg("worker")
            .args(worker_args(&options))
            .stdin(Stdio::piped())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(ChaosError::io(format!(
                "starting worker {id} ({})",
                self.bin.display()
            )))?;
        let stdin = child.stdin.take();
        state.histories.push(options.history.clone());
        state.running.push(Proc {
            id: id.clone(),
            child,
            stdin,
        });
        Ok(id)
    }

    /// Starts one more worker with the template's options.
    pub fn spawn(&self) -> Result<String, ChaosError> {
        self.spawn_with(|_| {})
    }

    /// Every history file written so far (also of workers that died).
    pub fn histories(&self) -> Vec<PathBuf> {
        self.state().histories.clone()
    }

    /// The ids of the running workers.
    pub fn running(&self) -> Vec<String> {
        self.state().running.iter().map(|p| p.id.clone()).collect()
    }

    /// A random running worker.
    pub fn pick(&self, rng: &mut impl Rng) -> Option<String> {
        let state = self.state();
        if state.running.is_empty() {
            return None;
        }
        let i = rng.random_range(0..state.running.len());
        Some(state.running[i].id.clone())
    }

    fn signal(&self, id: &str, signal: Signal) -> Result<(), ChaosError> {
        let state = self.state();
        let proc = state
            .running
            .iter()
            .find(|p| p.id == id)
            .ok_or_else(|| ChaosError::Worker(format!("no running worker {id}")))?;
        kill_process(Pid::from_child(&proc.child), signal)
            .map_err(|e| ChaosError::Worker(format!("signalling {id}: {e}")))
    }

    /// Stops worker `id` (`SIGSTOP`) and waits until the kernel says so.
    pub fn pause(&self, id: &str) -> Result<(), ChaosError> {
        self.signal(id, Signal::STOP)?;
        self.wait_state(id, true, Duration::from_secs(2));
        Ok(())
    }

    /// Continues worker `id` (`SIGCONT`).
    pub fn resume(&self, id: &str) -> Result<(), ChaosError> {
        self.signal(id, Signal::CONT)
    }

    /// Whether worker `id` is stopped (state `T` in `/proc`).
    pub fn is_stopped(&self, id: &str) -> bool {
        let state = self.state();
        state
            .running
            .iter()
            .find(|p| p.id == id)
            .is_some_and(|p| proc_stopped(p.child.id()))
    }

    /// Waits (bounded) until worker `id` is stopped (`stopped`) or not.
    pub fn wait_state(&self, id: &str, stopped: bool, limit: Duration) -> bool {
        wait_until(limit, || self.is_stopped(id) == stopped)
    }

    /// Waits (bounded) until worker `id` has exited; whether it did.
    pub fn wait_exited(&self, id: &str, limit: Duration) -> bool {
        wait_until(limit, || self.has_exited(id))
    }

    /// Kills worker `id` (`SIGKILL`) and reaps it.
    pub fn kill(&self, id: &str) -> Result<(), ChaosError> {
        let mut state = self.state();
        let Some(at) = state.running.iter().position(|p| p.id == id) else {
            return Err(ChaosError::Worker(format!("no running worker {id}")));
        };
        let mut proc = state.running.remove(at);
        let _ = kill_process(Pid::from_child(&proc.child), Signal::KILL);
        let _ = proc.child.wait();
        Ok(())
    }

    /// Whether worker `id` has exited on its own.
    pub fn has_exited(&self, id: &str) -> bool {
        let mut state = self.state();
        match state.running.iter_mut().find(|p| p.id == id) {
            Some(p) => !matches!(p.child.try_wait(), Ok(None)),
            None => true,
        }
    }

    /// Asks every worker to stop (closes its standard input; continues a
    /// stopped one), waits up to `limit` for them to finish their holds,
    /// then kills the rest. Returns the ids that had to be killed.
    pub fn stop_all(&self, limit: Duration) -> Vec<String> {
        let mut state = self.state();
        for proc in &mut state.running {
            let _ = kill_process(Pid::from_child(&proc.child), Signal::CONT);
            proc.stdin = None;
        }
        let end = Instant::now() + limit;
        while Instant::now() < end
            && state
                .running
                .iter_mut()
                .any(|p| matches!(p.child.try_wait(), Ok(None)))
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut killed = Vec::new();
        for mut proc in state.running.drain(..) {
            if matches!(proc.child.try_wait(), Ok(None)) {
                killed.push(proc.id.clone());
                let _ = kill_process(Pid::from_child(&proc.child), Signal::KILL);
            }
            let _ = proc.child.wait();
        }
        killed
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        for mut proc in state.running.drain(..) {
            let _ = kill_process(Pid::from_child(&proc.child), Signal::KILL);
            let _ = proc.child.wait();
        }
    }
}

/// Polls `done` every 2 ms until it holds or `limit` passes; whether it held.
fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Whether the process is in state `T` (stopped).
fn proc_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // The state follows the command name, which is in parentheses.
            let after = &stat[stat.rfind(')')? + 1..];
            after.split_whitespace().next().map(|s| s == "T")
        })
        .unwrap_or(false)
}

/// The command line of `chaos worker`.
pub fn worker_args(o: &WorkerOptions) -> Vec<String> {
    let mut args = vec![
        "--id".into(),
        o.id.clone(),
        "--nodes".into(),
        o.nodes.join(","),
        "--resource".into(),
        o.resource.clone(),
        "--keys".into(),
        o.keys.join(","),
        "--tasks".into(),
        o.tasks.to_string(),
        "--ttl-ms".into(),
        o.ttl.as_millis().to_string(),
        "--node-timeout-ms".into(),
        o.node_timeout.as_millis().to_string(),
        "--drift-factor".into(),
        o.drift_factor.to_string(),
        "--history".into(),
        o.history.display().to_string(),
        "--seed".into(),
        o.seed.to_string(),
    ];
    if let Some(long) = &o.long_key {
        args.push("--long-key".into());
        args.push(long.clone());
    }
    if let Some(n) = o.pause_before_write {
        args.push("--pause-before-write".into());
        args.push(n.to_string());
    }
    if let Some(n) = o.holds_per_task {
        args.push("--holds-per-task".into());
        args.push(n.to_string());
    }
    if !o.rw_keys.is_empty() && o.rw_tasks > 0 {
        args.push("--rw-keys".into());
        args.push(o.rw_keys.join(","));
        args.push("--rw-tasks".into());
        args.push(o.rw_tasks.to_string());
    }
    if let Some((name, permits)) = o.semaphore.as_ref().filter(|_| o.permit_tasks > 0) {
        args.push("--semaphore".into());
        args.push(name.clone());
        args.push("--permits".into());
        args.push(permits.to_string());
        args.push("--permit-tasks".into());
        args.push(o.permit_tasks.to_string());
    }
    args
}

/// Where worker `id` of a run in `dir` writes its stdout and stderr.
fn log_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.log"))
}

/// The last `lines` lines of every worker log in `dir` that is not empty
/// (a panic, an error), by worker id: what a failed run shows, since a CI
/// machine keeps no run directory.
pub fn log_tails(dir: &Path, lines: usize) -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut ids: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            Some(name.strip_suffix(".log")?.to_string())
        })
        .collect();
    ids.sort();
    ids.into_iter()
        .filter_map(|id| {
            let tail = crate::node::tail_of_file_if_nonempty(&log_path(dir, &id), lines)?;
            Some((id, tail))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_tails_show_only_worker_logs_with_something_in_them() {
        let dir = std::env::temp_dir().join(format!("ql-log-tails-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(log_path(&dir, "w1"), "a\nb\npanicked at x\n").expect("w1");
        std::fs::write(log_path(&dir, "w2"), "").expect("w2");
        std::fs::write(dir.join("history-w1.jsonl"), "{}\n").expect("history");
        let tails = log_tails(&dir, 2);
        std::fs::remove_dir_all(&dir).expect("cleanup");
        assert_eq!(
            tails,
            vec![("w1".to_string(), "b\npanicked at x\n".to_string())]
        );
    }
}
