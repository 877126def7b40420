"""Settings: one source of defaults, every bad value named by its variable, deployment values as EnvVars."""

from __future__ import annotations

import dagster as dg
import pytest

from contextual_assets.defs.resources import (
    ChunkStoreResource,
    EmbedderResource,
    HeaderSourceResource,
    ParsingResource,
    build_resources,
)
from contextual_assets.errors import ConfigurationError
from contextual_assets.fleet.config import FleetConfig
from contextual_assets.settings import PlatformSettings, env_names


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    import os

    for name in list(os.environ):
        if name.startswith("CTX_") or name == "DATABASE_URL":
            monkeypatch.delenv(name)


def test_resources_take_their_defaults_from_the_settings():
    settings = PlatformSettings()
    assert ParsingResource().chunk_tokens == settings.chunk_tokens == 200
    assert ParsingResource().max_pdf_pages == settings.max_pdf_pages
    headers = HeaderSourceResource()
    assert headers.context_tokens == settings.context_tokens == 1000
    assert headers.max_in_flight == settings.llm_max_in_flight == 0  # no ceiling: capacity is found
    assert headers.source == settings.header_source == "auto"
    assert headers.request_timeout_s == FleetConfig.model_fields["request_timeout_s"].default
    assert ChunkStoreResource().duckdb_path == settings.duckdb_path == ".ctx/index.duckdb"
    assert EmbedderResource().api_key_env == settings.embed_api_key_env


def test_values_come_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CTX_HOME", str(tmp_path))
    monkeypatch.setenv("CTX_CHUNK_TOKENS", "120")
    monkeypatch.setenv("CTX_HEADER_SOURCE", " Structural ")
    monkeypatch.setenv("CTX_LLM_BASE_URL", "http://a:8000/v1")  # the singular spelling still works
    monkeypatch.setenv("CTX_GOLD_FILE", "gold.jsonl")
    monkeypatch.setenv("CTX_LLM_ALLOW_MIXED_MODELS", "yes")
    settings = PlatformSettings.from_env()
    assert settings.chunk_tokens == 120 and settings.header_source == "structural"
    assert settings.llm_base_urls == "http://a:8000/v1" and settings.gold_path == "gold.jsonl"
    assert settings.llm_allow_mixed_models is True
    assert settings.duckdb_path == str(tmp_path / "index.duckdb")


@pytest.mark.parametrize(
    ("variable", "value", "accepts"),
    [
        ("CTX_CHUNK_TOKENS", "abc", "integer"),
        ("CTX_LLM_MAX_IN_FLIGHT", "-1", ">= 0"),
        ("CTX_HEADER_SOURCE", "gpt", "auto, openai, structural or none"),
        ("CTX_GATE_FLOORS", "[1, 2]", "JSON object"),
        ("CTX_GATE_TOLERANCE", "lots", "0 to 1"),
        ("CTX_LLM_SAMPLE_METRICS", "maybe", "true or false"),
        ("CTX_SERVE_QUERY_RUNTIME", "tensorrt", "onnx or torch"),
    ],
)
def test_a_bad_value_names_its_variable(monkeypatch, variable, value, accepts):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as raised:
        PlatformSettings.from_env()
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{variable}={value!r} is not valid") and accepts in message


def test_every_setting_has_a_variable_and_a_description():
    for name, field in PlatformSettings.model_fields.items():
        assert env_names(name) and all(v.isupper() for v in env_names(name)), name
        assert field.description, name


def test_deployment_values_reach_the_code_location_as_env_vars(monkeypatch, tmp_path):
    monkeypatch.setenv("CTX_LLM_BASE_URLS", "http://replica-1:8000/v1")
    monkeypatch.setenv("CTX_EMBED_MODEL", "bge-small")
    settings = PlatformSettings.from_env().model_copy(update={"embed_base_url": "http://emb:9000/v1"})
    location = build_resources(settings, env_vars=True)
    # Set by the environment: the variable travels, not its value.
    assert isinstance(location["headers"].base_urls, dg.EnvVar)
    assert location["headers"].base_urls.env_var_name == "CTX_LLM_BASE_URLS"
    assert isinstance(location["embedder"].model, dg.EnvVar)
    # Set in code: the value itself.
    assert location["embedder"].base_url == "http://emb:9000/v1"
    direct = build_resources(settings)
    assert direct["headers"].base_urls == "http://replica-1:8000/v1"
    assert direct["headers"].endpoints() == ["http://replica-1:8000/v1"]


def test_the_readme_lists_every_variable():
    from tests.support import REPO_ROOT

    readme = (REPO_ROOT / "README.md").read_text()
    missing = [env_names(name)[0] for name in PlatformSettings.model_fields if f"`{env_names(name)[0]}`" not in readme]
    assert not missing, f"README's settings table lacks {missing}"


def test_gate_settings_reach_the_gate_resource(monkeypatch):
    from contextual_assets.defs.resources import build_resources

    monkeypatch.setenv("CTX_GATE_MIN_COVERAGE", "0.5")
    monkeypatch.setenv("CTX_GATE_MAX_UNHEALTHY_SHARE", "0.4")
    monkeypatch.setenv("CTX_GATE_FLOORS", '{"pass_at_5": 0.3}')
    gate = build_resources(PlatformSettings.from_env())["gate"]
    policy = gate.policy()
    assert gate.min_coverage == 0.5 and policy.max_unhealthy_share == 0.4 and policy.floors == {"pass_at_5": 0.3}


# --- Each setting is declared once; everything else is derived from the declaration. ---

def _read_attributes() -> set[str]:
    """Every attribute name product code reads (`x.name`), outside the declaration itself."""
    import ast

    from tests.support import REPO_ROOT

    names: set[str] = set()
    for root in ("contextual_assets", "eval_assets"):
        for path in (REPO_ROOT / root).rglob("*.py"):
            if path.name != "settings.py":
                names |= {n.attr for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute)}
    return names


def test_every_setting_sets_a_configuration_field_or_is_read_by_name():
    """A half-added setting (declared, but neither setting a configuration field nor read) fails here."""
    from contextual_assets.settings import declaration

    read = _read_attributes()
    unused = [name for name in PlatformSettings.model_fields if not declaration(name)["sets"] and name not in read]
    assert not unused, f"declared but never used: {unused}"


def test_every_configuration_field_a_setting_sets_is_the_declared_one():
    """A configuration object that redeclares a field its setting sets (a second default) fails here."""
    from contextual_assets.configuration import targets
    from contextual_assets.deployment import CONFIGURATIONS
    from contextual_assets.settings import GROUPS

    assert set(CONFIGURATIONS) == set(GROUPS)
    for group, configuration in CONFIGURATIONS.items():
        for field, name in targets(group).items():
            declared, used = PlatformSettings.model_fields[name], configuration.model_fields[field]
            assert (used.default, used.description, used.metadata) == (
                declared.default, declared.description, declared.metadata), f"{configuration.__name__}.{field}"


def test_the_configured_deployment_carries_every_setting_that_sets_a_field(monkeypatch):
    from contextual_assets.configuration import targets
    from contextual_assets.deployment import configured_deployment

    monkeypatch.setenv("CTX_LLM_MAX_IN_FLIGHT", "7")
    monkeypatch.setenv("CTX_INBOX_INTERVAL_S", "30")
    monkeypatch.setenv("CTX_EMBED_DEVICE", "cpu")
    settings = PlatformSettings.from_env()
    deployment = configured_deployment(settings)
    for group in ("headers", "parsing", "embedder", "reranker", "gate", "inbox"):
        for field, name in targets(group).items():
            assert getattr(getattr(deployment, group), field) == getattr(settings, name), f"{group}.{field}"
    assert deployment.inbox.interval_s == 30 and deployment.embedder.device == deployment.reranker.device == "cpu"
    resources = build_resources(settings)
    assert resources["headers"].max_in_flight == 7 and resources["embedder"].device == "cpu"


def test_a_fleet_setting_reaches_the_fleet_through_the_field_of_the_same_name(monkeypatch):
    from contextual_assets.deployment import configured_deployment

    monkeypatch.setenv("CTX_LLM_BASE_URLS", "http://a:8000/v1,http://b:8000/v1")
    monkeypatch.setenv("CTX_LLM_MAX_IN_FLIGHT", "7")
    monkeypatch.setenv("CTX_LLM_REQUEST_TIMEOUT_S", "12.5")
    fleet = configured_deployment(PlatformSettings.from_env()).headers.fleet_config()
    assert [r.max_in_flight for r in fleet.replicas] == [7, 7] and fleet.request_timeout_s == 12.5


def test_only_string_settings_are_passed_as_env_vars():
    """dg.EnvVar carries a string: a numeric setting marked per deployment would reach the UI broken."""
    from contextual_assets.configuration import deployment_settings

    assert deployment_settings() and all(PlatformSettings.model_fields[n].annotation is str
                                         for n in deployment_settings())


def test_the_settings_tables_are_generated_from_the_declarations():
    from contextual_assets.settings_docs import main

    assert main(["--check"]) == 0, "run python -m contextual_assets.settings_docs"


def test_definitions_are_not_built_outside_a_settings_scope():
    from contextual_assets.configuration import active_settings, settings_scope

    with pytest.raises(ConfigurationError, match="build_definitions"):
        active_settings()
    settings = PlatformSettings()
    with settings_scope(settings):
        assert active_settings() is settings
