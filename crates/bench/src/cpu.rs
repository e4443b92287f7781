//! CPU time and context switches of processes and of the whole machine, from /proc, to say
//! where a measured window's work went (which process was busy, whether the machine had cores
//! left, and how often threads handed work to one another).

use std::time::Instant;

/// Linux's USER_HZ on every architecture this runs on: /proc reports CPU time in 1/100 s.
const TICKS_PER_SEC: f64 = 100.0;

/// CPU seconds (user + system) a process has used so far; `None` once it is gone. With
/// `children`, those of its children it has waited for are added (cutime, cstime).
pub fn process_secs(pid: u32, children: bool) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: count fields after it.
    let after_name = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<f64> = after_name
        .split_whitespace()
        .take(15)
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    // utime, stime, cutime, cstime are fields 14–17 of the line, 12–15 after the name.
    let own = fields.get(11)? + fields.get(12)?;
    let waited = if children {
        fields.get(13)? + fields.get(14)?
    } else {
        0.0
    };
    Some((own + waited) / TICKS_PER_SEC)
}

/// CPU seconds the machine has been busy so far, all cores together.
pub fn machine_busy_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?;
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: all but idle and iowait are busy.
    let busy: f64 = ticks
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4 && *i < 8)
        .map(|(_, v)| v)
        .sum();
    Some(busy / TICKS_PER_SEC)
}

/// Context switches (voluntary and not) of all a process's threads so far.
pub fn process_switches(pid: u32) -> Option<f64> {
    let mut total = 0.0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let status = std::fs::read_to_string(task.ok()?.path().join("status")).ok()?;
        total += status
            .lines()
            .filter(|line| line.contains("ctxt_switches:"))
            .filter_map(|line| line.split_whitespace().nth(1)?.parse::<f64>().ok())
            .sum::<f64>();
    }
    Some(total)
}

/// Read and write system calls (`syscr` + `syscw` of /proc/PID/io: reads, writes and their
/// socket kin) a process has made so far: how many times it crossed into the kernel to move
/// bytes, which batching on a connection brings down.
pub fn process_syscalls(pid: u32) -> Option<f64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    let field = |name: &str| {
        io.lines()
            .find_map(|line| line.strip_prefix(name))?
            .trim()
            .parse::<f64>()
            .ok()
    };
    Some(field("syscr:")? + field("syscw:")?)
}

/// Context switches of the whole machine so far.
pub fn machine_switches() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|line| line.strip_prefix("ctxt "))?
        .trim()
        .parse()
        .ok()
}

/// A reading of the watched processes and the machine, to subtract from a later one.
#[derive(Debug, Clone)]
pub struct Reading {
    at: Instant,
    machine: Option<(f64, f64)>,
    processes: Vec<ProcessReading>,
}

#[derive(Debug, Clone)]
struct ProcessReading {
    name: String,
    cpu_secs: Option<f64>,
    switches: Option<f64>,
    syscalls: Option<f64>,
}

impl ProcessReading {
    fn of(name: &str, pid: u32, with_children: bool) -> Self {
        Self {
            name: name.to_owned(),
            cpu_secs: process_secs(pid, with_children),
            switches: process_switches(pid),
            syscalls: process_syscalls(pid),
        }
    }
}

impl Reading {
    /// `watched`: (name, pid); this process (and the children it has waited for) is
    /// always included as `self`.
    pub fn now(watched: &[(String, u32)]) -> Self {
        let mut processes = vec![ProcessReading::of("self", std::process::id(), true)];
        processes.extend(
            watched
                .iter()
                .map(|(name, pid)| ProcessReading::of(name, *pid, false)),
        );
        Self {
            at: Instant::now(),
            machine: machine_busy_secs().zip(machine_switches()),
            processes,
        }
    }

    /// Since `earlier`: `cores`, the cores busy on average (the machine's and each
    /// process's), `switches`, context switches per second, and `syscalls`, each process's
    /// read and write system calls per second.
    pub fn since(&self, earlier: &Self) -> serde_json::Value {
        let wall = self.at.duration_since(earlier.at).as_secs_f64().max(1e-9);
        let rate = |now: Option<f64>, then: Option<f64>| now.zip(then).map(|(n, t)| (n - t) / wall);
        let mut cores = serde_json::Map::new();
        let mut switches = serde_json::Map::new();
        let mut syscalls = serde_json::Map::new();
        let (machine_now, machine_then) = (self.machine.unzip(), earlier.machine.unzip());
        if let Some(busy) = rate(machine_now.0, machine_then.0) {
            cores.insert("machine".into(), busy.into());
        }
        if let Some(per_sec) = rate(machine_now.1, machine_then.1) {
            switches.insert("machine".into(), per_sec.into());
        }
        for (now, then) in self.processes.iter().zip(&earlier.processes) {
            if let Some(busy) = rate(now.cpu_secs, then.cpu_secs) {
                cores.insert(now.name.clone(), busy.into());
            }
            if let Some(per_sec) = rate(now.switches, then.switches) {
                switches.insert(now.name.clone(), per_sec.into());
            }
            if let Some(per_sec) = rate(now.syscalls, then.syscalls) {
                syscalls.insert(now.name.clone(), per_sec.into());
            }
        }
        serde_json::json!({"cores": cores, "switches": switches, "syscalls": syscalls})
    }
}

/// `name=pid` from the command line.
pub fn parse_watch(spec: &str) -> Result<(String, u32), String> {
    let (name, pid) = spec
        .split_once('=')
        .ok_or_else(|| format!("`{spec}` is not NAME=PID"))?;
    let pid = pid
        .parse()
        .map_err(|_| format!("`{pid}` in `{spec}` is not a pid"))?;
    Ok((name.to_owned(), pid))
}

/// `cpu`: runs a command and writes to `out` how busy the machine and the watched processes
/// were while it ran (the command's own CPU under `self`); exits with the command's status.
pub async fn wrap(
    out: &std::path::Path,
    watched: &[(String, u32)],
    command: &[String],
) -> anyhow::Result<std::process::ExitCode> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("no command to run"))?;
    let before = Reading::now(watched);
    let status = tokio::process::Command::new(program)
        .args(args)
        .status()
        .await?;
    let after = Reading::now(watched);
    let mut report = after.since(&before);
    // The kernel keeps an exited child's CPU time for its parent, not its context switches
    // or system calls: ours alone would say nothing about the command.
    for kind in ["switches", "syscalls"] {
        if let Some(per_process) = report[kind].as_object_mut() {
            per_process.remove("self");
        }
    }
    report["wall_s"] = after.at.duration_since(before.at).as_secs_f64().into();
    std::fs::write(out, report.to_string())?;
    Ok(std::process::ExitCode::from(
        u8::try_from(status.code().unwrap_or(2)).unwrap_or(2),
    ))
}
