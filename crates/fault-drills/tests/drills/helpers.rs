//! What the drills share beyond the harness: timings sized for a 2-core CI machine.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

/// Settling after a fault: check-backs come every 2 s, the consumer's first retry after
/// 10 s; a minute leaves room for a loaded machine without hiding a real loss for long.
pub const SETTLE: Duration = Duration::from_secs(60);

/// How long a crowd may take to reach a moment a drill waits for.
pub const CROWD_PROGRESS: Duration = Duration::from_secs(30);

/// SIGABRT, which a fail point's `return` action raises (see order-consumer-svc's faults).
const SIGABRT: i32 = 6;

/// True when the process ended by aborting: it crashed where a fail point was armed, not
/// somewhere else.
pub fn aborted(status: ExitStatus) -> bool {
    status.signal() == Some(SIGABRT)
}
