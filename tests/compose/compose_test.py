#!/usr/bin/env python3
"""`make compose-test`: `docker compose up` as a new user runs it, checked
from the host. Installs Docker from Debian when it is missing, starts
dockerd when none runs (and stops only what it started), makes every image
the files name present (as it is, pulled, or a stand-in: see standins.py),
builds the sluice image from the Dockerfile, brings up the unchanged
docker-compose.yml, and checks what the README promises:

- the curl walk through Envoy on 127.0.0.1:10000: logins pass until the
  per-IP budget is spent, then a 429 with Retry-After and the CORS headers;
- /readyz shows Redis healthy; the container's health check passes;
- a rule file written on the host is applied through the mount;
- Redis stopped: the failure policy decides, /readyz degraded; started
  again: ready, and counting resumes in Redis;
- the image: its size, non-root, no shell, `/bin/ratelimit` in ratelimit
  mode, and the Envoy Gateway test run against the image;
- `docker compose down` leaves nothing of the project running.
"""

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import standins  # noqa: E402

ROOT = standins.ROOT
PROJECT = "sluicecomposetest"
# compose 1.x names the built image project_service; 2.x project-service.
IMAGES = [f"{PROJECT}_sluice", f"{PROJECT}-sluice"]
ADMIN = "http://127.0.0.1:8080"
ENVOY = "http://127.0.0.1:10000"
STARTED = time.monotonic()
# Debian's 20.10 CLI (BuildKit builds) before the machine's own client.
os.environ["PATH"] = "/usr/bin:/usr/sbin:" + os.environ.get("PATH", "")
os.environ["DOCKER_BUILDKIT"] = "1"
os.environ["COMPOSE_DOCKER_CLI_BUILD"] = "1"


def say(msg):
    print(f"[{time.monotonic() - STARTED:6.1f}s] {msg}", flush=True)


def sh(*cmd, check=True, capture=False, timeout=None):
    r = subprocess.run(cmd, capture_output=capture, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout or ''}{r.stderr or ''}")
    return r


def eventually(what, f, within=60.0):
    deadline = time.monotonic() + within
    last = None
    while time.monotonic() < deadline:
        try:
            last = f()
            if last:
                return last
        except (OSError, urllib.error.URLError, ValueError) as e:
            last = e
        time.sleep(0.25)
    raise SystemExit(f"timed out waiting for {what} (last: {last!r})")


def http(method, url, headers=None):
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, dict(r.headers.items()), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers.items()), e.read().decode()


def readyz():
    return json.loads(http("GET", f"{ADMIN}/readyz")[2])


def ensure_docker():
    need = [c for c in ("dockerd", "debootstrap") if not shutil.which(c)]
    if not Path("/usr/bin/docker").exists() or need or not compose_cmd(probe=True):
        say("installing docker.io, docker-compose and debootstrap (apt)")
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        pkgs = ["docker.io", "docker-compose", "debootstrap"]
        if sh(*sudo, "apt-get", "install", "-y", "-q", *pkgs, check=False, capture=True).returncode:
            sh(*sudo, "apt-get", "update", "-q", capture=True)
            sh(*sudo, "apt-get", "install", "-y", "-q", *pkgs, capture=True)
    if sh("docker", "info", check=False, capture=True).returncode == 0:
        say("dockerd already running: using it")
        return
    log = open(standins.CACHE / "dockerd.log", "ab")
    daemon = subprocess.Popen(["/usr/sbin/dockerd"], stdout=log, stderr=log, start_new_session=True)
    say(f"started dockerd (pid {daemon.pid}); it is stopped at the end")

    def stop():
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
    atexit.register(stop)
    eventually("dockerd", lambda: sh("docker", "info", check=False, capture=True).returncode == 0, 30)


def compose_cmd(probe=False):
    if sh("docker", "compose", "version", check=False, capture=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if probe:
        return None
    raise SystemExit("no docker compose")


def compose(*args, check=True, capture=False):
    return sh(*compose_cmd(), "-p", PROJECT, "-f", str(ROOT / "docker-compose.yml"), *args,
              check=check, capture=capture)


def images_named():
    names = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("FROM ") and "scratch" not in line:
            names.append(line.split()[1])
    for line in (ROOT / "docker-compose.yml").read_text().splitlines():
        if line.strip().startswith("image:"):
            names.append(line.split("image:")[1].strip())
    return names


def curl_walk():
    """The README's walk: 30 logins a minute per client IP, then 429."""
    headers = {"Origin": "https://app.example.com"}
    codes = []
    for _ in range(31):
        code, h, body = http("POST", f"{ENVOY}/api/auth/login", headers)
        codes.append(code)
        if code == 429:
            break
    assert codes[:-1] and all(c == 200 for c in codes[:-1]), codes
    assert codes[-1] == 429, codes
    h = {k.lower(): v for k, v in h.items()}
    assert int(h["retry-after"]) > 0, h
    assert h["access-control-allow-origin"] == "https://app.example.com", h
    assert "retry-after" in h["access-control-expose-headers"], h
    assert h["content-type"] == "application/problem+json", h
    assert json.loads(body)["status"] == 429, body
    say(f"curl walk: {len(codes) - 1} x 200, then 429 with retry-after {h['retry-after']} and CORS headers")


def rule_edit():
    path = ROOT / "descriptors" / "compose-test.yaml"
    path.write_text("domain: compose_test\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
    try:
        eventually("the host's new rule file in sluice", lambda: any(
            d["domain"] == "compose_test" for d in readyz()["config"]["domains"]), 30)
    finally:
        path.unlink()
    eventually("the rule file's removal in sluice", lambda: not any(
        d["domain"] == "compose_test" for d in readyz()["config"]["domains"]), 30)
    say("rule file written on the host: loaded through the mount, and unloaded when removed")


def redis_outage():
    compose("stop", "redis")
    codes = []

    def degraded():
        # Requests find a failing store (the breaker counts their failures).
        # Not the logins: that counter is over its limit, and the over-limit
        # cache answers it without asking Redis.
        codes.append(http("GET", f"{ENVOY}/api/items", {"Origin": "https://app.example.com"})[0])
        return readyz()["status"] == "degraded"
    eventually("/readyz degraded", degraded, 30)
    assert set(codes) <= {200, 429}, f"with Redis stopped, Envoy answered {codes}"
    store = readyz()["store"]
    say(f"redis stopped: /readyz degraded, deciding by {store['in_use']} ({store['detail']}); "
        f"Envoy answered {sorted(set(codes))}")
    compose("start", "redis")
    eventually("/readyz ready again", lambda: readyz()["status"] == "ready", 60)
    def counters():
        # A request's counter, not the prober's key (it proves Redis back).
        http("GET", f"{ENVOY}/api/items", {"Origin": "https://app.example.com"})
        keys = compose("exec", "-T", "redis", "redis-cli", "--scan", capture=True).stdout.split()
        return [k for k in keys if "probe" not in k]
    keys = eventually("a request's counter in the restarted Redis", counters, 20)
    say(f"redis started again: ready, counting in Redis again ({len(keys)} counter keys)")


def built_image():
    for name in IMAGES:
        if standins.have(name):
            return name
    raise SystemExit(f"no image {IMAGES}")


def image_checks():
    IMAGE = built_image()
    size = int(sh("docker", "image", "inspect", "-f", "{{.Size}}", IMAGE, capture=True).stdout)
    user = sh("docker", "image", "inspect", "-f", "{{.Config.User}}", IMAGE, capture=True).stdout.strip()
    assert user and not user.startswith("0") and user != "root", user
    shell = sh("docker", "run", "--rm", "--entrypoint", "/bin/sh", IMAGE, "-c", "true",
               check=False, capture=True)
    assert shell.returncode != 0, "the image has a shell"
    rl = sh("docker", "run", "--rm", "-e", "REDIS_PERSECOND=true", "--entrypoint", "/bin/ratelimit",
            IMAGE, check=False, capture=True)
    assert rl.returncode != 0 and "REDIS_PERSECOND=true" in rl.stderr, rl.stderr
    container = compose("ps", "-q", "sluice", capture=True).stdout.strip()
    eventually("the sluice container's health check", lambda: sh(
        "docker", "inspect", "-f", "{{.State.Health.Status}}", container,
        capture=True).stdout.strip() == "healthy", 60)
    say(f"image {IMAGE}: {size / 1e6:.1f} MB, user {user}, no shell, /bin/ratelimit reads the "
        "reference's environment, health check healthy")


def envoy_gateway_in_container():
    """The Envoy Gateway test, with sluice started in the image as /bin/ratelimit."""
    os.environ["SLUICE_TEST_IMAGE"] = built_image()
    sh("cargo", "test", "--test", "envoy_gateway", "--", "--ignored", "--test-threads=1",
       "in_the_image")
    say("Envoy Gateway's environment: passed with /bin/ratelimit in the image")


def ports_free():
    """The compose file publishes fixed host ports: say plainly when another
    process (a `make stack`, say) holds one, before compose fails on it."""
    import socket
    for port in (8080, 10000):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError as e:
                raise SystemExit(f"127.0.0.1:{port} is in use ({e.strerror}); docker-compose.yml "
                                 "publishes it: stop whatever holds it (make stack-down?) and run again")


def main():
    standins.CACHE.mkdir(parents=True, exist_ok=True)
    ports_free()
    ensure_docker()
    for image in images_named():
        say(f"image {image}: {standins.ensure(image)}")
    compose("down", "--remove-orphans", check=False, capture=True)
    t = time.monotonic()
    compose("build", "sluice")
    say(f"built the sluice image from the Dockerfile in {time.monotonic() - t:.0f}s")
    try:
        compose("up", "-d")
        eventually("sluice ready on Redis", lambda: readyz()["status"] == "ready"
                   and readyz()["store"]["backend"] == "redis", 90)
        say("compose up: /readyz ready, store redis healthy")
        eventually("Envoy answering", lambda: http("GET", f"{ENVOY}/")[0] < 500, 60)
        curl_walk()
        rule_edit()
        redis_outage()
        image_checks()
        envoy_gateway_in_container()
    except BaseException:
        compose("logs", "--no-color", "--tail", "50", check=False)
        raise
    finally:
        compose("down", "--remove-orphans", check=False)
    left = sh("docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}",
              capture=True).stdout.split()
    assert not left, f"compose down left containers: {left}"
    say("compose down: nothing of the project left running")
    say("compose test passed")


if __name__ == "__main__":
    main()
