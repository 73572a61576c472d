"""Credentials are never shown: storage URLs masked in every form SQLAlchemy and libpq accept, and every
password autotune has seen replaced in any text it prints or writes (console, errors, files).

Forms masked: `scheme://user:PASSWORD@host/db` (the password may hold '@' and ':': the host starts after the
last '@'), query parameters `?password=...` (also passwd, pwd, sslpassword), libpq key=value strings
(`host=h password=secret`, quoted `password='a b'`), and a URL SQLAlchemy cannot parse alike.
"""

from __future__ import annotations

import re
import threading
from urllib.parse import unquote

MASK = "***"
_KEYS = r"(?:password|passwd|pwd|sslpassword)"
_URL = re.compile(r"\b([A-Za-z][\w+.\-]*://)([^\s/?#'\"]*)")
_QUERY = re.compile(rf"(?i)([?&;]{_KEYS}=)([^&;#\s'\"]*)")
_CONNINFO = re.compile(rf"(?i)(?<![?&;\w])({_KEYS}\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s'\"&;]+)")
_seen: set[str] = set()
_lock = threading.Lock()


def _userinfo_password(authority: str) -> str | None:
    if "@" not in authority:
        return None
    userinfo = authority.rsplit("@", 1)[0]
    return userinfo.split(":", 1)[1] if ":" in userinfo else None


def secrets_in(text: str) -> list[str]:
    """The passwords a text (a URL or a conninfo string) carries, as written and URL-decoded."""
    found = [p for m in _URL.finditer(text) if (p := _userinfo_password(m.group(2)))]
    found += [m.group(2) for m in _QUERY.finditer(text)]
    found += [m.group(2).strip("'") for m in _CONNINFO.finditer(text)]
    return [s for p in found if p for s in {p, unquote(p)} if len(s) >= 2]


def remember(text: str | None) -> None:
    """Note the passwords in a storage URL, so that they are masked wherever they appear later."""
    if text:
        with _lock:
            _seen.update(secrets_in(text))


def mask(text: str) -> str:
    """The text with every credential masked: URL passwords, password parameters, and remembered secrets."""
    if not text:
        return text

    def url(m: re.Match[str]) -> str:
        authority = m.group(2)
        password = _userinfo_password(authority)
        if password is None:
            return m.group(0)
        user, host = authority.rsplit("@", 1)[0].split(":", 1)[0], authority.rsplit("@", 1)[1]
        return f"{m.group(1)}{user}:{MASK}@{host}"

    text = _CONNINFO.sub(lambda m: m.group(1) + MASK, _QUERY.sub(lambda m: m.group(1) + MASK, _URL.sub(url, text)))
    with _lock:
        known = sorted(_seen, key=len, reverse=True)
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
