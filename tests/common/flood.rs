//! A request flood far past what this host can answer, the CPU starvation
//! the store tests (`starved.rs`) put beside sluice.

use super::{descriptor, grpc_frame, request, sluice_bin};

/// A flood of `target` far past what this host can answer, for `secs`
/// seconds: h2load (C, as the issue's) when installed, each request on a
/// key of its own that asks Redis; else `sluice bench` on distinct keys.
pub fn flood(
    target: std::net::SocketAddr,
    secs: u64,
    dir: &std::path::Path,
) -> std::process::Child {
    let quiet = |mut c: std::process::Command| {
        c.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("flood")
    };
    if std::process::Command::new("h2load")
        .arg("--version")
        .output()
        .is_ok()
    {
        let req = request("shop", vec![descriptor(&[("flood", "one")])]);
        let body = grpc_frame(&req);
        let file = dir.join(format!("flood-{}.bin", target.port()));
        std::fs::write(&file, body).expect("body");
        let mut c = std::process::Command::new("h2load");
        c.args(["-n", "100000000", "-c", "16", "-m", "64", "-t", "1"])
            .args(["-D", &secs.to_string()])
            .args([
                "-H",
                "content-type:application/grpc",
                "-H",
                "te:trailers",
                "-d",
            ])
            .arg(&file)
            .arg(format!(
                "http://{target}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
            ));
        return quiet(c);
    }
    let mut c = std::process::Command::new(sluice_bin());
    c.args(["bench", "--target", &target.to_string(), "--domain", "shop"])
        .args(["--descriptor", "flood={n}", "--keys", "1000000"])
        .args(["--concurrency", "256", "--connections", "4"])
        .args(["--duration", &format!("{secs}s")]);
    quiet(c)
}
