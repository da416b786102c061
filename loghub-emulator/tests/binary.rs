//! The `loghub-emulator` binary: it says where it listens once it accepts connections, serves,
//! exits 0 on SIGTERM, and says in one line why it cannot start.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_loghub-emulator");

#[test]
fn it_announces_its_address_serves_and_exits_0_on_sigterm() {
    let mut child = Command::new(BIN)
        .args(["--bind", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("loghub-emulator listening on http://")
        .unwrap_or_else(|| panic!("announced {line:?}"))
        .to_string();
    let mut stream = TcpStream::connect(&addr).unwrap();
    stream
        .write_all(b"GET /_emulator/ready HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[test]
fn a_port_in_use_is_one_line_and_exit_1() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let output = Command::new(BIN).args(["--bind", &addr]).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!("loghub-emulator: cannot listen on {addr}: ")),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}

#[test]
fn bad_arguments_are_refused() {
    for args in [
        &["--bogus"][..],
        &["--access-key-id", "only-the-id"][..],
        &["--bind"][..],
    ] {
        let output = Command::new(BIN).args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
    }
}
