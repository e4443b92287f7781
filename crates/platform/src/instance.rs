//! Who this process is, for the leases it takes in MySQL (one reload of a product, one
//! reconcile run at a time).
//!
//! A holder must name one process and only that one. The process id alone does not: in a
//! container every service is PID 1, so two replicas of the gateway would hold one lease
//! together, and a reload retried on the second could rebuild, over the first's, a sale the
//! first had just put back on sale. Nor does the host name alone (two processes on one
//! host), nor both (a process restarted in the same container can get its old PID back
//! while its old lease has not expired). So a holder id is the service, the host name, the
//! PID and 64 random bits, drawn when the service builds its application: two applications
//! in one process (as the tests run them) are two holders too.

use rand::Rng;

/// Longest host name kept in a holder id: a lease holder is at most 128 characters.
const HOST_CHARS: usize = 64;

/// A new holder id for `service`: `<service>@<host>:<pid>:<16 hex digits>`. Call it once
/// when the service starts and keep it: every call draws another.
pub fn holder_id(service: &str) -> String {
    let random: u64 = rand::rng().random();
    format!(
        "{service}@{}:{}:{random:016x}",
        host_name(),
        std::process::id()
    )
}

/// `HOSTNAME` (a Kubernetes pod's name), else the kernel's host name, else "unknown".
fn host_name() -> String {
    let name = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    name.chars().take(HOST_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_holder_ids_drawn_in_one_process_differ() {
        let (first, second) = (holder_id("gateway"), holder_id("gateway"));
        assert_ne!(first, second);
    }

    #[test]
    fn a_holder_id_names_the_service_the_host_and_the_process() {
        let id = holder_id("gateway");
        let pid = format!(":{}:", std::process::id());
        assert!(id.starts_with("gateway@"), "{id}");
        assert!(id.contains(&pid), "{id}");
        assert!(id.contains(&host_name()), "{id}");
        assert!(id.chars().count() <= 128, "{id}");
    }
}
