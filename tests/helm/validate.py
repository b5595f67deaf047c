"""Validates rendered Kubernetes objects against the API's own schemas.

usage: validate.py VERSION [VERSION ...] < rendered.yaml

Each object is checked strictly (an unknown field is an error) against the
schemas of every VERSION, with kubernetes-validate's Python API: its CLI
passes a kind it has no schema for. Kinds of the Prometheus Operator (CRDs,
no schema here) are named on stdout as `unchecked KIND` for the caller to
check itself. Exits 1 with every error when any object fails.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../.tools/kube-validate"))
import kubernetes_validate  # noqa: E402
import yaml  # noqa: E402

CRDS = {"monitoring.coreos.com/v1"}

docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
errors = []
for doc in docs:
    kind = f"{doc.get('apiVersion')} {doc.get('kind')} {doc.get('metadata', {}).get('name')}"
    if doc.get("apiVersion") in CRDS:
        print(f"unchecked {doc['kind']}")
        continue
    for version in sys.argv[1:]:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{kind} on {version}: {'.'.join(map(str, e.path))}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            errors.append(f"{kind} on {version}: no schema ({e})")
print(f"checked {len(docs)} objects")
for e in errors:
    print(e, file=sys.stderr)
sys.exit(1 if errors else 0)
