//! A real headless Chromium (Debian's `chromium`, from `make deps`) driven
//! through ChromeDriver's WebDriver HTTP API, with its console and network
//! logs, on loopback.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::eventually;
use super::redis::free_port;

pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    agent: ureq::Agent,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub fn start() -> Browser {
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (make deps installs chromium-driver)");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        let base = format!("http://127.0.0.1:{port}");
        let up = eventually(Duration::from_secs(20), || {
            agent
                .get(format!("{base}/status"))
                .call()
                .is_ok_and(|r| r.status() == 200)
        });
        assert!(up, "chromedriver did not start");
        let profile = tempfile::tempdir().expect("profile dir");
        // The flags keep Chromium off the network: on this machine its
        // background connections are refused, and none may leave anyway.
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,1100",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("--user-data-dir={}", profile.path().display())])
        .collect::<Vec<_>>();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args},
            "goog:loggingPrefs": {"browser": "ALL", "performance": "ALL"},
        }}});
        let mut b = Browser {
            driver,
            base,
            session: String::new(),
            agent,
            _profile: profile,
        };
        let v = b.call("POST", "/session", Some(caps));
        b.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {v}"))
            .to_owned();
        b
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.base);
        let resp = match (method, body) {
            ("GET", _) => self.agent.get(&url).call(),
            ("DELETE", _) => self.agent.delete(&url).call(),
            (_, body) => self
                .agent
                .post(&url)
                .header("content-type", "application/json")
                .send(body.unwrap_or_else(|| json!({})).to_string()),
        };
        let mut resp = resp.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let text = resp.body_mut().read_to_string().expect("webdriver answer");
        let v: Value = serde_json::from_str(&text).expect("webdriver json");
        v["value"].clone()
    }

    fn session_call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        self.call(method, &path, body)
    }

    pub fn goto(&self, url: &str) {
        self.session_call("POST", "/url", Some(json!({"url": url})));
    }

    /// Runs `script` (a function body) in the page and returns its value.
    pub fn script(&self, script: &str) -> Value {
        self.session_call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
    }

    /// The text of the first element matching `css`, or "".
    pub fn text(&self, css: &str) -> String {
        let script = format!(
            "const e = document.querySelector({}); return e ? e.textContent : '';",
            serde_json::to_string(css).expect("css")
        );
        self.script(&script).as_str().unwrap_or("").to_owned()
    }

    /// Polls until `f` holds for the page (the console refreshes itself).
    pub fn wait_for(&self, within: Duration, mut f: impl FnMut(&Browser) -> bool) -> bool {
        eventually(within, || f(self))
    }

    /// Console messages logged at error level since the last call.
    pub fn console_errors(&self) -> Vec<String> {
        let logs = self.session_call("POST", "/se/log", Some(json!({"type": "browser"})));
        logs.as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or("").to_owned())
            .collect()
    }

    /// Every URL the page asked for since the last call (the DevTools
    /// protocol's `Network.requestWillBeSent`, from the performance log).
    pub fn requests(&self) -> Vec<String> {
        let logs = self.session_call("POST", "/se/log", Some(json!({"type": "performance"})));
        logs.as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| serde_json::from_str::<Value>(e["message"].as_str()?).ok())
            .filter(|m| m["message"]["method"] == "Network.requestWillBeSent")
            .filter_map(|m| {
                m["message"]["params"]["request"]["url"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect()
    }

    pub fn screenshot(&self, path: &Path) {
        let png = self.session_call("GET", "/screenshot", None);
        let bytes = base64_decode(png.as_str().expect("base64 png"));
        std::fs::write(path, bytes).expect("write screenshot");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self
                .agent
                .delete(format!("{}/session/{}", self.base, self.session))
                .call();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Standard base64, as WebDriver sends screenshots (no crate for ten lines).
fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| -> Option<u32> {
        match c {
            b'A'..=b'Z' => Some(u32::from(c - b'A')),
            b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
            b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for v in s.bytes().filter_map(value) {
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}
