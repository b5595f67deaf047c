//! The network between one instance and the store: a TCP proxy the harness
//! owns, on loopback. It passes bytes through, late by a set delay; it can
//! cut every connection and refuse new ones (a partition); or hold every
//! byte while keeping the connections open (a link gone silent, which no
//! error ever reports).
//!
//! In front of a Sentinel or a Cluster it is the instance's whole link: each
//! server the store names (a master, a node) is answered as a proxy of the
//! same link in front of it (`addresses.rs`), so a fault of the link
//! reaches every server the instance talks to, and no other instance's.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::addresses;

const PASS: u8 = 0;
const PARTITION: u8 = 1;
const SILENT: u8 = 2;

#[derive(Clone)]
pub struct Proxy {
    pub port: u16,
    mode: Arc<AtomicU8>,
    delay_ms: Arc<AtomicU64>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    /// In front of a Sentinel or a Cluster: each server port it named, and
    /// the port of this link's proxy in front of that server (`None`: a
    /// plain proxy).
    servers: Option<Arc<Mutex<HashMap<u16, u16>>>>,
}

impl Proxy {
    /// A proxy on a free loopback port in front of `target`.
    pub fn start(target: u16) -> Proxy {
        Proxy::serve(target, None, None)
    }

    /// A link whose proxies answer every server the store names with the
    /// link's own proxy in front of it; this one in front of `target`.
    pub fn start_renaming(target: u16) -> Proxy {
        Proxy::serve(target, None, Some(Arc::default()))
    }

    /// The port of this link's proxy in front of the server on `port`,
    /// started on first use (the port itself on a plain proxy).
    pub fn server(&self, port: u16) -> u16 {
        let Some(servers) = &self.servers else {
            return port;
        };
        if let Some(&p) = servers.lock().expect("servers").get(&port) {
            return p;
        }
        let started = Proxy::serve(port, Some(self), None).port;
        *servers
            .lock()
            .expect("servers")
            .entry(port)
            .or_insert(started)
    }

    /// Listens in front of `target`: a proxy of the link of `of` when
    /// given, else of a link of its own, renaming servers when `servers`.
    fn serve(
        target: u16,
        of: Option<&Proxy>,
        servers: Option<Arc<Mutex<HashMap<u16, u16>>>>,
    ) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let proxy = match of {
            Some(link) => Proxy {
                port,
                ..link.clone()
            },
            None => Proxy {
                port,
                mode: Arc::new(AtomicU8::new(PASS)),
                delay_ms: Arc::new(AtomicU64::new(0)),
                open: Arc::new(Mutex::new(Vec::new())),
                servers,
            },
        };
        let p = proxy.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                if p.mode.load(Ordering::Relaxed) == PARTITION {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                p.pipe(client, server);
            }
        });
        proxy
    }

    fn pipe(&self, client: TcpStream, server: TcpStream) {
        let _ = (client.set_nodelay(true), server.set_nodelay(true));
        if let (Ok(c), Ok(s)) = (client.try_clone(), server.try_clone()) {
            self.open.lock().expect("open").extend([c, s]);
        }
        for (from, to, answers) in [
            (client.try_clone(), server.try_clone(), false),
            (Ok(server), Ok(client), true),
        ] {
            let (Ok(mut from), Ok(mut to)) = (from, to) else {
                continue;
            };
            let (mode, delay) = (self.mode.clone(), self.delay_ms.clone());
            let link = (answers && self.servers.is_some()).then(|| self.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 16384];
                while let Ok(n) = from.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    // Silent: the bytes are held, the connection stays up.
                    while mode.load(Ordering::Relaxed) == SILENT {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    let ms = delay.load(Ordering::Relaxed);
                    if ms > 0 {
                        std::thread::sleep(Duration::from_millis(ms));
                    }
                    let out = match &link {
                        Some(l) => addresses::rename_servers(&buf[..n], |s| l.server(s)),
                        None => buf[..n].to_vec(),
                    };
                    if to.write_all(&out).is_err() {
                        break;
                    }
                }
                let _ = to.shutdown(Shutdown::Both);
            });
        }
    }

    pub fn pass(&self) {
        self.delay_ms.store(0, Ordering::Relaxed);
        self.mode.store(PASS, Ordering::Relaxed);
    }

    /// Every byte late by `ms`.
    pub fn delay(&self, ms: u64) {
        self.delay_ms.store(ms, Ordering::Relaxed);
    }

    /// Every connection cut, new ones refused.
    pub fn partition(&self) {
        self.mode.store(PARTITION, Ordering::Relaxed);
        for s in self.open.lock().expect("open").drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Every connection kept open, nothing carried.
    pub fn silence(&self) {
        self.mode.store(SILENT, Ordering::Relaxed);
    }
}
