//! Certificates for TLS nodes, made with the `openssl` command line tool
//! (`apt-get install openssl`): a private CA, a server certificate it
//! signs for 127.0.0.1 and localhost, a client certificate it signs, and a
//! CA nobody uses. Kept in a temporary directory removed with the [`Pki`].
//!
//! ```
//! use quorumlock_testbed::Testbed;
//! use quorumlock_testbed::pki::Pki;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pki = Pki::new()?;
//! let (options, tls_port) = pki.tls_options(false)?;
//! let _node = Testbed::start_with(1, options)?;
//! // A client of `rediss://127.0.0.1:{tls_port}` trusts pki.path("ca.crt").
//! assert!(pki.path("ca.crt").exists() && tls_port > 0);
//! # Ok(())
//! # }
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use crate::{NodeOptions, TestbedError};

/// The certificates of one test: `ca.crt`, `server.crt` / `server.key`,
/// `client.crt` / `client.key` and `other-ca.crt`, in a directory removed
/// with it.
pub struct Pki {
    dir: TempDir,
}

impl Pki {
    /// Makes the CAs and the certificates.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Io`] if the directory cannot be made or `openssl`
    /// cannot run; [`TestbedError::Openssl`] if it fails.
    pub fn new() -> Result<Pki, TestbedError> {
        let pki = Pki {
            dir: tempfile::tempdir().map_err(TestbedError::io("creating the PKI directory"))?,
        };
        let dir = pki.dir.path();
        let key = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for ca in ["ca", "other-ca"] {
            let subject = format!("/CN=quorumlock test {ca}");
            let (keyout, out) = (format!("{ca}.key"), format!("{ca}.crt"));
            let mut args = vec!["req", "-x509"];
            args.extend(key);
            args.extend([
                "-keyout", &keyout, "-out", &out, "-days", "2", "-subj", &subject,
            ]);
            openssl(dir, &args)?;
        }
        for (leaf, ext) in [
            (
                "server",
                "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
            ),
            ("client", "extendedKeyUsage=clientAuth\n"),
        ] {
            let ext_file = dir.join(format!("{leaf}.ext"));
            std::fs::write(&ext_file, ext)
                .map_err(TestbedError::io("writing a certificate extension"))?;
            let (keyout, csr) = (format!("{leaf}.key"), format!("{leaf}.csr"));
            let subject = format!("/CN=quorumlock test {leaf}");
            let mut args = vec!["req"];
            args.extend(key);
            args.extend(["-keyout", &keyout, "-out", &csr, "-subj", &subject]);
            openssl(dir, &args)?;
            let (crt, ext) = (format!("{leaf}.crt"), format!("{leaf}.ext"));
            openssl(
                dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.crt",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-out",
                    &crt,
                    "-days",
                    "2",
                    "-extfile",
                    &ext,
                ],
            )?;
        }
        Ok(pki)
    }

    /// The path of one of the files.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// The contents of one of the files.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Io`] if it cannot be read.
    pub fn pem(&self, file: &str) -> Result<Vec<u8>, TestbedError> {
        std::fs::read(self.path(file)).map_err(TestbedError::io(format!("reading {file}")))
    }

    /// Options for a node that also listens for TLS on a free port (the
    /// second value) with the server certificate, and asks clients for a
    /// certificate signed by the CA if `client_certificates`.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Io`] if no free port is found.
    pub fn tls_options(
        &self,
        client_certificates: bool,
    ) -> Result<(NodeOptions, u16), TestbedError> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(TestbedError::io("finding a free port for TLS"))?
            .port();
        let file = |f: &str| self.path(f).display().to_string();
        let options = NodeOptions {
            extra_config: vec![
                ("tls-port".into(), port.to_string()),
                ("tls-cert-file".into(), file("server.crt")),
                ("tls-key-file".into(), file("server.key")),
                ("tls-ca-cert-file".into(), file("ca.crt")),
                (
                    "tls-auth-clients".into(),
                    if client_certificates { "yes" } else { "no" }.into(),
                ),
            ],
            ..NodeOptions::default()
        };
        Ok((options, port))
    }
}

fn openssl(dir: &Path, args: &[&str]) -> Result<(), TestbedError> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(TestbedError::io(
            "running openssl (apt-get install openssl)",
        ))?;
    if out.status.success() {
        return Ok(());
    }
    Err(TestbedError::Openssl {
        command: format!("openssl {}", args.join(" ")),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}
