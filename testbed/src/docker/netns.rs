//! Packet drops inside one container's network namespace: `iptables` run
//! from the host with `nsenter -t <pid> -n`, so the container's image
//! needs no iptables of its own and the host's rules are never touched.
//!
//! A [`Drops`] removes its rules when dropped (best effort: a container
//! that restarted has a new namespace without them anyway).

use std::net::Ipv4Addr;

use super::cli::{self, COMMAND_LIMIT};
use super::container::Container;
use crate::TestbedError;

/// One rule: the chain it goes in (`INPUT` or `OUTPUT`) and its match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    chain: &'static str,
    matches: Vec<String>,
}

impl Rule {
    /// Drops what arrives for the server's port: requests vanish.
    pub fn requests_in(port: u16) -> Rule {
        Rule {
            chain: "INPUT",
            matches: vec![
                "-p".into(),
                "tcp".into(),
                "--dport".into(),
                port.to_string(),
            ],
        }
    }

    /// Drops what leaves from the server's port: requests are carried out,
    /// replies vanish.
    pub fn replies_out(port: u16) -> Rule {
        Rule {
            chain: "OUTPUT",
            matches: vec![
                "-p".into(),
                "tcp".into(),
                "--sport".into(),
                port.to_string(),
            ],
        }
    }

    /// Drops everything from `peer`.
    pub fn from(peer: Ipv4Addr) -> Rule {
        Rule {
            chain: "INPUT",
            matches: vec!["-s".into(), peer.to_string()],
        }
    }

    /// Drops everything to `peer`.
    pub fn to(peer: Ipv4Addr) -> Rule {
        Rule {
            chain: "OUTPUT",
            matches: vec!["-d".into(), peer.to_string()],
        }
    }

    fn args<'a>(&'a self, pid: &'a str, op: &'a str) -> Vec<&'a str> {
        let mut args = vec!["-t", pid, "-n", "iptables", "-w", op, self.chain];
        args.extend(self.matches.iter().map(String::as_str));
        args.extend(["-j", "DROP"]);
        args
    }
}

/// Rules in force in one container's namespace.
#[derive(Debug)]
pub struct Drops {
    pid: String,
    rules: Vec<Rule>,
}

impl Drops {
    /// Puts `rules` in force in `container`'s network namespace.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`] naming the `nsenter`/`iptables` command
    /// (the rules put in before it are removed again), or the container
    /// not running.
    pub fn install(container: &Container, rules: Vec<Rule>) -> Result<Drops, TestbedError> {
        let pid = container.pid()?;
        if pid == 0 {
            return Err(TestbedError::Docker {
                command: format!("nsenter into {}", container.service),
                status: "not running".into(),
                stderr: String::new(),
            });
        }
        let mut drops = Drops {
            pid: pid.to_string(),
            rules: Vec::with_capacity(rules.len()),
        };
        for rule in rules {
            cli::run("nsenter", &rule.args(&drops.pid, "-A"), COMMAND_LIMIT)?;
            drops.rules.push(rule);
        }
        Ok(drops)
    }

    /// Removes the rules.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Docker`] for the first rule that could not be
    /// removed (the others are still tried).
    pub fn remove(mut self) -> Result<(), TestbedError> {
        self.remove_all()
    }

    fn remove_all(&mut self) -> Result<(), TestbedError> {
        let mut first = Ok(());
        for rule in std::mem::take(&mut self.rules) {
            if let Err(e) = cli::run("nsenter", &rule.args(&self.pid, "-D"), COMMAND_LIMIT) {
                first = first.and(Err(e));
            }
        }
        first
    }
}

impl Drop for Drops {
    fn drop(&mut self) {
        let _ = self.remove_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_name_their_chain_and_match() {
        let rule = Rule::replies_out(6379);
        assert_eq!(
            rule.args("42", "-A"),
            [
                "-t", "42", "-n", "iptables", "-w", "-A", "OUTPUT", "-p", "tcp", "--sport", "6379",
                "-j", "DROP"
            ]
        );
        let rule = Rule::from(Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(
            rule.args("7", "-D")[5..],
            ["-D", "INPUT", "-s", "10.0.0.2", "-j", "DROP"]
        );
    }
}
