//! A TCP proxy that delays what a client sends to a Redis.

use super::*;

/// A TCP proxy in front of a Redis that delays every chunk the client sends
/// by an adjustable number of milliseconds: a slow network or a slow server.
pub struct DelayProxy {
    pub port: u16,
    delay_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Chunks read from clients so far (before their delay).
    chunks: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl DelayProxy {
    pub fn start(target: u16) -> DelayProxy {
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let delay_ms = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let delay = delay_ms.clone();
        let chunks = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let seen = chunks.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (mut c_read, mut s_write) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                let (mut s_read, mut c_write) = (server, client);
                let (delay, seen) = (delay.clone(), seen.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16384];
                    while let Ok(n) = c_read.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        seen.fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(Duration::from_millis(delay.load(Ordering::Relaxed)));
                        if s_write.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = s_write.shutdown(std::net::Shutdown::Both);
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut s_read, &mut c_write);
                    let _ = c_write.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        DelayProxy {
            port,
            delay_ms,
            chunks,
        }
    }

    /// Chunks the proxy has read from sluice so far: a call sent.
    pub fn chunks(&self) -> u64 {
        self.chunks.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn set_delay(&self, ms: u64) {
        self.delay_ms
            .store(ms, std::sync::atomic::Ordering::Relaxed);
    }
}
