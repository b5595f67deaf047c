//! The store a fleet shares, one scenario each: a redis-server, a memcached,
//! a Redis master and replica behind a Sentinel, or a Redis Cluster of three
//! masters with a replica each. The nemesis stops, kills and restarts it the
//! same way (on Sentinel and Cluster, a server that is master then), fails
//! it over, and on Cluster moves slots between masters under load.

use super::common::memcache::Memcached;
use super::common::redis::{RedisCluster, RedisSentinel, RedisServer, command};
use super::common::send_signal;
use super::proxy::Proxy;

/// The Sentinel scenario's master name.
const MASTER: &str = "chaos";

/// Which store a run's fleet shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Redis,
    Memcached,
    Sentinel,
    Cluster,
    /// A redis-server, the rules pushed over xDS (`xds.rs`).
    Xds,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Redis => "redis",
            Backend::Memcached => "memcached",
            Backend::Sentinel => "sentinel",
            Backend::Cluster => "cluster",
            Backend::Xds => "redis, rules over xDS",
        }
    }

    /// Whether the fleet has a concurrency rule: memcached holds no slots,
    /// and an overlay cannot make a pushed rule one.
    pub fn slots(self) -> bool {
        !matches!(self, Backend::Memcached | Backend::Xds)
    }

    /// `CHAOS_STORE`: `redis` (the default), `memcached`, `sentinel`,
    /// `cluster` or `xds` (Redis, the rules over xDS).
    pub fn from_env() -> Backend {
        match std::env::var("CHAOS_STORE").as_deref() {
            Ok("memcached") => Backend::Memcached,
            Ok("sentinel") => Backend::Sentinel,
            Ok("cluster") => Backend::Cluster,
            Ok("xds") => Backend::Xds,
            _ => Backend::Redis,
        }
    }
}

pub enum Store {
    Redis(RedisServer),
    Memcached(Memcached),
    Sentinel(Sentinel),
    Cluster(RedisCluster),
}

/// Two redis-servers, one replicating the other, and a Sentinel watching
/// them (a failover 1 s after the master stops answering).
pub struct Sentinel {
    servers: [RedisServer; 2],
    sentinel: RedisSentinel,
}

impl Sentinel {
    fn start() -> Sentinel {
        let master = RedisServer::start();
        let replica = RedisServer::start();
        replica.cli(&["replicaof", "127.0.0.1", &master.port.to_string()]);
        let synced = super::common::eventually(std::time::Duration::from_secs(10), || {
            replica
                .cli(&["info", "replication"])
                .contains("master_link_status:up")
        });
        assert!(synced, "the replica never synced");
        let sentinel = RedisSentinel::start(MASTER, master.port);
        Sentinel {
            servers: [master, replica],
            sentinel,
        }
    }

    /// The server the Sentinel names master now (the first, before it
    /// answers).
    fn master(&mut self) -> &mut RedisServer {
        let port = self.sentinel.master_port(MASTER);
        let [a, b] = &mut self.servers;
        if port == Some(b.port) { b } else { a }
    }

    /// Whether the Sentinel has settled (no failover under way, its master
    /// not down) on a server that answers `ROLE` as master: the next fault
    /// must act on the master the sentinels name. (The instances' following
    /// it is the checker's: each new master is a store fault of its own,
    /// `History::switches`.)
    fn settled(&self) -> bool {
        let listed = self.sentinel.cli(&["sentinel", "master", MASTER]);
        let mut fields = listed.lines();
        let flags = fields.by_ref().skip_while(|l| *l != "flags").nth(1);
        flags == Some("master")
            && self
                .sentinel
                .master_port(MASTER)
                .and_then(|port| command(port, "ROLE"))
                .is_some_and(|role| role.contains("master"))
    }

    /// `SENTINEL FAILOVER`: the replica promoted, the master made its
    /// replica, without either failing.
    fn failover(&self) {
        let _ = std::process::Command::new("redis-cli")
            .args(["-p", &self.sentinel.port.to_string()])
            .args(["sentinel", "failover", MASTER])
            .output();
    }
}

impl Store {
    pub fn start(backend: Backend) -> Store {
        match backend {
            Backend::Redis | Backend::Xds => Store::Redis(RedisServer::start()),
            Backend::Memcached => Store::Memcached(Memcached::start()),
            Backend::Sentinel => Store::Sentinel(Sentinel::start()),
            Backend::Cluster => Store::Cluster(RedisCluster::start_with(1)),
        }
    }

    /// The serve flags that point an instance at the store: through `proxy`
    /// where the fleet has proxies.
    /// The store's flags for the instance whose link is `link`.
    pub fn flags(&self, link: &Proxy) -> Vec<String> {
        let proxy = link.port;
        match self {
            Store::Redis(_) => vec!["--redis-url".into(), format!("redis://127.0.0.1:{proxy}")],
            Store::Memcached(_) => vec!["--memcache-servers".into(), format!("127.0.0.1:{proxy}")],
            Store::Sentinel(_) => vec![
                "--redis-sentinel".into(),
                format!("{MASTER}@127.0.0.1:{proxy}"),
            ],
            Store::Cluster(c) => {
                let seeds: Vec<String> = c
                    .nodes
                    .iter()
                    .map(|n| format!("127.0.0.1:{}", link.server(n.port)))
                    .collect();
                vec!["--redis-cluster".into(), seeds.join(",")]
            }
        }
    }

    /// One instance's link to the store: a proxy in front of it (on
    /// Sentinel and Cluster, one that answers each server the store names
    /// with the link's own proxy in front of it).
    pub fn link(&self) -> Proxy {
        match self {
            Store::Sentinel(s) => Proxy::start_renaming(s.sentinel.port),
            Store::Cluster(c) => Proxy::start_renaming(c.nodes[0].port),
            _ => Proxy::start(self.port()),
        }
    }

    pub fn port(&self) -> u16 {
        match self {
            Store::Redis(r) => r.port,
            Store::Memcached(m) => m.port,
            Store::Sentinel(s) => {
                let port = s.sentinel.master_port(MASTER);
                port.unwrap_or(s.servers[0].port)
            }
            Store::Cluster(c) => c.nodes[0].port,
        }
    }

    pub fn pid(&self) -> u32 {
        match self {
            Store::Redis(r) => r.pid(),
            Store::Memcached(m) => m.pid(),
            Store::Sentinel(s) => {
                let port = s.sentinel.master_port(MASTER);
                let [a, b] = &s.servers;
                if port == Some(b.port) {
                    b.pid()
                } else {
                    a.pid()
                }
            }
            Store::Cluster(c) => c.masters().first().map_or(0, |&i| c.nodes[i].pid()),
        }
    }

    /// Signals the master.
    pub fn signal(&self, sig: &str) {
        if self.pid() > 0 {
            send_signal(self.pid(), sig);
        }
    }

    /// Whether one server is master as the Sentinel names it (always, on
    /// the other stores).
    pub fn settled(&self) -> bool {
        match self {
            Store::Sentinel(s) => s.settled(),
            _ => true,
        }
    }

    /// What the Sentinel says of its master and each server its role, for
    /// a failure's message.
    pub fn describe(&self) -> String {
        let Store::Sentinel(s) = self else {
            return String::new();
        };
        let mut out = s
            .sentinel
            .cli(&["sentinel", "master", MASTER])
            .replace('\n', " ");
        for r in &s.servers {
            let role = command(r.port, "ROLE").unwrap_or_else(|| "no answer".into());
            out.push_str(&format!(
                "\n{} (pid {}): {}",
                r.port,
                r.pid(),
                role.replace('\n', " ")
            ));
        }
        out
    }

    pub fn kill(&mut self) {
        match self {
            Store::Redis(r) => r.kill(),
            Store::Memcached(m) => m.kill(),
            Store::Sentinel(s) => s.master().kill(),
            Store::Cluster(c) => {
                if let Some(&i) = c.masters().first() {
                    c.nodes[i].kill();
                }
            }
        }
    }

    /// Starts it again on its port, empty (on Sentinel, the server that
    /// was killed: the Sentinel makes it a replica of the one it promoted).
    pub fn restart(&mut self) {
        match self {
            Store::Redis(r) => r.restart(),
            Store::Memcached(m) => m.restart(),
            Store::Sentinel(s) => restart_dead(&mut s.servers),
            Store::Cluster(c) => restart_dead(&mut c.nodes),
        }
    }

    /// A failover without a failure: `SENTINEL FAILOVER`, or `CLUSTER
    /// FAILOVER` on the replica of a master (the one the seed's `pick`
    /// names).
    pub fn failover(&self, pick: usize) {
        match self {
            Store::Sentinel(s) => s.failover(),
            Store::Cluster(c) => {
                let replicas: Vec<&RedisServer> = c
                    .nodes
                    .iter()
                    .filter(|n| n.pid() > 0 && n.cli(&["role"]).starts_with("slave"))
                    .collect();
                if !replicas.is_empty() {
                    replicas[pick % replicas.len()].cli(&["cluster", "failover"]);
                }
            }
            _ => {}
        }
    }

    /// Moves a third of one master's slots to another (`redis-cli --cluster
    /// reshard`), keys and all, while requests go on; on a Cluster only.
    /// The slots moved.
    pub fn migrate(&self, pick: usize) -> usize {
        let Store::Cluster(c) = self else { return 0 };
        let masters = c.masters();
        if masters.len() < 2 {
            return 0;
        }
        let from = &c.nodes[masters[pick % masters.len()]];
        let to = &c.nodes[masters[(pick + 1) % masters.len()]];
        let id = |n: &RedisServer| n.cli(&["cluster", "myid"]).trim().to_owned();
        let out = std::process::Command::new("redis-cli")
            .args(["--cluster", "reshard", &format!("127.0.0.1:{}", from.port)])
            .args(["--cluster-from", &id(from), "--cluster-to", &id(to)])
            .args(["--cluster-slots", "1800", "--cluster-yes"])
            .output();
        // redis-cli names each slot twice: in its plan, then as it moves it.
        let moved = out.as_ref().map_or(0, |o| {
            String::from_utf8_lossy(&o.stdout)
                .matches("Moving slot")
                .count()
                / 2
        });
        let ok = out.as_ref().is_ok_and(|o| o.status.success());
        eprintln!(
            "migration {} -> {}: {moved} slots moved{}",
            from.port,
            to.port,
            if ok { "" } else { ", then it failed" }
        );
        moved
    }

    /// Signals every server (the end of a run continues them all).
    pub fn continue_all(&self) {
        match self {
            Store::Sentinel(s) => {
                for r in &s.servers {
                    if r.pid() > 0 {
                        send_signal(r.pid(), "CONT");
                    }
                }
            }
            Store::Cluster(c) => {
                for r in &c.nodes {
                    if r.pid() > 0 {
                        send_signal(r.pid(), "CONT");
                    }
                }
            }
            other => other.signal("CONT"),
        }
    }
}

/// Starts again, empty, every server that was killed (a Sentinel makes it a
/// replica of the one it promoted; a Cluster node rejoins by its
/// `nodes.conf`).
fn restart_dead(servers: &mut [RedisServer]) {
    for r in servers {
        if r.pid() == 0 {
            r.restart();
        }
    }
}
