"""``repokit deploy kserve REPO``: KServe manifests and a container build file for a repository.

Exit codes: 0 written, 1 the repository has errors (``repokit validate`` says which), 2 usage
errors (bad paths or options).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from repokit.cli.output import RepokitGroup, examples, make_console, print_error
from repokit.errors import RepokitError


def _replicas(text: str) -> tuple[int, int]:
    low, sep, high = text.partition(":")
    try:
        first = int(low)
        last = int(high) if sep else first
    except ValueError:
        raise typer.BadParameter(f"--replicas takes N or MIN:MAX, got '{text}'") from None
    return first, last


def kserve(
    repository: Annotated[
        Path, typer.Argument(help="The repository (e.g. repokit build's output).")
    ],
    storage_uri: Annotated[
        str,
        typer.Option(
            "--storage-uri",
            help="Where the cluster reads the repository: s3://..., gs://..., pvc://..., ...",
        ),
    ],
    image: Annotated[
        str, typer.Option("--image", help="The image built from the written Dockerfile.")
    ],
    output: Annotated[Path, typer.Option("-o", "--output", help="Directory to write.")] = Path(
        "deploy"
    ),
    name: Annotated[str, typer.Option("--name", help="InferenceService name.")] = "",
    namespace: Annotated[str, typer.Option("--namespace")] = "",
    cluster_runtime: Annotated[
        bool,
        typer.Option("--cluster-runtime", help="A ClusterServingRuntime (every namespace)."),
    ] = False,
    gpu: Annotated[
        bool | None,
        typer.Option(
            "--gpu/--no-gpu",
            help="GPU image and one nvidia.com/gpu (default: when a model needs a GPU).",
        ),
    ] = None,
    grpc: Annotated[
        bool,
        typer.Option("--grpc", help="Expose gRPC (grpc-v2) instead of HTTP/REST (v2)."),
    ] = False,
    grace_period: Annotated[
        int,
        typer.Option(
            "--grace-period",
            help="terminationGracePeriodSeconds; serve's --exit-timeout-secs is derived from it.",
        ),
    ] = 60,
    replicas: Annotated[str, typer.Option("--replicas", help="N or MIN:MAX.")] = "1",
    cpu: Annotated[str, typer.Option("--cpu", help="CPU request and limit.")] = "1",
    memory: Annotated[str, typer.Option("--memory", help="Memory request and limit.")] = "2Gi",
) -> None:
    """KServe ServingRuntime + InferenceService (kserve.yaml) and a Dockerfile for REPOSITORY."""
    from repokit.deploy.bundle import InvalidRepository, build_bundle, write_bundle
    from repokit.deploy.kserve import AFFINITY_HEADER, KServeOptions

    console = make_console()
    errors = make_console(stderr=True)
    low, high = _replicas(replicas)
    options = KServeOptions(
        name=name or repository.resolve().name.lower().replace("_", "-"),
        storage_uri=storage_uri,
        image=image,
        namespace=namespace,
        cluster_runtime=cluster_runtime,
        grpc=grpc,
        grace_period_secs=grace_period,
        min_replicas=low,
        max_replicas=high,
        cpu=cpu,
        memory=memory,
    )
    try:
        bundle = build_bundle(repository, options, gpu)
        written = write_bundle(bundle, output)
    except InvalidRepository as error:
        print_error(errors, error.message)
        raise typer.Exit(1) from None
    except RepokitError as error:
        print_error(errors, error.message)
        raise typer.Exit(2) from None
    except OSError as error:
        print_error(errors, f"cannot write '{output}': {error.strerror}")
        raise typer.Exit(2) from None
    o = bundle.options
    for path in written:
        console.print(f"wrote {path}", markup=False, highlight=False)
    console.print(
        f"{o.runtime_kind} {o.runtime_name} and InferenceService {o.name}: "
        f"{len(bundle.facts.models)} model(s), {'GPU' if o.gpu else 'CPU'} image, "
        f"{o.min_replicas}..{o.max_replicas} replica(s), grace period {o.grace_period_secs} s "
        f"(serve --exit-timeout-secs={o.exit_timeout_secs})",
        markup=False,
        highlight=False,
    )
    if o.sequence_models:
        console.print(
            f"sequence models ({', '.join(o.sequence_models)}): clients send each request's "
            f"correlation ID in the '{AFFINITY_HEADER}' header; the DestinationRule in "
            "kserve.yaml routes it to one replica (needs Istio)",
            markup=False,
            highlight=False,
        )


def register(app: typer.Typer) -> None:
    deploy_app = typer.Typer(
        cls=RepokitGroup,
        no_args_is_help=True,
        help="Write what a cluster needs to serve a repository with repokit serve.",
        rich_markup_mode=None,
    )
    deploy_app.command(
        "kserve",
        epilog=examples(
            "repokit deploy kserve ./compiled --storage-uri s3://models/compiled \\",
            "    --image registry.example/repokit:0.1 -o deploy/",
            "repokit deploy kserve ./compiled --storage-uri pvc://models/compiled \\",
            "    --image repokit:0.1 --replicas 2:8 --grace-period 120 --grpc",
        ),
    )(kserve)
    app.add_typer(deploy_app, name="deploy")
