"""Loading the YAML under deploy/ and validating custom resources against the CRDs' schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def schemas() -> dict[str, dict[str, Any]]:
    """kind → openAPIV3Schema of each CRD file under deploy/crds/."""
    out = {}
    for path in sorted((DEPLOY / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        out[crd["spec"]["names"]["kind"]] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return out


def errors(resource: dict[str, Any], kinds: dict[str, dict[str, Any]]) -> list[str]:
    """Every way `resource` breaks its kind's schema (the x-kubernetes-* keywords are the API
    server's business and jsonschema ignores them)."""
    validator = jsonschema.Draft7Validator(kinds[resource["kind"]])
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(resource)]
