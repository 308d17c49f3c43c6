"""`ferrymq operator`: the Kubernetes operator (kopf) for NameService, Controller, Broker, Console,
Proxy and AmqpGateway resources; `ferrymq operator crds` prints their CustomResourceDefinitions."""

from __future__ import annotations

import click


@click.group(invoke_without_command=True)
@click.option(
    "-n", "--namespace", "namespaces", multiple=True, help="Serve this namespace (repeatable; glob)."
)
@click.option("-A", "--all-namespaces", is_flag=True, help="Serve every namespace.")
@click.option(
    "--image", help="ferrymq image for pods whose resource names none [default: ferrymq/ferrymq:<version>]."
)
@click.option("--resync", type=click.FloatRange(min=0.1), default=6.0, show_default=True,
              help="Seconds between two reconciles of an unchanged resource.")  # fmt: skip
@click.option(
    "--liveness", metavar="URL", help="Serve kopf's liveness probe here, e.g. http://0.0.0.0:8080/healthz."
)
@click.pass_context
def operator(ctx, namespaces, all_namespaces, image, resync, liveness):
    """Run the Kubernetes operator: reconcile ferrymq's custom resources into pods."""
    if ctx.invoked_subcommand is not None:
        return
    if not namespaces and not all_namespaces:
        raise click.UsageError("give -n NAMESPACE (repeatable) or -A")
    try:
        import kopf

        from ferrymq.operator.context import Settings
        from ferrymq.operator.handlers import build_registry
        from ferrymq.operator.pods import DEFAULT_IMAGE
    except ImportError as e:
        raise click.ClickException(f"{e.name} is missing: pip install 'ferrymq[operator]'") from None
    registry = build_registry(Settings(image=image or DEFAULT_IMAGE, resync=resync))
    kopf.run(
        registry=registry,
        standalone=True,  # one operator replica: no peering resource needed
        clusterwide=all_namespaces,
        namespaces=namespaces,
        liveness_endpoint=liveness,
    )


@operator.command()
@click.option("--out", type=click.Path(file_okay=False), help="Write one file per CRD into this directory.")
def crds(out):
    """Print the CustomResourceDefinitions as YAML (kubectl apply -f -), or write them (--out)."""
    from pathlib import Path

    import yaml

    from ferrymq.operator.crds import all_crds

    if out is None:
        click.echo(yaml.safe_dump_all(all_crds(), sort_keys=False), nl=False)
        return
    for crd in all_crds():
        target = (
            Path(out) / f"{crd['metadata']['name'].split('.', 1)[1]}_{crd['spec']['names']['plural']}.yaml"
        )
        target.write_text(yaml.safe_dump(crd, sort_keys=False))
        click.echo(target)
