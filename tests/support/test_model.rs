//! A project for `aurad serve` whose agents use the built-in `test` model
//! (offline, no mock server): an `aurad.yaml` naming a free loopback port
//! and the given agent files.

use std::net::SocketAddr;

use super::serve::free_port;

/// Writes `aurad.yaml` (`listen` on a free loopback port) and each
/// `(name, yaml)` as `agents/<name>.yaml`; returns the directory and the
/// address.
pub fn project(agents: &[(&str, &str)]) -> (tempfile::TempDir, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    std::fs::write(
        root.join("aurad.yaml"),
        format!("listen: {addr}\nshutdown_grace: 5s\n"),
    )
    .unwrap();
    std::fs::create_dir(root.join("agents")).unwrap();
    for (name, yaml) in agents {
        std::fs::write(root.join(format!("agents/{name}.yaml")), yaml).unwrap();
    }
    (dir, addr)
}
