//! One test of the current test binary run alone in a child process of that binary: for a
//! test that measures or changes the whole process (its threads, its environment) while the
//! binary's other tests run on other threads, and for a case that may end its process (a
//! crash, an abort). The child is the binary run as `--exact NAME --nocapture
//! --test-threads=1`, so that test is the only one in it.
//!
//! Tests are named as libtest names them: their module path below the test crate's root
//! ([`test_name!`]).

use std::process::{Command, Output};

/// The variable [`rerun_alone`] sets in the child to the name of the test it runs.
pub const ALONE: &str = "SIMPLER_TEST_ALONE";

/// The libtest name of test `test` written in the module whose `module_path!()` is
/// `module`: the module path below the test crate's root, then the test (`lane::x` for test
/// `x` of module `lane` of test crate `it`; `x` for a test at a crate's root).
pub fn test_path(module: &str, test: &str) -> String {
    match module.split_once("::") {
        Some((_, below)) => format!("{below}::{test}"),
        None => test.to_owned(),
    }
}

/// The libtest name ([`child::test_path`](test_path)) of the test function `$test` of the
/// calling module, a `String`; the function must exist there.
#[macro_export]
macro_rules! test_name {
    ($test:ident) => {{
        let _: fn() = $test;
        $crate::child::test_path(module_path!(), stringify!($test))
    }};
}

/// Runs the calling test alone in a child process of this binary and returns, unless this
/// process is that child (then the test goes on). `$test` is the calling test function.
/// See [`rerun_alone`].
#[macro_export]
macro_rules! in_own_process {
    ($test:ident) => {
        let name = $crate::test_name!($test);
        if !$crate::child::is_alone(&name) {
            $crate::child::rerun_alone(&name, &[]);
            return;
        }
    };
}

/// This test binary as a command that runs test `name` (a libtest name) and nothing else:
/// `--exact name --nocapture --test-threads=1`. Add `--ignored` for an ignored test.
///
/// # Panics
/// When the path of this binary cannot be found.
pub fn command(name: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("the test binary's path"));
    c.args(["--exact", name, "--nocapture", "--test-threads=1"]);
    c
}

/// Whether this process is the child [`rerun_alone`] started for test `name`.
pub fn is_alone(name: &str) -> bool {
    std::env::var_os(ALONE).is_some_and(|v| v == name)
}

/// Runs test `name` of this binary alone in a child process, with [`ALONE`] set to `name`
/// and `env` added, relays its stderr, and asserts that it ran that one test and passed it
/// ([`assert_passed`]).
///
/// # Panics
/// When the child cannot be started, or did not pass the test.
pub fn rerun_alone(name: &str, env: &[(&str, &str)]) {
    let mut c = command(name);
    c.env(ALONE, name);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("running the test binary again");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert_passed(&out, name);
}

/// Asserts that `out`, the output of a [`command`] for test `name`, ran one test and passed
/// it (a name that matches no test runs none, and passes).
///
/// # Panics
/// When it did not, with the child's exit status and the lines where it panicked (or the
/// end of its stderr).
pub fn assert_passed(out: &Output, name: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.success() && stdout.contains("test result: ok. 1 passed") {
        return;
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    let mut why: Vec<String> = (0..lines.len())
        .filter(|&i| lines[i].contains("panicked at"))
        .map(|i| lines[i..(i + 2).min(lines.len())].join(" "))
        .collect();
    if why.is_empty() {
        why = lines[lines.len().saturating_sub(20)..]
            .iter()
            .map(|l| l.to_string())
            .collect();
    }
    panic!(
        "{name} in a child process: {}, not one test passed\n{}\n{}",
        out.status,
        stdout
            .lines()
            .rev()
            .find(|l| l.starts_with("test result"))
            .unwrap_or("(no result line)"),
        why.join("\n")
    );
}
