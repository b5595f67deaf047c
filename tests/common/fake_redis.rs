//! A Redis that answers what a real one will not: garbage, short replies, a
//! PING that works while scripts do not. It speaks enough RESP for the redis
//! crate to connect (commands in, one reply each) and answers each command
//! from the test's function.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A fake Redis on a free loopback port; stops accepting when dropped.
pub struct FakeRedis {
    pub port: u16,
    pub connections: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

/// The reply to one command (its words, upper-cased first).
pub type Answer = dyn Fn(&[String]) -> Vec<u8> + Send + Sync;

impl FakeRedis {
    pub fn start(answer: impl Fn(&[String]) -> Vec<u8> + Send + Sync + 'static) -> FakeRedis {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(AtomicU64::new(0));
        let answer: Arc<Answer> = Arc::new(answer);
        let (s, c) = (stop.clone(), connections.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        c.fetch_add(1, Ordering::Relaxed);
                        let answer = answer.clone();
                        let s = s.clone();
                        std::thread::spawn(move || serve(conn, &*answer, &s));
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
                }
            }
        });
        FakeRedis {
            port,
            connections,
            stop,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for FakeRedis {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// What a plain Redis answers to the handshake and PING, else `None`.
pub fn handshake(cmd: &[String]) -> Option<Vec<u8>> {
    match cmd.first().map(String::as_str) {
        Some("PING") => Some(b"+PONG\r\n".to_vec()),
        Some("HELLO") => Some(b"-ERR unknown command 'HELLO'\r\n".to_vec()),
        Some("CLIENT" | "SELECT" | "AUTH") => Some(b"+OK\r\n".to_vec()),
        _ => None,
    }
}

fn serve(conn: TcpStream, answer: &Answer, stop: &AtomicBool) {
    conn.set_read_timeout(Some(std::time::Duration::from_millis(200)))
        .ok();
    let mut out = conn.try_clone().expect("clone");
    let mut r = BufReader::new(conn);
    while !stop.load(Ordering::Relaxed) {
        let cmd = match read_command(&mut r) {
            Ok(Some(cmd)) => cmd,
            Ok(None) => return,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(_) => return,
        };
        if out.write_all(&answer(&cmd)).is_err() {
            return;
        }
    }
}

/// One RESP array of bulk strings; `None` at end of stream.
fn read_command(r: &mut BufReader<TcpStream>) -> std::io::Result<Option<Vec<String>>> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let n: usize = line.trim().trim_start_matches('*').parse().unwrap_or(0);
    let mut words = Vec::with_capacity(n);
    for _ in 0..n {
        line.clear();
        r.read_line(&mut line)?;
        let len: usize = line.trim().trim_start_matches('$').parse().unwrap_or(0);
        let mut buf = vec![0; len + 2];
        r.read_exact(&mut buf)?;
        buf.truncate(len);
        words.push(String::from_utf8_lossy(&buf).into_owned());
    }
    if let Some(first) = words.first_mut() {
        *first = first.to_ascii_uppercase();
    }
    Ok(Some(words))
}
