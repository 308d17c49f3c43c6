"""Loading the YAML under deploy/ and validating custom resources against the CRDs' schemas."""

from __future__ import annotations

import json
import re
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


CHART = DEPLOY / "helm" / "ferrymq-operator"
_EXPR = re.compile(r"\{\{\s*([.\w]+)\s*(?:\|\s*(\w+)\s*)?\}\}")


def render_chart(release: str, namespace: str) -> list[dict[str, Any]]:
    """The chart's templates with its default values, as `helm template` would render them.

    helm is not installed here; the templates therefore use only `{{ .Values.x }}`,
    `{{ .Release.Name }}`, `{{ .Release.Namespace }}` and `| toJson`, which this renders, and
    anything else fails the test."""
    scope = {"Values": yaml.safe_load((CHART / "values.yaml").read_text()),
             "Release": {"Name": release, "Namespace": namespace}}  # fmt: skip

    def value(match: re.Match) -> str:
        found: Any = scope
        for part in match.group(1).strip(".").split("."):
            found = found[part]
        if match.group(2) == "toJson":
            return json.dumps(found)
        if match.group(2) is not None:
            raise ValueError(f"unsupported template function {match.group(2)}")
        return str(found)

    docs = []
    for path in sorted((CHART / "templates").glob("*.yaml")):
        text = _EXPR.sub(value, path.read_text())
        if "{{" in text:
            raise ValueError(f"{path.name}: a template construct this renderer does not know")
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs
