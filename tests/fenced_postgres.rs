//! `examples/fenced_postgres.rs` run for real: a private PostgreSQL server
//! (started here, stopped pass or fail), three Redis nodes from the testbed,
//! the example's own code, and the payment row checked afterwards.
//!
//! Needs PostgreSQL's server binaries (`initdb`, `pg_ctl`; Debian:
//! `apt-get install postgresql`, which `testbed/run test` does as root).
//! Without them the test is skipped with a message, except under `CI=true`,
//! where it fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use quorumlock_testbed::Testbed;
use tempfile::TempDir;

// The example compiled into this test, so the test runs exactly its code
// (a built example binary could be stale: `cargo test --test` does not
// build examples). Its `main` is the example's entry point, unused here.
#[allow(dead_code)]
#[path = "../examples/fenced_postgres.rs"]
mod example;

#[test]
fn a_late_write_with_an_old_token_is_refused_by_postgres() {
    let Some(bin) = postgres_binaries() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!(
                "PostgreSQL server binaries (initdb, pg_ctl) not found under \
                 /usr/lib/postgresql/*/bin or on PATH; install them \
                 (Debian/Ubuntu: apt-get install postgresql, or run testbed/run test as root)"
            );
        }
        eprintln!(
            "SKIPPED: PostgreSQL server binaries (initdb, pg_ctl) not found; \
             install them (Debian/Ubuntu: apt-get install postgresql) to run this test"
        );
        return;
    };
    let postgres = Postgres::start(bin);
    let testbed = Testbed::start(3).expect("start redis nodes");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");

    let outcome = runtime
        .block_on(example::run(testbed.urls(), &postgres.url()))
        .unwrap_or_else(|e| panic!("the example failed: {e}"));
    assert!(outcome.b_token > outcome.a_token, "{outcome:?}");

    // The row holds B's write and B's token: A's late write left no trace.
    let (status, fence) = runtime.block_on(read_row(&postgres.url(), &outcome.payment));
    assert_eq!(status, "captured by B", "{outcome:?}");
    assert_eq!(
        u64::try_from(fence).ok(),
        Some(outcome.b_token),
        "{outcome:?}"
    );
}

/// The payment row's status and fence, read on a connection of the test's own.
async fn read_row(url: &str, payment: &str) -> (String, i64) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the private PostgreSQL");
    let connection = tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT status, fence FROM payments WHERE id = $1",
            &[&payment],
        )
        .await
        .expect("the payment row");
    drop(client);
    connection
        .await
        .expect("the connection task")
        .expect("the connection");
    (row.get(0), row.get(1))
}

/// The directory holding `initdb` and `pg_ctl`: the newest
/// `/usr/lib/postgresql/<version>/bin` (Debian, Ubuntu), else the first
/// directory on `PATH` that has both.
fn postgres_binaries() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    let debian = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_both(bin))
        .max_by_key(|(version, _)| *version)
        .map(|(_, bin)| bin);
    debian.or_else(|| std::env::split_paths(&std::env::var_os("PATH")?).find(|dir| has_both(dir)))
}

/// A PostgreSQL server of this test's own: data and Unix socket in a
/// temporary directory, no TCP listener, trust authentication. Stopped
/// (`pg_ctl stop -m immediate`, which signals the server recorded in its
/// own data directory) when dropped, pass or fail.
struct Postgres {
    bin: PathBuf,
    /// PostgreSQL refuses to run as root: as root, every command runs as
    /// the `postgres` user, which then owns the directory.
    as_postgres_user: bool,
    dir: TempDir,
}

impl Postgres {
    fn start(bin: PathBuf) -> Postgres {
        let dir = tempfile::Builder::new()
            .prefix("quorumlock-pg-")
            .tempdir()
            .expect("a temporary directory");
        let as_postgres_user = running_as_root();
        if as_postgres_user {
            check(
                "chown",
                Command::new("chown")
                    .arg("postgres:")
                    .arg(dir.path())
                    .output(),
            );
        }
        let postgres = Postgres {
            bin,
            as_postgres_user,
            dir,
        };
        let data = postgres.data();
        check(
            "initdb",
            postgres
                .command("initdb")
                .arg("-D")
                .arg(&data)
                .args(["-A", "trust", "-U", "postgres", "-E", "UTF8"])
                .args(["--no-locale", "--no-sync"])
                .output(),
        );
        let options = format!(
            "-c listen_addresses='' -c unix_socket_directories='{}' -c fsync=off",
            postgres.dir.path().display()
        );
        let started = postgres
            .command("pg_ctl")
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(postgres.dir.path().join("server.log"))
            .args(["-o", &options, "-w", "-t", "60", "start"])
            .output();
        if !started.as_ref().is_ok_and(|out| out.status.success()) {
            let log = std::fs::read_to_string(postgres.dir.path().join("server.log"));
            panic!("pg_ctl start failed: {started:?}\nserver log: {log:?}");
        }
        postgres
    }

    /// The tokio-postgres connection string for the server's socket.
    fn url(&self) -> String {
        format!(
            "host={} dbname=postgres user=postgres",
            self.dir.path().display()
        )
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `program` from the PostgreSQL binaries, as the `postgres` user when
    /// this test runs as root.
    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        if self.as_postgres_user {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let stopped = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        if !stopped.as_ref().is_ok_and(|out| out.status.success()) {
            eprintln!("pg_ctl stop failed: {stopped:?}");
        }
    }
}

/// Whether this process runs as root (its effective user id is 0).
fn running_as_root() -> bool {
    let id = check("id -u", Command::new("id").arg("-u").output());
    String::from_utf8_lossy(&id.stdout).trim() == "0"
}

/// The output of a command that must succeed; otherwise a panic that shows
/// what it said.
fn check(what: &str, output: std::io::Result<Output>) -> Output {
    match output {
        Ok(out) if out.status.success() => out,
        other => panic!("{what} failed: {other:?}"),
    }
}
