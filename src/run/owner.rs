//! Who owns a run: the process that claimed it, written so that a later
//! process can tell whether that owner still runs, even when its pid has
//! been reused since (after a crash or a reboot, pids come round again).
//!
//! On Linux an owner is `pid:N boot B start S`: B is the first 8 characters
//! of `/proc/sys/kernel/random/boot_id` and S the process's start time in
//! clock ticks after boot (field 22 of `/proc/N/stat`). The owner is alive
//! when this boot is B and process N started at S, and N is not a zombie
//! (a killed process whose parent has not reaped it yet runs nothing).
//! Where `/proc` cannot say, and for rows written as plain `pid:N`, only
//! the pid is checked (`kill(N, 0)`). Depends on `libc` and the file system
//! only.

use std::sync::OnceLock;

/// This process's owner text (computed once: it never changes).
pub fn this_process() -> &'static str {
    static OWNER: OnceLock<String> = OnceLock::new();
    OWNER.get_or_init(|| {
        let pid = std::process::id();
        match (boot_id(), start_ticks(pid)) {
            (Some(boot), Some(start)) => format!("pid:{pid} boot {boot} start {start}"),
            _ => format!("pid:{pid}"),
        }
    })
}

/// Whether the process named by `owner` still runs. This process itself
/// counts as not alive: a run it finds at start-up was claimed by an
/// earlier process that had the same pid.
pub fn is_alive(owner: &str) -> bool {
    let Some(rest) = owner.strip_prefix("pid:") else {
        return false;
    };
    let mut words = rest.split_whitespace();
    let Some(pid) = words.next().and_then(|p| p.parse::<i32>().ok()) else {
        return false;
    };
    if pid <= 0 || pid as u32 == std::process::id() {
        return false;
    }
    let identity = match (words.next(), words.next(), words.next(), words.next()) {
        (Some("boot"), Some(boot), Some("start"), Some(start)) => start
            .parse::<u64>()
            .ok()
            .map(|start| (boot.to_string(), start)),
        _ => None,
    };
    if is_zombie(pid as u32) {
        return false;
    }
    if let (Some((boot, start)), Some(now_boot)) = (identity, boot_id()) {
        return boot == now_boot && start_ticks(pid as u32) == Some(start);
    }
    pid_exists(pid)
}

/// Whether process `pid` has ended but is not reaped yet (state `Z`).
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .next()?
                .to_string();
            Some(state == "Z")
        })
        .unwrap_or(false)
}

/// The first 8 characters of this boot's id.
fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id: String = id.trim().chars().take(8).collect();
    (id.len() == 8).then_some(id)
}

/// When process `pid` started, in clock ticks after boot.
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; it ends at the last ')'.
    let after_name = stat.rsplit_once(')')?.1;
    // Field 3 (state) is the first after the name; starttime is field 22.
    after_name.split_whitespace().nth(19)?.parse().ok()
}

fn pid_exists(pid: i32) -> bool {
    // Signal 0 checks existence; EPERM means it exists under another user.
    // SAFETY: kill with signal 0 sends nothing.
    let result = unsafe { libc::kill(pid, 0) };
    result == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child process that runs until killed, its owner text, and a
    /// guard that kills it.
    struct Child(std::process::Child);

    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn sleeper() -> Child {
        Child(
            std::process::Command::new("sleep")
                .arg("600")
                .spawn()
                .expect("spawn sleep"),
        )
    }

    #[test]
    fn a_running_process_is_alive_under_its_full_owner_text() {
        let child = sleeper();
        let pid = child.0.id();
        let boot = boot_id().expect("Linux /proc");
        let start = start_ticks(pid).expect("start time");
        let owner = format!("pid:{pid} boot {boot} start {start}");
        assert!(is_alive(&owner));
        assert!(is_alive(&format!("pid:{pid}")), "legacy form");
        // The same pid with another start time or boot: a reused pid.
        assert!(!is_alive(&format!(
            "pid:{pid} boot {boot} start {}",
            start + 1
        )));
        assert!(!is_alive(&format!("pid:{pid} boot 00000000 start {start}")));
        drop(child);
        assert!(!is_alive(&owner));
        assert!(!is_alive(&format!("pid:{pid}")));
    }

    #[test]
    fn this_process_names_itself_fully_and_counts_as_not_alive() {
        let me = this_process();
        let pid = std::process::id();
        assert!(me.starts_with(&format!("pid:{pid} boot ")), "{me}");
        assert!(me.contains(" start "), "{me}");
        assert!(!is_alive(me));
    }

    #[test]
    fn a_killed_process_not_yet_reaped_is_not_alive() {
        let mut child = sleeper();
        let pid = child.0.id();
        let owner = format!(
            "pid:{pid} boot {} start {}",
            boot_id().unwrap(),
            start_ticks(pid).unwrap()
        );
        assert!(is_alive(&owner));
        // SIGKILL without waiting: the process stays a zombie until reaped.
        // SAFETY: kill sends a signal to our own child process.
        assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !is_zombie(pid) {
            assert!(std::time::Instant::now() < deadline, "no zombie");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!is_alive(&owner));
        assert!(!is_alive(&format!("pid:{pid}")));
        let _ = child.0.wait();
    }

    #[test]
    fn malformed_owners_are_not_alive() {
        for owner in ["", "pid:", "pid:abc", "pid:-1", "host:1", "pid:0"] {
            assert!(!is_alive(owner), "{owner}");
        }
    }
}
