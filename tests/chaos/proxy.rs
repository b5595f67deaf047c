//! The network between one instance and the store: a TCP proxy the harness
//! owns, on loopback. It passes bytes through, late by a set delay; it can
//! cut every connection and refuse new ones (a partition); or hold every
//! byte while keeping the connections open (a link gone silent, which no
//! error ever reports).
//!
//! A link carries all its connections on one thread of its own, so it is
//! late for all of them at once: the pulse taken through it (`pulse.rs`)
//! hears what the instance hears when the host keeps that thread off a
//! core, which a pulse taken straight to the store cannot (seed 6 of the
//! short seeds saw a trip under a request flood with the store's own pulse
//! steady).
//!
//! In front of a Sentinel or a Cluster it is the instance's whole link: each
//! server the store names (a master, a node) is answered as a proxy of the
//! same link in front of it (`addresses.rs`), so a fault of the link
//! reaches every server the instance talks to, and no other instance's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::watch;

use super::addresses;

const PASS: u8 = 0;
const PARTITION: u8 = 1;
const SILENT: u8 = 2;

#[derive(Clone)]
pub struct Proxy {
    pub port: u16,
    mode: Arc<AtomicU8>,
    delay_ms: Arc<AtomicU64>,
    /// Bumped by a partition: every connection open on the link is cut.
    cut: Arc<watch::Sender<u64>>,
    /// In front of a Sentinel or a Cluster: each server port it named, and
    /// the port of this link's proxy in front of that server (`None`: a
    /// plain proxy).
    servers: Option<Arc<Mutex<HashMap<u16, u16>>>>,
    /// The link's thread.
    rt: Handle,
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
    /// given, else of a link of its own (and its thread), renaming servers
    /// when `servers`.
    fn serve(
        target: u16,
        of: Option<&Proxy>,
        servers: Option<Arc<Mutex<HashMap<u16, u16>>>>,
    ) -> Proxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        listener.set_nonblocking(true).expect("nonblocking");
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
                cut: Arc::new(watch::channel(0).0),
                servers,
                rt: link_thread(),
            },
        };
        let p = proxy.clone();
        proxy.rt.spawn(async move {
            let Ok(listener) = TcpListener::from_std(listener) else {
                return;
            };
            while let Ok((client, _)) = listener.accept().await {
                // Refused: dropped unanswered, as a partition does.
                if p.mode.load(Ordering::Relaxed) == PARTITION {
                    continue;
                }
                if let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await {
                    p.pipe(client, server);
                }
            }
        });
        proxy
    }

    fn pipe(&self, client: TcpStream, server: TcpStream) {
        let _ = (client.set_nodelay(true), server.set_nodelay(true));
        let (client_reads, client_writes) = client.into_split();
        let (server_reads, server_writes) = server.into_split();
        let link = self.servers.is_some().then(|| self.clone());
        self.rt
            .spawn(self.clone().carry(client_reads, server_writes, None));
        self.rt
            .spawn(self.clone().carry(server_reads, client_writes, link));
    }

    /// One direction of one connection, until either side closes it or
    /// the link is cut; answers are renamed through `link` when given.
    async fn carry(self, mut from: OwnedReadHalf, mut to: OwnedWriteHalf, link: Option<Proxy>) {
        let mut cut = self.cut.subscribe();
        let mut buf = vec![0u8; 16384];
        loop {
            let n = tokio::select! {
                r = from.read(&mut buf) => match r {
                    Ok(n) if n > 0 => n,
                    _ => break,
                },
                _ = cut.changed() => break,
            };
            // Silent: the bytes are held, the connection stays up.
            while self.mode.load(Ordering::Relaxed) == SILENT {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let ms = self.delay_ms.load(Ordering::Relaxed);
            if ms > 0 {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            if cut.has_changed().unwrap_or(true) {
                break;
            }
            let out = match &link {
                Some(l) => addresses::rename_servers(&buf[..n], |s| l.server(s)),
                None => buf[..n].to_vec(),
            };
            if to.write_all(&out).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
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
        self.cut.send_modify(|n| *n += 1);
    }

    /// Every connection kept open, nothing carried.
    pub fn silence(&self) {
        self.mode.store(SILENT, Ordering::Relaxed);
    }
}

/// A thread for one link's connections, for the rest of the process (as
/// the link's listeners are).
fn link_thread() -> Handle {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("proxy runtime");
    let handle = rt.handle().clone();
    std::thread::spawn(move || rt.block_on(std::future::pending::<()>()));
    handle
}
