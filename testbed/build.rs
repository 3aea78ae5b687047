//! Builds the fake wall clock shim (`shim/fakeclock.c`) as a shared object,
//! `$OUT_DIR/libquorumlock_fakeclock.so`, which `src/fakeclock.rs` embeds.
//!
//! The `cc` crate only builds static archives, so it is used just to find
//! the C compiler for the target (and its default flags); the shared object
//! is linked by running that compiler directly.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const SOURCE: &str = "shim/fakeclock.c";
const OUTPUT: &str = "libquorumlock_fakeclock.so";

fn main() {
    println!("cargo:rerun-if-changed={SOURCE}");
    println!("cargo:rerun-if-changed=build.rs");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let output = out_dir.join(OUTPUT);
    let compiler = cc::Build::new()
        .warnings(true)
        .extra_warnings(true)
        .get_compiler();
    let mut command: Command = compiler.to_command();
    command
        .args([
            "-shared",
            "-fPIC",
            "-O2",
            "-std=gnu11",
            "-fvisibility=hidden",
        ])
        .arg("-o")
        .arg(&output)
        .arg(SOURCE);
    let status = command
        .status()
        .unwrap_or_else(|err| panic!("running the C compiler {command:?}: {err}"));
    assert!(
        status.success(),
        "building {OUTPUT} from {SOURCE} failed ({status}): {command:?}"
    );
}
