"""What the settings' declarations derive (`contextual_assets/settings.py`): the fields a setting sets in
each configuration object (`configured_by`), their values for given settings, the settings whose values
differ per deployment, and the scope Dagster definitions are built in.

A configuration object (`HeaderConfig`, `ParsingConfig`, `EmbedderConfig`, `RerankerConfig`, `GateConfig`)
subclasses `configured_by(<group>)`: the fields its settings set come with their declared type, default,
bounds and meaning, and it declares only the fields no setting sets.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache
from typing import Annotated, Any

from pydantic import BaseModel, Field, create_model

from contextual_assets.errors import ConfigurationError
from contextual_assets.settings import GROUPS, PlatformSettings, declaration, env_names


def targets(group: str) -> dict[str, str]:
    """Configuration field -> the setting that sets it, for the configuration object `group`."""
    if group not in GROUPS:
        raise ValueError(f"unknown configuration group {group!r} (one of {GROUPS})")
    fields: dict[str, str] = {}
    for name in PlatformSettings.model_fields:
        for target in declaration(name)["sets"]:
            target_group, _, field = target.partition(".")
            if target_group == group:
                fields[field] = name
    return fields


@cache
def configured_by(group: str) -> type[BaseModel]:
    """The base of configuration object `group`: one field per setting that sets it, typed, bounded,
    defaulted and described as the setting is declared."""
    fields: dict[str, Any] = {}
    for field, name in targets(group).items():
        info = PlatformSettings.model_fields[name]
        annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        fields[field] = (annotation, Field(info.default, description=info.description))
    return create_model(f"{group.title()}Settings", **fields)


def configuration_values(group: str, settings: PlatformSettings) -> dict[str, Any]:
    """The fields of configuration object `group` that `settings` set, with their values."""
    return {field: getattr(settings, name) for field, name in targets(group).items()}


def deployment_settings() -> tuple[str, ...]:
    """The settings whose values differ per deployment (URLs, paths, model names): the code location
    passes their variables as `dg.EnvVar`, so the UI never bakes their values into run config."""
    return tuple(name for name in PlatformSettings.model_fields if declaration(name)["deployment"])


def env_source(name: str, value: Any) -> str | None:
    """The variable that gave field `name` its `value`, when the environment did."""
    for variable in env_names(name):
        if variable in os.environ:
            return variable if os.environ[variable].strip() == str(value) else None
    return None


@contextmanager
def settings_scope(settings: PlatformSettings) -> Iterator[None]:
    """Within the block, `active_settings()` is `settings`: the scope definitions are built in."""
    token = _ACTIVE.set(settings)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active_settings() -> PlatformSettings:
    """The settings of the `settings_scope` around the caller; outside one, an error (never a silent read
    of the environment: the code location reads it once, in `contextual_assets.definitions`)."""
    settings = _ACTIVE.get()
    if settings is None:
        raise ConfigurationError("definitions are built only inside settings_scope(settings): load them with "
                                 "contextual_assets.definitions.build_definitions(settings), or through the "
                                 "code location `contextual_assets.definitions`")
    return settings


_ACTIVE: ContextVar[PlatformSettings | None] = ContextVar("ctx_active_settings", default=None)
