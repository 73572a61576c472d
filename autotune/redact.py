"""Credentials are never shown: storage URLs masked in every form SQLAlchemy and libpq accept, and every
password autotune has seen replaced in any text it prints or writes (console, errors, files).

Forms masked:
- `scheme://user:PASSWORD@host/db`, the password being everything from the first ':' after the user to the
  last '@' on the line: it may hold '@', ':', '/', '#', '?', quotes and spaces (SQLAlchemy accepts them
  unencoded). `scheme:/...` (a URL a path turned into) alike;
- query parameters `password=`, `passwd=`, `pwd=`, `sslpassword=`, also when the key is percent-encoded;
- libpq key=value strings (`host=h password=secret`, quoted `password='a b'`), also percent-encoded inside
  another parameter (`?dsn=host%3Dh%20password%3Dsecret`);
- every password seen once (in any of these forms, as written, decoded and encoded), wherever it appears.
"""

from __future__ import annotations

import re
import threading
from urllib.parse import quote, unquote

MASK = "***"
_KEYS = {"password", "passwd", "pwd", "sslpassword"}
_URL = re.compile(r"\b([A-Za-z][\w+.\-]*:/{1,2})([^:/@\s'\"]*):([^\n]*)@")
_QUERY = re.compile(r"([?&;])([^=&;#\s]+)=([^&;#\s'\"]*)")
_CONNINFO = re.compile(r"(?i)(?<![?&;\w%])((?:password|passwd|pwd|sslpassword)\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s'\"&;]+)")
_seen: set[str] = set()
_lock = threading.Lock()


def _variants(secret: str) -> set[str]:
    return {s for s in (secret, unquote(secret), quote(secret, safe=""), quote(secret)) if len(s) >= 2}


def secrets_in(text: str) -> list[str]:
    """The passwords a text (a URL, a conninfo string, either percent-encoded) carries, in every spelling."""
    found: set[str] = set()
    for form in {text, unquote(text), unquote(unquote(text))}:
        found |= {m.group(3) for m in _URL.finditer(form) if m.group(3)}
        found |= {m.group(3) for m in _QUERY.finditer(form) if unquote(m.group(2)).lower() in _KEYS and m.group(3)}
        found |= {m.group(2).strip("'") for m in _CONNINFO.finditer(form)}
    return sorted({v for s in found for v in _variants(s)}, key=len, reverse=True)


def remember(text: str | None) -> None:
    """Note the passwords in a storage URL, so that they are masked wherever they appear later."""
    if text:
        with _lock:
            _seen.update(secrets_in(text))


def mask(text: str) -> str:
    """The text with every credential masked: URL passwords, password parameters, and remembered secrets."""
    if not text:
        return text
    own = secrets_in(text)  # found before the forms below are rewritten (e.g. a percent-encoded conninfo)
    text = _URL.sub(lambda m: f"{m.group(1)}{m.group(2)}:{MASK}@", text)
    text = _QUERY.sub(
        lambda m: f"{m.group(1)}{m.group(2)}={MASK}" if unquote(m.group(2)).lower() in _KEYS else m.group(0), text
    )
    text = _CONNINFO.sub(lambda m: m.group(1) + MASK, text)
    with _lock:
        known = sorted(_seen | set(own), key=len, reverse=True)
    for secret in known:
        text = text.replace(secret, MASK)
    return text


class MaskingWriter:
    """A text stream that masks credentials in everything written through it (the CLI's consoles)."""

    def __init__(self, stream: object) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(mask(text))  # type: ignore[attr-defined]
        return len(text)

    def flush(self) -> None:
        self._stream.flush()  # type: ignore[attr-defined]

    def isatty(self) -> bool:
        return bool(getattr(self._stream, "isatty", lambda: False)())

    def fileno(self) -> int:
        return self._stream.fileno()  # type: ignore[attr-defined]

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", "utf-8")
