"""deploy/: the plain operator manifests, the Helm chart and the Dockerfile, checked offline (no
API server, helm or Docker here): the chart renders to the plain manifests, its CRDs are the
generated ones, RBAC grants what the operator does, and the command lines parse."""

from __future__ import annotations

import re

import yaml

from ferrymq.cli.main import main
from ferrymq.operator import render_broker, render_console, render_controller, render_nameservice
from ferrymq.operator.crds import GROUP, KINDS
from tests.operator.manifests import CHART, DEPLOY, ROOT, load_all, render_chart

PLAIN = DEPLOY / "operator" / "ferrymq-operator.yaml"


def _key(doc):
    return doc["kind"], doc["metadata"]["name"]


def test_chart_renders_to_the_plain_manifests():
    plain = [d for d in load_all(PLAIN) if d["kind"] != "Namespace"]
    assert sorted(render_chart("ferrymq-operator", "ferrymq"), key=_key) == sorted(plain, key=_key)
    assert {
        d["metadata"].get("namespace") for d in plain if d["kind"] in ("Deployment", "ServiceAccount")
    } == {"ferrymq"}


def test_chart_crds_are_the_generated_ones():
    for path in sorted((DEPLOY / "crds").glob("*.yaml")):
        assert (CHART / "crds" / path.name).read_text() == path.read_text(), f"copy {path} into the chart"
    assert len(list((CHART / "crds").glob("*.yaml"))) == len(KINDS)


def _rules():
    role = next(d for d in load_all(PLAIN) if d["kind"] == "ClusterRole")
    granted = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted |= {(group, resource, verb) for verb in rule["verbs"]}
    return granted


def test_rbac_grants_what_the_operator_does():
    granted = _rules()
    for info in KINDS.values():
        for verb in ("get", "list", "watch", "patch"):
            assert (GROUP, info["plural"], verb) in granted, (info["plural"], verb)
        assert (GROUP, f"{info['plural']}/status", "patch") in granted
    made = render_nameservice.render("n", {"size": 1}, "i") + render_controller.render(
        "c", "ns", {"size": 1}, "i"
    )
    made += [*render_broker.render("b", {"size": 1}, "a", "", "i"), render_controller.access_service("c")]
    made += render_console.render(
        "c", {"consoleDeployment": {"spec": {"template": {"spec": {"containers": [{}]}}}}}, "a"
    )
    for obj in made:
        group = obj["apiVersion"].rpartition("/")[0]
        for verb in ("get", "create", "patch"):
            assert (group, obj["kind"].lower() + "s", verb) in granted, (obj["kind"], verb)
    assert {("", "pods", v) for v in ("get", "list", "watch")} <= granted
    assert ("apiextensions.k8s.io", "customresourcedefinitions", "list") in granted  # kopf's scan


def test_operator_deployment_runs_a_command_that_parses():
    docs = {d["kind"]: d for d in load_all(PLAIN)}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["ferrymq"]
    operator = main.get_command(None, container["args"][0])
    operator.make_context("operator", container["args"][1:])
    assert pod["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"]
    subject = docs["ClusterRoleBinding"]["subjects"][0]
    assert (subject["name"], subject["namespace"]) == ("ferrymq-operator", "ferrymq")
    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["name"] == "ferrymq-operator"


def test_dockerfile_copies_what_exists_and_installs_the_operator():
    text = (DEPLOY / "Dockerfile").read_text()
    for line in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M):
        for source in line.split():
            assert (ROOT / source).exists(), source
    assert '".[operator]"' in text and 'ENTRYPOINT ["ferrymq"]' in text
