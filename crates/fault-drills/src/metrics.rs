//! Reading what a service process did: its Prometheus counters and its CPU time. A drill
//! that must show a service did *not* do something (spin, retry in a loop) reads these.

use std::sync::OnceLock;

/// Adds up the samples of every series named `name` in Prometheus text: all label sets of
/// a counter, or one of a histogram's `_count` / `_sum`. 0 when there is none.
pub fn sum(text: &str, name: &str) -> f64 {
    sum_of(text, name, |_| true)
}

/// [`sum`] over the series of `name` whose label set includes `label` (`key="value"`).
pub fn sum_where(text: &str, name: &str, label: &str) -> f64 {
    sum_of(text, name, |labels| {
        labels
            .trim_start_matches('{')
            .trim_end_matches('}')
            .split(',')
            .any(|pair| pair.trim() == label)
    })
}

fn sum_of(text: &str, name: &str, labels_match: impl Fn(&str) -> bool) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, labels) = series.split_at(series.find('{').unwrap_or(series.len()));
            (series_name.trim() == name && labels_match(labels))
                .then(|| value.trim().parse::<f64>().ok())?
        })
        .sum()
}

/// User + system CPU seconds of process `pid`, from `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: u32) -> Result<f64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    // The command name (field 2) may hold spaces and parentheses; the fields after its
    // closing parenthesis start at field 3 (state), so utime (14) and stime (15) are the
    // 12th and 13th of them.
    let after_name = stat
        .rsplit_once(')')
        .ok_or("no command name in /proc/<pid>/stat")?
        .1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| -> Result<f64, String> {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .map(|t| t as f64)
            .ok_or_else(|| format!("field {} of /proc/{pid}/stat", i + 3))
    };
    Ok((ticks(11)? + ticks(12)?) / clock_ticks_per_second())
}

/// `getconf CLK_TCK`: 100 on Linux as built everywhere we run, asked once anyway.
fn clock_ticks_per_second() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# HELP seckill_consumer_batch_failures_total Batches handed back.
# TYPE seckill_consumer_batch_failures_total counter
seckill_consumer_batch_failures_total{retryable=\"true\"} 7
seckill_consumer_batch_failures_total{retryable=\"false\"} 2
seckill_consumer_batch_size_count 12
seckill_consumer_batch_size_sum 40
seckill_orders_written_total 40
";

    #[test]
    fn every_label_set_of_a_counter_is_added_up() {
        assert_eq!(sum(TEXT, "seckill_consumer_batch_failures_total"), 9.0);
    }

    #[test]
    fn a_name_matches_whole_series_names_only() {
        assert_eq!(sum(TEXT, "seckill_consumer_batch_size_count"), 12.0);
        assert_eq!(sum(TEXT, "seckill_consumer_batch_size"), 0.0);
        assert_eq!(sum(TEXT, "seckill_orders_written"), 0.0);
    }

    #[test]
    fn a_label_picks_the_series_that_carry_it() {
        let name = "seckill_consumer_batch_failures_total";
        assert_eq!(sum_where(TEXT, name, r#"retryable="true""#), 7.0);
        assert_eq!(sum_where(TEXT, name, r#"retryable="maybe""#), 0.0);
        assert_eq!(
            sum_where(TEXT, "seckill_orders_written_total", r#"retryable="true""#),
            0.0
        );
    }

    #[test]
    fn cpu_time_grows_while_the_process_works() {
        let before = cpu_seconds(std::process::id()).unwrap();
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < std::time::Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
        }
        let after = cpu_seconds(std::process::id()).unwrap();
        // 300 ms of wall time busy on one thread: at least a third of it on a loaded CPU.
        assert!(after - before >= 0.1, "{before} → {after}");
    }
}
