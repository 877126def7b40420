"""The search service's API keys: named tokens from `CTX_SEARCH_KEYS_FILE` (a YAML mapping `name: token`,
read again when it changes, no restart) beside the single token of `CTX_SEARCH_TOKEN_ENV` (named
`default`). With neither, every request is admitted."""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from ctx_search_client.client import clean_token, sendable_token
from pydantic import RootModel, ValidationError, field_validator

from contextual_assets.errors import ConfigurationError

DEFAULT_KEY_NAME = "default"
KEYS_FILE_SETTING = "CTX_SEARCH_KEYS_FILE"
log = logging.getLogger(__name__)


class KeysFile(RootModel[dict[str, str]]):
    """The keys file's content: names to tokens, each token printable ASCII and used by one name."""

    @field_validator("root")
    @classmethod
    def _tokens(cls, keys: dict[str, str]) -> dict[str, str]:
        cleaned = {str(name).strip(): token.strip() for name, token in keys.items()}
        for name, token in cleaned.items():
            if not name or not token:
                raise ValueError(f"key {name!r} has an empty name or token")
            if not sendable_token(token):
                raise ValueError(f"the token of key {name!r} is not printable ASCII")
        if len(set(cleaned.values())) != len(cleaned):
            raise ValueError("two keys share a token (each client needs its own)")
        return cleaned


def _parse(path: Path) -> dict[str, str]:
    """The keys in `path`; ConfigurationError, one line naming CTX_SEARCH_KEYS_FILE, when it is not valid."""
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        reason = " ".join(str(exc).split())
        raise ConfigurationError(f"{KEYS_FILE_SETTING}={path} cannot be read: {reason}") from None
    if loaded is None:  # an empty file (often a rewrite caught half way): not a valid set of keys
        raise ConfigurationError(f"{KEYS_FILE_SETTING}={path} is empty; write a YAML mapping `name: token` "
                                 "(`{}` for no keys)")
    try:
        return KeysFile.model_validate(loaded).root
    except ValidationError as exc:
        reason = "; ".join(e["msg"] for e in exc.errors())
        raise ConfigurationError(f"{KEYS_FILE_SETTING}={path} is not a YAML mapping `name: token`: "
                                 f"{' '.join(reason.split())}") from None


class KeyRing:
    """The keys in force: the file's (re-read when its mtime or size changes, checked at most every
    `check_every_s`) and the `default` token. A bad rewrite keeps the last good keys, with a warning."""

    def __init__(self, token: str | None = None, keys_file: str | Path | None = None, *,
                 check_every_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._token = clean_token(token)  # a Secret's trailing newline would lock every client out
        self._path = Path(keys_file) if keys_file else None
        self._check_every_s, self._clock = check_every_s, clock
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        self._signature: tuple[int, int] | None = None
        self._file_keys: dict[str, str] = {}
        if self._path is not None:  # at startup a bad file is an error: the operator is there to fix it
            self._signature = self._stat()
            self._file_keys = self._checked(_parse(self._path))
            self._checked_at = clock()

    @property
    def enabled(self) -> bool:
        """A key is needed: a keys file or a token is configured."""
        return self._path is not None or self._token is not None

    def _stat(self) -> tuple[int, int] | None:
        assert self._path is not None
        try:
            status = os.stat(self._path)
        except OSError:
            return None
        return status.st_mtime_ns, status.st_size

    def _checked(self, keys: dict[str, str]) -> dict[str, str]:
        if self._token is not None and DEFAULT_KEY_NAME in keys:
            raise ConfigurationError(f"{KEYS_FILE_SETTING}={self._path} names a key '{DEFAULT_KEY_NAME}', the name "
                                     "of the CTX_SEARCH_TOKEN_ENV token; rename one")
        return keys

    def _refresh(self) -> None:
        """Re-read the file if it changed since the last look (at most every `check_every_s`)."""
        if self._path is None:
            return
        now = self._clock()
        with self._lock:
            if now - self._checked_at < self._check_every_s:
                return
            self._checked_at = now
            signature = self._stat()
            if signature == self._signature:
                return
            self._signature = signature  # a bad rewrite is reported once, not every second
            try:
                self._file_keys = self._checked(_parse(self._path))
            except ConfigurationError as exc:
                log.warning("%s; keeping the %d keys read before", exc, len(self._file_keys))
                return
        log.info("%s=%s read again: %d keys", KEYS_FILE_SETTING, self._path, len(self._file_keys))

    def keys(self) -> dict[str, str]:
        """Name -> token of every key in force now."""
        self._refresh()
        with self._lock:
            keys = dict(self._file_keys)
        if self._token is not None:
            keys[DEFAULT_KEY_NAME] = self._token
        return keys

    def identify(self, authorization: str) -> str | None:
        """The name of the key an `Authorization: Bearer <token>` header carries, else None (each key is
        compared in constant time, all of them every time)."""
        scheme, _, value = authorization.partition(" ")
        given = value.strip().encode()
        found = None
        for name, token in self.keys().items():
            if hmac.compare_digest(given, token.encode()) and scheme.lower() == "bearer":
                found = name
        return found
