"""Repository layout (§5.1): hidden model directories, version folders Triton skips or reads
oddly, the version policy against the folders present, and the directory name."""

from __future__ import annotations

from repokit.config.rules.context import RuleContext
from repokit.repository.versions import VersionDirKind, select_versions


def check_model_dir(ctx: RuleContext) -> None:
    model = ctx.model
    dir_file = ctx.relative(model.path)
    if model.hidden:
        ctx.report(
            "model-dir-hidden",
            f"hidden directory '{model.name}' is a model for Triton (every subdirectory "
            "of the repository is); it fails to load unless it is a real model. Move it "
            "out of the repository",
            file=dir_file,
        )
    has_config = any(name == "config.pbtxt" for name in model.files)
    if not has_config and not model.existing_versions and not model.hidden:
        ctx.report(
            "model-dir-stray",
            f"directory '{model.name}' has neither a config.pbtxt nor a version folder; "
            "Triton treats every directory of the repository as a model, so this one "
            "fails to load. Move it out of the repository if it is not a model",
            file=dir_file,
        )
    for version_dir in model.version_dirs:
        name, file = version_dir.name, f"{dir_file}/{version_dir.name}"
        if version_dir.kind is VersionDirKind.LEADING_ZEROS:
            ctx.report(
                "version-dir-leading-zeros",
                f"ignore version directory '{name}' which contains leading zeros in its "
                f"directory name; rename it to '{name.lstrip('0') or '0'}'",
                file=file,
            )
        elif version_dir.kind is VersionDirKind.NOT_NUMERIC:
            ctx.report(
                "version-dir-not-numeric",
                f"ignore version directory '{name}' which fails to convert to integral number",
                file=file,
            )
        elif version_dir.kind is VersionDirKind.PREFIX_PARSED:
            ctx.report(
                "version-dir-prefix-parsed",
                f"version directory '{name}' is read by Triton as version "
                f"{version_dir.version} (std::stoll reads the numeric prefix), but the "
                f"backend then looks for the model in '{version_dir.version}/'; rename "
                "the folder to a plain number",
                file=file,
            )
        elif version_dir.kind is VersionDirKind.OUT_OF_RANGE:
            ctx.report(
                "version-dir-out-of-range",
                f"version directory '{name}' is outside the int64 range; Triton's "
                "std::stoll throws out_of_range, which it does not catch",
                file=file,
            )


def check_versions(ctx: RuleContext) -> None:
    selection = select_versions(ctx.config.version_policy, ctx.model.existing_versions)
    ctx.versions = selection.versions
    for version in selection.missing_specific:
        ctx.report(
            "version-not-present",
            f"version {version} is specified for model '{ctx.name}', but the version "
            "directory is not present",
            path="version_policy.specific.versions",
        )
    if selection.versions:
        return
    existing = sorted(ctx.model.existing_versions)
    if not existing:
        detail = "the model directory has no numeric version folder (e.g. '1/')"
    else:
        detail = f"the policy selects none of the existing versions {existing}"
    ctx.report(
        "no-version-available",
        "at least one version must be available under the version policy of model "
        f"'{ctx.name}': {detail}",
        path="version_policy" if existing else "",
    )


def check_model_name(ctx: RuleContext) -> None:
    if ctx.config.name != ctx.model.name:
        ctx.report(
            "model-name-mismatch",
            f"unexpected directory name '{ctx.model.name}' for model "
            f"'{ctx.config.name}', directory name must equal model name; rename one or "
            "remove 'name' from the config",
            path="name",
        )
