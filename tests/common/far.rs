//! A store far away: a TCP proxy on loopback that carries every chunk a set
//! time late in each direction, as a link between regions does. A delay
//! line, not a queue: each chunk leaves `delay` after it arrived, whatever
//! came before it, so pipelined calls overlap as they do on a real long
//! link (a proxy that slept before each read would add the delays up).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// A delay line in front of one server, on its own thread; stops with the
/// process.
pub struct FarLink {
    pub port: u16,
}

impl FarLink {
    /// Listens on a free loopback port, carrying to `target` each way
    /// `delay` late.
    pub fn start(target: u16, delay: Duration) -> FarLink {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind far link");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("far link runtime");
        std::thread::spawn(move || {
            rt.block_on(async move {
                let Ok(listener) = TcpListener::from_std(listener) else {
                    return;
                };
                while let Ok((client, _)) = listener.accept().await {
                    if let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await {
                        let _ = (client.set_nodelay(true), server.set_nodelay(true));
                        let (cr, cw) = client.into_split();
                        let (sr, sw) = server.into_split();
                        tokio::spawn(carry(cr, sw, delay));
                        tokio::spawn(carry(sr, cw, delay));
                    }
                }
            });
        });
        FarLink { port }
    }
}

/// One direction: a reader stamps each chunk, a writer sends it at its
/// stamp plus `delay`.
async fn carry(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buf = vec![0u8; 65536];
    loop {
        match from.read(&mut buf).await {
            Ok(n) if n > 0 => {
                if tx
                    .send((Instant::now() + delay, buf[..n].to_vec()))
                    .is_err()
                {
                    break;
                }
            }
            _ => break,
        }
    }
    drop(tx);
    let _ = writer.await;
}
