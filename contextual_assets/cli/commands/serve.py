"""`ctx serve`: the search service over HTTP, in this process."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys

import uvicorn

from contextual_assets.cli.main import EXIT_OK, EXIT_USAGE
from contextual_assets.serving.app import ACCESS_LOG, create_app
from contextual_assets.serving.client import token_from_env
from contextual_assets.serving.keys import KeyRing
from contextual_assets.serving.rate_limit import RateLimiter
from contextual_assets.serving.service import service_from_settings
from contextual_assets.settings import PlatformSettings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="", help="address to bind (default: CTX_SERVE_HOST, 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=0, help="port (default: CTX_SERVE_PORT, 8765)")
    parser.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=True,
                        help="one line per request on stderr: client, method, path, status, milliseconds; "
                             "never a header, so never the token (default: on)")
    parser.add_argument("--insecure", action="store_true",
                        help="serve on a non-loopback address without a token (refused otherwise: anyone who "
                             "reaches the port could search the index)")


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1 to 65535)")
    return int(text)


def is_loopback(host: str) -> bool:
    """Only this machine can reach `host` (localhost, 127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def _keys(settings: PlatformSettings) -> KeyRing:
    """The API keys: CTX_SEARCH_KEYS_FILE's and the token CTX_SEARCH_TOKEN_ENV names (a keys file that cannot
    be read or is not a mapping `name: token` is a ConfigurationError naming CTX_SEARCH_KEYS_FILE: exit 2)."""
    return KeyRing(token_from_env(settings.search_token_env), settings.search_keys_file or None)


def run(args: argparse.Namespace) -> int:
    settings = PlatformSettings.from_env()
    keys = _keys(settings)
    host = args.host or settings.serve_host
    port = args.port or settings.serve_port
    if not is_loopback(host) and not keys.enabled:
        if not args.insecure:  # checked before anything loads: a misdeployment fails at once, by name
            print(f"error: refusing to serve on {host} without a token: set {settings.search_token_env}, "
                  "or pass --insecure to serve without one", file=sys.stderr)
            return EXIT_USAGE
        print(f"warning: serving on {host} without a token (--insecure); set {settings.search_token_env} "
              "(or CTX_SEARCH_KEYS_FILE) to require one", file=sys.stderr)
    limiter = RateLimiter(settings.serve_rate_limit_per_s, settings.serve_rate_burst)
    service = service_from_settings(settings, long_lived=True)
    default = service.default_version()
    rate = f"{limiter.per_s:g}/s, bursts of {limiter.burst}" if limiter.enabled else "off"
    print(f"serving {service.store.location} on http://{host}:{port} "
          f"({service.alias} -> {service.production() or 'not set'}; default {default or 'none'}; "
          f"keys {', '.join(sorted(keys.keys())) if keys.enabled else 'off'}; rate limit {rate})",
          file=sys.stderr, flush=True)
    if args.access_log:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        ACCESS_LOG.addHandler(handler)
        ACCESS_LOG.setLevel(logging.INFO)
        ACCESS_LOG.propagate = False  # the CLI's root handler shows WARNING and up only
    app = create_app(service, max_request_bytes=settings.serve_max_request_bytes, keys=keys, rate_limiter=limiter)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    return EXIT_OK
