//! The `herald` command line with bad input: a clear message and a non-zero exit.

use std::process::{Command, Output};

fn herald(args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut command = Command::new(env!("CARGO_BIN_EXE_herald"));
    command
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("run herald");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).to_string()
}

#[test]
fn bad_settings_name_the_setting_and_exit_non_zero() {
    let out = herald(&["serve", "--listen", "not-an-address"], &[], None);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--listen"), "{}", stderr(&out));

    let out = herald(&["migrate"], &[("HERALD_LOGIN_MAX_FAILURES", "many")], None);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("login-max-failures"),
        "{}",
        stderr(&out)
    );

    let out = herald(&["migrate", "--database-url", "oracle://db/x"], &[], None);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("database_url"), "{}", stderr(&out));

    let out = herald(&["user", "add", "ada", "--role", "overlord"], &[], None);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("overlord"), "{}", stderr(&out));
}

#[test]
fn users_and_tokens_are_made_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/herald.db", dir.path().display());
    let out = herald(
        &[
            "user",
            "add",
            "ada",
            "--role",
            "operator",
            "--password-stdin",
            "--database-url",
            &url,
        ],
        &[],
        Some("short"),
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("password: must be at least 12"),
        "{}",
        stderr(&out)
    );

    let out = herald(
        &[
            "user",
            "add",
            "ada",
            "--role",
            "operator",
            "--database-url",
            &url,
        ],
        &[],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        printed.contains("password: "),
        "a generated password is printed once: {printed}"
    );

    let out = herald(
        &[
            "user",
            "add",
            "ada",
            "--role",
            "reader",
            "--database-url",
            &url,
        ],
        &[],
        None,
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("already exists"), "{}", stderr(&out));

    let out = herald(
        &[
            "token",
            "create",
            "--name",
            "ci",
            "--role",
            "reader",
            "--database-url",
            &url,
        ],
        &[],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("hrl_"));
}

#[test]
fn one_off_commands_refuse_the_ephemeral_store() {
    for args in [
        &["migrate", "--database-url", "memory://"][..],
        &[
            "token",
            "create",
            "--name",
            "ci",
            "--role",
            "reader",
            "--database-url",
            "memory://",
        ][..],
    ] {
        let out = herald(args, &[], None);
        assert!(!out.status.success(), "{args:?}");
        let err = stderr(&out);
        assert!(
            err.contains("memory://") && err.contains("database_url"),
            "{err}"
        );
    }
}
