//! Synthetic histories for the checker's and the timeline's tests: a
//! small event builder, and a generator of realistic runs (keys contended
//! by workers, faults that slow acquisitions, client pauses that make
//! late unfenced writes, client crashes that end holds at the kill).

use super::history::{Event, Mode, Nanos, Target, What};

/// An arbitrary `CLOCK_MONOTONIC` origin.
pub const T0: Nanos = 1_000_000_000_000;

/// `ms` milliseconds after [`T0`].
pub fn ms(ms: f64) -> Nanos {
    T0 + (ms * 1e6) as Nanos
}

/// Builds histories event by event.
#[derive(Default)]
pub struct Builder {
    pub events: Vec<Event>,
}

impl Builder {
    pub fn new() -> Builder {
        Builder::default()
    }

    pub fn push(&mut self, t: Nanos, src: &str, what: What) -> &mut Self {
        self.events.push(Event {
            t,
            src: src.to_string(),
            what,
        });
        self
    }

    pub fn attempt(&mut self, t: Nanos, key: &str, hold: &str) -> &mut Self {
        let src = worker_of(hold);
        self.push(
            t,
            src,
            What::AcquireStart {
                key: key.into(),
                hold: hold.into(),
                owner: Some(format!("owner-of-{hold}")),
            },
        )
    }

    pub fn won(&mut self, t: Nanos, key: &str, hold: &str, deadline: Nanos) -> &mut Self {
        self.won_with(t, key, hold, deadline, None)
    }

    /// A read-write lock's or a semaphore's win: the call named no owner,
    /// the winning attempt's is `owner-of-<hold>`.
    pub fn won_as(
        &mut self,
        t: Nanos,
        key: &str,
        hold: &str,
        deadline: Nanos,
        mode: Mode,
    ) -> &mut Self {
        self.won_with(t, key, hold, deadline, Some(mode))
    }

    fn won_with(
        &mut self,
        t: Nanos,
        key: &str,
        hold: &str,
        deadline: Nanos,
        mode: Option<Mode>,
    ) -> &mut Self {
        let src = worker_of(hold);
        let owner = mode.is_some().then(|| format!("owner-of-{hold}"));
        self.push(
            t,
            src,
            What::Won {
                key: key.into(),
                hold: hold.into(),
                deadline,
                nodes: vec![0, 1, 2],
                mode,
                owner,
            },
        )
    }

    pub fn failed(&mut self, t: Nanos, key: &str, hold: &str) -> &mut Self {
        let src = worker_of(hold);
        self.push(
            t,
            src,
            What::Failed {
                key: key.into(),
                hold: hold.into(),
                error: "no quorum".into(),
            },
        )
    }

    pub fn token(&mut self, t: Nanos, key: &str, hold: &str, token: u64) -> &mut Self {
        let src = worker_of(hold);
        self.push(
            t,
            src,
            What::Token {
                key: key.into(),
                hold: hold.into(),
                token,
            },
        )
    }

    pub fn renew(&mut self, t: Nanos, key: &str, hold: &str, deadline: Nanos) -> &mut Self {
        let src = worker_of(hold);
        self.push(
            t,
            src,
            What::Renew {
                key: key.into(),
                hold: hold.into(),
                deadline,
            },
        )
    }

    pub fn lost(&mut self, t: Nanos, key: &str, hold: &str, deadline: Nanos) -> &mut Self {
        let src = worker_of(hold);
        self.push(
            t,
            src,
            What::Lost {
                key: key.into(),
                hold: hold.into(),
                deadline,
                reason: "renewal refused".into(),
            },
        )
    }

    pub fn release(&mut self, t: Nanos, key: &str, hold: &str, deadline: Nanos) -> &mut Self {
        let src = worker_of(hold);
        self.push(
            t,
            src,
            What::Release {
                key: key.into(),
                hold: hold.into(),
                deadline,
                held: t < deadline,
            },
        )
    }

    /// One read-modify-write; `accepted: false` logs a refused write.
    #[allow(clippy::too_many_arguments)]
    pub fn write(
        &mut self,
        t: Nanos,
        key: &str,
        hold: &str,
        target: Target,
        token: Option<u64>,
        read: u64,
        accepted: bool,
        last: Option<u64>,
    ) -> &mut Self {
        let src = worker_of(hold);
        self.push(
            t,
            src,
            What::Write {
                key: key.into(),
                hold: hold.into(),
                target,
                token,
                read: Some(read),
                wrote: accepted.then_some(read + 1),
                accepted,
                last,
            },
        )
    }

    pub fn fault(&mut self, t: Nanos, fault: u32, kind: &str, target: &str) -> &mut Self {
        self.push(
            t,
            "chaos",
            What::FaultStart {
                fault,
                kind: kind.into(),
                target: target.into(),
                detail: String::new(),
            },
        )
    }

    pub fn fault_end(&mut self, t: Nanos, fault: u32) -> &mut Self {
        self.push(t, "chaos", What::FaultEnd { fault })
    }

    /// The prober found `key` of `hold`'s call on node `node`.
    pub fn probe(&mut self, t: Nanos, node: usize, key: &str, hold: &str) -> &mut Self {
        self.push(
            t,
            "chaos",
            What::Probe {
                node,
                key: key.into(),
                owner: format!("owner-of-{hold}"),
                pttl_ms: 500,
            },
        )
    }

    pub fn final_values(
        &mut self,
        t: Nanos,
        fenced: &[(&str, u64)],
        unfenced: &[(&str, u64)],
        keys_left: &[&str],
    ) -> &mut Self {
        let pairs = |v: &[(&str, u64)]| v.iter().map(|(k, n)| (k.to_string(), *n)).collect();
        self.push(
            t,
            "chaos",
            What::Final {
                fenced: pairs(fenced),
                unfenced: pairs(unfenced),
                keys_left: keys_left.iter().map(|k| k.to_string()).collect(),
            },
        )
    }

    /// A whole well-behaved hold: attempt, win, token, both writes,
    /// release at `end_ms`. `values` are the counters before it
    /// (fenced, unfenced) and are advanced.
    pub fn clean_hold(
        &mut self,
        key: &str,
        hold: &str,
        start_ms: f64,
        end_ms: f64,
        token: u64,
        values: &mut (u64, u64),
    ) -> &mut Self {
        let deadline = ms(start_ms + 100.0);
        self.attempt(ms(start_ms - 1.0), key, hold)
            .won(ms(start_ms), key, hold, deadline)
            .token(ms(start_ms + 0.1), key, hold, token);
        let mid = (start_ms + end_ms) / 2.0;
        self.write(
            ms(mid),
            key,
            hold,
            Target::Fenced,
            Some(token),
            values.0,
            true,
            None,
        );
        self.write(
            ms(mid + 0.01),
            key,
            hold,
            Target::Unfenced,
            None,
            values.1,
            true,
            None,
        );
        values.0 += 1;
        values.1 += 1;
        self.release(ms(end_ms), key, hold, deadline)
    }

    /// The start of a call that names no owner (a read-write lock's, a
    /// semaphore's).
    pub fn attempt_anon(&mut self, t: Nanos, key: &str, hold: &str) -> &mut Self {
        let src = worker_of(hold);
        self.push(
            t,
            src,
            What::AcquireStart {
                key: key.into(),
                hold: hold.into(),
                owner: None,
            },
        )
    }

    /// A read-write lock's or a semaphore's hold of `key` as `mode`, from
    /// `start_ms` to its release at `end_ms` (deadline 100 ms after the
    /// win), with `token` if any.
    pub fn shared_hold(
        &mut self,
        key: &str,
        hold: &str,
        mode: Mode,
        (start_ms, end_ms): (f64, f64),
        token: Option<u64>,
    ) -> &mut Self {
        let deadline = ms(start_ms + 100.0);
        self.attempt_anon(ms(start_ms - 1.0), key, hold).won_as(
            ms(start_ms),
            key,
            hold,
            deadline,
            mode,
        );
        if let Some(token) = token {
            self.token(ms(start_ms + 0.1), key, hold, token);
        }
        self.release(ms(end_ms), key, hold, deadline)
    }

    pub fn sorted(&self) -> Vec<Event> {
        let mut events = self.events.clone();
        events.sort_by_key(|e| e.t);
        events
    }
}

/// `w3` from `w3-17`.
pub fn worker_of(hold: &str) -> &str {
    hold.rsplit_once('-').map_or(hold, |(w, _)| w)
}

/// xorshift64*: enough randomness for synthetic histories, no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[lo, hi)`.
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// What [`generate`] makes.
pub struct Config {
    pub seconds: f64,
    pub keys: usize,
    pub workers: usize,
    pub faults: usize,
    /// Add one hold that overlaps another, on the third key, half-way.
    pub inject_overlap: bool,
    pub seed: u64,
}

impl Config {
    /// 120 s, 4 keys, 8 workers, 30 faults: about 20,000 holds.
    pub fn realistic() -> Config {
        Config {
            seconds: 120.0,
            keys: 4,
            workers: 8,
            faults: 30,
            inject_overlap: true,
            seed: 7,
        }
    }
}

const VALIDITY_MS: f64 = 100.0;
const NODE_KINDS: [&str; 5] = [
    "node_pause",
    "node_kill",
    "node_restart_empty",
    "net_delay",
    "partition",
];
const CLIENT_KINDS: [&str; 3] = ["client_pause", "client_crash", "clock_rate"];

struct FaultPlan {
    kind: &'static str,
    target: String,
    start: f64,
    end: f64,
}

/// A realistic run (times in ms from [`T0`] while generating).
pub fn generate(cfg: &Config) -> Vec<Event> {
    let mut rng = Rng::new(cfg.seed);
    let mut b = Builder::new();
    let total_ms = cfg.seconds * 1000.0;
    let workers: Vec<String> = (0..cfg.workers).map(|i| format!("w{i}")).collect();
    let keys: Vec<String> = (0..cfg.keys).map(|i| format!("k{i}")).collect();
    for (i, w) in workers.iter().enumerate() {
        b.push(
            ms(i as f64 * 0.1),
            w,
            What::WorkerStart {
                pid: 1000 + i as u32,
            },
        );
    }

    // Faults, node kinds twice as likely as client kinds.
    let mut plans: Vec<FaultPlan> = (0..cfg.faults)
        .map(|_| {
            let (kind, target) = if rng.unit() < 0.66 {
                let kind = NODE_KINDS[rng.below(NODE_KINDS.len())];
                (kind, format!("n{}", rng.below(5)))
            } else {
                let kind = CLIENT_KINDS[rng.below(CLIENT_KINDS.len())];
                (kind, workers[rng.below(workers.len())].clone())
            };
            let start = rng.range(1_000.0, total_ms - 7_000.0);
            let end = start + rng.range(300.0, 6_000.0);
            FaultPlan {
                kind,
                target,
                start,
                end,
            }
        })
        .collect();
    plans.sort_by(|a, b| a.start.total_cmp(&b.start));
    for (i, f) in plans.iter().enumerate() {
        b.push(
            ms(f.start),
            "chaos",
            What::FaultStart {
                fault: i as u32,
                kind: f.kind.into(),
                target: f.target.clone(),
                detail: match f.kind {
                    "net_delay" => "delay 40ms ±20ms".into(),
                    "clock_rate" => "rate 1.015".into(),
                    _ => String::new(),
                },
            },
        );
        b.push(ms(f.end), "chaos", What::FaultEnd { fault: i as u32 });
        if f.kind == "client_crash" {
            let i = workers.iter().position(|w| *w == f.target).unwrap();
            b.push(
                ms(f.end),
                &f.target,
                What::WorkerStart {
                    pid: 2000 + i as u32,
                },
            );
        }
    }
    let node_fault_at = |t: f64| {
        plans
            .iter()
            .any(|f| f.start <= t && t <= f.end && f.target.starts_with('n'))
    };
    let worker_fault = |w: &str, kind: &str, from: f64, to: f64| {
        plans
            .iter()
            .find(|f| f.kind == kind && f.target == w && f.start < to && from < f.end)
            .map(|f| (f.start, f.end))
    };

    let mut seq = vec![0u64; cfg.workers];
    let mut final_fenced = Vec::new();
    let mut final_unfenced = Vec::new();
    for (ki, key) in keys.iter().enumerate() {
        let mut t = rng.range(0.0, 5.0) + 1.0;
        let mut token = 0u64;
        let mut fenced = 0u64;
        let mut unfenced = 0u64;
        let mut stale: Option<(f64, u64)> = None;
        let mut injected = !cfg.inject_overlap || ki != 2 % cfg.keys;
        while t < total_ms - 500.0 {
            if let Some((at, value)) = stale
                && at <= t
            {
                unfenced = value;
                stale = None;
            }
            let wi = rng.below(cfg.workers);
            let w = &workers[wi];
            if worker_fault(w, "client_crash", t, t + 1.0).is_some()
                || worker_fault(w, "client_pause", t, t + 1.0).is_some()
            {
                t += 0.5;
                continue;
            }
            seq[wi] += 1;
            let hold = format!("{w}-{}", seq[wi]);
            let faulty = node_fault_at(t);
            b.attempt(ms(t), key, &hold);
            let latency = if faulty {
                rng.range(2.0, 30.0)
            } else {
                rng.range(0.8, 3.0)
            };
            if worker_fault(w, "client_crash", t, t + latency).is_some() {
                // Killed while acquiring: the acquire never returned, and
                // whatever it took on the nodes stays until it expires.
                t += latency + VALIDITY_MS + rng.range(1.0, 5.0);
                continue;
            }
            if rng.unit() < if faulty { 0.3 } else { 0.03 } {
                b.failed(ms(t + latency), key, &hold);
                t += latency + rng.range(1.0, 6.0);
                continue;
            }
            let won = t + latency;
            let mut deadline = won + VALIDITY_MS;
            b.won(ms(won), key, &hold, ms(deadline));
            token += 1;
            let my_token = token;
            b.token(ms(won + 0.3), key, &hold, my_token);
            let mut work = if rng.unit() < 0.015 {
                rng.range(100.0, 300.0)
            } else {
                rng.range(6.0, 22.0)
            };

            // Alive when it won (checked above), so a crash that ends the
            // hold starts at or after the win.
            let crash = worker_fault(w, "client_crash", won, won + work).map(|(s, _)| s);
            let pause = worker_fault(w, "client_pause", won + 1.0, won + work);
            // The fenced write, unless the worker is killed before it, or
            // paused (then its fenced read is refused when it resumes).
            let writes_fenced = match crash {
                Some(kill) => kill > won + 0.6,
                None => pause.is_none(),
            };
            if writes_fenced {
                b.write(
                    ms(won + 0.6),
                    key,
                    &hold,
                    Target::Fenced,
                    Some(my_token),
                    fenced,
                    true,
                    None,
                );
                fenced += 1;
            }
            if crash.is_some() {
                // Killed mid-hold: whatever it did before the kill is
                // logged; the key stays until its deadline.
                t = deadline + rng.range(1.0, 5.0);
                continue;
            }
            if let Some((_, resume)) = pause {
                // Paused after reading both counters: the writes land
                // when it resumes, long after the deadline.
                b.write(
                    ms(resume + 0.3),
                    key,
                    &hold,
                    Target::Fenced,
                    Some(my_token),
                    fenced,
                    false,
                    Some(my_token + 1),
                );
                let read = unfenced;
                b.write(
                    ms(resume + 0.5),
                    key,
                    &hold,
                    Target::Unfenced,
                    None,
                    read,
                    true,
                    None,
                );
                stale = Some((resume + 0.5, read + 1));
                b.release(ms(resume + 1.0), key, &hold, ms(deadline));
                t = deadline + rng.range(1.0, 5.0);
                continue;
            }
            b.write(
                ms(won + 1.0),
                key,
                &hold,
                Target::Unfenced,
                None,
                unfenced,
                true,
                None,
            );
            unfenced += 1;
            let mut r = won + VALIDITY_MS / 3.0;
            while r < won + work {
                deadline = r + VALIDITY_MS;
                b.renew(ms(r), key, &hold, ms(deadline));
                r += VALIDITY_MS / 3.0;
            }
            if !injected && t > total_ms / 2.0 {
                // Another worker wins while this one holds.
                injected = true;
                work = work.max(10.0);
                let other = (wi + 1) % cfg.workers;
                seq[other] += 1;
                let h2 = format!("{}-{}", workers[other], seq[other]);
                let won2 = won + work / 2.0;
                b.attempt(ms(won2 - 1.0), key, &h2);
                b.won(ms(won2), key, &h2, ms(won2 + VALIDITY_MS));
                token += 1;
                b.token(ms(won2 + 0.3), key, &h2, token);
                b.write(
                    ms(won2 + 0.6),
                    key,
                    &h2,
                    Target::Fenced,
                    Some(token),
                    fenced,
                    true,
                    None,
                );
                fenced += 1;
                b.release(ms(won + work + 3.0), key, &h2, ms(won2 + VALIDITY_MS));
                t = won + work + 3.0;
            }
            b.release(ms(won + work), key, &hold, ms(deadline));
            t = t.max(won + work) + rng.range(0.5, 3.0);
        }
        final_fenced.push((key.clone(), fenced));
        final_unfenced.push((key.clone(), stale.map_or(unfenced, |(_, v)| v)));
    }
    b.push(
        ms(total_ms + 500.0),
        "chaos",
        What::Final {
            fenced: final_fenced,
            unfenced: final_unfenced,
            keys_left: Vec::new(),
        },
    );
    b.sorted()
}
