//! Builds the fake wall clock shim (`shim/fakeclock.c`) as a shared object
//! in `OUT_DIR`, and hands its path to the crate as the compile-time
//! variable `QUORUMLOCK_FAKECLOCK_SO`, which `src/fakeclock.rs` embeds.
//!
//! The `cc` crate only builds static archives, so it is used just to find
//! the C compiler for the target (and its default flags); the shared object
//! is linked by running that compiler directly. Whatever the compiler
//! prints (its warnings) is passed on as `cargo:warning` lines, since cargo
//! hides a build script's own output.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const SOURCE: &str = "shim/fakeclock.c";
const OUTPUT: &str = "libquorumlock_fakeclock.so";
/// The variable, set for the crate's compilation, naming the built shim.
const PATH_ENV: &str = "QUORUMLOCK_FAKECLOCK_SO";

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
    let result = command
        .output()
        .unwrap_or_else(|err| panic!("running the C compiler {command:?}: {err}"));
    let diagnostics = String::from_utf8_lossy(&result.stderr);
    for line in diagnostics.lines().filter(|line| !line.trim().is_empty()) {
        println!("cargo:warning={line}");
    }
    assert!(
        result.status.success(),
        "building {OUTPUT} from {SOURCE} failed ({}): {command:?}\n{diagnostics}",
        result.status
    );
    let path = output
        .to_str()
        .unwrap_or_else(|| panic!("OUT_DIR path {} is not UTF-8", output.display()));
    println!("cargo:rustc-env={PATH_ENV}={path}");
}
