//! The process metrics every Go component exports (the Prometheus Go client's process
//! collector) and kube-proxy dashboards read: CPU time, memory, file descriptors and start
//! time, read from `/proc/self` at each scrape and appended to `/metrics` with the same names,
//! types and help texts.

use std::fmt::Write;

/// The kernel exports times in `/proc` in USER_HZ, which is 100 on every Linux ABI
/// (whatever the kernel's own HZ); the Go client assumes the same.
const USER_HZ: f64 = 100.0;

/// What `/proc/self/stat` says: (user + system CPU seconds, start ticks after boot, virtual
/// memory bytes). The command name (field 2) may hold spaces and parentheses: fields are
/// counted after its last `)`.
fn parse_stat(stat: &str) -> Option<(f64, u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state): utime is field 14, stime 15, starttime 22, vsize 23.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    let cpu = (field(14)? + field(15)?) as f64 / USER_HZ;
    Some((cpu, field(22)?, field(23)?))
}

/// A `Key:   value kB` line of `/proc/self/status`, in bytes.
fn status_bytes(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// The soft limit of `Max open files` in `/proc/self/limits`.
fn max_open_files(limits: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line["Max open files".len()..].split_whitespace().next()?;
    // "unlimited" is what the Go client reports as +Inf too.
    Some(soft.parse::<f64>().unwrap_or(f64::INFINITY))
}

/// The boot time, in unix seconds (`btime` of `/proc/stat`).
fn boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

fn family(out: &mut String, name: &str, kind: &str, help: &str, value: f64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
}

/// Appends the process metrics to a `/metrics` text; a family whose source cannot be read is
/// left out (never fails a scrape).
pub fn render_into(out: &mut String) {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let stat = read("/proc/self/stat").as_deref().and_then(parse_stat);
    let status = read("/proc/self/status").unwrap_or_default();
    if let Some((cpu, _, _)) = stat {
        family(out, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", cpu);
    }
    if let Some(max) = read("/proc/self/limits").as_deref().and_then(max_open_files) {
        family(out, "process_max_fds", "gauge", "Maximum number of open file descriptors.", max);
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        family(out, "process_open_fds", "gauge", "Number of open file descriptors.", fds.count() as f64);
    }
    if let Some(rss) = status_bytes(&status, "VmRSS:") {
        family(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", rss as f64);
    }
    if let (Some((_, start_ticks, _)), Some(boot)) = (stat, read("/proc/stat").as_deref().and_then(boot_time)) {
        let start = boot as f64 + start_ticks as f64 / USER_HZ;
        family(
            out,
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            start,
        );
    }
    if let Some((_, _, vsize)) = stat {
        family(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", vsize as f64);
    }
}

/// The node's conntrack table, read at each scrape (as the node exporter's
/// `node_nf_conntrack_entries` and `_limit`, for nodes without it): entries of the agent's
/// network namespace (the node's) and the table's limit. Left out where conntrack is not
/// loaded.
pub fn conntrack_into(out: &mut String) {
    let read = |p: &str| std::fs::read_to_string(p).ok().and_then(|t| t.trim().parse::<f64>().ok());
    let (Some(count), Some(max)) =
        (read("/proc/sys/net/netfilter/nf_conntrack_count"), read("/proc/sys/net/netfilter/nf_conntrack_max"))
    else {
        return;
    };
    family(out, "verdict_conntrack_entries", "gauge", "Connections in the node's conntrack table.", count);
    family(out, "verdict_conntrack_entries_limit", "gauge", "The conntrack table's limit (nf_conntrack_max).", max);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        // A command name with a space and a parenthesis, as a process may choose.
        let stat = "4242 (ver dict) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 130 0 0 20 0 7 0 123456 \
                    1048576000 5000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(parse_stat(stat), Some((3.8, 123456, 1_048_576_000)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn status_limits_and_boot_time_are_read() {
        let status = "Name:\tverdict\nVmSize:\t  1000 kB\nVmRSS:\t   2048 kB\n";
        assert_eq!(status_bytes(status, "VmRSS:"), Some(2048 * 1024));
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024.0));
        assert_eq!(boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n"), Some(1_700_000_000));
    }

    #[test]
    fn renders_every_family_for_this_process() {
        let mut out = String::new();
        render_into(&mut out);
        for (name, kind) in [
            ("process_cpu_seconds_total", "counter"),
            ("process_max_fds", "gauge"),
            ("process_open_fds", "gauge"),
            ("process_resident_memory_bytes", "gauge"),
            ("process_start_time_seconds", "gauge"),
            ("process_virtual_memory_bytes", "gauge"),
        ] {
            assert!(out.contains(&format!("# TYPE {name} {kind}\n{name} ")), "{name}:\n{out}");
        }
    }
}
