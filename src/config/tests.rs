use std::time::Duration;

use super::*;
use crate::error::ConfigError;
use crate::quorum::Quorum;
use crate::retry::RetryPolicy;

fn three() -> LockConfigBuilder {
    LockConfig::builder().nodes([
        "redis://127.0.0.1:1",
        "redis://127.0.0.1:2",
        "redis://127.0.0.1:3",
    ])
}

#[test]
fn defaults_are_documented_values() {
    let c = three().build().expect("valid");
    assert_eq!(c.ttl(), Duration::from_secs(30));
    assert_eq!(c.quorum(), Quorum::Majority);
    assert_eq!(c.required_nodes(), 2);
    assert_eq!(c.drift_factor(), 0.01);
    assert_eq!(c.node_timeout(), Duration::from_millis(50));
    assert_eq!(c.min_validity(), Duration::from_secs(3));
    // A short TTL scales the default node timeout down instead of failing.
    let c = three()
        .ttl(Duration::from_millis(200))
        .build()
        .expect("valid");
    assert_eq!(c.node_timeout(), Duration::from_millis(20));
}

#[test]
fn no_nodes() {
    assert_eq!(
        LockConfig::builder().build().unwrap_err(),
        ConfigError::NoNodes
    );
}

#[test]
fn unparsable_url_is_named() {
    let err = LockConfig::builder()
        .node("redis://127.0.0.1:1")
        .node("http://nope")
        .build()
        .unwrap_err();
    match &err {
        ConfigError::InvalidNodeUrl { url, .. } => assert_eq!(url, "http://nope"),
        other => panic!("expected InvalidNodeUrl, got {other:?}"),
    }
    assert!(err.to_string().contains("http://nope"), "{err}");
}

#[test]
#[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
fn tls_without_a_tls_feature_names_the_feature() {
    let err = LockConfig::builder()
        .node("rediss://app:secret@127.0.0.1:6380")
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        ConfigError::TlsNotEnabled {
            url: "rediss://app:***@127.0.0.1:6380".into()
        }
    );
    assert!(err.to_string().contains("tls-rustls"), "{err}");
}

#[test]
#[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
fn tls_urls_parse_with_a_tls_feature() {
    let config = LockConfig::builder()
        .node("rediss://127.0.0.1:6380")
        .build()
        .expect("valid");
    assert_eq!(config.node_urls().next(), Some("rediss://127.0.0.1:6380"));
}

#[test]
fn clients_configured_by_the_caller_are_nodes_shown_without_secrets() {
    let client = redis::Client::open("redis://app:secret@[::1]:7000/2").expect("url");
    let config = LockConfig::builder()
        .node_client(client)
        .node("redis://127.0.0.1:7000")
        .build()
        .expect("valid");
    let urls: Vec<&str> = config.node_urls().collect();
    assert_eq!(urls, ["redis://[::1]:7000/2", "redis://127.0.0.1:7000"]);
    assert!(!format!("{config:?}").contains("secret"));
    // The same server given twice, once as a client: refused.
    let twice = LockConfig::builder()
        .node("redis://127.0.0.1:7000")
        .node_client(redis::Client::open("redis://127.0.0.1:7000").expect("url"))
        .build()
        .unwrap_err();
    assert!(
        matches!(twice, ConfigError::DuplicateNode { .. }),
        "{twice}"
    );
}

#[test]
fn duplicate_nodes_are_named_even_when_spelled_differently() {
    let err = LockConfig::builder()
        .nodes([
            "redis://127.0.0.1:7000",
            "redis://127.0.0.1:7001/",
            "redis://127.0.0.1:7000/0",
        ])
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        ConfigError::DuplicateNode {
            url: "redis://127.0.0.1:7000/0".into(),
            first: "redis://127.0.0.1:7000".into()
        }
    );
    // Another database on the same server is another node.
    assert!(
        LockConfig::builder()
            .nodes(["redis://127.0.0.1:7000/0", "redis://127.0.0.1:7000/1"])
            .build()
            .is_ok()
    );
}

#[test]
fn quorum_k_out_of_range() {
    for k in [0, 4] {
        let err = three().quorum(Quorum::AtLeast(k)).build().unwrap_err();
        assert_eq!(err, ConfigError::QuorumOutOfRange { k, nodes: 3 });
        assert!(err.to_string().contains(&format!("AtLeast({k})")));
    }
    assert!(three().quorum(Quorum::AtLeast(3)).build().is_ok());
    assert!(three().quorum(Quorum::AtLeast(1)).build().is_ok());
}

#[test]
fn ttl_zero_and_huge() {
    for ttl in [
        Duration::ZERO,
        Duration::from_micros(999),
        MAX_TTL + Duration::from_millis(1),
    ] {
        assert!(
            matches!(three().ttl(ttl).build(), Err(ConfigError::TtlOutOfRange { ttl: t, .. }) if t == ttl)
        );
    }
}

#[test]
fn node_timeout_must_be_well_below_ttl() {
    let ttl = Duration::from_secs(1);
    for node_timeout in [
        Duration::ZERO,
        Duration::from_millis(101),
        Duration::from_secs(2),
    ] {
        let err = three()
            .ttl(ttl)
            .node_timeout(node_timeout)
            .build()
            .unwrap_err();
        assert_eq!(
            err,
            ConfigError::NodeTimeoutOutOfRange {
                node_timeout,
                ttl,
                max: Duration::from_millis(100)
            }
        );
    }
    assert!(
        three()
            .ttl(ttl)
            .node_timeout(Duration::from_millis(100))
            .build()
            .is_ok()
    );
}

#[test]
fn drift_factor_out_of_range() {
    for value in [-0.1, 1.0, f64::NAN, f64::INFINITY] {
        match three().drift_factor(value).build() {
            Err(ConfigError::DriftFactorOutOfRange { value: v }) => {
                assert!(v.to_bits() == value.to_bits())
            }
            other => panic!("{value}: {other:?}"),
        }
    }
}

#[test]
fn drift_that_leaves_no_validity() {
    // 0.95 of 1 s plus 2 ms leaves 48 ms, below the default minimum of 100 ms.
    let err = three()
        .ttl(Duration::from_secs(1))
        .drift_factor(0.95)
        .build()
        .unwrap_err();
    assert!(
        matches!(err, ConfigError::NoValidityLeft { drift_factor, .. } if drift_factor == 0.95),
        "{err:?}"
    );
    // A 2 ms TTL is eaten by the fixed 2 ms allowance alone.
    let err = three()
        .ttl(Duration::from_millis(2))
        .node_timeout(Duration::from_micros(100))
        .min_validity(Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(matches!(err, ConfigError::NoValidityLeft { .. }), "{err:?}");
}

#[test]
fn watchdog_defaults_follow_the_ttl() {
    let c = three().ttl(Duration::from_secs(9)).build().expect("valid");
    assert!(!c.watchdog());
    assert_eq!(c.renew_interval(), Duration::from_secs(3));
    assert_eq!(c.loss_margin(), Duration::from_millis(900));
    assert_eq!(c.max_hold(), None);
}

#[test]
fn renew_interval_must_leave_room_before_the_loss() {
    // Lease of 10 s: 10 s − 102 ms drift; minus the 1 s margin.
    let max = Duration::from_millis(8_898);
    for renew_interval in [Duration::ZERO, max, Duration::from_secs(20)] {
        let err = three()
            .ttl(Duration::from_secs(10))
            .renew_interval(renew_interval)
            .build()
            .unwrap_err();
        assert_eq!(
            err,
            ConfigError::RenewIntervalOutOfRange {
                renew_interval,
                max
            }
        );
    }
}

#[test]
fn loss_margin_and_max_hold_out_of_range() {
    let lease = Duration::from_millis(9_898);
    for loss_margin in [Duration::ZERO, lease, Duration::from_secs(11)] {
        let err = three()
            .ttl(Duration::from_secs(10))
            .loss_margin(loss_margin)
            .build()
            .unwrap_err();
        assert_eq!(
            err,
            ConfigError::LossMarginOutOfRange { loss_margin, lease }
        );
    }
    assert_eq!(
        three().max_hold(Duration::ZERO).build().unwrap_err(),
        ConfigError::MaxHoldZero
    );
}

#[test]
fn connect_timeout_zero() {
    assert_eq!(
        three().connect_timeout(Duration::ZERO).build().unwrap_err(),
        ConfigError::ConnectTimeoutZero {
            value: Duration::ZERO
        }
    );
}

#[test]
fn bad_retry_policy_is_reported() {
    let err = three()
        .retry(RetryPolicy::default().with_jitter(2.0))
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::InvalidRetry {
                field: "jitter",
                ..
            }
        ),
        "{err:?}"
    );
}
