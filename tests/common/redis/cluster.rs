//! A Redis Cluster of real redis-server processes.

use super::*;

/// A Redis Cluster of three masters, created with `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Three masters, no replicas.
    pub fn start() -> RedisCluster {
        RedisCluster::start_with(0)
    }

    /// Three masters with `replicas` replicas each; a replica takes over
    /// about two seconds after its master dies.
    pub fn start_with(replicas: usize) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|_| RedisServer::start_on(free_cluster_port(), true))
            .collect();
        let mut args = vec!["--cluster".to_owned(), "create".to_owned()];
        args.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
        args.extend([
            "--cluster-replicas".to_owned(),
            replicas.to_string(),
            "--cluster-yes".to_owned(),
        ]);
        let out = Command::new("redis-cli")
            .args(&args)
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        for n in &nodes {
            assert!(
                eventually(Duration::from_secs(20), || n
                    .cli(&["cluster", "info"])
                    .contains("cluster_state:ok")),
                "cluster not ok on {}",
                n.port
            );
        }
        // A replica can take over only once it has synced with its master.
        for n in &nodes {
            assert!(
                eventually(Duration::from_secs(30), || {
                    let r = n.cli(&["info", "replication"]);
                    r.contains("role:master") || r.contains("master_link_status:up")
                }),
                "replica on {} never synced",
                n.port
            );
        }
        RedisCluster { nodes }
    }

    /// The nodes that answer `ROLE` with `master`.
    pub fn masters(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].cli(&["role"]).starts_with("master"))
            .collect()
    }

    pub fn seeds(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }
}
