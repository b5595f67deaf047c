#!/usr/bin/env python3
"""The staging stack without Docker: Redis, sluice (on that Redis, watching
descriptors/), the demo upstream and Envoy (envoy/envoy.yaml) on loopback.

    python3 envoy/stack.py up       # what `make stack` runs
    python3 envoy/stack.py down     # what `make stack-down` runs
    python3 envoy/stack.py render --listen 127.0.0.1:10000 --admin 127.0.0.1:9901 \\
        --sluice 127.0.0.1:8081 --upstream 127.0.0.1:8000 --out FILE \\
        [--config envoy/rlqs.yaml]

`render` rewrites only the four socket addresses of envoy/envoy.yaml (the
tests use it too), so the stack runs the same Envoy config as docker compose.
Ports come from STACK_ENVOY_PORT (10000), STACK_ENVOY_ADMIN_PORT (9901),
STACK_SLUICE_PORT (8081), STACK_SLUICE_ADMIN_PORT (8080), STACK_REDIS_PORT (6390)
and STACK_UPSTREAM_PORT (8000). State, logs and pids live in .tools/stack/;
`down` stops only the processes `up` started.
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENVOY_CONFIG = ROOT / "envoy" / "envoy.yaml"
DESCRIPTORS = ROOT / "descriptors"
STATE = ROOT / ".tools" / "stack"
ENVOY_BIN = ROOT / ".tools" / "envoy-pkg" / "envoy" / "_bin" / "envoy"
SLUICE_BIN = ROOT / "target" / "release" / "sluice"

# The socket addresses in envoy.yaml, by role: (address, port) as shipped.
SHIPPED = {
    "listen": ("0.0.0.0", 10000),
    "admin": ("127.0.0.1", 9901),
    "sluice": ("sluice", 8081),
    "upstream": ("upstream", 8000),
}


def render(text, addresses):
    """envoy.yaml with each shipped socket address replaced; every one must be
    found exactly once, so a drifted config fails loudly."""
    for role, (host, port) in addresses.items():
        old_host, old_port = SHIPPED[role]
        pattern = re.compile(
            r"socket_address: \{address: %s, port_value: %d\}"
            % (re.escape(old_host), old_port)
        )
        new = "socket_address: {address: %s, port_value: %d}" % (host, port)
        text, n = pattern.subn(new, text)
        if n != 1:
            raise SystemExit(f"envoy.yaml: expected one {role} address {old_host}:{old_port}, found {n}")
    return text


def host_port(value):
    host, _, port = value.rpartition(":")
    return host, int(port)


def cmd_render(args):
    addresses = {
        "listen": host_port(args.listen),
        "admin": host_port(args.admin),
        "sluice": host_port(args.sluice),
        "upstream": host_port(args.upstream),
    }
    Path(args.out).write_text(render(Path(args.config).read_text(), addresses))
    return 0


def port_env(name, default):
    return int(os.environ.get(name, default))


def free(port):
    with socket.socket() as s:
        # As the servers do: a port in TIME_WAIT is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def wait_for(what, check, log, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    tail = log.read_text()[-2000:] if log.exists() else ""
    raise SystemExit(f"{what} did not come up; last log lines of {log}:\n{tail}")


def http_ok(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def start(name, argv, started):
    log = STATE / f"{name}.log"
    # A new session: the process outlives this script and gets no signal
    # when it exits.
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=ROOT,
    )
    started[name] = {"pid": proc.pid, "started": start_time(proc.pid)}
    (STATE / "pids.json").write_text(json.dumps(started, indent=1))
    return log


def cmd_up(_args):
    ports = {
        "envoy": port_env("STACK_ENVOY_PORT", 10000),
        "envoy_admin": port_env("STACK_ENVOY_ADMIN_PORT", 9901),
        "sluice": port_env("STACK_SLUICE_PORT", 8081),
        "sluice_admin": port_env("STACK_SLUICE_ADMIN_PORT", 8080),
        "redis": port_env("STACK_REDIS_PORT", 6390),
        "upstream": port_env("STACK_UPSTREAM_PORT", 8000),
    }
    STATE.mkdir(parents=True, exist_ok=True)
    if (STATE / "pids.json").exists() and running(json.loads((STATE / "pids.json").read_text())):
        raise SystemExit("the stack is already up; `make stack-down` stops it")
    for binary, hint in [(ENVOY_BIN, "make deps"), (SLUICE_BIN, "make build")]:
        if not binary.exists():
            raise SystemExit(f"{binary} is missing; run `{hint}`")
    busy = [f"{name} 127.0.0.1:{p}" for name, p in ports.items() if not free(p)]
    if busy:
        raise SystemExit("ports in use: " + ", ".join(busy) + " (set STACK_*_PORT to move them)")

    started = {}
    try:
        log = start(
            "redis",
            ["redis-server", "--bind", "127.0.0.1", "--port", str(ports["redis"]),
             "--save", "", "--appendonly", "no", "--dir", str(STATE)],
            started,
        )
        wait_for("redis", lambda: socket.create_connection(("127.0.0.1", ports["redis"]), 1).close() or True, log)
        log = start(
            "sluice",
            [str(SLUICE_BIN), "serve", "--config", str(DESCRIPTORS),
             "--redis-url", f"redis://127.0.0.1:{ports['redis']}",
             "--grpc-addr", f"127.0.0.1:{ports['sluice']}",
             "--admin-addr", f"127.0.0.1:{ports['sluice_admin']}"],
            started,
        )
        wait_for("sluice", lambda: http_ok(f"http://127.0.0.1:{ports['sluice_admin']}/healthz"), log)
        log = start(
            "upstream",
            [sys.executable, str(ROOT / "envoy" / "upstream.py"), "--port", str(ports["upstream"])],
            started,
        )
        wait_for("upstream", lambda: http_ok(f"http://127.0.0.1:{ports['upstream']}/"), log)
        config = STATE / "envoy.yaml"
        config.write_text(render(ENVOY_CONFIG.read_text(), {
            "listen": ("127.0.0.1", ports["envoy"]),
            "admin": ("127.0.0.1", ports["envoy_admin"]),
            "sluice": ("127.0.0.1", ports["sluice"]),
            "upstream": ("127.0.0.1", ports["upstream"]),
        }))
        log = start(
            "envoy",
            [str(ENVOY_BIN), "-c", str(config), "--disable-hot-restart", "--log-level", "warning"],
            started,
        )
        wait_for("envoy", lambda: http_ok(f"http://127.0.0.1:{ports['envoy']}/api/health"), log)
    except BaseException:
        stop(started)
        raise
    print(f"""stack up:
  Envoy        http://127.0.0.1:{ports['envoy']}   (admin http://127.0.0.1:{ports['envoy_admin']})
  sluice       grpc 127.0.0.1:{ports['sluice']}, admin http://127.0.0.1:{ports['sluice_admin']}  (rules: descriptors/, reloaded on edit)
  Redis        127.0.0.1:{ports['redis']}
  upstream     http://127.0.0.1:{ports['upstream']}
  logs         {STATE}/*.log
try:   curl -i http://127.0.0.1:{ports['envoy']}/api/items
stop:  make stack-down""")
    return 0


def proc_stat(pid):
    """The fields of /proc/<pid>/stat after the command name, or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid):
    fields = proc_stat(pid)
    return fields[19] if fields else None


def alive(p):
    """Whether the recorded process is still the one we started (its start
    time tells a reused pid apart) and not a zombie (PID 1 may not reap)."""
    fields = proc_stat(p["pid"])
    return fields is not None and fields[0] != "Z" and fields[19] == p["started"]


def running(started):
    return any(alive(p) for p in started.values())


def stop(started):
    for name, p in reversed(list(started.items())):
        if not alive(p):
            continue
        os.kill(p["pid"], signal.SIGTERM)
        deadline = time.monotonic() + 10
        while alive(p) and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive(p):
            os.kill(p["pid"], signal.SIGKILL)
        print(f"stopped {name} (pid {p['pid']})")


def cmd_down(_args):
    pids = STATE / "pids.json"
    if not pids.exists():
        print("the stack is not up")
        return 0
    stop(json.loads(pids.read_text()))
    pids.unlink()
    return 0


def main():
    parser = argparse.ArgumentParser(description="sluice's local staging stack")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up").set_defaults(run=cmd_up)
    sub.add_parser("down").set_defaults(run=cmd_down)
    r = sub.add_parser("render", help="envoy.yaml with local addresses")
    for flag in ("--listen", "--admin", "--sluice", "--upstream", "--out"):
        r.add_argument(flag, required=True)
    r.add_argument("--config", default=str(ENVOY_CONFIG),
                   help="the Envoy config to render (envoy/envoy.yaml, or envoy/rlqs.yaml)")
    r.set_defaults(run=cmd_render)
    args = parser.parse_args()
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
