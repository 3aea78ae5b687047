use proptest::prelude::*;

use super::*;
use crate::chaos::history::{Event, Mode, Target, What};
use crate::chaos::synth::{self, Builder, ms};

fn clean() -> Builder {
    let mut b = Builder::new();
    let mut k0 = (0, 0);
    let mut k1 = (0, 0);
    b.clean_hold("k0", "w0-1", 10.0, 30.0, 1, &mut k0)
        .clean_hold("k1", "w1-1", 12.0, 40.0, 1, &mut k1)
        .clean_hold("k0", "w1-2", 31.0, 50.0, 2, &mut k0)
        .clean_hold("k0", "w2-1", 50.0, 70.0, 3, &mut k0)
        .clean_hold("k1", "w0-2", 41.0, 60.0, 2, &mut k1)
        .final_values(
            ms(200.0),
            &[("k0", 3), ("k1", 2)],
            &[("k0", 3), ("k1", 2)],
            &[],
        );
    b
}

fn run(b: &Builder) -> CheckReport {
    check(&b.sorted(), &Floors::none())
}

#[test]
fn a_clean_history_passes() {
    let report = run(&clean());
    assert_eq!(report.verdict, Verdict::Pass, "{}", report.summary_table());
    assert!(report.violations.is_empty());
    assert!(report.reasons.is_empty());
    let s = &report.stats;
    assert_eq!((s.attempts, s.acquisitions, s.failed), (5, 5, 0));
    assert_eq!(s.acquisitions_per_key["k0"], 3);
    assert_eq!(s.fenced_writes_accepted, 5);
    assert_eq!(s.unfenced_writes, 5);
    assert_eq!(s.token_less_holds, 0);
    assert!(s.final_seen);
    // Touching intervals (release at 50, next won at 50) do not overlap.
    assert_eq!(report.count(ViolationKind::Overlap), 0);
}

#[test]
fn the_workers_service_counters_are_summed_into_the_figures() {
    let mut b = clean();
    for (worker, granted) in [("w0", 1), ("w1", 2)] {
        b.push(
            ms(150.0),
            worker,
            What::Services {
                acquired: 3,
                granted,
                handoffs: 1,
            },
        );
    }
    let report = run(&b);
    assert_eq!(report.verdict, Verdict::Pass, "{}", report.summary_table());
    let s = &report.stats;
    assert_eq!((s.services_acquired, s.granted, s.handoffs), (6, 3, 2));
    assert!(
        report.summary_table().contains("3 of 6"),
        "{}",
        report.summary_table()
    );
}

#[test]
fn overlapping_holds_fail() {
    let mut b = clean();
    let mut v = (3, 3);
    b.clean_hold("k0", "w3-1", 65.0, 80.0, 4, &mut v);
    let report = run(&b);
    assert_eq!(report.verdict, Verdict::Fail);
    assert_eq!(report.count(ViolationKind::Overlap), 1);
    let o = &report.violations[0];
    assert_eq!(o.kind, ViolationKind::Overlap);
    assert_eq!(o.holds, ["w2-1", "w3-1"]);
    assert_eq!((o.start, o.end), (ms(65.0), ms(70.0)));
    assert!(o.detail.contains("5.0 ms"), "{}", o.detail);
    // Where each holder believed it held, for the one who reads a failure.
    assert!(o.detail.contains("won on n0,n1,n2"), "{}", o.detail);
    assert!(report.reasons[0].contains("overlap"));
}

#[test]
fn a_killed_holder_s_interval_ends_at_the_kill() {
    // w0-1 never releases; its deadline is 100 ms after winning.
    let base = |b: &mut Builder| {
        b.attempt(ms(0.0), "k0", "w0-1")
            .won(ms(1.0), "k0", "w0-1", ms(101.0));
    };
    // A kill before the win does not end it.
    let mut b = Builder::new();
    base(&mut b);
    b.fault(ms(0.5), 1, CLIENT_CRASH, "w0")
        .fault_end(ms(0.7), 1)
        .won(ms(50.0), "k0", "w1-1", ms(150.0));
    let report = run(&b);
    assert_eq!(report.count(ViolationKind::Overlap), 1);
    assert_eq!(report.stats.killed_holds, 0);
    assert_eq!(report.stats.free_after_kill_max_ms, None);
    assert_eq!(report.stats.killed_holds_not_followed, 0);
    // Killed at 20 ms: a win at 30 ms is fine, one at 10 ms is not.
    // The first frees the key 10 ms after the kill; after the kill,
    // the second is followed by no win.
    for (won, overlaps, free, not_followed) in [(30.0, 0, Some(10.0), 0), (10.0, 1, None, 1)] {
        let mut b = Builder::new();
        base(&mut b);
        b.fault(ms(20.0), 1, CLIENT_CRASH, "w0")
            .fault_end(ms(500.0), 1)
            .won(ms(won), "k0", "w1-1", ms(won + 100.0));
        let report = run(&b);
        assert_eq!(report.count(ViolationKind::Overlap), overlaps, "{won}");
        assert_eq!(report.stats.killed_holds, 1);
        let free_ms = report.stats.free_after_kill_max_ms;
        assert_eq!(free_ms.map(|v| (v * 1e3).round() / 1e3), free, "{won}");
        assert_eq!(report.stats.killed_holds_not_followed, not_followed);
        let table = report.summary_table();
        let shown = free.map_or("-".to_string(), |v| format!("{v:.0} ms"));
        assert!(
            table.contains(&format!("free after kill max{shown:>18}")),
            "{table}"
        );
        let h = holds(&b.sorted());
        assert_eq!((h[0].end, h[0].ended_by), (ms(20.0), EndedBy::Kill));
    }
    // A crash of another worker ends nothing.
    let mut b = Builder::new();
    base(&mut b);
    b.fault(ms(20.0), 1, CLIENT_CRASH, "w5")
        .won(ms(30.0), "k0", "w1-1", ms(130.0));
    assert_eq!(run(&b).count(ViolationKind::Overlap), 1);
}

#[test]
fn the_interval_ends_at_the_earlier_of_release_and_deadline() {
    // Released before the deadline: ends at the release.
    let mut b = Builder::new();
    b.won(ms(0.0), "k0", "w0-1", ms(100.0))
        .release(ms(40.0), "k0", "w0-1", ms(100.0))
        .won(ms(50.0), "k0", "w1-1", ms(150.0));
    let h = holds(&b.sorted());
    assert_eq!((h[0].end, h[0].ended_by), (ms(40.0), EndedBy::Release));
    assert_eq!(run(&b).count(ViolationKind::Overlap), 0);
    // Released after its deadline (a paused holder): ends at the
    // deadline, so a win after the deadline is no overlap.
    let mut b = Builder::new();
    b.won(ms(0.0), "k0", "w0-1", ms(100.0))
        .won(ms(120.0), "k0", "w1-1", ms(220.0))
        .release(ms(500.0), "k0", "w0-1", ms(100.0));
    let h = holds(&b.sorted());
    assert_eq!((h[0].end, h[0].ended_by), (ms(100.0), EndedBy::Deadline));
    assert_eq!(run(&b).count(ViolationKind::Overlap), 0);
    // But a win before that deadline is one.
    let mut b = Builder::new();
    b.won(ms(0.0), "k0", "w0-1", ms(100.0))
        .won(ms(90.0), "k0", "w1-1", ms(190.0))
        .release(ms(500.0), "k0", "w0-1", ms(100.0));
    assert_eq!(run(&b).count(ViolationKind::Overlap), 1);
}

#[test]
fn renewals_extend_the_interval() {
    let mut b = Builder::new();
    b.won(ms(0.0), "k0", "w0-1", ms(100.0))
        .renew(ms(33.0), "k0", "w0-1", ms(133.0))
        .renew(ms(66.0), "k0", "w0-1", ms(166.0))
        .lost(ms(120.0), "k0", "w0-1", ms(166.0))
        .won(ms(150.0), "k0", "w1-1", ms(250.0));
    let report = run(&b);
    let h = holds(&b.sorted());
    assert_eq!(h[0].deadline, ms(166.0));
    assert_eq!(h[0].renewals, 2);
    assert!(h[0].lost);
    // The loss notice does not end the interval: the deadline does.
    assert_eq!(report.count(ViolationKind::Overlap), 1);
    assert_eq!(report.stats.renewals, 2);
    assert_eq!(report.stats.losses_reported, 1);
    // A Lost deadline alone also counts as a reported deadline.
    let mut b = Builder::new();
    b.won(ms(0.0), "k0", "w0-1", ms(100.0))
        .lost(ms(50.0), "k0", "w0-1", ms(140.0))
        .won(ms(120.0), "k0", "w1-1", ms(220.0));
    assert_eq!(run(&b).count(ViolationKind::Overlap), 1);
}

#[test]
fn tokens_must_increase_in_won_order() {
    let mut b = Builder::new();
    b.won(ms(0.0), "k0", "w0-1", ms(100.0))
        .token(ms(0.1), "k0", "w0-1", 5)
        .release(ms(10.0), "k0", "w0-1", ms(100.0))
        .won(ms(20.0), "k0", "w1-1", ms(120.0))
        .release(ms(30.0), "k0", "w1-1", ms(120.0))
        .won(ms(40.0), "k0", "w2-1", ms(140.0))
        .token(ms(40.1), "k0", "w2-1", 5)
        .release(ms(50.0), "k0", "w2-1", ms(140.0))
        .won(ms(60.0), "k0", "w3-1", ms(160.0))
        .token(ms(60.1), "k0", "w3-1", 3)
        .release(ms(70.0), "k0", "w3-1", ms(160.0))
        .won(ms(80.0), "k0", "w4-1", ms(180.0))
        .token(ms(80.1), "k0", "w4-1", 6)
        // Another key's tokens are independent.
        .won(ms(90.0), "k1", "w5-1", ms(190.0))
        .token(ms(90.1), "k1", "w5-1", 1);
    let report = run(&b);
    assert_eq!(report.count(ViolationKind::TokenRegression), 2);
    assert_eq!(report.count(ViolationKind::Overlap), 0);
    assert_eq!(report.stats.token_less_holds, 1);
    let regressions: Vec<&Vec<String>> = report
        .violations
        .iter()
        .filter(|v| v.kind == ViolationKind::TokenRegression)
        .map(|v| &v.holds)
        .collect();
    assert_eq!(regressions, [&vec!["w0-1", "w2-1"], &vec!["w0-1", "w3-1"]]);
    assert_eq!(report.verdict, Verdict::Fail);
}

#[test]
fn fenced_lost_updates_fail() {
    // Two accepted writes read 2.
    let mut b = clean();
    b.won(ms(100.0), "k0", "w3-1", ms(200.0))
        .write(
            ms(101.0),
            "k0",
            "w3-1",
            Target::Fenced,
            Some(9),
            2,
            true,
            None,
        )
        .release(ms(110.0), "k0", "w3-1", ms(200.0));
    let report = run(&b);
    assert_eq!(report.verdict, Verdict::Fail);
    let lost: Vec<&Violation> = report
        .violations
        .iter()
        .filter(|v| v.kind == ViolationKind::FencedLostUpdate)
        .collect();
    // The duplicate read; it explains the final value (3) below the 4
    // accepted writes, so that is not reported again.
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0].holds, ["w2-1", "w3-1"]);
    assert_eq!(report.stats.lost_updates_fenced, 1);
    // A shortfall beyond the duplicates is.
    b.final_values(ms(300.0), &[("k0", 2)], &[], &[]);
    let report = run(&b);
    assert_eq!(report.count(ViolationKind::FencedLostUpdate), 2);
    let last = report
        .violations
        .iter()
        .rfind(|v| v.kind == ViolationKind::FencedLostUpdate);
    let detail = &last.unwrap().detail;
    assert!(
        detail.contains("ended at 2 after 4 accepted writes: 2 lost, 1 of"),
        "{detail}"
    );
    assert_eq!(report.stats.lost_updates_fenced, 2);
    // Refused writes are not updates.
    let mut b = clean();
    b.won(ms(100.0), "k0", "w3-1", ms(200.0)).write(
        ms(101.0),
        "k0",
        "w3-1",
        Target::Fenced,
        Some(1),
        2,
        false,
        Some(3),
    );
    let report = run(&b);
    assert_eq!(report.verdict, Verdict::Pass);
    assert_eq!(report.stats.fenced_writes_rejected, 1);
    // A final value below the accepted writes alone is a loss.
    let mut b = clean();
    b.final_values(ms(300.0), &[("k0", 2)], &[], &[]);
    let report = run(&b);
    assert_eq!(report.count(ViolationKind::FencedLostUpdate), 1);
    assert_eq!(report.verdict, Verdict::Fail);
}

#[test]
fn keys_left_fail() {
    let mut b = clean();
    b.final_values(ms(300.0), &[], &[], &["n2:k0", "n4:k1"]);
    let report = run(&b);
    assert_eq!(report.verdict, Verdict::Fail);
    assert_eq!(report.count(ViolationKind::KeysLeft), 2);
    let v = &report.violations[0];
    assert_eq!(v.key, "k0");
    assert!(v.detail.contains("n2"), "{}", v.detail);
}

/// w0-1 holds k0 from 10 to 30 ms (released at 30): keys found on node 2
/// at `probes` (ms), with `faults` (kind, target, start, end in ms).
fn left_after_release(probes: &[f64], faults: &[(&str, &str, f64, f64)]) -> CheckReport {
    let mut b = clean();
    for (i, (kind, target, start, end)) in faults.iter().enumerate() {
        b.fault(ms(*start), 100 + i as u32, kind, target)
            .fault_end(ms(*end), 100 + i as u32);
    }
    for t in probes {
        b.probe(ms(*t), 2, "k0", "w0-1");
    }
    run(&b)
}

#[test]
fn a_key_found_well_after_its_release_fails() {
    let late = 30.0 + released::BOUND as f64 / 1e6 + 50.0;
    // Within the bound: the release may still be on its way.
    let report = left_after_release(&[60.0, 200.0], &[]);
    assert_eq!(report.count(ViolationKind::KeyLeftAfterRelease), 0);
    assert_eq!(report.verdict, Verdict::Pass, "{}", report.summary_table());
    let report = left_after_release(&[late], &[]);
    assert_eq!(report.count(ViolationKind::KeyLeftAfterRelease), 1);
    assert_eq!(report.verdict, Verdict::Fail);
    let v = &report.violations[0];
    assert_eq!(
        (v.key.as_str(), v.holds.as_slice()),
        ("k0", &["w0-1".to_string()][..])
    );
    assert!(v.detail.contains("n2"), "{}", v.detail);
}

#[test]
fn a_fault_of_the_node_or_the_worker_restarts_the_bound() {
    let after = |end: f64| end + released::BOUND as f64 / 1e6;
    for target in ["n2", "n2:master", "w0"] {
        // Found while the fault is on, and soon after it ended: not judged.
        let report = left_after_release(
            &[500.0, after(1000.0) - 50.0],
            &[("node_pause", target, 20.0, 1000.0)],
        );
        assert_eq!(
            report.count(ViolationKind::KeyLeftAfterRelease),
            0,
            "{target}"
        );
        // Found well after it ended: judged.
        let report = left_after_release(
            &[after(1000.0) + 50.0],
            &[("node_pause", target, 20.0, 1000.0)],
        );
        assert_eq!(
            report.count(ViolationKind::KeyLeftAfterRelease),
            1,
            "{target}"
        );
    }
    // A fault of another node or worker excuses nothing.
    let report = left_after_release(
        &[after(30.0) + 50.0],
        &[
            ("node_pause", "n1", 20.0, 2000.0),
            ("client_pause", "w1", 20.0, 2000.0),
        ],
    );
    assert_eq!(report.count(ViolationKind::KeyLeftAfterRelease), 1);
}

#[test]
fn a_failover_may_bring_back_a_released_key_for_its_ttl() {
    let bound = released::BOUND as f64 / 1e6;
    // Replication of n2 cut at 25 ms (w0-1 held k0 then), the release at
    // 30 ms runs on the old master only, the replica is promoted at 400:
    // it still has the key, which lives out its TTL.
    let late = 400.0 + bound + 100.0;
    let report = left_after_release(&[late], &[("failover", "n2", 25.0, 400.0)]);
    assert_eq!(report.count(ViolationKind::KeyLeftAfterRelease), 0);
    // Over before the release: the call's last write on the new master
    // refreshed the key brought back, and its release left that entry.
    let report = left_after_release(&[late], &[("failover", "n2", 15.0, 25.0)]);
    assert_eq!(report.count(ViolationKind::KeyLeftAfterRelease), 0);
    // A failover of another node excuses nothing, nor one that began long
    // after the release (the replica had it by then).
    let report = left_after_release(&[late], &[("failover", "n1", 25.0, 400.0)]);
    assert_eq!(report.count(ViolationKind::KeyLeftAfterRelease), 1);
    let start = 30.0 + bound + 50.0;
    let report = left_after_release(
        &[start + 300.0 + bound + 100.0],
        &[("failover", "n2", start, start + 300.0)],
    );
    assert_eq!(report.count(ViolationKind::KeyLeftAfterRelease), 1);
}

/// n1 restarted empty from 100 to 150 ms, with a quarantine of 1 s when
/// `settings`; then one hold of k3 by a call started at `start` and won
/// at `won` (on nodes 0, 1 and 2), released 10 ms later.
fn won_after_a_restart(settings: bool, target: &str, start: f64, won: f64) -> CheckReport {
    let mut b = clean();
    if settings {
        b.push(
            ms(0.0),
            "chaos",
            What::Settings {
                quarantine_ms: 1_000,
            },
        );
    }
    b.fault(ms(100.0), 100, "crash_restart_empty", target)
        .fault_end(ms(150.0), 100)
        .attempt(ms(start), "k3", "w5-1")
        .won(ms(won), "k3", "w5-1", ms(won + 500.0))
        .release(ms(won + 10.0), "k3", "w5-1", ms(won + 500.0));
    run(&b)
}

#[test]
fn a_vote_from_a_restarted_node_before_its_quarantine_ends_fails() {
    let report = won_after_a_restart(true, "n1", 200.0, 210.0);
    assert_eq!(report.count(ViolationKind::VoteInQuarantine), 1);
    assert_eq!(report.verdict, Verdict::Fail);
    let v = &report.violations[0];
    assert_eq!(
        (v.key.as_str(), v.holds.as_slice()),
        ("k3", &["w5-1".to_string()][..])
    );
    assert!(v.detail.contains("n1"), "{}", v.detail);
    // Once the quarantine has passed (from the restart's start), the vote
    // counts; a call begun before the restart ended may have had the old
    // server's vote; another node's restart, or a history without the
    // settings, judges nothing.
    for report in [
        won_after_a_restart(true, "n1", 1_150.0, 1_160.0),
        won_after_a_restart(true, "n1", 120.0, 210.0),
        won_after_a_restart(true, "n4", 200.0, 210.0),
        won_after_a_restart(false, "n1", 200.0, 210.0),
    ] {
        assert_eq!(report.count(ViolationKind::VoteInQuarantine), 0);
        assert_eq!(report.verdict, Verdict::Pass, "{}", report.summary_table());
    }
}

#[test]
fn a_worker_killed_before_its_undo_was_through_is_not_judged() {
    let bound = released::BOUND as f64 / 1e6;
    // n2 cut off from 20 ms, w0 killed at 200 ms (its release, sent at
    // 30, still queued), n2 back at 1000: the queued acquire lands then,
    // and nobody is left to undo it.
    let report = left_after_release(
        &[1000.0 + bound + 100.0],
        &[
            ("net_partition", "n2", 20.0, 1000.0),
            (CLIENT_CRASH, "w0", 200.0, 201.0),
        ],
    );
    assert_eq!(report.count(ViolationKind::KeyLeftAfterRelease), 0);
    // Killed long after the undo was due on a node nothing hindered: the
    // key had to be gone by then.
    let report = left_after_release(
        &[30.0 + bound + 500.0],
        &[(
            CLIENT_CRASH,
            "w0",
            30.0 + bound + 100.0,
            30.0 + bound + 101.0,
        )],
    );
    assert_eq!(report.count(ViolationKind::KeyLeftAfterRelease), 1);
}

#[test]
fn a_rolled_back_attempt_must_leave_nothing_either() {
    let mut b = clean();
    b.attempt(ms(80.0), "k1", "w3-1")
        .failed(ms(90.0), "k1", "w3-1")
        .probe(ms(100.0), 0, "k1", "w3-1");
    assert_eq!(run(&b).count(ViolationKind::KeyLeftAfterRelease), 0);
    b.probe(
        ms(90.0 + released::BOUND as f64 / 1e6 + 10.0),
        0,
        "k1",
        "w3-1",
    );
    assert_eq!(run(&b).count(ViolationKind::KeyLeftAfterRelease), 1);
    // A key of an unknown owner, or of a call still going, is not judged.
    let mut b = clean();
    b.attempt(ms(80.0), "k1", "w3-1")
        .probe(ms(5000.0), 0, "k1", "w3-1")
        .probe(ms(5000.0), 0, "k1", "nobody-1");
    assert_eq!(run(&b).count(ViolationKind::KeyLeftAfterRelease), 0);
}

/// A holder paused past its deadline writes the unfenced counter late.
fn late_unfenced_writer() -> Builder {
    let mut b = Builder::new();
    b.won(ms(0.0), "k0", "w0-1", ms(100.0))
        .token(ms(0.1), "k0", "w0-1", 1)
        .won(ms(110.0), "k0", "w1-1", ms(210.0))
        .token(ms(110.1), "k0", "w1-1", 2)
        .write(
            ms(111.0),
            "k0",
            "w1-1",
            Target::Unfenced,
            None,
            0,
            true,
            None,
        )
        .write(
            ms(112.0),
            "k0",
            "w1-1",
            Target::Fenced,
            Some(2),
            0,
            true,
            None,
        )
        .release(ms(120.0), "k0", "w1-1", ms(210.0))
        // w0-1 read both before its pause; it resumes at 300 ms.
        .write(
            ms(300.0),
            "k0",
            "w0-1",
            Target::Unfenced,
            None,
            0,
            true,
            None,
        )
        .write(
            ms(300.5),
            "k0",
            "w0-1",
            Target::Fenced,
            Some(1),
            0,
            false,
            Some(2),
        )
        .release(ms(301.0), "k0", "w0-1", ms(100.0))
        .final_values(ms(400.0), &[("k0", 1)], &[("k0", 1)], &[]);
    b
}

#[test]
fn unfenced_lost_updates_fail_only_when_protected() {
    let b = late_unfenced_writer();
    let report = run(&b);
    assert_eq!(report.verdict, Verdict::Pass, "{}", report.summary_table());
    assert_eq!(report.count(ViolationKind::UnfencedLostUpdate), 1);
    assert_eq!(report.count(ViolationKind::WriteOutsideHold), 1);
    assert_eq!(report.count(ViolationKind::FencedLostUpdate), 0);
    assert_eq!(report.guaranteed_violations, 0);
    assert_eq!(report.unguaranteed_violations, 2);
    assert_eq!(report.failing_violations, 0);
    assert_eq!(report.stats.lost_updates_unfenced, 1);
    let late = report
        .violations
        .iter()
        .find(|v| v.kind == ViolationKind::WriteOutsideHold)
        .unwrap();
    assert!(!late.guaranteed);
    assert_eq!((late.start, late.end), (ms(100.0), ms(300.0)));

    let floors = Floors {
        unfenced_is_protected: true,
        ..Floors::none()
    };
    let report = check(&b.sorted(), &floors);
    assert_eq!(report.verdict, Verdict::Fail);
    assert_eq!(report.failing_violations, 1);
    assert_eq!(report.reasons, ["1 unfenced_lost_update violation(s)"]);
}

#[test]
fn coverage_below_a_floor_is_invalid() {
    let mut b = clean();
    b.fault(ms(5.0), 1, "node_pause", "n1")
        .fault_end(ms(20.0), 1)
        .fault(ms(45.0), 2, "net_delay", "n0");
    let events = b.sorted();
    let ok = Floors {
        min_acquisitions: 5,
        min_faults: 2,
        required_kinds: vec!["node_pause".into(), "net_delay".into()],
        // Attempts at 9, 11, 30, 40, 49 ms: 9 and 11 in the pause,
        // 49 in the unterminated delay.
        min_during_fault_ratio: 0.6,
        unfenced_is_protected: false,
    };
    let report = check(&events, &ok);
    assert_eq!(report.verdict, Verdict::Pass, "{}", report.summary_table());
    assert_eq!(report.stats.attempts_during_fault, 3);
    assert!((report.stats.attempts_during_fault_ratio - 0.6).abs() < 1e-9);
    assert_eq!(report.stats.acquisitions_during_fault, 3);
    let pause = &report.stats.faults_per_kind[1];
    assert_eq!((pause.kind.as_str(), pause.count), ("node_pause", 1));
    assert_eq!(pause.attempts_during, 2);
    assert!((pause.total_s - 0.015).abs() < 1e-9);

    let short = [
        Floors {
            min_acquisitions: 6,
            ..ok.clone()
        },
        Floors {
            min_faults: 3,
            ..ok.clone()
        },
        Floors {
            required_kinds: vec!["partition".into()],
            ..ok.clone()
        },
        Floors {
            min_during_fault_ratio: 0.61,
            ..ok.clone()
        },
    ];
    for floors in short {
        let report = check(&events, &floors);
        assert_eq!(report.verdict, Verdict::Invalid, "{floors:?}");
        assert_eq!(report.coverage_problems.len(), 1, "{floors:?}");
        assert!(report.reasons[0].starts_with("coverage: "));
    }
    // A violation makes it a failure whatever the coverage.
    let mut v = (3, 3);
    b.clean_hold("k0", "w3-1", 65.0, 80.0, 4, &mut v);
    let report = check(
        &b.sorted(),
        &Floors {
            min_acquisitions: 1000,
            ..ok
        },
    );
    assert_eq!(report.verdict, Verdict::Fail);
    assert_eq!(report.coverage_problems.len(), 1);
    assert!(
        report.reasons[0].contains("overlap"),
        "{:?}",
        report.reasons
    );
    assert!(
        report
            .reasons
            .last()
            .unwrap()
            .starts_with("coverage: only 6")
    );
}

#[test]
fn all_overlaps_are_counted_but_the_list_is_capped() {
    // 60 holds all overlapping each other: 1,770 pairs.
    let mut b = Builder::new();
    for i in 0..60 {
        b.won(ms(i as f64), "k0", &format!("w{i}-1"), ms(1000.0));
    }
    let report = run(&b);
    assert_eq!(report.count(ViolationKind::Overlap), 60 * 59 / 2);
    let listed = report
        .violations
        .iter()
        .filter(|v| v.kind == ViolationKind::Overlap)
        .count();
    assert_eq!(listed, MAX_REPORTED_PER_KIND);
    assert_eq!(
        report.violation_counts[0].listed,
        MAX_REPORTED_PER_KIND as u64
    );
}

#[test]
fn the_earliest_violations_are_listed() {
    // k0, checked first, has 60 holds all overlapping from 1 s on:
    // 1,770 pairs. k1 has one overlap, earlier than all of them.
    let mut b = Builder::new();
    for i in 0..60 {
        b.won(ms(1000.0 + i as f64), "k0", &format!("w{i}-1"), ms(5000.0));
    }
    b.won(ms(10.0), "k1", "w60-1", ms(110.0))
        .won(ms(20.0), "k1", "w61-1", ms(120.0));
    let report = run(&b);
    assert_eq!(report.count(ViolationKind::Overlap), 60 * 59 / 2 + 1);
    let listed: Vec<&Violation> = report
        .violations
        .iter()
        .filter(|v| v.kind == ViolationKind::Overlap)
        .collect();
    assert_eq!(listed.len(), MAX_REPORTED_PER_KIND);
    // Listed by time: the k1 overlap first.
    assert_eq!(listed[0].key, "k1");
    assert_eq!(listed[0].holds, ["w60-1", "w61-1"]);
    assert!(listed.windows(2).all(|w| w[0].start <= w[1].start));
    // Then the 999 earliest of k0: the 990 pairs of the holds won by
    // 1,044 ms, and 9 of the 45 the hold won at 1,045 ms makes.
    assert!(listed.iter().all(|v| v.start <= ms(1045.0)));
    let at_1045 = listed.iter().filter(|v| v.start == ms(1045.0)).count();
    assert_eq!(at_1045, 9);
    // Seconds from the first event (k1's first win, at 10 ms).
    assert!(
        (listed[0].start_s - 0.010).abs() < 1e-9,
        "{}",
        listed[0].start_s
    );
    assert!(
        (listed[1].start_s - 0.991).abs() < 1e-9,
        "{}",
        listed[1].start_s
    );
}

#[test]
fn a_read_of_the_largest_value_does_not_overflow() {
    let mut b = Builder::new();
    for (i, t) in [(0, 10.0), (1, 20.0)] {
        let hold = format!("w{i}-1");
        b.won(ms(t), "k0", &hold, ms(t + 5.0)).write(
            ms(t + 1.0),
            "k0",
            &hold,
            Target::Unfenced,
            None,
            u64::MAX - 1,
            true,
            None,
        );
    }
    let report = run(&b);
    assert_eq!(report.count(ViolationKind::UnfencedLostUpdate), 1);
    // The builder logs `read + 1`; the checker must not compute it.
    let mut events = b.sorted();
    for e in &mut events {
        if let What::Write { read, wrote, .. } = &mut e.what {
            (*read, *wrote) = (Some(u64::MAX), Some(u64::MAX));
        }
    }
    let report = check(&events, &Floors::none());
    let lost = &report.violations[0];
    assert_eq!(lost.kind, ViolationKind::UnfencedLostUpdate);
    assert!(
        lost.detail.contains("read 18446744073709551615"),
        "{}",
        lost.detail
    );
}

#[test]
fn the_report_serialises_and_prints() {
    let report = run(&late_unfenced_writer());
    let json = serde_json::to_string(&report).unwrap();
    assert!(json.contains("\"verdict\":\"pass\""), "{json}");
    assert!(json.contains("\"kind\":\"unfenced_lost_update\""));
    let back: CheckReport = serde_json::from_str(&json).unwrap();
    assert_eq!(back, report);
    let table = report.summary_table();
    for needle in ["verdict: PASS", "unfenced_lost_update", "lock name"] {
        assert!(table.contains(needle), "{needle}\n{table}");
    }
    // Fixed width: no line longer than the rules, also with violations.
    assert!(table.lines().all(|l| l.chars().count() <= 78), "{table}");
    let mut b = clean();
    let mut v = (3, 3);
    b.clean_hold("k0", "w3-1", 65.0, 80.0, 4, &mut v);
    let table = run(&b).summary_table();
    assert!(table.contains("first failing violations"), "{table}");
    assert!(table.lines().all(|l| l.chars().count() <= 78), "{table}");
}

#[test]
fn a_realistic_run_is_checked_quickly() {
    let events = synth::generate(&synth::Config::realistic());
    let started = std::time::Instant::now();
    let report = check(&events, &Floors::none());
    let took = started.elapsed();
    println!("{} events checked in {took:?}", events.len());
    // A few hundred milliseconds in a debug build; the bound only
    // catches a quadratic slip.
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");
    println!("{}", report.summary_table());
    assert!(
        report.stats.acquisitions > 15_000,
        "{}",
        report.stats.acquisitions
    );
    assert_eq!(report.count(ViolationKind::Overlap), 1);
    assert_eq!(report.count(ViolationKind::TokenRegression), 0);
    assert_eq!(report.count(ViolationKind::FencedLostUpdate), 0);
    assert_eq!(report.verdict, Verdict::Fail);
}

#[test]
fn the_order_of_events_does_not_matter() {
    let events = synth::generate(&synth::Config::realistic());
    let mut reversed = events.clone();
    reversed.reverse();
    let (a, b) = (
        check(&events, &Floors::none()),
        check(&reversed, &Floors::none()),
    );
    assert_eq!(a.stats, b.stats);
    assert_eq!(a.violation_counts, b.violation_counts);
    assert_eq!(a.verdict, b.verdict);
}

fn read(slot: u32) -> Mode {
    Mode::Read { slot }
}

fn permit(slot: u32, permits: u32) -> Mode {
    Mode::Permit { slot, permits }
}

/// Readers that share `rw0` (two of them at once), and writers between
/// them, touching but never overlapping; tokens rising per slot.
fn clean_rw() -> Builder {
    let mut b = Builder::new();
    b.shared_hold("rw0", "w1-1", read(1), (10.0, 40.0), Some(1))
        .shared_hold("rw0", "w2-1", read(2), (20.0, 50.0), Some(1))
        .shared_hold("rw0", "w3-1", Mode::Write, (50.0, 60.0), Some(2))
        .shared_hold("rw0", "w1-2", read(1), (60.0, 80.0), Some(3))
        .shared_hold("rw0", "w2-2", read(5), (65.0, 90.0), Some(3))
        // Another name is another lock.
        .shared_hold("rw1", "w4-1", Mode::Write, (70.0, 85.0), Some(1))
        .final_values(ms(300.0), &[], &[], &[]);
    b
}

#[test]
fn readers_share_and_writers_between_them_pass() {
    let report = run(&clean_rw());
    assert_eq!(report.verdict, Verdict::Pass, "{}", report.summary_table());
    let s = &report.stats;
    assert_eq!((s.reads, s.writes, s.permits), (4, 2, 0));
    assert_eq!(s.acquisitions, 6);
    assert_eq!(s.readers_at_once_max, 2);
    for kind in [
        ViolationKind::WriterOverlap,
        ViolationKind::Overlap,
        ViolationKind::TokenRegression,
    ] {
        assert_eq!(report.count(kind), 0, "{}", kind.name());
    }
}

#[test]
fn a_writer_overlapping_a_reader_fails() {
    let mut b = clean_rw();
    // Starts under w2-2's read (65–90 ms).
    b.shared_hold("rw0", "w4-2", Mode::Write, (85.0, 95.0), None);
    let report = run(&b);
    assert_eq!(report.verdict, Verdict::Fail);
    assert_eq!(report.count(ViolationKind::WriterOverlap), 1);
    assert_eq!(report.count(ViolationKind::Overlap), 0);
    let v = &report.violations[0];
    assert_eq!(v.kind, ViolationKind::WriterOverlap);
    assert_eq!(v.key, "rw0");
    assert_eq!(v.holds, ["w2-2", "w4-2"]);
    assert_eq!((v.start, v.end), (ms(85.0), ms(90.0)));
    assert!(
        v.detail.contains("w4-2 wrote rw0 while w2-2 read it"),
        "{}",
        v.detail
    );
    assert!(v.detail.contains("read, slot 5"), "{}", v.detail);
    assert!(
        report.reasons[0].contains("writer_overlap"),
        "{:?}",
        report.reasons
    );
}

#[test]
fn a_reader_or_a_writer_starting_under_a_writer_fails() {
    let mut b = clean_rw();
    b.shared_hold("rw0", "w5-1", Mode::Write, (100.0, 150.0), None)
        // A reader under the writer.
        .shared_hold("rw0", "w6-1", read(9), (120.0, 160.0), None)
        // A second writer: overlaps the first writer and the reader.
        .shared_hold("rw0", "w7-1", Mode::Write, (140.0, 145.0), None);
    let report = run(&b);
    assert_eq!(report.count(ViolationKind::WriterOverlap), 3);
    let pairs: Vec<&[String]> = report
        .violations
        .iter()
        .filter(|v| v.kind == ViolationKind::WriterOverlap)
        .map(|v| v.holds.as_slice())
        .collect();
    for pair in [["w5-1", "w6-1"], ["w5-1", "w7-1"], ["w6-1", "w7-1"]] {
        assert!(
            pairs.contains(&&pair.map(String::from)[..]),
            "{pair:?} in {pairs:?}"
        );
    }
    // Readers among themselves: never.
    let mut b = clean_rw();
    b.shared_hold("rw0", "w5-1", read(7), (100.0, 150.0), None)
        .shared_hold("rw0", "w6-1", read(8), (120.0, 160.0), None);
    assert_eq!(run(&b).verdict, Verdict::Pass);
}

#[test]
fn two_readers_of_one_slot_overlap() {
    let mut b = clean_rw();
    // Slot 5 is w2-2's until 90 ms.
    b.shared_hold("rw0", "w6-1", read(5), (70.0, 75.0), Some(4));
    let report = run(&b);
    assert_eq!(report.count(ViolationKind::Overlap), 1);
    assert_eq!(report.count(ViolationKind::WriterOverlap), 0);
    let v = &report.violations[0];
    assert_eq!(v.key, "quorumlock:rw:rw0:5");
    assert_eq!(v.holds, ["w2-2", "w6-1"]);
}

#[test]
fn read_write_tokens_rise_per_slot_and_past_every_writer() {
    // A writer's token not above an earlier reader's (of any slot).
    let mut b = clean_rw();
    b.shared_hold("rw0", "w5-1", Mode::Write, (100.0, 110.0), Some(3));
    let report = run(&b);
    assert_eq!(report.count(ViolationKind::TokenRegression), 1);
    assert_eq!(report.violations[0].holds, ["w1-2", "w5-1"]);
    // A reader's token not above the last writer's, on a slot no reader
    // had before.
    let mut b = clean_rw();
    b.shared_hold("rw0", "w5-1", read(30), (100.0, 110.0), Some(2));
    let report = run(&b);
    assert_eq!(report.count(ViolationKind::TokenRegression), 1);
    assert_eq!(report.violations[0].holds, ["w3-1", "w5-1"]);
    // Readers of different slots may share a token; of one slot, not.
    let mut b = clean_rw();
    b.shared_hold("rw0", "w5-1", read(30), (100.0, 110.0), Some(3))
        .shared_hold("rw0", "w6-1", read(30), (110.0, 120.0), Some(3));
    let report = run(&b);
    assert_eq!(report.count(ViolationKind::TokenRegression), 1);
    assert_eq!(report.violations[0].holds, ["w5-1", "w6-1"]);
}

/// Permits of `sem` with K = 2: two at once, a third when one ends.
fn clean_permits() -> Builder {
    let mut b = Builder::new();
    b.shared_hold("sem", "w11-1", permit(0, 2), (10.0, 50.0), Some(1))
        .shared_hold("sem", "w12-1", permit(1, 2), (20.0, 60.0), Some(1))
        .shared_hold("sem", "w13-1", permit(0, 2), (50.0, 70.0), Some(2))
        .shared_hold("sem", "w11-2", permit(1, 2), (60.0, 65.0), Some(2))
        .final_values(ms(300.0), &[], &[], &[]);
    b
}

#[test]
fn k_permits_at_once_pass() {
    let report = run(&clean_permits());
    assert_eq!(report.verdict, Verdict::Pass, "{}", report.summary_table());
    let s = &report.stats;
    assert_eq!((s.reads, s.writes, s.permits), (0, 0, 4));
    assert_eq!((s.permits_at_once_max, s.permits_k), (2, 2));
    assert_eq!(report.count(ViolationKind::MoreThanKHolders), 0);
}

#[test]
fn more_than_k_permits_at_once_fail() {
    let mut b = clean_permits();
    // A third permit while w11-1 and w12-1 hold: a slot beyond K, as a
    // client with K + 1 takes, logged with the K the others use.
    b.shared_hold("sem", "w4-1", permit(2, 2), (30.0, 40.0), None);
    let report = run(&b);
    assert_eq!(report.verdict, Verdict::Fail);
    assert_eq!(report.count(ViolationKind::MoreThanKHolders), 1);
    assert_eq!(report.count(ViolationKind::Overlap), 0);
    let v = &report.violations[0];
    assert_eq!(v.kind, ViolationKind::MoreThanKHolders);
    assert_eq!(v.key, "sem");
    assert_eq!(v.holds, ["w11-1", "w12-1", "w4-1"]);
    assert_eq!((v.start, v.end), (ms(30.0), ms(40.0)));
    assert!(v.detail.contains("3 permits of sem"), "{}", v.detail);
    assert!(v.detail.contains("(K 2)"), "{}", v.detail);
    assert_eq!(report.stats.permits_at_once_max, 3);
    // Two permits of one slot at once are the slot's overlap too.
    let mut b = clean_permits();
    b.shared_hold("sem", "w4-1", permit(0, 2), (30.0, 40.0), None);
    let report = run(&b);
    assert_eq!(report.count(ViolationKind::MoreThanKHolders), 1);
    assert_eq!(report.count(ViolationKind::Overlap), 1);
    assert_eq!(report.violations[0].key, "quorumlock:permit:sem:0");
}

#[test]
fn a_lowered_k_lets_the_old_permits_run_out() {
    let mut b = Builder::new();
    // Three permits of K = 3; K lowered to 2 while two of them still run
    // (new permits on slots 0 and 1 only): three at once is still within
    // the old K.
    b.shared_hold("sem", "w1-1", permit(0, 3), (10.0, 30.0), None)
        .shared_hold("sem", "w2-1", permit(1, 3), (10.0, 60.0), None)
        .shared_hold("sem", "w3-1", permit(2, 3), (10.0, 80.0), None)
        .shared_hold("sem", "w4-1", permit(0, 2), (40.0, 100.0), None)
        .shared_hold("sem", "w5-1", permit(1, 2), (70.0, 120.0), None);
    assert_eq!(run(&b).verdict, Verdict::Pass);
    // Once they have ended, three at once is one too many.
    b.shared_hold("sem", "w6-1", permit(2, 2), (85.0, 90.0), None);
    let report = run(&b);
    assert_eq!(report.count(ViolationKind::MoreThanKHolders), 1);
    assert_eq!(report.violations[0].holds, ["w4-1", "w5-1", "w6-1"]);
}

#[test]
fn permit_tokens_rise_per_slot() {
    let mut b = clean_permits();
    b.shared_hold("sem", "w4-1", permit(1, 2), (80.0, 90.0), Some(2));
    let report = run(&b);
    assert_eq!(report.count(ViolationKind::TokenRegression), 1);
    assert_eq!(report.violations[0].holds, ["w11-2", "w4-1"]);
}

#[test]
fn a_slot_key_found_well_after_its_release_fails() {
    let late = 80.0 + released::BOUND as f64 / 1e6 + 50.0;
    let probe = |t: f64, key: &str, hold: &str| {
        let mut b = clean_rw();
        b.probe(ms(t), 1, key, hold);
        run(&b)
    };
    // w1-2 read rw0 on slot 1 until 80 ms.
    let within = probe(100.0, "quorumlock:rw:rw0:1", "w1-2");
    assert_eq!(within.count(ViolationKind::KeyLeftAfterRelease), 0);
    let report = probe(late, "quorumlock:rw:rw0:1", "w1-2");
    assert_eq!(report.count(ViolationKind::KeyLeftAfterRelease), 1);
    let v = &report.violations[0];
    assert_eq!(v.key, "quorumlock:rw:rw0:1");
    assert_eq!(v.holds, ["w1-2"]);
    // A writer's keys: every slot.
    let report = probe(late, "quorumlock:rw:rw0:17", "w3-1");
    assert_eq!(report.count(ViolationKind::KeyLeftAfterRelease), 1);
    // A permit's.
    let mut b = clean_permits();
    b.probe(ms(late), 0, "quorumlock:permit:sem:0", "w13-1");
    assert_eq!(run(&b).count(ViolationKind::KeyLeftAfterRelease), 1);
    // An owner no win named (a losing attempt's) is not judged.
    let report = probe(late, "quorumlock:rw:rw0:1", "w9-9");
    assert_eq!(report.count(ViolationKind::KeyLeftAfterRelease), 0);
}

#[test]
fn the_report_counts_reads_writes_and_permits() {
    let mut b = clean_rw();
    for e in clean_permits().events {
        b.events.push(e);
    }
    let report = run(&b);
    assert_eq!(report.verdict, Verdict::Pass, "{}", report.summary_table());
    let table = report.summary_table();
    for needle in [
        "reads",
        "writes",
        "permits at once max",
        "2 of K 2",
        "readers at once max",
        "writer_overlap",
        "more_than_k_holders",
        "rw0",
        "sem",
    ] {
        assert!(table.contains(needle), "{needle}\n{table}");
    }
    assert!(table.lines().all(|l| l.chars().count() <= 78), "{table}");
    let json = serde_json::to_string(&report).unwrap();
    assert!(json.contains("\"kind\":\"more_than_k_holders\""), "{json}");
    let back: CheckReport = serde_json::from_str(&json).unwrap();
    assert_eq!(back, report);
}

/// Holds as (key, start offset, length, how it ends) in ns.
fn schedule_events(holds: &[(usize, u64, u64, u8)]) -> Vec<Event> {
    let mut b = Builder::new();
    for (i, &(key, start, len, ending)) in holds.iter().enumerate() {
        let (key, id) = (format!("k{key}"), format!("w{i}-1"));
        let (start, end) = (synth::T0 + start, synth::T0 + start + len);
        match ending {
            // Released well before its deadline.
            0 => b
                .won(start, &key, &id, end + 1_000_000)
                .release(end, &key, &id, end + 1_000_000),
            // Expired (released late).
            1 => b
                .won(start, &key, &id, end)
                .release(end + 50_000_000, &key, &id, end),
            // Killed.
            _ => b.won(start, &key, &id, end + 1_000_000).fault(
                end,
                i as u32,
                CLIENT_CRASH,
                &format!("w{i}"),
            ),
        };
    }
    b.sorted()
}

/// Back-to-back holds per key (gaps may be zero): disjoint intervals.
fn disjoint() -> impl Strategy<Value = Vec<(usize, u64, u64, u8)>> {
    prop::collection::vec((0..3usize, 0..5_000u64, 1..20_000u64, 0..3u8), 1..60).prop_map(|raw| {
        let mut next = [0u64; 3];
        raw.into_iter()
            .map(|(key, gap, len, ending)| {
                let start = next[key] + gap;
                next[key] = start + len;
                (key, start, len, ending)
            })
            .collect()
    })
}

/// Shared holds as (mode: 0 write, else a read or a permit of slot
/// `mode`, start, length) in µs, of one name; released before their
/// deadline.
fn shared_events(holds: &[(u32, u64, u64)], semaphore: Option<u32>) -> Vec<Event> {
    let mut b = Builder::new();
    for (i, &(mode, start, len)) in holds.iter().enumerate() {
        let mode = match (semaphore, mode) {
            (Some(k), slot) => permit(slot, k),
            (None, 0) => Mode::Write,
            (None, slot) => read(slot),
        };
        let (start, end) = (synth::T0 + start * 1_000, synth::T0 + (start + len) * 1_000);
        let id = format!("w{i}-1");
        b.won_as(start, "x", &id, end + 1_000_000, mode)
            .release(end, "x", &id, end + 1_000_000);
    }
    b.sorted()
}

fn shared_schedule() -> impl Strategy<Value = Vec<(u32, u64, u64)>> {
    prop::collection::vec((0..4u32, 0..200u64, 1..60u64), 1..40)
}

proptest! {
    #[test]
    fn writer_overlaps_are_the_pairs_with_a_writer(holds in shared_schedule()) {
        let report = check(&shared_events(&holds, None), &Floors::none());
        let meets = |a: &(u32, u64, u64), b: &(u32, u64, u64)| a.1 < b.1 + b.2 && b.1 < a.1 + a.2;
        let mut expected = 0;
        for (i, a) in holds.iter().enumerate() {
            for b in &holds[i + 1..] {
                if (a.0 == 0 || b.0 == 0) && meets(a, b) {
                    expected += 1;
                }
            }
        }
        prop_assert_eq!(report.count(ViolationKind::WriterOverlap), expected);
    }

    #[test]
    fn more_than_k_is_each_start_with_k_open(holds in shared_schedule(), k in 1..4u32) {
        let report = check(&shared_events(&holds, Some(k)), &Floors::none());
        // Per hold: the holds open at its start (itself included; of two
        // starting together, the later in start order sees the earlier).
        let mut order: Vec<usize> = (0..holds.len()).collect();
        order.sort_by_key(|&i| (holds[i].1, format!("w{i}-1")));
        let mut expected = 0;
        for (n, &i) in order.iter().enumerate() {
            let t = holds[i].1;
            let open = order[..=n]
                .iter()
                .filter(|&&j| holds[j].1 + holds[j].2 > t)
                .count();
            if open > k as usize {
                expected += 1;
            }
        }
        prop_assert_eq!(report.count(ViolationKind::MoreThanKHolders), expected);
    }

    #[test]
    fn disjoint_schedules_never_overlap(holds in disjoint()) {
        let report = check(&schedule_events(&holds), &Floors::none());
        prop_assert_eq!(report.count(ViolationKind::Overlap), 0);
        prop_assert_eq!(report.verdict, Verdict::Pass);
    }

    #[test]
    fn shifting_a_hold_into_another_overlaps(
        holds in disjoint(),
        pick in any::<prop::sample::Index>(),
        other in any::<prop::sample::Index>(),
        into in any::<prop::sample::Index>(),
    ) {
        let mut holds = holds;
        let i = pick.index(holds.len());
        let same_key: Vec<usize> = (0..holds.len())
            .filter(|&j| j != i && holds[j].0 == holds[i].0)
            .collect();
        prop_assume!(!same_key.is_empty());
        let j = same_key[other.index(same_key.len())];
        // Move j to start strictly inside i's interval.
        let (_, start_i, len_i, _) = holds[i];
        holds[j].1 = start_i + into.index(len_i as usize) as u64;
        let report = check(&schedule_events(&holds), &Floors::none());
        prop_assert!(report.count(ViolationKind::Overlap) >= 1);
        let (a, b) = (format!("w{i}-1"), format!("w{j}-1"));
        let found = report.violations.iter().any(|v| {
            v.kind == ViolationKind::Overlap && v.holds.contains(&a) && v.holds.contains(&b)
        });
        prop_assert!(found, "{} and {} not reported", a, b);
        prop_assert_eq!(report.verdict, Verdict::Fail);
    }
}
