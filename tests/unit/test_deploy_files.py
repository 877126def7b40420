"""deploy/: the container image, the compose file, the Helm values, the Kubernetes manifests and the fleet
and gold files, checked without Docker, Helm or a cluster.

- compose.yaml is interpolated the way compose does it (string values after YAML parsing, from
  deploy/.env.example) and validated against the Compose Specification's JSON schema as check-jsonschema
  vendors it (its builtin `vendor.compose-spec`, read from the installed package, and its CLI); every
  variable it uses is in .env.example, every service has an image, and every volume, config, secret and
  file it names exists; the vLLM services and the fleet file list the same replicas; the run containers
  the DockerRunLauncher starts get the network, settings and files the code server has.
- The Dockerfile is parsed: its base image, its torch index and extras, every COPY source (present and
  not excluded by .dockerignore) and its command (a module that exists, flags the installed dagster CLI
  has).
- The Helm values are validated against the Dagster chart's values.schema.json
  (deploy/helm/values.schema.json), and, because that schema lets unknown keys through at the top level
  and in a user deployment, every key path is also checked against the schema's properties.
- Every Kubernetes manifest under deploy/helm/ is validated offline against Kubernetes' own schemas
  (kubernetes-validate, strict, Kubernetes KUBERNETES_VERSION); the fleet ConfigMap names the vLLM
  StatefulSet's replicas; the gold set parses with the project's loader and is mounted where
  CTX_GOLD_FILE points.
Each check is also run once on a broken input, to show it can fail.
"""

from __future__ import annotations

import copy
import fnmatch
import hashlib
import importlib.resources
import importlib.util
import json
import re
import shlex
import subprocess
import tomllib
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.support import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
ENV_EXAMPLE = DEPLOY / ".env.example"
COMPOSE_INSTANCE = DEPLOY / "dagster.compose.yaml"
POSTGRES_INSTANCE = DEPLOY / "dagster.postgres.yaml"
GOLD_EXAMPLE = DEPLOY / "gold.example.yaml"
CADDYFILE = DEPLOY / "Caddyfile"
DOCKERFILE = DEPLOY / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
FLEET_COMPOSE = DEPLOY / "fleet.compose.yaml"
WORKSPACE_GRPC = DEPLOY / "workspace.grpc.yaml"
HELM = DEPLOY / "helm"
HELM_SCHEMA = HELM / "values.schema.json"
HELM_VALUES = HELM / "values.yaml"
HELM_GPU_VALUES = HELM / "values-gpu-embedding.yaml"
FLEET_CONFIGMAP = HELM / "fleet-configmap.yaml"
SEARCH_SERVICE = HELM / "search-service.yaml"
VLLM_MANIFEST = HELM / "vllm.yaml"
GOLD_CONFIGMAP = HELM / "gold-configmap.yaml"
MIGRATE_JOB = HELM / "ctx-migrate" / "templates" / "migrate-job.yaml"
README = DEPLOY / "README.md"
# The Kubernetes API the manifests are validated against (kubernetes-validate holds the schemas of each
# minor up to its own version); deploy/README.md names it.
KUBERNETES_VERSION = "1.33"
NAMESPACE = "ctx"  # the namespace deploy/README.md installs into
# The extras the image installs: the S3 inbox the Helm values recommend, and both run launchers.
IMAGE_EXTRAS = {"s3", "k8s", "docker"}

CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
DEFINITIONS_MODULE = "contextual_assets.definitions"


# --------------------------------------------------------------------------------------------------
# compose: interpolation as compose does it


class MissingVariable(Exception):
    pass


_VAR = re.compile(
    r"\$(?:(\$)"  # $$: a literal dollar
    r"|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])((?:[^{}]|\{[^{}]*\})*))?\}"  # ${NAME}, ${NAME:-default}, ...
    r"|([A-Za-z_][A-Za-z0-9_]*))"  # $NAME
)


def _interpolate_str(text: str, env: dict[str, str], used: set[str]) -> str:
    def replace(match: re.Match) -> str:
        if match.group(1):
            return "$"  # "$$" is a literal dollar
        name = match.group(2) or match.group(5)
        op, arg = match.group(3), match.group(4) or ""
        used.add(name)
        value = env.get(name)
        if op in (":-", "-"):
            unset = value is None or (op == ":-" and value == "")
            return _interpolate_str(arg, env, used) if unset else value
        if op in (":?", "?"):
            if value is None or (op == ":?" and value == ""):
                raise MissingVariable(f"{name}: {arg}")
            return value
        if op in (":+", "+"):
            set_ = value is not None and (op == "+" or value != "")
            return _interpolate_str(arg, env, used) if set_ else ""
        return value or ""

    return _VAR.sub(replace, text)


def interpolate(node: Any, env: dict[str, str], used: set[str] | None = None) -> Any:
    """Compose's interpolation: applied to string values of the parsed file (not to keys)."""
    used = set() if used is None else used
    if isinstance(node, dict):
        return {key: interpolate(value, env, used) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate(value, env, used) for value in node]
    if isinstance(node, str):
        return _interpolate_str(node, env, used)
    return node


def env_example() -> dict[str, str]:
    values = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def filled_env() -> dict[str, str]:
    """.env.example with the required secrets filled in, as a user's deploy/.env would be."""
    return {key: value or f"test-{key.lower()}" for key, value in env_example().items()}


def compose_raw() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def compose() -> dict:
    return interpolate(compose_raw(), filled_env())


def _vendored(name: str) -> Traversable:
    """A file of check-jsonschema's vendored schemas: its builtin `vendor.<name>` is this file."""
    return importlib.resources.files("check_jsonschema.builtin_schemas.vendor").joinpath(name)


def compose_schema() -> dict:
    """The Compose Specification's JSON schema, as the installed check-jsonschema vendors it."""
    return json.loads(_vendored("compose-spec.json").read_bytes())


def compose_schema_errors(document: dict) -> list[str]:
    validator = jsonschema.Draft202012Validator(compose_schema())
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def check_jsonschema_cli(document: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    """check-jsonschema's own command on the interpolated file, with its builtin compose schema."""
    path = tmp_path / "compose.interpolated.yaml"
    path.write_text(yaml.safe_dump(document))
    return subprocess.run(
        [str(REPO_ROOT / ".venv" / "bin" / "check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True, text=True, timeout=120,
    )


def compose_reference_problems(document: dict) -> list[str]:
    """Services without an image, and volumes, configs, secrets, files and services named but absent."""
    problems = []
    services = document.get("services", {})
    for top in ("volumes", "configs", "secrets"):
        for name, spec in (document.get(top) or {}).items():
            path = (spec or {}).get("file")
            if path and not (DEPLOY / path).is_file():
                problems.append(f"{top}.{name}: file {path} does not exist")
    for name, service in services.items():
        if not service.get("image") and not service.get("build"):
            problems.append(f"{name}: neither image nor build")
        build = service.get("build")
        if isinstance(build, dict):
            context = (DEPLOY / build.get("context", ".")).resolve()
            if not (context / build.get("dockerfile", "Dockerfile")).is_file():
                problems.append(f"{name}: build.dockerfile not found under {context}")
        for mount in service.get("volumes", []):
            source = mount.split(":", 1)[0] if isinstance(mount, str) else mount.get("source", "")
            if source.startswith("/"):
                continue  # a host path (the Docker socket): the host's, not the repository's
            if source.startswith("."):
                if not (DEPLOY / source).exists():
                    problems.append(f"{name}: bind mount source {source} does not exist")
            elif source not in (document.get("volumes") or {}):
                problems.append(f"{name}: volume {source} is not declared under volumes")
        for top in ("configs", "secrets"):
            for ref in service.get(top, []):
                source = ref if isinstance(ref, str) else ref["source"]
                if source not in (document.get(top) or {}):
                    problems.append(f"{name}: {top[:-1]} {source} is not declared under {top}")
        depends = service.get("depends_on", {})
        for other in depends if isinstance(depends, (list, dict)) else []:
            if other not in services:
                problems.append(f"{name}: depends_on {other}, which is not a service")
    return problems


def vllm_services(document: dict) -> dict[str, dict]:
    return {name: s for name, s in document["services"].items() if name.startswith("vllm-")}


def _flag(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def gpu_problems(document: dict) -> list[str]:
    problems, seen = [], {}
    vllm = vllm_services(document)
    if not vllm:
        problems.append("no vllm-N service")
    for name, service in vllm.items():
        devices = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
        if len(devices) != 1:
            problems.append(f"{name}: expected one device reservation, found {len(devices)}")
            continue
        device = devices[0]
        if device.get("driver") != "nvidia" or "gpu" not in device.get("capabilities", []):
            problems.append(f"{name}: not an nvidia gpu reservation")
        if "count" in device and "device_ids" in device:
            problems.append(f"{name}: count and device_ids are mutually exclusive in compose")
        ids = device.get("device_ids", [])
        if len(ids) != 1:
            problems.append(f"{name}: expected exactly one device id, found {ids}")
        for gpu in ids:
            if gpu in seen:
                problems.append(f"{name}: GPU {gpu} already reserved by {seen[gpu]}")
            seen[gpu] = name
    return problems


def fleet_urls_of_compose(document: dict) -> set[str]:
    urls = set()
    for name, service in vllm_services(document).items():
        command = service["command"]
        urls.add(f"http://{name}:{_flag(command, '--port')}/v1")
    return urls


def _mounts(service: dict) -> dict[str, str]:
    """A service's volume mounts as {container path: source}."""
    pairs = [m.split(":")[:2] if isinstance(m, str) else (m["source"], m["target"]) for m in service.get("volumes", [])]
    return {target: source for source, target in pairs}


def etc_files(document: dict) -> dict[str, Path]:
    """The files service config-files copies into its volume, as {path inside the volume's mount:
    repository file}: `cp <mounted configs...> <volume mount>/`."""
    service = document["services"]["config-files"]
    words = shlex.split(service["command"][-1])
    assert words[0] == "cp", words
    *sources, dest = words[1:]
    configs = {c["target"]: DEPLOY / document["configs"][c["source"]]["file"] for c in service["configs"]}
    assert dest.rstrip("/") in _mounts(service), f"config-files copies to {dest}, which is no volume"
    return {f"{dest.rstrip('/')}/{Path(source).name}": configs[source] for source in sources if source in configs}


def file_in_service(document: dict, service_name: str, path: str) -> Path | None:
    """The repository file at `path` in a service's container: a config mounted there, or a file that
    config-files copied into a volume the service mounts at the same place."""
    service = document["services"][service_name]
    configs = {c["target"]: c["source"] for c in service.get("configs", [])}
    if path in configs:
        return DEPLOY / document["configs"][configs[path]]["file"]
    copier = _mounts(document["services"]["config-files"])
    mounts = _mounts(service)
    folder = str(Path(path).parent)
    if folder in mounts and copier.get(folder) == mounts[folder]:
        return etc_files(document).get(path)
    return None


def _volume_names(document: dict) -> dict[str, str]:
    """{Docker volume name: compose volume key} for the volumes given a fixed name."""
    return {spec["name"]: key for key, spec in (document.get("volumes") or {}).items() if spec and spec.get("name")}


def run_launcher_problems(document: dict, instance: dict) -> list[str]:
    """What a run container, started by the daemon with the instance's DockerRunLauncher, would lack
    compared with the code server: the compose network, an ingest setting, a volume (the inbox, the
    storage folder, the fleet and gold files), the code server's image; and whether the daemon and
    webserver can reach Docker."""
    launcher = instance.get("run_launcher") or {}
    if (launcher.get("module"), launcher.get("class")) != ("dagster_docker", "DockerRunLauncher"):
        return [f"run_launcher is {launcher.get('class')}, not dagster_docker.DockerRunLauncher"]
    problems = []
    config = launcher.get("config", {})
    services = document["services"]
    network = ((document.get("networks") or {}).get("default") or {}).get("name")
    if config.get("network") != network:
        problems.append(f"network {config.get('network')!r} is not the compose network's name {network!r}")
    code_env, daemon_env = services["code-server"]["environment"], services["daemon"]["environment"]
    forwarded = set(config.get("env_vars", []))
    for name in sorted({k for k in code_env if k.startswith("CTX_")} | {"DATABASE_URL", "DAGSTER_PG_URL"}):
        if name not in forwarded:
            problems.append(f"run containers do not receive {name}")
        elif daemon_env.get(name) != code_env[name]:
            problems.append(f"the daemon passes on {name}={daemon_env.get(name)!r}, the code server has {code_env[name]!r}")
    names, code_mounts = _volume_names(document), _mounts(services["code-server"])
    run_mounts = {}
    for mount in config.get("container_kwargs", {}).get("volumes", []):
        source, target = mount.split(":")[:2]
        run_mounts[target] = source
        if source not in names:
            problems.append(f"run volume {source} is no compose volume's name")
        elif code_mounts.get(target) != names[source]:
            problems.append(f"{target}: the code server mounts {code_mounts.get(target)}, run containers {names[source]}")
    for name in ("CTX_LLM_FLEET_FILE", "CTX_GOLD_FILE", "CTX_INBOX"):
        path = Path(code_env[name])
        if not any(path == Path(t) or Path(t) in path.parents for t in run_mounts):
            problems.append(f"{name}={path}: not on a volume the run containers mount")
    if code_env.get("DAGSTER_CURRENT_IMAGE") != services["code-server"]["image"]:
        problems.append("the code server's DAGSTER_CURRENT_IMAGE is not its image: runs would start from another")
    for name in ("daemon", "webserver"):
        if _mounts(services[name]).get("/var/run/docker.sock") != "/var/run/docker.sock":
            problems.append(f"{name} does not mount the Docker socket")
        if not services[name].get("group_add"):
            problems.append(f"{name} is not in the socket's group (group_add)")
    return problems


def load_fleet(path: Path):
    from contextual_assets.fleet.config import FleetConfig

    return FleetConfig.load(fleet_file=str(path))


# --------------------------------------------------------------------------------------------------
# Dockerfile


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    instructions, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue
        current += " " + stripped
        if current.endswith("\\"):
            current = current[:-1]
            continue
        keyword, _, args = current.strip().partition(" ")
        instructions.append((keyword.upper(), args.strip()))
        current = ""
    return instructions


def _dockerignore_patterns() -> list[str]:
    lines = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def _ignored(path: str, patterns: list[str]) -> bool:
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        candidates = [pattern] + ([pattern[3:]] if pattern.startswith("**/") else [])
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(prefix, c) for prefix in prefixes for c in candidates) or any(
            pattern.startswith("**/") and fnmatch.fnmatch(part, pattern[3:]) for part in parts
        ):
            ignored = not negate
    return ignored


def dockerfile_problems(text: str) -> list[str]:
    problems = []
    instructions = dockerfile_instructions(text)
    args = {}
    for keyword, rest in instructions:
        if keyword == "ARG" and "=" in rest:
            key, _, value = rest.partition("=")
            args[key] = value.strip('"')
    base = next((rest for keyword, rest in instructions if keyword == "FROM"), "")
    base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), base).split(" ")[0]
    # An exact Python 3.11 release on a named Debian (python:3.11.N-slim-<debian>), optionally by digest:
    # never the moving python:3.11-slim.
    if not re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", base):
        problems.append(f"base image is {base!r}, not an exact python:3.11.N-slim-<debian> release")
    if args.get("TORCH_INDEX_URL") != CPU_TORCH_INDEX:
        problems.append(f"TORCH_INDEX_URL defaults to {args.get('TORCH_INDEX_URL')!r}, not the CPU index")
    installs = [rest for keyword, rest in instructions if keyword == "RUN" and "pip install" in rest]
    install = next((run for run in installs if '--extra-index-url "${TORCH_INDEX_URL}"' in run), None)
    package = re.search(r'-e "\.(?:\[([^\]]*)\])?"', install or "")
    if package is None:
        problems.append('no `pip install --extra-index-url "${TORCH_INDEX_URL}" -e ".[extras]"`')
    else:
        extras = set((package.group(1) or "").split(",")) - {""}
        if IMAGE_EXTRAS - extras:
            problems.append(f"the image installs the package without the extras {sorted(IMAGE_EXTRAS - extras)}")
        declared = set(pyproject()["project"]["optional-dependencies"])
        if extras - declared:
            problems.append(f"the image installs extras pyproject.toml does not declare: {sorted(extras - declared)}")
    patterns = _dockerignore_patterns()
    for keyword, rest in instructions:
        if keyword != "COPY":
            continue
        parts = [p for p in shlex.split(rest) if not p.startswith("--")]
        for source in parts[:-1]:
            if not (REPO_ROOT / source).exists():
                problems.append(f"COPY {source}: not in the repository")
            elif _ignored(source.rstrip("/"), patterns):
                problems.append(f"COPY {source}: excluded by .dockerignore")
    cmd = next((rest for keyword, rest in reversed(instructions) if keyword == "CMD"), None)
    if cmd is None:
        problems.append("no CMD")
    else:
        command = json.loads(cmd)
        if command[:3] != ["dagster", "code-server", "start"]:
            problems.append(f"CMD is {command[:3]}, not a dagster code server")
        module = _flag(command, "-m")
        if importlib.util.find_spec(module) is None:
            problems.append(f"CMD module {module} does not exist")
    return problems


def pyproject() -> dict:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def dockerfile_cmd() -> list[str]:
    return json.loads(next(r for k, r in reversed(dockerfile_instructions(DOCKERFILE.read_text())) if k == "CMD"))


# --------------------------------------------------------------------------------------------------
# Helm: the chart's schema and a strict key walk


def helm_merge(base: Any, override: Any) -> Any:
    """How helm combines values files: maps merge key by key, anything else (lists too) is replaced,
    and a null deletes the key."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = helm_merge(base.get(key), value)
        return merged
    return copy.deepcopy(override)


def helm_values(*, gpu: bool = False) -> dict:
    values = yaml.safe_load(HELM_VALUES.read_text())
    return helm_merge(values, yaml.safe_load(HELM_GPU_VALUES.read_text())) if gpu else values


def helm_schema() -> dict:
    return json.loads(HELM_SCHEMA.read_text())


def _is_remote(ref: str | None) -> bool:
    return bool(ref) and not ref.startswith("#")


def _offline(schema: Any, *, keep_required: bool) -> Any:
    """The chart schema usable here: the Kubernetes definitions it refers to by URL are not fetched
    (their sibling keywords still apply), and `required` is dropped unless asked for, because helm
    validates the user's values merged over the chart's defaults, which supply the required keys."""
    if isinstance(schema, dict):
        out = {}
        for key, value in schema.items():
            if key == "$ref" and _is_remote(value):
                continue
            if key == "required" and not keep_required and isinstance(value, list):
                continue
            out[key] = _offline(value, keep_required=keep_required)
        return out
    if isinstance(schema, list):
        return [_offline(v, keep_required=keep_required) for v in schema]
    return schema


def helm_schema_errors(values: dict) -> list[str]:
    schema = helm_schema()
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in jsonschema.Draft202012Validator(_offline(schema, keep_required=False)).iter_errors(values)
    ]
    # List items get no chart defaults (helm replaces lists), so each deployment is checked whole.
    strict = _offline(schema, keep_required=True)
    deployment = {"$ref": "#/$defs/UserDeployment", "$defs": strict["$defs"]}
    for i, item in enumerate(values.get("dagster-user-deployments", {}).get("deployments", [])):
        errors += [
            f"dagster-user-deployments/deployments/{i}/{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in jsonschema.Draft202012Validator(deployment).iter_errors(item)
        ]
    return errors


def _resolve(node: dict, root: dict) -> dict:
    """Follow a local $ref (keeping sibling keywords); a URL $ref is left (a Kubernetes type)."""
    seen = 0
    while "$ref" in node and node["$ref"].startswith("#/") and seen < 50:
        target: Any = root
        for part in node["$ref"][2:].split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        seen += 1
    return node


_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}


def _branches(node: dict, root: dict, value: Any) -> list[dict]:
    node = _resolve(node, root)
    options = node.get("anyOf") or node.get("oneOf")
    if options:
        base = {k: v for k, v in node.items() if k not in ("anyOf", "oneOf")}
        out = []
        for option in options:
            out += _branches({**base, **option} if "$ref" not in option else option, root, value)
        return out
    kind = _JSON_TYPES.get(type(value), "null")
    declared = node.get("type")
    if declared is None or declared == kind or (kind == "integer" and declared == "number"):
        return [node]
    return []


def unknown_key_paths(value: Any, node: dict, root: dict, path: str = "") -> list[str]:
    """Every key path of `value` that the schema does not define. An object schema with properties
    admits only those (additionalProperties true, pydantic's extra="allow", is not taken as a licence
    to invent keys); a map schema (no properties) admits any key; a Kubernetes type (a URL $ref, not
    available offline) admits any key beyond the properties listed."""
    branches = _branches(node, root, value)
    if not branches:
        return []
    if isinstance(value, dict):
        known: dict[str, dict] = {}
        free: list[dict] = []
        opaque = False
        for branch in branches:
            known.update(branch.get("properties") or {})
            extra = branch.get("additionalProperties")
            opaque |= _is_remote(branch.get("$ref"))
            if not branch.get("properties"):
                if isinstance(extra, dict):
                    free.append(extra)
                elif extra is not False:
                    opaque = True
        problems = []
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if key in known:
                problems += unknown_key_paths(item, known[key], root, where)
            elif free:
                problems += unknown_key_paths(item, free[0], root, where)
            elif not opaque:
                problems.append(where)
        return problems
    if isinstance(value, list):
        problems = []
        for branch in branches:
            if "items" in branch:
                for i, item in enumerate(value):
                    problems += unknown_key_paths(item, branch["items"], root, f"{path}[{i}]")
                break
        return problems
    return []


def helm_unknown_keys(values: dict) -> list[str]:
    schema = helm_schema()
    return unknown_key_paths(values, schema, schema)


def _user_deployment(values: dict) -> dict:
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    return deployment


def _camel_to_snake(node: Any) -> Any:
    if isinstance(node, dict):
        return {re.sub(r"(?<!^)([A-Z])", r"_\1", k).lower(): _camel_to_snake(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_camel_to_snake(v) for v in node]
    return node


# ==================================================================================================
# every file under deploy/


def test_every_file_under_deploy_parses():
    yaml_files = sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml"))
    assert {COMPOSE, COMPOSE_INSTANCE, POSTGRES_INSTANCE, HELM_VALUES, FLEET_CONFIGMAP, FLEET_COMPOSE, WORKSPACE_GRPC,
            GOLD_EXAMPLE, GOLD_CONFIGMAP, VLLM_MANIFEST, SEARCH_SERVICE} <= set(yaml_files)
    for path in yaml_files:
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        kind = list if path == GOLD_EXAMPLE else dict  # a gold set is a list of tasks
        assert documents and all(isinstance(d, kind) for d in documents), path
    for path in sorted(DEPLOY.rglob("*.json")):
        assert isinstance(json.loads(path.read_text()), dict), path


def test_the_committed_schemas_are_the_ones_deploy_readme_names():
    """The chart schema is a copy of the upstream file; deploy/README.md names where it comes from and its
    sha256, so an edit shows here. The compose and Kubernetes schemas are the installed packages' own."""
    readme = README.read_text()
    digest = hashlib.sha256(HELM_SCHEMA.read_bytes()).hexdigest()
    assert digest in readme, f"{HELM_SCHEMA.relative_to(REPO_ROOT)}: sha256 {digest} is not in deploy/README.md"
    assert "433c65790b0cd47cc2ead98deae42308bf8110c2" in readme
    assert not (DEPLOY / "schemas").exists(), "the compose schema is check-jsonschema's vendored copy now"
    assert "vendor.compose-spec" in readme and f"Kubernetes {KUBERNETES_VERSION}" in readme


def test_the_compose_schema_is_check_jsonschemas_vendored_copy():
    """The schema read from the installed check-jsonschema is the one it ships (its recorded sha256)."""
    recorded = _vendored("sha256").joinpath("compose-spec.sha256").read_text().split()[0]
    assert hashlib.sha256(_vendored("compose-spec.json").read_bytes()).hexdigest() == recorded
    assert compose_schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"


# ==================================================================================================
# compose


def test_compose_file_is_valid_against_the_compose_specification(tmp_path):
    assert compose_schema_errors(compose()) == []
    result = check_jsonschema_cli(compose(), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_schema_check_catches_an_invalid_file(tmp_path):
    broken = compose()
    broken["services"]["code-server"]["restart_policy"] = "always"  # not a compose key
    broken["services"]["vllm-0"]["deploy"]["resources"]["reservations"]["devices"][0].pop("capabilities")
    errors = compose_schema_errors(broken)
    assert any("restart_policy" in e for e in errors), errors
    assert any("capabilities" in e for e in errors), errors
    result = check_jsonschema_cli(broken, tmp_path)
    assert result.returncode == 1 and "restart_policy" in result.stdout + result.stderr, result.stdout


def test_compose_variables_are_all_in_env_example_and_secrets_are_not():
    used: set[str] = set()
    interpolate(compose_raw(), filled_env(), used)
    example = env_example()
    assert used - set(example) == set(), "add these to deploy/.env.example"
    # The secrets are required (${VAR:?...}) and empty in the template: compose refuses to start until
    # deploy/.env sets them, and no password is committed.
    for secret in ("POSTGRES_PASSWORD", "LLM_API_KEY", "CTX_SEARCH_TOKEN", "CTX_SEARCH_DB_PASSWORD"):
        assert example[secret] == "", f"{secret} has a value in .env.example"
        with pytest.raises(MissingVariable, match=secret):
            interpolate(compose_raw(), {**filled_env(), secret: ""})


def test_env_example_check_catches_a_missing_variable():
    raw = compose_raw()
    raw["services"]["search"]["environment"]["CTX_SERVE_MAX_K"] = "${CTX_SEARCH_MAX_K:-100}"
    used: set[str] = set()
    interpolate(raw, filled_env(), used)
    assert used - set(env_example()) == {"CTX_SEARCH_MAX_K"}


def test_compose_services_have_images_and_what_they_reference_exists():
    document = compose()
    assert compose_reference_problems(document) == []
    expected = {"postgres", "config-files", "code-server", "webserver", "daemon", "search"}
    assert expected <= set(document["services"])
    # pgvector on Postgres 16, at an exact pgvector release (not the moving pg16 tag).
    assert re.fullmatch(r"pgvector/pgvector:\d+\.\d+\.\d+-pg16", document["services"]["postgres"]["image"])


def test_compose_reference_check_catches_missing_things():
    broken = compose()
    del broken["services"]["search"]["image"], broken["services"]["search"]["build"]
    broken["services"]["webserver"]["volumes"].append("logs:/logs")
    broken["services"]["code-server"]["configs"].append({"source": "nope", "target": "/nope"})
    broken["configs"]["fleet"]["file"] = "./missing-fleet.yaml"
    broken["services"]["daemon"]["depends_on"]["ghost"] = {"condition": "service_started"}
    problems = compose_reference_problems(broken)
    for fragment in ("search: neither image", "volume logs", "config nope", "missing-fleet.yaml", "ghost"):
        assert any(fragment in p for p in problems), (fragment, problems)


def test_vllm_replicas_each_reserve_their_own_gpu_and_are_the_fleet():
    document = compose()
    assert gpu_problems(document) == []
    assert len(vllm_services(document)) >= 2
    fleet = load_fleet(FLEET_COMPOSE)
    assert {r.base_url for r in fleet.replicas} == fleet_urls_of_compose(document)
    # The code server reads that file where compose puts it, and runs with the key vLLM requires.
    code_server = document["services"]["code-server"]
    env = code_server["environment"]
    assert file_in_service(document, "code-server", env["CTX_LLM_FLEET_FILE"]).resolve() == FLEET_COMPOSE.resolve()
    for service in vllm_services(document).values():
        command = service["command"]
        assert service["environment"]["VLLM_API_KEY"] == env["CTX_LLM_API_KEY"]
        assert _flag(command, "--model") == _flag(command, "--served-model-name") == env["CTX_LLM_MODEL"]
        assert int(_flag(command, "--max-model-len")) >= 4096
        assert "--enable-prefix-caching" in command and _flag(command, "--generation-config") == "vllm"
        # --max-num-seqs is the replica's batch capacity; the client finds the useful concurrency under it
        # (a max_in_flight in the fleet file is a ceiling only), so it is not set low to throttle.
        max_num_seqs = int(_flag(command, "--max-num-seqs"))
        assert max_num_seqs >= 256, f"--max-num-seqs {max_num_seqs}: vLLM's batch capacity, not a throttle"
        assert all(r.max_in_flight is None or r.max_in_flight <= max_num_seqs for r in fleet.replicas)


def test_gpu_and_fleet_checks_catch_mistakes(tmp_path):
    document = compose()
    vllm1 = document["services"]["vllm-1"]["deploy"]["resources"]["reservations"]["devices"][0]
    vllm1["device_ids"] = ["0"]
    vllm1["count"] = 1
    problems = gpu_problems(document)
    assert any("GPU 0 already reserved by vllm-0" in p for p in problems), problems
    assert any("mutually exclusive" in p for p in problems), problems

    fleet = yaml.safe_load(FLEET_COMPOSE.read_text())
    fleet["replicas"] = fleet["replicas"][:1]
    one = tmp_path / "fleet.yaml"
    one.write_text(yaml.safe_dump(fleet))
    assert {r.base_url for r in load_fleet(one).replicas} != fleet_urls_of_compose(compose())


def test_dagster_processes_share_the_compose_instance_and_find_the_code_server():
    from dagster._core.workspace.config_schema import process_workspace_config

    document = compose()
    services = document["services"]
    for name in ("code-server", "webserver", "daemon"):
        service = services[name]
        env = service["environment"]
        home = env["DAGSTER_HOME"]
        assert file_in_service(document, name, f"{home}/dagster.yaml").resolve() == COMPOSE_INSTANCE.resolve()
        url = urlparse(env["DAGSTER_PG_URL"])
        assert (url.scheme, url.hostname, url.path) == ("postgresql+psycopg2", "postgres", "/dagster"), name
        assert any(v.endswith(":/opt/dagster/dagster_home/storage") for v in service["volumes"]), name
    for name in ("code-server", "daemon", "search"):
        url = urlparse(services[name]["environment"]["DATABASE_URL"])
        assert (url.scheme, url.hostname, url.path) == ("postgresql", "postgres", "/ctx"), name

    workspace = yaml.safe_load(WORKSPACE_GRPC.read_text())
    assert process_workspace_config(workspace).success
    (server,) = [entry["grpc_server"] for entry in workspace["load_from"]]
    command = services["code-server"]["command"]
    assert server["host"] == "code-server"
    assert str(server["port"]) == _flag(command, "-p")
    assert server["location_name"] == _flag(command, "--location-name")
    for name in ("webserver", "daemon"):
        mounts = {c["target"]: document["configs"][c["source"]]["file"] for c in services[name]["configs"]}
        workspace_arg = _flag(services[name]["command"], "-w")
        assert (DEPLOY / mounts[workspace_arg]).resolve() == WORKSPACE_GRPC.resolve()
    assert command == dockerfile_cmd()
    assert services["search"]["command"][:2] == ["ctx", "serve"]
    assert _flag(services["search"]["command"], "--host") == "0.0.0.0"


def test_each_run_is_a_container_with_the_code_servers_settings_and_files():
    """compose's instance launches every run as a container (DockerRunLauncher), which gets what the code
    server has: the network, the ingest settings (from the daemon), the inbox, storage and /etc/ctx."""
    document = compose()
    instance = yaml.safe_load(COMPOSE_INSTANCE.read_text())
    assert run_launcher_problems(document, instance) == []
    # The copy service runs once and stops; the code server starts after it.
    assert document["services"]["config-files"]["restart"] == "no"
    assert document["services"]["code-server"]["depends_on"]["config-files"] == {
        "condition": "service_completed_successfully"
    }


def test_run_launcher_check_catches_a_run_container_without_what_it_needs():
    document = compose()
    instance = yaml.safe_load(COMPOSE_INSTANCE.read_text())
    config = instance["run_launcher"]["config"]
    config["network"] = "ctx_default_typo"
    config["env_vars"].remove("CTX_GOLD_FILE")
    config["container_kwargs"]["volumes"] = [v for v in config["container_kwargs"]["volumes"] if "/etc/ctx" not in v]
    del document["services"]["daemon"]["environment"]["DATABASE_URL"]
    document["services"]["webserver"]["volumes"].remove("/var/run/docker.sock:/var/run/docker.sock")
    problems = run_launcher_problems(document, instance)
    for fragment in ("network 'ctx_default_typo'", "do not receive CTX_GOLD_FILE", "passes on DATABASE_URL=None",
                     "CTX_LLM_FLEET_FILE=/etc/ctx/fleet.yaml: not on a volume", "webserver does not mount the Docker"):
        assert any(fragment in p for p in problems), (fragment, problems)
    instance["run_launcher"] = {"module": "dagster", "class": "DefaultRunLauncher"}
    assert run_launcher_problems(compose(), instance) == [
        "run_launcher is DefaultRunLauncher, not dagster_docker.DockerRunLauncher"
    ]


def test_gold_example_parses_with_the_gold_loader_and_compose_mounts_it():
    from contextual_assets.samples import sample_gold_file
    from eval_assets.gold.gold_set import load_gold

    gold = load_gold(GOLD_EXAMPLE)
    # As shipped, the sample corpus's queries: a fresh deployment's smoke test (the sample corpus
    # ingested) can pass the gate and promote, as `make demo` does with the same set.
    with sample_gold_file() as path:
        sample = load_gold(path)
    assert [(t.query, t.evidence) for t in gold.tasks] == [(t.query, t.evidence) for t in sample.tasks]
    document = compose()
    for name in ("code-server", "daemon"):
        path = document["services"][name]["environment"]["CTX_GOLD_FILE"]
        assert path == document["services"]["code-server"]["environment"]["CTX_GOLD_FILE"]
    path = document["services"]["code-server"]["environment"]["CTX_GOLD_FILE"]
    assert file_in_service(document, "code-server", path).resolve() == GOLD_EXAMPLE.resolve()


def test_gold_checks_catch_a_bad_file_or_a_wrong_mount(tmp_path):
    from contextual_assets.errors import ConfigurationError
    from eval_assets.gold.gold_set import load_gold

    bad = tmp_path / "gold.yaml"
    bad.write_text("- query: where is it\n  evidence: []\n")  # a task needs evidence
    with pytest.raises(ConfigurationError, match="not a valid gold set"):
        load_gold(bad)
    document = compose()
    document["services"]["config-files"]["configs"] = [
        c for c in document["services"]["config-files"]["configs"] if c["source"] != "gold"
    ]
    assert file_in_service(document, "code-server", "/etc/ctx/gold.yaml") is None
    document = compose()
    document["services"]["code-server"]["volumes"].remove("etc:/etc/ctx:ro")
    assert file_in_service(document, "code-server", "/etc/ctx/gold.yaml") is None


def test_the_ui_is_published_on_localhost_and_the_proxy_authenticates():
    """Dagster OSS has no authentication: the UI's port is bound to 127.0.0.1 unless the .env says
    otherwise, and the optional proxy (profile `proxy`) asks for a login before reaching it."""
    (raw,) = compose_raw()["services"]["webserver"]["ports"]
    assert raw == "${DAGSTER_WEBSERVER_BIND:-127.0.0.1}:${DAGSTER_WEBSERVER_PORT:-3000}:3000"
    assert interpolate(raw, {}) == "127.0.0.1:3000:3000"  # no .env at all
    assert compose()["services"]["webserver"]["ports"] == ["127.0.0.1:3000:3000"]  # .env.example
    document = compose()
    proxy = document["services"]["ui-proxy"]
    assert proxy["profiles"] == ["proxy"]
    assert file_in_service(document, "ui-proxy", "/etc/caddy/Caddyfile").resolve() == CADDYFILE.resolve()
    caddyfile = CADDYFILE.read_text()
    assert re.search(r"basic_auth \{\s*\{\$CTX_UI_USER\} \{\$CTX_UI_PASSWORD_HASH\}\s*\}", caddyfile)
    assert "reverse_proxy webserver:3000" in caddyfile
    assert set(re.findall(r"\{\$(\w+)\}", caddyfile)) <= set(proxy["environment"])
    assert "no authentication" in README.read_text()


# ==================================================================================================
# Dockerfile


def test_dockerfile_builds_the_code_location_from_repository_files():
    assert dockerfile_problems(DOCKERFILE.read_text()) == []


def test_dockerfile_command_uses_flags_the_installed_dagster_has():
    help_text = subprocess.run(
        [str(REPO_ROOT / ".venv" / "bin" / "dagster"), "code-server", "start", "--help"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    for flag in {arg for arg in dockerfile_cmd()[3:] if arg.startswith("-")}:
        assert re.search(rf"(^|\s|,){re.escape(flag)}[\s,]", help_text), f"dagster code-server start has no {flag}"
    assert importlib.util.find_spec(DEFINITIONS_MODULE) is not None


def test_dockerfile_check_catches_mistakes():
    text = DOCKERFILE.read_text()
    broken = (
        text.replace("COPY eval_assets ./eval_assets", "COPY eval_assets ./eval_assets\nCOPY .venv /venv")
        .replace("COPY contextual_assets ", "COPY contextual_asset ")
        .replace(DEFINITIONS_MODULE, "contextual_assets.defs.nowhere")
        .replace("ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm", "ARG PYTHON_IMAGE=python:3.12")
        .replace(f"TORCH_INDEX_URL={CPU_TORCH_INDEX}", "TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128")
        .replace('-e ".[s3,k8s,docker]"', '-e ".[s3,gpu]"')
    )
    problems = dockerfile_problems(broken)
    for fragment in (".venv: excluded", "contextual_asset: not in", "nowhere does not exist", "python:3.12", "cu128",
                     "without the extras ['docker', 'k8s']", "does not declare: ['gpu']"):
        assert any(fragment in p for p in problems), (fragment, problems)
    moving = text.replace("ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm", "ARG PYTHON_IMAGE=python:3.11-slim")
    assert any("not an exact python:3.11.N-slim" in p for p in dockerfile_problems(moving))


def test_image_extras_pin_the_run_launchers_to_dagsters_tested_minor():
    from packaging.requirements import Requirement

    project = pyproject()["project"]
    postgres = next(Requirement(r) for r in project["dependencies"] if r.startswith("dagster-postgres"))
    for extra, name in (("k8s", "dagster-k8s"), ("docker", "dagster-docker")):
        (requirement,) = [Requirement(r) for r in project["optional-dependencies"][extra]]
        assert requirement.name == name and requirement.specifier == postgres.specifier, requirement


# ==================================================================================================
# Helm


@pytest.mark.parametrize("gpu", [False, True], ids=["values.yaml", "values.yaml+values-gpu-embedding.yaml"])
def test_helm_values_validate_against_the_chart_schema(gpu):
    values = helm_values(gpu=gpu)
    assert helm_schema_errors(values) == []
    assert helm_unknown_keys(values) == []


def test_helm_checks_catch_invented_keys():
    schema_only_misses = helm_values()
    schema_only_misses["replicaz"] = 3  # top level: the chart's schema allows extra keys there
    schema_only_misses["userDeployments"] = {"enabled": True}  # the chart's key is dagster-user-deployments
    _user_deployment(schema_only_misses)["gpuCount"] = 1  # a user deployment allows extra keys too
    assert helm_schema_errors(schema_only_misses) == []
    assert sorted(helm_unknown_keys(schema_only_misses)) == [
        "dagster-user-deployments.deployments[0].gpuCount",
        "replicaz",
        "userDeployments",
    ]

    both_catch = helm_values()
    both_catch["runLauncher"]["config"]["k8sRunLauncher"]["gpus"] = 1
    both_catch["concurrency"]["pools"]["ctx_ingest"] = 1
    assert any("gpus" in e for e in helm_schema_errors(both_catch))
    assert any("ctx_ingest" in e for e in helm_schema_errors(both_catch))
    assert sorted(helm_unknown_keys(both_catch)) == [
        "concurrency.pools.ctx_ingest",
        "runLauncher.config.k8sRunLauncher.gpus",
    ]

    wrong_type = helm_values()
    wrong_type["runLauncher"]["type"] = "DockerRunLauncher"
    del _user_deployment(wrong_type)["port"]
    errors = helm_schema_errors(wrong_type)
    assert any("DockerRunLauncher" in e for e in errors), errors
    assert any("'port' is a required property" in e for e in errors), errors


def test_helm_values_run_the_platform_on_the_k8s_run_launcher_with_external_postgres():
    values = helm_values()
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    assert values["postgresql"]["enabled"] is False and values["generatePostgresqlPasswordSecret"] is False
    assert "postgresqlPassword" not in values["postgresql"]
    deployment = _user_deployment(values)
    assert deployment["codeServerArgs"][:2] == ["-m", DEFINITIONS_MODULE]
    assert deployment["port"] == 4000
    # The chart copies the deployment's resources into the run pods (deep-merged over the launcher's), so
    # they equal the launcher's (tests/unit/test_deploy_observability.py merges them as dagster-k8s does).
    assert deployment["resources"] == values["runLauncher"]["config"]["k8sRunLauncher"]["resources"]
    assert deployment["envSecrets"] == [{"name": "ctx-secrets"}, {"name": "ctx-object-store"}]
    secret_like = re.compile(r"(PASSWORD|TOKEN|API_KEY|DATABASE_URL|PG_URL)")
    assert not [key for key in deployment["env"] if secret_like.search(key)], "secrets belong in ctx-secrets"
    assert values["dagsterDaemon"]["runCoordinator"]["type"] == "QueuedRunCoordinator"


def test_helm_concurrency_is_the_instance_config_of_the_other_deployments():
    shipped = yaml.safe_load((REPO_ROOT / "dagster.yaml").read_text())["concurrency"]
    postgres = yaml.safe_load((DEPLOY / "dagster.postgres.yaml").read_text())["concurrency"]
    helm = helm_values()["concurrency"]
    assert helm.pop("enabled") is True
    assert _camel_to_snake(helm) == shipped == postgres
    run_coordinator_config = helm_values()["dagsterDaemon"]["runCoordinator"].get("config", {})
    assert not run_coordinator_config.get("queuedRunCoordinator"), "limits set twice: the chart refuses that"


def test_gpu_variant_differs_only_in_image_gpu_limits_and_device():
    base, gpu = helm_values(), helm_values(gpu=True)
    base_launcher = base["runLauncher"]["config"]["k8sRunLauncher"]
    gpu_launcher = gpu["runLauncher"]["config"]["k8sRunLauncher"]
    assert "nvidia.com/gpu" not in base_launcher["resources"]["limits"]
    assert "CTX_EMBED_DEVICE=cpu" in base_launcher["envVars"]
    assert gpu_launcher["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "CTX_EMBED_DEVICE=cuda" in gpu_launcher["envVars"]
    base_deployment, gpu_deployment = _user_deployment(base), _user_deployment(gpu)
    assert gpu_deployment["image"]["tag"] != base_deployment["image"]["tag"]
    # Apart from the image (its own and check-inbox's) and the memory the chart copies into the run pods,
    # the same deployment.
    def without_image(deployment: dict) -> dict:
        out = copy.deepcopy(deployment)
        out["image"] = out["resources"] = None
        for init in out["initContainers"]:
            init["image"] = None
        return out
    assert without_image(gpu_deployment) == without_image(base_deployment)
    assert gpu_deployment["resources"]["requests"]["cpu"] == gpu_launcher["resources"]["requests"]["cpu"]
    assert "nvidia.com/gpu" not in str(gpu_deployment["resources"]), "the code server asks for no GPU"


def helm_files(deployment: dict) -> dict[str, str]:
    """The files the user deployment's ConfigMap volumes (plain or projected) put in its pods, as
    {path: ConfigMap name}, each key of the ConfigMap (from the manifests under deploy/helm/) a file."""
    configmaps = {d["metadata"]["name"]: d for d in k8s_documents() if d["kind"] == "ConfigMap"}
    files = {}
    for volume in deployment.get("volumes", []):
        sources = [volume] if "configMap" in volume else volume.get("projected", {}).get("sources", [])
        for mount in (m for m in deployment.get("volumeMounts", []) if m["name"] == volume["name"]):
            for source in sources:
                name = source.get("configMap", {}).get("name")
                for key in configmaps.get(name, {}).get("data", {}):
                    files[f"{mount['mountPath'].rstrip('/')}/{key}"] = name
    return files


def configmap_file(name: str, key: str) -> str:
    (configmap,) = [d for d in k8s_documents() if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
    return configmap["data"][key]


def test_fleet_and_gold_configmaps_are_mounted_where_the_settings_read_them(tmp_path):
    deployment = _user_deployment(helm_values())
    files = helm_files(deployment)
    env = deployment["env"]
    assert files.get(env["CTX_LLM_FLEET_FILE"]) == "ctx-fleet", files
    assert files.get(env["CTX_GOLD_FILE"]) == "ctx-gold", files
    assert deployment.get("includeConfigInLaunchedRuns", {}).get("enabled", True), "run pods need the mount too"

    written = tmp_path / "fleet.yaml"
    written.write_text(configmap_file("ctx-fleet", Path(env["CTX_LLM_FLEET_FILE"]).name))
    fleet = load_fleet(written)
    assert len(fleet.replicas) >= 2
    assert all(urlparse(r.base_url).hostname.endswith(".svc.cluster.local") for r in fleet.replicas)
    # The gold ConfigMap holds deploy/gold.example.yaml as it is (which the gold loader reads, above).
    assert configmap_file("ctx-gold", Path(env["CTX_GOLD_FILE"]).name) == GOLD_EXAMPLE.read_text()


def test_helm_mount_check_catches_a_configmap_left_out():
    deployment = _user_deployment(helm_values())
    (volume,) = [v for v in deployment["volumes"] if "projected" in v]
    volume["projected"]["sources"] = [s for s in volume["projected"]["sources"] if s["configMap"]["name"] != "ctx-gold"]
    files = helm_files(deployment)
    assert deployment["env"]["CTX_GOLD_FILE"] not in files and deployment["env"]["CTX_LLM_FLEET_FILE"] in files


# --------------------------------------------------------------------------------------------------
# Kubernetes manifests


def k8s_documents() -> list[dict]:
    return [d for path in (FLEET_CONFIGMAP, SEARCH_SERVICE, VLLM_MANIFEST, GOLD_CONFIGMAP)
            for d in yaml.safe_load_all(path.read_text()) if d]


def k8s_errors(document: dict) -> list[str]:
    """Kubernetes' own schema for the object's kind and apiVersion (kubernetes-validate, offline), strict:
    unknown fields are errors, as `kubectl apply --validate=strict` makes them."""
    try:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{'/'.join(map(str, error.path))}: {error.message}"]
    except kubernetes_validate.SchemaNotFoundError as error:
        return [error.message]
    return []


def user_deployment_pod(deployment: dict) -> dict:
    """The parts of the user deployment that become Kubernetes objects in the code server's and run
    pods (image, env, volumes, mounts), as a Pod, so Kubernetes' schema checks them too."""
    image = f"{deployment['image']['repository']}:{deployment['image']['tag']}"
    container = {"name": "code", "image": image, "env": [{"name": k, "value": v} for k, v in deployment["env"].items()],
                 "envFrom": [{"secretRef": s} for s in deployment["envSecrets"]],
                 "volumeMounts": deployment["volumeMounts"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": deployment["name"]},
            "spec": {"containers": [container], "volumes": deployment["volumes"]}}


@pytest.mark.parametrize("path", [FLEET_CONFIGMAP, SEARCH_SERVICE, VLLM_MANIFEST, GOLD_CONFIGMAP, MIGRATE_JOB],
                         ids=lambda p: p.name)
def test_kubernetes_manifests_validate_against_kubernetes_schemas(path):
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert documents
    for document in documents:
        assert k8s_errors(document) == [], (path.name, document["kind"])


@pytest.mark.parametrize("gpu", [False, True], ids=["values.yaml", "values.yaml+values-gpu-embedding.yaml"])
def test_user_deployment_volumes_and_env_validate_as_a_pod(gpu):
    assert k8s_errors(user_deployment_pod(_user_deployment(helm_values(gpu=gpu)))) == []


def test_kubernetes_check_catches_invalid_objects():
    service, statefulset = yaml.safe_load_all(VLLM_MANIFEST.read_text())
    unknown = copy.deepcopy(statefulset)
    unknown["spec"]["replica"] = 2  # strict: not a StatefulSet field
    assert any("'replica' was unexpected" in e for e in k8s_errors(unknown))
    wrong_type = copy.deepcopy(statefulset)
    wrong_type["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8000"
    assert any("containerPort: '8000' is not of type 'integer'" in e for e in k8s_errors(wrong_type))
    missing = copy.deepcopy(service)
    del missing["spec"]["ports"][0]["port"]
    assert any("'port' is a required property" in e for e in k8s_errors(missing))
    pod = user_deployment_pod(_user_deployment(helm_values()))
    pod["spec"]["volumes"][0]["projected"]["sources"][0]["configMap"]["nam"] = "ctx-fleet"
    assert any("'nam' was unexpected" in e for e in k8s_errors(pod))
    assert k8s_errors({"apiVersion": "v9", "kind": "Nothing", "metadata": {"name": "x"}})


def vllm_fleet_urls(statefulset: dict, service: dict) -> set[str]:
    """The per-replica URLs a StatefulSet behind a headless Service has:
    http://<statefulset>-<ordinal>.<service>.<namespace>.svc.cluster.local:<port>/v1."""
    name, spec = statefulset["metadata"]["name"], statefulset["spec"]
    (container,) = spec["template"]["spec"]["containers"]
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == "http"]
    return {f"http://{name}-{i}.{spec['serviceName']}.{NAMESPACE}.svc.cluster.local:{port}/v1"
            for i in range(spec["replicas"])}


def test_fleet_configmap_names_each_vllm_replica_of_the_statefulset(tmp_path):
    service, statefulset = yaml.safe_load_all(VLLM_MANIFEST.read_text())
    assert (service["kind"], statefulset["kind"]) == ("Service", "StatefulSet")
    # A headless Service gives each pod its own DNS name, so the client routes to each replica itself.
    assert service["spec"]["clusterIP"] == "None"
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["selector"] == statefulset["spec"]["selector"]["matchLabels"]
    assert statefulset["spec"]["replicas"] == 2
    written = tmp_path / "fleet.yaml"
    written.write_text(configmap_file("ctx-fleet", "fleet.yaml"))
    assert {r.base_url for r in load_fleet(written).replicas} == vllm_fleet_urls(statefulset, service)
    assert f"kubectl create namespace {NAMESPACE}" in README.read_text()

    more = copy.deepcopy(statefulset)
    more["spec"]["replicas"] = 3
    assert {r.base_url for r in load_fleet(written).replicas} != vllm_fleet_urls(more, service)


def test_vllm_statefulset_runs_the_compose_flags_with_a_gpu_the_key_and_a_model_cache():
    _service, statefulset = yaml.safe_load_all(VLLM_MANIFEST.read_text())
    pod = statefulset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    compose_command = next(iter(vllm_services(compose()).values()))["command"]
    assert args == compose_command, "the same flags and defaults as deploy/compose.yaml"
    assert container["image"] == env_example()["VLLM_IMAGE"]
    assert _flag(args, "--served-model-name") == _user_deployment(helm_values())["env"]["CTX_LLM_MODEL"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    env = {e["name"]: e for e in container["env"]}
    assert env["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "ctx-secrets", "key": "CTX_LLM_API_KEY"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    (cache,) = statefulset["spec"]["volumeClaimTemplates"]
    assert mounts[cache["metadata"]["name"]] == env["HF_HOME"]["value"]


def test_search_service_manifest_reads_the_same_secrets():
    deployment, service, budget = yaml.safe_load_all(SEARCH_SERVICE.read_text())
    assert (deployment["kind"], service["kind"], budget["kind"]) == ("Deployment", "Service", "PodDisruptionBudget")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"][:2] == ["ctx", "serve"] and _flag(container["args"], "--host") == "0.0.0.0"
    image = _user_deployment(helm_values())["image"]
    assert container["image"] == f"{image['repository']}:{image['tag']}"
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    # The token from ctx-secrets; the store as the read-only role, from its own Secret (never the owner's
    # DATABASE_URL in ctx-secrets): tests/unit/test_deploy_observability.py.
    assert refs == {"CTX_SEARCH_TOKEN": {"name": "ctx-secrets", "key": "CTX_SEARCH_TOKEN"},
                    "DATABASE_URL": {"name": "ctx-search-db", "key": "DATABASE_URL"}}
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_interpolation_follows_compose_rules():
    used: set[str] = set()
    env = {"SET": "v", "EMPTY": ""}
    assert interpolate("$$HOME ${SET} $SET", env, used) == "$HOME v v"
    assert interpolate("${EMPTY:-d} ${EMPTY-d} ${UNSET-d} ${UNSET:-${SET}}", env, used) == "d  d v"
    assert interpolate("${SET:+alt} ${EMPTY:+alt} ${EMPTY+alt}", env, used) == "alt  alt"
    assert used == {"SET", "EMPTY", "UNSET"}
    with pytest.raises(MissingVariable, match="EMPTY: say so"):
        interpolate({"a": ["${EMPTY:?say so}"]}, env)
    assert interpolate({"n": 1, "k": "${SET?x}"}, env) == {"n": 1, "k": "v"}
