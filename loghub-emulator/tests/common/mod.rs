//! What the test targets share: the runner (proxy variables first, then the emulator, then the
//! cases one by one), the SDK client pointed at the emulator, and a small signed HTTP/1.1
//! client for the calls the SDK does not make (split, merge, the control API, other
//! compressions).

#![allow(dead_code)] // each target uses a part

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use aliyun_log_rust_sdk::{Client, Config, FromConfig};
use aliyun_log_sdk_protobuf::{Log, LogGroup};
use aliyun_log_sdk_sign::{sign_v1, QueryParams};
use shardlease_loghub_emulator::Emulator;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The endpoint every client is given: any name works, the emulator is the proxy.
pub const ENDPOINT: &str = "loghub.local";
/// The access key the clients sign with.
pub const KEY_ID: &str = "test-key-id";
pub const KEY_SECRET: &str = "test-key-secret";

pub type CaseFuture = Pin<Box<dyn Future<Output = ()> + Send>>;
pub type Case = (&'static str, fn(Ctx) -> CaseFuture);

/// What a case gets.
#[derive(Clone)]
pub struct Ctx {
    pub addr: SocketAddr,
    names: Arc<AtomicU32>,
}

/// Runs `cases` one by one on one emulator, printing a line per case and
/// `N passed, M failed` at the end. The proxy variables are set before any thread exists.
pub fn run(emulator: Emulator, cases: &[Case]) -> ExitCode {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().unwrap();
    for name in ["all_proxy", "ALL_PROXY", "https_proxy", "HTTPS_PROXY"] {
        std::env::remove_var(name);
    }
    for name in ["http_proxy", "HTTP_PROXY"] {
        std::env::set_var(name, format!("http://{addr}"));
    }
    for name in ["no_proxy", "NO_PROXY"] {
        std::env::set_var(name, "127.0.0.1,localhost");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let (passed, failed) = runtime.block_on(async move {
        let running = emulator.serve(listener).expect("serve");
        let ctx = Ctx {
            addr,
            names: Arc::new(AtomicU32::new(0)),
        };
        let (mut passed, mut failed) = (0, 0);
        for (name, case) in cases {
            ctx.control("DELETE", "/_emulator/faults", "").await;
            ctx.control("DELETE", "/_emulator/requests", "").await;
            match tokio::spawn(case(ctx.clone())).await {
                Ok(()) => {
                    println!("test {name} ... ok");
                    passed += 1;
                }
                Err(_) => {
                    println!("test {name} ... FAILED");
                    failed += 1;
                }
            }
        }
        running.shutdown().await;
        (passed, failed)
    });
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// An answer of the raw client.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Raw {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// The `errorCode` of an error answer.
    pub fn error_code(&self) -> String {
        self.json()["errorCode"].as_str().unwrap_or("").to_string()
    }
}

impl Ctx {
    /// A name no other case uses: `prefix-N`.
    pub fn unique(&self, prefix: &str) -> String {
        format!("{prefix}-{}", self.names.fetch_add(1, Ordering::Relaxed))
    }

    /// The SDK client, without retries (a case that wants the SDK's retries builds its own).
    pub fn client(&self) -> Client {
        client_with(KEY_ID, KEY_SECRET, 0)
    }

    /// A new project with one logstore of `shards` shards, made with the SDK.
    pub async fn logstore(&self, shards: i32) -> (String, String) {
        let (project, logstore) = (self.unique("proj"), self.unique("store"));
        let client = self.client();
        client
            .create_project(&project)
            .description("a test project")
            .send()
            .await
            .expect("CreateProject");
        client
            .create_logstore(&project, &logstore)
            .shard_count(shards)
            .ttl(1)
            .send()
            .await
            .expect("CreateLogStore");
        (project, logstore)
    }

    /// A call over plain HTTP/1.1 to the emulator, signed as the SDK signs, with the host
    /// `<project>.loghub.local` (or `loghub.local` without a project).
    pub async fn call(
        &self,
        method: &str,
        project: Option<&str>,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Raw {
        let mut map = http::HeaderMap::new();
        for (name, value) in headers {
            map.insert(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        if !map.contains_key("x-log-bodyrawsize") {
            map.insert("x-log-bodyrawsize", body.len().to_string().parse().unwrap());
        }
        sign_v1(
            KEY_ID,
            KEY_SECRET,
            None,
            method.parse().unwrap(),
            path,
            &mut map,
            QueryParams::from(query.iter().copied()),
            (!body.is_empty()).then_some(body),
        )
        .expect("sign");
        let host = match project {
            Some(p) => format!("{p}.{ENDPOINT}"),
            None => ENDPOINT.to_string(),
        };
        let mut head = format!("{method} {}", target(path, query));
        head.push_str(&format!(
            " HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n"
        ));
        for (name, value) in &map {
            head.push_str(&format!("{name}: {}\r\n", value.to_str().unwrap()));
        }
        head.push_str("\r\n");
        self.exchange(head.into_bytes(), body).await
    }

    /// A control-API call, unsigned.
    pub async fn control(&self, method: &str, path: &str, json: &str) -> Raw {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            json.len()
        );
        self.exchange(head.into_bytes(), json.as_bytes()).await
    }

    /// Sends a request (an unsigned one too) and reads the whole answer.
    pub async fn exchange(&self, head: Vec<u8>, body: &[u8]) -> Raw {
        let mut stream = tokio::net::TcpStream::connect(self.addr)
            .await
            .expect("connect");
        stream.write_all(&head).await.unwrap();
        stream.write_all(body).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        parse_answer(&answer)
    }

    /// A fault, through the control API.
    pub async fn fault(&self, json: serde_json::Value) {
        let raw = self
            .control("POST", "/_emulator/faults", &json.to_string())
            .await;
        assert_eq!(raw.status, 200, "{}", String::from_utf8_lossy(&raw.body));
    }

    /// The call counts, through the control API.
    pub async fn counts(&self) -> serde_json::Value {
        self.control("GET", "/_emulator/requests", "").await.json()
    }

    /// ListShards over plain HTTP, as JSON.
    pub async fn shards(&self, project: &str, logstore: &str) -> Vec<serde_json::Value> {
        let raw = self
            .call(
                "GET",
                Some(project),
                &format!("/logstores/{logstore}/shards"),
                &[],
                &[],
                b"",
            )
            .await;
        assert_eq!(raw.status, 200);
        raw.json().as_array().unwrap().clone()
    }
}

/// The SDK client signing with this key, with `retries` retries.
pub fn client_with(id: &str, secret: &str, retries: u32) -> Client {
    let config = Config::builder()
        .endpoint(ENDPOINT)
        .access_key(id, secret)
        .max_retry(retries)
        .build()
        .expect("an SDK config");
    Client::from_config(config).expect("an SDK client")
}

fn target(path: &str, query: &[(&str, &str)]) -> String {
    if query.is_empty() {
        return path.to_string();
    }
    let encoded = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(query.iter().copied())
        .finish();
    format!("{path}?{encoded}")
}

fn parse_answer(answer: &[u8]) -> Raw {
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP answer");
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Raw {
        status,
        headers,
        body: answer[split + 4..].to_vec(),
    }
}

/// The status and code of the server's refusal of a call (the SDK's answers implement no
/// `Debug`, so `unwrap_err` cannot be used).
pub fn refused<T>(result: Result<T, aliyun_log_rust_sdk::Error>) -> (u32, String) {
    match result {
        Ok(_) => panic!("the call succeeded; a refusal was expected"),
        Err(error) => server_error(error),
    }
}

/// The status and code of an SDK error that came from the server.
pub fn server_error(error: aliyun_log_rust_sdk::Error) -> (u32, String) {
    match error {
        aliyun_log_rust_sdk::Error::Server {
            http_status,
            error_code,
            request_id,
            ..
        } => {
            assert!(
                request_id.is_some_and(|id| id.len() == 24),
                "x-log-requestid"
            );
            (http_status, error_code)
        }
        other => panic!("not a server error: {other}"),
    }
}

/// A log group of one log whose content `n` = `value`.
pub fn group(value: &str) -> LogGroup {
    let mut log = Log::from_unixtime(1_700_000_000);
    log.add_content_kv("n", value);
    let mut group = LogGroup::new();
    group.set_topic("test").add_log(log);
    group
}

/// The values of `n` in log groups, in order.
pub fn values(groups: &[LogGroup]) -> Vec<String> {
    groups
        .iter()
        .flat_map(|g| g.logs())
        .flat_map(|l| l.contents())
        .map(|c| c.value().clone())
        .collect()
}
