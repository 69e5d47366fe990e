//! Starting, watching and ending one child process (`docs/l3-worker.md` §5).
//!
//! A child is a fresh program started by `std::process::Command` (fork + exec, never a
//! fork alone), in its own process group (a terminal's Ctrl-C reaches the parent, which
//! decides; the children follow their parent's end). Its stdin is a pipe whose write end
//! only this process holds: the child ends itself when it reads end-of-file, so it dies
//! within milliseconds of its parent, however the parent died. Its stderr is a pipe read by
//! a thread of this process that forwards each line to this process's stderr (prefixed with
//! the child's name) and keeps the last [`TAIL_BYTES`] for the crash report. Its stdout is
//! this process's.
//!
//! This module owns the process and its pipes; the mailbox and the messages are the
//! endpoints'. A [`ChildProcess`] is always reaped: by a wait that saw it exit, or by its
//! drop, which kills a child still running and waits for it.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::process::ChildProgram;

/// Bytes of a child's stderr kept for its crash report.
pub(crate) const TAIL_BYTES: usize = 8 * 1024;

/// The longest line forwarded whole; longer ones are forwarded in pieces.
const LINE_BYTES: usize = 4096;

/// How long a crash report waits for the rest of a dead child's stderr.
const TAIL_SETTLE: Duration = Duration::from_millis(500);

/// The last bytes a child wrote to stderr, and whether the pipe has ended.
#[derive(Default)]
struct Tail {
    state: Mutex<(Vec<u8>, bool)>,
    ended: Condvar,
}

impl Tail {
    fn push(&self, bytes: &[u8]) {
        let mut s = self.state.lock();
        s.0.extend_from_slice(bytes);
        if s.0.len() > TAIL_BYTES {
            let cut = s.0.len() - TAIL_BYTES;
            s.0.drain(..cut);
        }
    }

    fn end(&self) {
        self.state.lock().1 = true;
        self.ended.notify_all();
    }

    /// The tail as text, once the pipe ended or `settle` passed.
    fn text(&self, settle: Duration) -> String {
        let until = Instant::now() + settle;
        let mut s = self.state.lock();
        while !s.1 {
            if self.ended.wait_until(&mut s, until).timed_out() {
                break;
            }
        }
        String::from_utf8_lossy(&s.0).into_owned()
    }
}

/// One started child process.
pub(crate) struct ChildProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    tail: Arc<Tail>,
    status: Option<ExitStatus>,
}

impl ChildProcess {
    /// Starts `program` with the engine's `env` as the child `name` (`chip 0`).
    ///
    /// # Errors
    /// A text saying why the program could not be started (the program path, the system's
    /// error).
    pub(crate) fn spawn(
        name: &str,
        program: &ChildProgram,
        env: &[(&str, String)],
    ) -> Result<ChildProcess, String> {
        let mut command = Command::new(&program.program);
        command
            .args(&program.args)
            .envs(program.env.iter().map(|(k, v)| (k, v)))
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::inherit())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = command.spawn().map_err(|e| {
            format!(
                "cannot run the child program `{}`: {e}",
                program.program.display()
            )
        })?;
        let stdin = child.stdin.take();
        let stderr = child.stderr.take().expect("stderr is piped");
        let tail = Arc::new(Tail::default());
        let prefix = format!("[{name}, pid {}] ", child.id());
        let reader = {
            let tail = tail.clone();
            std::thread::Builder::new()
                .name(format!("stderr of {name}"))
                .spawn(move || forward_stderr(stderr, &prefix, &tail))
        };
        let mut process = ChildProcess {
            child,
            stdin,
            tail,
            status: None,
        };
        if let Err(e) = reader {
            process.kill_and_reap();
            return Err(format!("cannot start the thread reading its stderr: {e}"));
        }
        Ok(process)
    }

    /// The child's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How the child ended, if it has (reaping it).
    pub(crate) fn poll_exit(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.status = Some(status);
            }
        }
        self.status
    }

    /// Waits up to `timeout` for the child to end by itself.
    pub(crate) fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + timeout;
        loop {
            if let Some(status) = self.poll_exit() {
                return Some(status);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Kills the child (SIGKILL) unless it has ended, and reaps it.
    pub(crate) fn kill_and_reap(&mut self) -> ExitStatus {
        if let Some(status) = self.poll_exit() {
            return status;
        }
        // SIGKILL ends any child, and first: closing the stdin pipe would make a healthy
        // one end itself (status 3) before the signal lands, and its report would not say
        // it was killed.
        let _ = self.child.kill();
        self.stdin = None;
        let status = self
            .child
            .wait()
            .unwrap_or_else(|_| ExitStatus::from_raw(libc::SIGKILL));
        self.status = Some(status);
        status
    }

    /// The crash report of the ended child: how it ended and the tail of its stderr, as
    /// `it was killed by signal SIGKILL (9); it wrote nothing to stderr`. It does not name
    /// the child: the error carrying it names the endpoint (pid included) once.
    pub(crate) fn report(&mut self) -> String {
        let how = match self.poll_exit() {
            Some(status) => describe_status(status),
            None => "is still running".into(),
        };
        let tail = self.tail.text(TAIL_SETTLE);
        let tail = tail.trim_end();
        if tail.is_empty() {
            format!("it {how}; it wrote nothing to stderr")
        } else {
            format!("it {how}; the end of its stderr:\n{tail}")
        }
    }

    /// The tail of the child's stderr so far, without waiting.
    pub(crate) fn stderr_tail(&self) -> String {
        self.tail.text(Duration::ZERO)
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill_and_reap();
    }
}

/// `exited with status 3`, `was killed by signal SIGKILL (9)`.
pub(crate) fn describe_status(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    match status.signal() {
        Some(sig) => format!(
            "was killed by signal {} ({sig}){}",
            signal_name(sig),
            if status.core_dumped() {
                ", core dumped"
            } else {
                ""
            }
        ),
        None => format!("ended with {status}"),
    }
}

/// The name of signal `sig` (`SIGSEGV`), or `signal N`.
pub(crate) fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

fn forward_stderr(mut pipe: impl Read, prefix: &str, tail: &Tail) {
    let mut buf = [0u8; 4096];
    let mut line = Vec::new();
    // The parent's stderr, through `eprint!` so that a test harness's capture holds it. A
    // stderr that fails (a closed pipe) makes `eprint!` panic: forwarding stops, the tail
    // goes on, and the child is never left writing into a pipe nobody reads.
    let mut forwarding = true;
    let mut forward = |line: &[u8]| {
        if forwarding {
            let text = String::from_utf8_lossy(line);
            forwarding = std::panic::catch_unwind(|| eprint!("{prefix}{text}")).is_ok();
        }
    };
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                tail.push(&buf[..n]);
                for &b in &buf[..n] {
                    line.push(b);
                    if b == b'\n' || line.len() >= LINE_BYTES {
                        if b != b'\n' {
                            line.push(b'\n');
                        }
                        forward(&line);
                        line.clear();
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    if !line.is_empty() {
        line.push(b'\n');
        forward(&line);
    }
    tail.end();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::path::PathBuf;

    fn sh(script: &str) -> ChildProgram {
        ChildProgram {
            program: PathBuf::from("/bin/sh"),
            args: vec![OsString::from("-c"), OsString::from(script)],
            env: Vec::new(),
        }
    }

    #[test]
    fn a_dead_child_is_reported_with_its_signal_and_stderr_tail() {
        let mut c = ChildProcess::spawn(
            "chip 9",
            &sh("echo first >&2; echo \"last $SIMPLER_X\" >&2; kill -SEGV $$"),
            &[("SIMPLER_X", "words".into())],
        )
        .unwrap();
        let status = c.wait_exit(Duration::from_secs(10)).expect("it dies");
        assert_eq!(status.signal(), Some(libc::SIGSEGV));
        let report = c.report();
        assert!(
            report.starts_with("it was killed by signal SIGSEGV (11)")
                && !report.contains("chip 9")
                && report.contains("first\nlast words"),
            "{report}"
        );
    }

    #[test]
    fn the_program_s_own_variables_reach_the_child_under_the_engine_s() {
        let mut program = sh("echo \"$SIMPLER_Y $SIMPLER_X\" >&2; exit 4");
        program.env = vec![
            ("SIMPLER_Y".into(), "mine".into()),
            ("SIMPLER_X".into(), "overridden".into()),
        ];
        let mut c =
            ChildProcess::spawn("sub 1", &program, &[("SIMPLER_X", "engine".into())]).unwrap();
        let status = c.wait_exit(Duration::from_secs(10)).expect("it exits");
        assert_eq!(status.code(), Some(4));
        let until = Instant::now() + Duration::from_secs(10);
        while !c.stderr_tail().contains('\n') && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(c.stderr_tail(), "mine engine\n");
    }

    #[test]
    fn the_tail_is_bounded_and_a_live_child_is_killed_and_reaped_on_drop() {
        let mut c = ChildProcess::spawn(
            "sub 0",
            &sh("head -c 20000 /dev/zero | tr '\\0' a >&2; echo END >&2; exec sleep 30"),
            &[],
        )
        .unwrap();
        let pid = c.pid();
        let until = Instant::now() + Duration::from_secs(10);
        while !c.stderr_tail().contains("END") && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        let tail = c.stderr_tail();
        assert!(
            tail.len() <= TAIL_BYTES && tail.ends_with("END\n"),
            "{}",
            tail.len()
        );
        assert!(c.poll_exit().is_none());
        drop(c);
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "killed and reaped"
        );
    }

    #[test]
    fn a_program_that_does_not_exist_is_named() {
        let err = ChildProcess::spawn(
            "chip 0",
            &ChildProgram {
                program: PathBuf::from("/no/such/simpler-child"),
                args: vec![],
                env: vec![],
            },
            &[],
        )
        .err()
        .unwrap();
        assert!(
            err.contains("cannot run the child program `/no/such/simpler-child`"),
            "{err}"
        );
    }

    #[test]
    fn statuses_are_described() {
        assert_eq!(
            describe_status(ExitStatus::from_raw(3 << 8)),
            "exited with status 3"
        );
        assert_eq!(
            describe_status(ExitStatus::from_raw(libc::SIGKILL)),
            "was killed by signal SIGKILL (9)"
        );
        assert_eq!(signal_name(64), "signal 64");
    }
}
