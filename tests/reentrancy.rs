//! Re-entry against real nodes: the per-key hold count goes up with every
//! hold of one owner and down with every release, only the last release
//! frees the key, other owners can neither re-enter nor touch our holds,
//! the count starts over after the keys expired, the watchdog keeps a
//! nested hold alive, and a lost hold is never re-entered.

mod common;

use std::time::Duration;

use futures::FutureExt;

use quorumlock::{
    Error, Hold, LockConfig, LockGuard, LostReason, MultiLock, Owner, ReleaseReport, Stamp, Wait,
};
use quorumlock_testbed::Testbed;

/// A wait budget for acquires that are expected to win at once.
const WAIT: Duration = Duration::from_secs(2);

/// The hold count of `key` on every node, in node order.
fn counts(testbed: &Testbed, key: &str) -> Vec<usize> {
    testbed
        .nodes()
        .iter()
        .map(|n| common::holds_on(n, key))
        .collect()
}

/// Waits until everything `lock` has sent to the nodes has run there.
///
/// An acquire returns at its quorum and drops the calls still pending: one
/// already written to a node's connection runs there, one not yet written
/// never does (the guard reports that node as `Hold::Unknown`). A probe
/// hold released through the same connections is queued behind both kinds,
/// so once every node answered its release, each node's count is final.
async fn settle(lock: &MultiLock) {
    for _ in 0..20 {
        let probe = lock
            .try_acquire("settle-probe")
            .await
            .expect("probe is free");
        if probe.release().await.failed.is_empty() {
            return;
        }
    }
    panic!("no probe release was answered by every node in 20 tries");
}

/// The hold counts of one key expected on every node, kept in step with
/// each acquire and release of one owner.
struct Model<'a> {
    testbed: &'a Testbed,
    key: &'a str,
    token: String,
    expected: Vec<usize>,
}

impl<'a> Model<'a> {
    /// A model of a key no one held before.
    fn new(testbed: &'a Testbed, key: &'a str, token: &str) -> Model<'a> {
        Model {
            testbed,
            key,
            token: token.to_string(),
            expected: vec![0; testbed.len()],
        }
    }

    /// Records a hold just taken through `lock` and returns the nodes it
    /// landed on: every node that confirmed it, and those of the nodes
    /// still unanswered at the decision whose request had been written.
    async fn took(&mut self, lock: &MultiLock, guard: &LockGuard) -> Vec<bool> {
        assert_eq!(guard.token(), self.token, "a hold of another owner");
        settle(lock).await;
        let now = counts(self.testbed, self.key);
        let landed: Vec<bool> = now
            .iter()
            .zip(&self.expected)
            .zip(guard.nodes())
            .map(|((now, before), (url, hold))| {
                let landed = *now == before + 1;
                assert!(
                    landed || now == before,
                    "{url}: count {before} -> {now} for one hold"
                );
                match hold {
                    Hold::Held => assert!(landed, "{url} confirmed a hold it does not have"),
                    Hold::NotHeld => assert!(!landed, "{url} refused a hold it has"),
                    _ => {}
                }
                landed
            })
            .collect();
        assert!(
            landed.iter().filter(|l| **l).count() >= 2,
            "no quorum: {landed:?}"
        );
        if landed.contains(&false) {
            eprintln!("note: a hold of {:?} missed a node: {landed:?}", self.key);
        }
        for (e, l) in self.expected.iter_mut().zip(&landed) {
            *e += usize::from(*l);
        }
        self.check("after an acquire");
        landed
    }

    /// Records the release of a hold that landed on `landed` and checks the
    /// nodes: at once when every node answered the release; otherwise after
    /// the release to the slow nodes, finished in the background, landed
    /// (bounded wait).
    ///
    /// A node where the hold landed gives it back (and keeps the key while
    /// other holds remain); every other node reports it not held, even
    /// while the owner's other holds are there.
    async fn released(&mut self, landed: &[bool], report: &ReleaseReport, what: &str) {
        for (e, l) in self.expected.iter_mut().zip(landed) {
            *e -= usize::from(*l);
        }
        if report.failed.is_empty() {
            let released = landed.iter().filter(|l| **l).count();
            let kept = landed
                .iter()
                .zip(&self.expected)
                .filter(|(l, e)| **l && **e > 0)
                .count();
            assert_eq!(
                (report.released, report.kept, report.not_held),
                (released, kept, landed.len() - released),
                "{what}: (released, kept, not_held) for a hold that landed on {landed:?}: {report:?}"
            );
        }
        if !report.failed.is_empty() {
            eprintln!("note: {what}: a node did not answer the release in time: {report:?}");
            let waiting = format!("{what}: the background release to reach every node");
            common::wait_for(&waiting, Duration::from_secs(5), || {
                counts(self.testbed, self.key) == self.expected
            })
            .await;
        }
        self.check(what);
    }

    /// Every node has the expected count; the key carries our token where
    /// the count is above zero and is gone where it is zero.
    fn check(&self, what: &str) {
        assert_eq!(counts(self.testbed, self.key), self.expected, "{what}");
        let values: Vec<Option<String>> = self
            .expected
            .iter()
            .map(|e| (*e > 0).then(|| self.token.clone()))
            .collect();
        assert_eq!(common::values(self.testbed, self.key), values, "{what}");
    }

    /// The depth on every node that holds the key.
    fn depths(&self) -> Vec<usize> {
        self.expected.iter().copied().filter(|e| *e > 0).collect()
    }
}

/// Waits until the guard's validity deadline has passed (the event is the
/// deadline itself; the loop is bounded).
async fn outlive(guard: &LockGuard) {
    for _ in 0..100 {
        if !guard.is_held() {
            return;
        }
        tokio::time::sleep(guard.validity() + Duration::from_millis(1)).await;
    }
    panic!("guard still held after 100 waits");
}

/// Why a guard is no longer held, for failure messages.
fn why(guard: &LockGuard) -> String {
    match guard.lost().now_or_never() {
        Some(notice) => format!(
            "{} (declared {:?} before its deadline)",
            notice.reason,
            notice.deadline.saturating_since(notice.at)
        ),
        None => "not lost".to_string(),
    }
}

fn assert_contended(result: Result<LockGuard, Error>, key: &str) {
    match result {
        Err(Error::Contended { key: named, .. }) => assert_eq!(named, key),
        other => panic!("expected Contended on {key:?}, got {other:?}"),
    }
}

/// An `acquire*` with a wait budget that only ever met contention.
fn assert_waited_out_contended(result: Result<LockGuard, Error>, key: &str) {
    match result {
        Err(Error::WaitBudgetExhausted {
            key: named, last, ..
        }) => {
            assert_eq!(named, key);
            assert!(
                matches!(*last, Error::Contended { .. }),
                "last attempt: {last:?}"
            );
        }
        other => panic!("expected WaitBudgetExhausted(Contended) on {key:?}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_holds_count_up_and_down_and_only_the_last_release_frees_the_key() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(common::lock(&testbed)).await;
    let other = common::connected(common::lock(&testbed)).await;
    let key = "ledger";

    let outer = lock.try_acquire(key).await.expect("free");
    let token = outer.token().to_string();
    let mut model = Model::new(&testbed, key, &token);
    let mut landed = vec![model.took(&lock, &outer).await];

    // Depth 2 and 3: each nested guard re-enters from the one before it.
    let g2 = outer.reenter().await.expect("depth 2");
    landed.push(model.took(&lock, &g2).await);
    let g3 = g2.reenter().await.expect("depth 3");
    landed.push(model.took(&lock, &g3).await);
    // Depth 4 through the owner, depth 5 from that guard's read-only handle.
    let g4 = lock
        .acquire_as(&outer.owner(), key, Wait::up_to(WAIT))
        .await
        .expect("depth 4 via acquire_as");
    landed.push(model.took(&lock, &g4).await);
    let g5 = g4.handle().reenter().await.expect("depth 5");
    landed.push(model.took(&lock, &g5).await);
    if landed.iter().all(|l| !l.contains(&false)) {
        // The usual case: every hold reached every node.
        assert_eq!(counts(&testbed, key), vec![5; 3]);
    }
    assert!(
        model.depths().iter().all(|d| *d <= 5),
        "{:?}",
        model.expected
    );

    for g in [&g2, &g3, &g4, &g5] {
        assert_eq!(g.token(), token, "one owner, one token");
        assert_eq!(g.owner(), outer.owner());
        assert!(g.is_held());
    }
    assert_contended(other.try_acquire(key).await, key);

    // Inner guards released out of order; the outer stays held throughout.
    let outer_landed = landed.remove(0);
    let mut inner: Vec<Option<_>> = [("g2", g2), ("g3", g3), ("g4", g4), ("g5", g5)]
        .into_iter()
        .zip(landed)
        .map(Some)
        .collect();
    // g3, g5, g2, g4: neither the order of taking nor its reverse.
    for i in [1, 3, 0, 2] {
        let ((name, guard), landed) = inner[i].take().expect("each once");
        let before = model.expected.clone();
        let report = guard.release().await;
        assert!(report.was_held, "{name}: {report:?}");
        model.released(&landed, &report, name).await;
        assert!(report.kept > 0, "{name}: other holds remain: {report:?}");
        assert!(
            model.expected.iter().zip(&before).all(|(a, b)| a <= b),
            "{name}: a count went up"
        );
        assert!(outer.is_held(), "an inner release ended the outer hold");
        assert_contended(other.try_acquire(key).await, key);
    }
    assert_eq!(
        model.expected,
        outer_landed
            .iter()
            .map(|l| usize::from(*l))
            .collect::<Vec<_>>()
    );

    let report = outer.release().await;
    assert!(report.was_held);
    model
        .released(&outer_landed, &report, "the last release")
        .await;
    assert_eq!(report.kept, 0, "{report:?}");
    assert_eq!(common::values(&testbed, key), vec![None; 3], "deleted");

    let next = other
        .try_acquire(key)
        .await
        .expect("another owner takes it at once");
    assert_ne!(next.token(), token);
    assert_eq!(next.release().await.kept, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outer_guard_may_go_first_and_the_inner_keeps_the_key() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(common::lock(&testbed)).await;
    let other = common::connected(common::lock(&testbed)).await;
    let key = "nest";

    let outer = lock.try_acquire(key).await.expect("free");
    let mut model = Model::new(&testbed, key, outer.token());
    let outer_landed = model.took(&lock, &outer).await;
    let inner = outer.reenter().await.expect("re-enter");
    let inner_landed = model.took(&lock, &inner).await;

    let report = outer.release().await;
    model.released(&outer_landed, &report, "outer first").await;
    assert!(
        report.kept >= 2,
        "the inner hold keeps a quorum: {report:?}"
    );
    assert!(inner.is_held(), "the outer release ended the inner hold");
    assert_eq!(
        model.expected,
        inner_landed
            .iter()
            .map(|l| usize::from(*l))
            .collect::<Vec<_>>()
    );
    assert_contended(other.try_acquire(key).await, key);

    let report = inner.release().await;
    model.released(&inner_landed, &report, "inner last").await;
    assert_eq!(report.kept, 0, "{report:?}");
    assert_eq!(common::values(&testbed, key), vec![None; 3]);
    other.try_acquire(key).await.expect("free").release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_owner_can_neither_reenter_nor_touch_our_holds() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(common::lock(&testbed)).await;
    let intruder = common::connected(common::lock(&testbed)).await;
    let key = "vault";

    let outer = lock.try_acquire(key).await.expect("free");
    let token = outer.token().to_string();
    let mut model = Model::new(&testbed, key, &token);
    let outer_landed = model.took(&lock, &outer).await;
    let inner = outer.reenter().await.expect("re-enter");
    let inner_landed = model.took(&lock, &inner).await;

    // Another client (a fresh owner) is refused; so is a plain acquire on
    // our own client, which is a fresh owner too.
    assert_contended(intruder.try_acquire(key).await, key);
    assert_contended(lock.try_acquire(key).await, key);
    // A valid token that is not ours: refused, on either client.
    let stranger = Owner::from_token(Owner::new().token()).expect("valid token");
    assert_ne!(stranger.token(), token);
    let short = Duration::from_millis(200);
    assert_waited_out_contended(
        lock.acquire_as(&stranger, key, Wait::up_to(short)).await,
        key,
    );
    assert_waited_out_contended(
        intruder
            .acquire_as(&stranger, key, Wait::up_to(short))
            .await,
        key,
    );
    // A set containing our key: refused as a whole, and the free name of
    // the set is not left behind.
    match intruder.try_acquire_all(&[key, "vault-annex"]).await {
        Err(Error::Contended { .. }) => {}
        other => panic!("expected Contended, got {other:?}"),
    }
    common::wait_until_gone(&testbed, "vault-annex", "the refused set was rolled back").await;
    settle(&intruder).await;
    settle(&lock).await;
    model.check("after the refused attempts");

    // Tokens that are not what `Owner::token` gives are rejected by name.
    let upper = token.to_ascii_uppercase();
    let longer = format!("{token}0");
    let not_hex = "g".repeat(32);
    for bad in ["", "worker-1", &upper, &token[1..], &longer, &not_hex] {
        match Owner::from_token(bad) {
            Err(Error::InvalidOwner { token: named, .. }) => assert_eq!(named, bad),
            other => panic!("{bad:?} accepted: {other:?}"),
        }
    }

    // The intruder's own guard, on another name, released: ours untouched.
    let theirs = intruder.try_acquire("vault-other").await.expect("free");
    let report = theirs.release().await;
    assert_eq!(report.kept, 0, "{report:?}");
    model.check("after the intruder's release");
    assert!(outer.is_held() && inner.is_held());

    let report = inner.release().await;
    model.released(&inner_landed, &report, "inner").await;
    let report = outer.release().await;
    model.released(&outer_landed, &report, "outer").await;
    assert_eq!(report.kept, 0);
    assert_eq!(common::values(&testbed, key), vec![None; 3]);
    intruder
        .try_acquire(key)
        .await
        .expect("free once we are done")
        .release()
        .await;
}

/// A lock with a short TTL and no watchdog, and its guards on "lease":
/// depth 3, then the keys expire on every node.
async fn expired_depth_three(testbed: &Testbed) -> (MultiLock, Owner, Vec<LockGuard>) {
    let ttl = Duration::from_millis(800);
    let lock = common::connected(common::lock_with(testbed, |b| {
        b.ttl(ttl).node_timeout(ttl / 10)
    }))
    .await;
    let outer = lock
        .acquire("lease", Wait::up_to(WAIT))
        .await
        .expect("free");
    assert!(!outer.is_watched());
    let owner = outer.owner();
    let mut model = Model::new(testbed, "lease", owner.token());
    model.took(&lock, &outer).await;
    let g2 = outer.reenter().await.expect("depth 2");
    model.took(&lock, &g2).await;
    let g3 = g2.reenter().await.expect("depth 3");
    model.took(&lock, &g3).await;
    assert!(model.depths().contains(&3), "{:?}", model.expected);

    common::wait_until_gone(testbed, "lease", "every hold expired").await;
    let guards = vec![outer, g2, g3];
    for g in &guards {
        // Each deadline comes before its key's expiry on any node.
        assert!(!g.is_held(), "held after its keys expired");
    }
    (lock, owner, guards)
}

/// The same owner takes "lease" again after its keys expired, with a TTL
/// that outlives the test; returns the guard and where it landed.
async fn fresh_hold<'a>(
    testbed: &'a Testbed,
    lock: &MultiLock,
    owner: &Owner,
) -> (LockGuard, Vec<bool>, Model<'a>) {
    let mut fresh = lock
        .acquire_as(owner, "lease", Wait::up_to(WAIT))
        .await
        .expect("the same owner takes it again");
    fresh
        .extend(Duration::from_secs(30))
        .await
        .expect("extend the new hold");
    let mut model = Model::new(testbed, "lease", owner.token());
    let landed = model.took(lock, &fresh).await;
    // The count starts over: 1, not 4.
    assert_eq!(
        model.depths(),
        vec![1; landed.iter().filter(|l| **l).count()]
    );
    (fresh, landed, model)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_keys_expire_the_count_starts_over_and_stale_releases_keep_the_new_hold() {
    let testbed = Testbed::start(3).expect("testbed");
    let (lock, owner, stale) = expired_depth_three(&testbed).await;
    let (fresh, landed, mut model) = fresh_hold(&testbed, &lock, &owner).await;

    for (i, g) in stale.into_iter().enumerate() {
        let report = g.release().await;
        assert!(!report.was_held, "stale guard {i}: {report:?}");
        // Nothing of the stale holds is left: the counts stay as they are,
        // and every node reports the hold not held (0 released, 0 kept, 3
        // not held), although the same owner holds the key there again.
        model
            .released(&[false; 3], &report, &format!("stale guard {i}"))
            .await;
        assert!(fresh.is_held());
    }

    let report = fresh.release().await;
    assert!(report.was_held);
    model.released(&landed, &report, "the new hold").await;
    assert_eq!(report.kept, 0, "{report:?}");
    assert_eq!(common::values(&testbed, "lease"), vec![None; 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_nested_holds_and_the_inner_outlives_the_outer() {
    // The node timeout is the largest allowed (a tenth of the TTL), so that
    // a busy machine does not time out live nodes.
    let ttl = Duration::from_secs(2);
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(common::lock_with(&testbed, |b| {
        b.ttl(ttl).node_timeout(ttl / 10).watchdog(true)
    }))
    .await;
    let contender = common::connected(common::lock(&testbed)).await;
    let key = "job";

    let outer = lock.try_acquire(key).await.expect("free");
    let inner = outer.reenter().await.expect("re-enter");
    assert!(
        outer.is_watched() && inner.is_watched(),
        "the watchdog carries over"
    );
    let token = outer.token().to_string();

    // Time is what is under test: hold for well past two TTLs.
    tokio::time::sleep(ttl * 5 / 2).await;
    assert!(
        outer.is_held(),
        "outer lost after 2.5 TTLs: {}",
        why(&outer)
    );
    assert!(
        inner.is_held(),
        "inner lost after 2.5 TTLs: {}",
        why(&inner)
    );
    // A renewal re-takes a hold on a node its acquire did not reach, so
    // both holds are on every node once a renewal heard from all of them.
    common::wait_for("both holds on every node", ttl * 2, || {
        counts(&testbed, key) == vec![2; 3]
    })
    .await;
    assert_eq!(common::values(&testbed, key), vec![Some(token.clone()); 3]);
    assert_contended(contender.try_acquire(key).await, key);

    let report = outer.release().await;
    assert!(report.was_held);
    // Both holds were on every node: each node that answered kept the key.
    assert_eq!(report.released + report.failed.len(), 3, "{report:?}");
    assert_eq!(report.kept, report.released, "{report:?}");
    // A node slower than the node timeout gets the release in the
    // background.
    common::wait_for("the outer hold gone from every node", ttl, || {
        counts(&testbed, key) == vec![1; 3]
    })
    .await;
    let outer_released = Stamp::now();

    // The inner hold alone keeps the key alive, renewed, for several TTLs.
    tokio::time::sleep(ttl * 3).await;
    assert!(
        inner.is_held(),
        "inner lost after the outer's release: {}",
        why(&inner)
    );
    let renewal = inner.last_renewal().expect("renewed");
    assert!(
        renewal.started > outer_released,
        "no renewal since the outer's release"
    );
    assert_eq!(counts(&testbed, key), vec![1; 3]);
    assert_eq!(common::values(&testbed, key), vec![Some(token.clone()); 3]);
    for node in testbed.nodes() {
        let pttl = common::pttl_on(node, key);
        assert!(
            pttl > 0 && pttl <= ttl.as_millis() as i64,
            "kept alive by renewals, not by a long TTL: pttl {pttl} on {}",
            node.url()
        );
    }
    assert_contended(contender.try_acquire(key).await, key);

    let report = inner.release().await;
    assert!(report.was_held);
    assert_eq!(report.released + report.failed.len(), 3, "{report:?}");
    assert_eq!(report.kept, 0, "{report:?}");
    common::wait_until_gone(&testbed, key, "the last hold released").await;
    assert_eq!(lock.stats().lost, 0);
    assert_eq!(lock.stats().watched, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_token_passed_as_text_reenters_from_another_client() {
    let testbed = Testbed::start(3).expect("testbed");
    let here = common::connected(common::lock(&testbed)).await;
    let key = "report";

    let outer = here.try_acquire(key).await.expect("free");
    let mut model = Model::new(&testbed, key, outer.token());
    let outer_landed = model.took(&here, &outer).await;
    // What would cross a process boundary: the node URLs and the token text.
    let urls = testbed.urls();
    let text: String = outer.token().to_string();

    let there = MultiLock::new(
        LockConfig::builder()
            .nodes(urls.clone())
            .build()
            .expect("config"),
    );
    let owner = Owner::from_token(&text).expect("a token from `token()` is valid");
    let inner = there
        .acquire_as(&owner, key, Wait::up_to(WAIT))
        .await
        .expect("the same owner re-enters from another client");
    assert_eq!(inner.token(), text);
    let inner_landed = model.took(&there, &inner).await;

    // A third "process" with its own owner is refused.
    let elsewhere = MultiLock::new(LockConfig::builder().nodes(urls).build().expect("config"));
    assert_contended(elsewhere.try_acquire(key).await, key);

    let report = inner.release().await;
    model
        .released(&inner_landed, &report, "the other client's hold")
        .await;
    assert!(report.kept >= 2, "{report:?}");
    assert!(outer.is_held());
    let report = outer.release().await;
    model
        .released(&outer_landed, &report, "the first client's hold")
        .await;
    assert_eq!(report.kept, 0);
    assert_eq!(common::values(&testbed, key), vec![None; 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_or_lost_hold_is_never_reentered() {
    let testbed = Testbed::start(3).expect("testbed");
    let lock = common::connected(common::lock(&testbed)).await;

    // Released: a handle outlives its guard.
    let guard = lock.try_acquire("gone").await.expect("free");
    let handle = guard.handle();
    guard.release().await;
    match handle.reenter().await {
        Err(Error::Lost {
            key,
            reason: LostReason::Released,
        }) => assert_eq!(key, "gone"),
        other => panic!("expected Lost(Released), got {other:?}"),
    }
    assert_eq!(common::values(&testbed, "gone"), vec![None; 3]);

    // Expired: past its validity deadline, and its keys gone.
    let ttl = Duration::from_millis(300);
    let short = common::connected(common::lock_with(&testbed, |b| {
        b.ttl(ttl).node_timeout(ttl / 10)
    }))
    .await;
    let guard = short
        .acquire("expired", Wait::up_to(WAIT))
        .await
        .expect("free");
    outlive(&guard).await;
    common::wait_until_gone(&testbed, "expired", "its TTL ran out").await;
    match guard.reenter().await {
        Err(Error::Lost {
            key,
            reason: LostReason::ValidityExpired,
        }) => assert_eq!(key, "expired"),
        other => panic!("expected Lost(ValidityExpired), got {other:?}"),
    }
    assert_eq!(
        common::values(&testbed, "expired"),
        vec![None; 3],
        "a refused re-entry writes nothing"
    );
    guard.release().await;

    // Lost: the keys were deleted behind the holder's back.
    let mut guard = lock.try_acquire("vanished").await.expect("free");
    // The acquire decided at the quorum; the third node's write may still
    // be on its way (a busy machine), and a DEL before it would leave it.
    common::wait_for("the acquire on every node", Duration::from_secs(10), || {
        common::values(&testbed, "vanished")
            .iter()
            .all(Option::is_some)
    })
    .await;
    common::on_every_node(&testbed, &["DEL", "vanished"]);
    assert!(matches!(
        guard.extend(Duration::from_secs(30)).await,
        Err(Error::Lost {
            reason: LostReason::KeysGone(_),
            ..
        })
    ));
    match guard.reenter().await {
        Err(Error::Lost {
            reason: LostReason::KeysGone(_),
            ..
        }) => {}
        other => panic!("expected Lost(KeysGone), got {other:?}"),
    }
    assert_eq!(common::values(&testbed, "vanished"), vec![None; 3]);
    guard.release().await;
}
