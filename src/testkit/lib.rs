//! Herald's shared test fixtures, used by the integration tests (`src/tests`) and
//! the benches (`benches/`): a fresh real database per test and the macro that runs
//! a contract on all three engines ([`db`]), a real server in this process
//! ([`server`]) or as a child process ([`process`]), a real receiver on loopback
//! ([`receiver`]), store-level outbox helpers ([`outbox`]), injected database
//! faults ([`faults`]), the run-approval scene ([`run_approvals`]), log lines captured in-process ([`logs`]), a connection-counting
//! TCP proxy ([`tcp_proxy`]), and the multi-node and isolation scenes the tests and
//! their benches share ([`cluster`], [`isolation`]), and what the benches that
//! drive a release `herald serve` add ([`bench`]: its process, CPU time, peak RSS).

pub mod bench;
pub mod cluster;
pub mod db;
pub mod faults;
pub mod http;
pub mod isolation;
pub mod logs;
pub mod outbox;
pub mod process;
pub mod receiver;
pub mod run_approvals;
pub mod secrets;
pub mod server;
pub mod tcp_proxy;
pub mod waiting;

pub use db::*;
pub use http::*;
pub use outbox::*;
pub use process::*;
pub use receiver::*;
pub use secrets::*;
pub use server::*;
pub use waiting::*;

use std::path::PathBuf;

/// The `herald` binary cargo built beside the running test or bench
/// (`target/<profile>/herald`; the runner lives in `target/<profile>/deps`).
pub fn herald_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("the running test's own path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a test binary under target/<profile>/deps");
    let bin = profile_dir.join(format!("herald{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "no herald binary at {} (cargo builds it for integration tests and benches)",
        bin.display()
    );
    bin
}

/// `target/tmp` (cargo's `CARGO_TARGET_TMPDIR`): files a failing test leaves for
/// reading, gone with `cargo clean`.
pub fn target_tmp_dir() -> PathBuf {
    let bin = herald_bin();
    let target = bin
        .parent()
        .and_then(|profile| profile.parent())
        .expect("target/<profile>");
    let dir = target.join("tmp");
    std::fs::create_dir_all(&dir).expect("target/tmp can be created");
    dir
}
