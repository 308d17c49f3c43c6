"""The CRDs under deploy/crds/: generated from ferrymq.operator.crds, structural, and accepting the
samples and Apache's own manifests while refusing bad ones."""

from __future__ import annotations

import copy

import pytest
import yaml

from ferrymq.operator.crds import GROUP, KINDS, all_crds
from tests.operator.manifests import DEPLOY, ROOT, errors, load_all, schemas


def test_deploy_crds_are_the_generated_ones():
    for crd in all_crds():
        path = DEPLOY / "crds" / f"{GROUP}_{crd['spec']['names']['plural']}.yaml"
        assert yaml.safe_load(path.read_text()) == crd, (
            f"{path} is stale: ferrymq operator crds --out deploy/crds"
        )
    assert len(list((DEPLOY / "crds").glob("*.yaml"))) == len(KINDS)


def _objects(schema, where="$"):
    if schema.get("type") == "object":
        yield where, schema
    for key, sub in (schema.get("properties") or {}).items():
        yield from _objects(sub, f"{where}.{key}")
    if isinstance(schema.get("items"), dict):
        yield from _objects(schema["items"], f"{where}[]")


@pytest.mark.parametrize("kind", list(KINDS))
def test_schemas_are_structural(kind):
    """The API server refuses an object schema that neither lists its fields nor keeps unknown ones."""
    for where, schema in _objects(schemas()[kind]):
        if where == "$.metadata":
            continue  # the API server's own
        assert (
            "properties" in schema
            or "additionalProperties" in schema
            or schema.get("x-kubernetes-preserve-unknown-fields")
        ), where


@pytest.mark.parametrize(
    "path",
    [*sorted((DEPLOY / "samples").glob("*.yaml")), ROOT / "tests/operator/data/apache_cluster.yaml"],
    ids=lambda p: p.name,
)
def test_manifests_validate(path):
    kinds = schemas()
    docs = load_all(path)
    assert docs
    for doc in docs:
        assert doc["apiVersion"] == f"{GROUP}/v1alpha1"
        assert errors(doc, kinds) == [], doc["metadata"]["name"]


def _apache(kind):
    return copy.deepcopy(
        next(d for d in load_all(ROOT / "tests/operator/data/apache_cluster.yaml") if d["kind"] == kind)
    )


@pytest.mark.parametrize(
    ("kind", "change", "words"),
    [
        ("Broker", {"size": 0}, "less than the minimum"),
        ("Broker", {"size": "three"}, "is not of type 'integer'"),
        ("Broker", {"clusterMode": "DLEDGER"}, "is not one of"),
        ("NameService", {"storageMode": "Tmpfs"}, "is not one of"),
        ("NameService", {"env": [{"value": "x"}]}, "'name' is a required property"),
        ("TopicTransfer", {"topic": None}, "'topic' is a required property"),
        ("Console", {"consoleDeployment": None}, "'consoleDeployment' is a required property"),
    ],
)
def test_bad_manifests_are_refused(kind, change, words):
    doc = _apache(kind)
    for key, value in change.items():
        if value is None:
            del doc["spec"][key]
        else:
            doc["spec"][key] = value
    found = errors(doc, schemas())
    assert any(words in e for e in found), found


def test_cli_prints_the_crds_and_wants_a_namespace():
    from click.testing import CliRunner

    from ferrymq.cli.main import main

    printed = CliRunner().invoke(main, ["operator", "crds"])
    assert printed.exit_code == 0 and list(yaml.safe_load_all(printed.output)) == all_crds()
    refused = CliRunner().invoke(main, ["operator"])
    assert refused.exit_code == 2 and "-n NAMESPACE" in refused.output
