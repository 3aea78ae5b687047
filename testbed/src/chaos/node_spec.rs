//! How a worker's command line names its lock nodes: a `redis://` URL, or
//! a Sentinel group written as one word
//! (`sentinel:<service>:<max replica lag ms>:<sentinel URL>+<sentinel URL>…`),
//! so that `--nodes` stays a comma-separated list.

use std::time::Duration;

use quorumlock::{LockConfigBuilder, SentinelNode};

const PREFIX: &str = "sentinel:";

/// The word for a Sentinel group whose masters refuse writes once cut off
/// from their replicas for `max_replica_lag`.
pub fn sentinel_spec(service: &str, max_replica_lag: Duration, sentinels: &[String]) -> String {
    format!(
        "{PREFIX}{service}:{}:{}",
        max_replica_lag.as_millis(),
        sentinels.join("+")
    )
}

/// Adds `nodes` to `builder` in their order (so a node's index in the
/// history is its place in the list).
///
/// # Errors
///
/// A message naming a Sentinel word that does not parse.
pub fn add_nodes(
    mut builder: LockConfigBuilder,
    nodes: &[String],
) -> Result<LockConfigBuilder, String> {
    for node in nodes {
        builder = match node.strip_prefix(PREFIX) {
            None => builder.node(node.clone()),
            Some(rest) => builder.sentinel_node(parse_sentinel(rest).ok_or_else(|| {
                format!(
                    "bad Sentinel node {node:?}: expected sentinel:<service>:<lag ms>:<url>+<url>…"
                )
            })?),
        };
    }
    Ok(builder)
}

fn parse_sentinel(rest: &str) -> Option<SentinelNode> {
    let mut parts = rest.splitn(3, ':');
    let service = parts.next().filter(|s| !s.is_empty())?;
    let lag: u64 = parts.next()?.parse().ok()?;
    let sentinels: Vec<&str> = parts.next()?.split('+').filter(|s| !s.is_empty()).collect();
    if sentinels.is_empty() {
        return None;
    }
    Some(SentinelNode::new(service, sentinels).max_replica_lag(Duration::from_millis(lag)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorumlock::LockConfig;

    #[test]
    fn a_sentinel_word_round_trips_into_a_node_in_its_place() {
        let word = sentinel_spec(
            "group",
            Duration::from_secs(2),
            &[
                "redis://10.0.0.1:26379".into(),
                "redis://10.0.0.2:26379".into(),
            ],
        );
        assert_eq!(
            word,
            "sentinel:group:2000:redis://10.0.0.1:26379+redis://10.0.0.2:26379"
        );
        let node = parse_sentinel(word.strip_prefix(PREFIX).unwrap()).unwrap();
        assert_eq!(node.replica_lag(), Duration::from_secs(2));
        let nodes = vec!["redis://10.0.0.9:6379".to_string(), word];
        let config = add_nodes(LockConfig::builder(), &nodes)
            .unwrap()
            .build()
            .unwrap();
        let urls: Vec<&str> = config.node_urls().collect();
        assert_eq!(urls, ["redis://10.0.0.9:6379", "redis+sentinel://group"]);
    }

    #[test]
    fn a_bad_sentinel_word_is_named() {
        for bad in [
            "sentinel:group",
            "sentinel::5:redis://a:1",
            "sentinel:g:x:redis://a:1",
            "sentinel:g:5:",
        ] {
            let err = add_nodes(LockConfig::builder(), &[bad.to_string()]).unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
    }
}
