//! The parent's side of one child: its process and its mailbox, driven together — start by
//! a deadline, one request at a time while watching that the child lives, shutdown with a
//! bounded wait and a kill (`docs/l3-worker.md` §5). Both endpoints in child processes (a
//! chip, a sub worker) are a [`Link`] plus their own message mapping.

use std::time::{Duration, Instant};

use crate::endpoint::{EndpointError, KillSwitch};
use crate::process::mailbox::{Mailbox, WaitEnd, MAILBOX_LEN};
use crate::process::spawn::{describe_status, ChildProcess};
use crate::process::wire::{decode, encode, Request, Response, Start};
use crate::process::{env, ChildProgram};
use crate::WorkerError;

/// How long a child has to exit after it is asked to, before it is killed.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// A started child: its process, its mailbox, its kill switch, and its death once seen.
pub(crate) struct Link {
    name: String,
    mailbox: Mailbox,
    process: ChildProcess,
    kill: KillSwitch,
    dead: Option<String>,
}

/// Why a wait for a response ended without one.
enum Ended {
    /// The child exited.
    Exited,
    /// The mailbox holds something malformed.
    Broke(String),
    /// The kill switch was tripped during the call.
    Killed,
}

impl Link {
    /// Starts the child `name` (`chip 0`, `sub worker 1`) of `role` (`chip`, `sub`) and
    /// `index` running `program`, sends it `start` and waits for its READY until
    /// `deadline`. Returns the link and the child's Ready response.
    ///
    /// # Errors
    /// [`WorkerError::Startup`] naming the child and why — the program could not run, it
    /// exited or failed before READY (with its error or its stderr tail), or the deadline
    /// passed (it is killed). Nothing is left running.
    pub(crate) fn start(
        name: &str,
        role: &str,
        index: usize,
        program: &ChildProgram,
        start: Start,
        deadline: Instant,
    ) -> Result<(Link, Response), WorkerError> {
        let began = Instant::now();
        let failed = |reason: String| WorkerError::Startup {
            endpoint: name.to_string(),
            reason,
        };
        let mailbox = Mailbox::create(&name.replace(' ', "-"))
            .map_err(|e| failed(format!("cannot make its mailbox: {e}")))?;
        let vars = [
            (env::ROLE, role.to_string()),
            (env::INDEX, index.to_string()),
            (env::MAILBOX_FD, mailbox.region().fd().to_string()),
            (env::MAILBOX_LEN, MAILBOX_LEN.to_string()),
            (env::PARENT_PID, std::process::id().to_string()),
        ];
        let mut process = ChildProcess::spawn(name, program, &vars).map_err(failed)?;
        let posted = mailbox
            .post_request(&encode(&Request::Start(start)))
            .map_err(|e| failed(format!("cannot post its start request: {e}")))?;
        let waited = mailbox.wait_response(
            &posted,
            Some(deadline),
            || match process.poll_exit() {
                Some(_) => Err(()),
                None => Ok(()),
            },
            |_| (),
        );
        let reply = match waited {
            Ok(bytes) => decode::<Response>(&bytes, "start response"),
            Err(WaitEnd::Timeout) => {
                process.kill_and_reap();
                let tail = process.stderr_tail();
                return Err(failed(format!(
                    "it was not ready within {:.1?} of its start (state {:?}); it was killed{}",
                    deadline.saturating_duration_since(began),
                    mailbox.state(),
                    tail_note(&tail)
                )));
            }
            Err(WaitEnd::Check(())) => {
                return Err(failed(format!(
                    "before it was ready, its process (pid {}) ended: {}",
                    process.pid(),
                    process.report()
                )));
            }
        };
        match reply {
            Ok(ready @ Response::Ready { .. }) => Ok((
                Link {
                    name: name.to_string(),
                    mailbox,
                    process,
                    kill: KillSwitch::new(),
                    dead: None,
                },
                ready,
            )),
            Ok(Response::Err(e)) => {
                let text = e.into_worker().to_string();
                let ended = process
                    .wait_exit(SHUTDOWN_GRACE)
                    .map(describe_status)
                    .unwrap_or_else(|| "was killed".into());
                process.kill_and_reap();
                Err(failed(format!("{text} (the child process {ended})")))
            }
            Ok(other) => {
                process.kill_and_reap();
                Err(failed(format!(
                    "it answered its start request with {other:?}; is the child program a \
                     simpler child of this build?"
                )))
            }
            Err(text) => {
                process.kill_and_reap();
                Err(failed(text))
            }
        }
    }

    /// The child's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The switch that ends a call in flight by killing the child.
    pub(crate) fn kill_switch(&self) -> KillSwitch {
        self.kill.clone()
    }

    /// Sends `request` and waits for its response, however long the child works, as long
    /// as it lives and the kill switch is not tripped meanwhile.
    ///
    /// # Errors
    /// [`EndpointError::Died`] with the crash report when the child has died (now or
    /// before), its mailbox broke or the kill switch was tripped (the child is killed);
    /// [`EndpointError::Failed`] when the request could not be staged.
    pub(crate) fn call(&mut self, request: &Request) -> Result<Response, EndpointError> {
        if let Some(report) = &self.dead {
            return Err(EndpointError::Died {
                report: report.clone(),
            });
        }
        let posted = self.mailbox.post_request(&encode(request)).map_err(|e| {
            EndpointError::Failed(WorkerError::InvalidState(format!(
                "{}: cannot stage a request for the child: {e}",
                self.name
            )))
        })?;
        let process = &mut self.process;
        let kill = &self.kill;
        let armed = kill.trips();
        let waited = self.mailbox.wait_response(
            &posted,
            None,
            || {
                if process.poll_exit().is_some() {
                    Err(Ended::Exited)
                } else if kill.trips() != armed {
                    Err(Ended::Killed)
                } else {
                    Ok(())
                }
            },
            Ended::Broke,
        );
        let ended = match waited {
            Ok(bytes) => match decode::<Response>(&bytes, "response") {
                Ok(response) => return Ok(response),
                Err(text) => Ended::Broke(text),
            },
            Err(WaitEnd::Check(ended)) => ended,
            Err(WaitEnd::Timeout) => unreachable!("a wait without a deadline"),
        };
        if !matches!(ended, Ended::Exited) {
            self.process.kill_and_reap();
        }
        Err(self.died(ended))
    }

    fn died(&mut self, ended: Ended) -> EndpointError {
        let report = match ended {
            Ended::Exited => self.process.report(),
            Ended::Broke(why) => format!(
                "its mailbox broke ({why}), so it was killed: {}",
                self.process.report()
            ),
            Ended::Killed => format!(
                "it was killed during its call ({}): {}",
                self.kill.reason(),
                self.process.report()
            ),
        };
        self.dead = Some(report.clone());
        EndpointError::Died { report }
    }

    /// Asks the child to exit, waits [`SHUTDOWN_GRACE`], kills it if it has not, and reaps
    /// it. A child already reported dead is only reaped.
    ///
    /// # Errors
    /// [`EndpointError::Died`] when the child had to be killed or exited with a failure;
    /// [`EndpointError::Failed`] with the child's own error from its shutdown.
    pub(crate) fn shutdown(&mut self) -> Result<(), EndpointError> {
        if self.dead.is_some() {
            self.process.kill_and_reap();
            return Ok(());
        }
        let until = Instant::now() + SHUTDOWN_GRACE;
        let answer = match self.mailbox.post_request(&encode(&Request::Shutdown)) {
            Ok(posted) => {
                let process = &mut self.process;
                self.mailbox
                    .wait_response(
                        &posted,
                        Some(until),
                        || match process.poll_exit() {
                            Some(_) => Err(()),
                            None => Ok(()),
                        },
                        |_| (),
                    )
                    .ok()
                    .and_then(|bytes| decode::<Response>(&bytes, "response").ok())
            }
            Err(_) => None,
        };
        let left = until.saturating_duration_since(Instant::now());
        let Some(status) = self.process.wait_exit(left) else {
            self.process.kill_and_reap();
            let report = format!(
                "{} did not exit within {SHUTDOWN_GRACE:?} of being asked to, so it was killed{}",
                self.name,
                tail_note(&self.process.stderr_tail())
            );
            self.dead = Some(report.clone());
            return Err(EndpointError::Died { report });
        };
        if !status.success() {
            return Err(self.died(Ended::Exited));
        }
        match answer {
            Some(Response::Err(e)) => Err(EndpointError::Failed(e.into_worker())),
            _ => Ok(()),
        }
    }
}

fn tail_note(tail: &str) -> String {
    let tail = tail.trim_end();
    if tail.is_empty() {
        "; it wrote nothing to stderr".into()
    } else {
        format!("; the end of its stderr:\n{tail}")
    }
}
