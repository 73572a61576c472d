"""Credentials are never shown: storage URLs masked in every form SQLAlchemy and libpq accept, and
every password autotune has seen replaced in any text it prints or writes (console, errors, files).

Forms masked:
- `scheme://user:PASSWORD@host/db`, the password being everything from the first ':' after the user
  to the last '@' on the line: it may hold '@', ':', '/', '#', '?', quotes and spaces (SQLAlchemy
  accepts them unencoded). `scheme:/...` (a URL a path turned into) alike;
- query parameters `password=`, `passwd=`, `pwd=`, `sslpassword=`, also when the key is
  percent-encoded;
- libpq key=value strings (`host=h password=secret`, quoted `password='a b'`), also percent-encoded
  inside another parameter (`?dsn=host%3Dh%20password%3Dsecret`);
- every password seen once (in any of these forms, as written, decoded and encoded), wherever it
  appears.
"""

from __future__ import annotations

import re
import threading
from typing import Any, TextIO
from urllib.parse import quote, unquote

MASK = "***"
_KEYS = {"password", "passwd", "pwd", "sslpassword"}
_URL = re.compile(r"\b([A-Za-z][\w+.\-]*:/{1,2})([^:/@\s'\"]*):([^\n]*)@")
_QUERY = re.compile(r"([?&;])([^=&;#\s]+)=([^&;#\s'\"]*)")
_CONNINFO = re.compile(
    r"(?i)(?<![?&;\w%])((?:password|passwd|pwd|sslpassword)\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s'\"&;]+)"
)
_seen: set[str] = set()
_lock = threading.Lock()


def _variants(secret: str) -> set[str]:
    return {
        s for s in (secret, unquote(secret), quote(secret, safe=""), quote(secret)) if len(s) >= 2
    }


def secrets_in(text: str) -> list[str]:
    """The passwords a text (a URL, a conninfo string, either percent-encoded) carries, in every
    spelling."""
    found: set[str] = set()
    for form in {text, unquote(text), unquote(unquote(text))}:
        found |= {m.group(3) for m in _URL.finditer(form) if m.group(3)}
        found |= {
            m.group(3)
            for m in _QUERY.finditer(form)
            if unquote(m.group(2)).lower() in _KEYS and m.group(3)
        }
        found |= {m.group(2).strip("'") for m in _CONNINFO.finditer(form)}
    return sorted({v for s in found for v in _variants(s)}, key=len, reverse=True)


def remember(text: str | None) -> None:
    """Note the passwords in a storage URL, so that they are masked wherever they appear later."""
    if text:
        with _lock:
            _seen.update(secrets_in(text))


def _forms(text: str) -> str:
    """The text with its URL passwords, password parameters and conninfo passwords masked."""
    text = _URL.sub(lambda m: f"{m.group(1)}{m.group(2)}:{MASK}@", text)
    text = _QUERY.sub(
        lambda m: (
            f"{m.group(1)}{m.group(2)}={MASK}"
            if unquote(m.group(2)).lower() in _KEYS
            else m.group(0)
        ),
        text,
    )
    return _CONNINFO.sub(lambda m: m.group(1) + MASK, text)


MIN_KEPT = 6  # a shorter secret is masked in the records, not in every text (it would garble them)


def keep(values: list[str]) -> None:
    """Note a command's secrets (masked in its records), so that any later text showing them is
    masked."""
    with _lock:
        _seen.update(v for v in values if len(v) >= MIN_KEPT)


def holds_known(text: str) -> bool:
    """The text shows a secret autotune has seen (a storage or tracking URL's password, a
    command's)."""
    with _lock:
        return any(secret in text for secret in _seen)


def mask(text: str) -> str:
    """The text with every credential masked: URL passwords, password parameters, and remembered
    secrets."""
    if not text:
        return text
    # found before the forms below are rewritten (e.g. a percent-encoded conninfo)
    own = secrets_in(text)
    text = _forms(text)
    with _lock:
        known = sorted(_seen | set(own), key=len, reverse=True)
    for secret in known:
        text = text.replace(secret, MASK)
    return text


class MaskingWriter:
    """A text stream that masks credentials in everything written through it (the CLI's
    consoles)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(mask(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:
        return self._stream.encoding


# A command's own secrets (task command): a variable or a flag whose name says it holds one (after
# the conventions of HF: HF_TOKEN, --hub_token; W&B: WANDB_API_KEY; cloud SDKs:
# AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; databases: DB_PASSWORD), a token of a well-known shape,
# a URL or conninfo password.
SECRET_WORDS = {"secret", "password", "passwd", "pwd", "credential", "credentials", "apikey"}
SECRET_PAIRS = {("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key")}
# --eos_token "</s>" holds no secret
SPECIAL_TOKENS = {"pad", "eos", "bos", "unk", "sep", "cls", "mask"}
NOT_SECRETS = {"", "true", "false", "yes", "no", "none", "null", "0", "1"}  # --use_auth_token true
# Shapes documented by their issuers: Hugging Face (hf_), OpenAI and Anthropic (sk-), GitHub (ghp_
# and kin), Slack (xox?-), AWS access key ids (AKIA).
TOKEN_SHAPE = re.compile(
    r"\b(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|AKIA[0-9A-Z]{16})\b"
)
# filled from the environment, never stored
ENV_REFERENCE = re.compile(r"\{env:([A-Za-z_][A-Za-z0-9_]*)\}")


def secret_name(name: str) -> bool:
    """A variable or flag name that says it holds a secret (hub_token, WANDB_API_KEY,
    DB_PASSWORD)."""
    if name.upper() in ("PWD", "OLDPWD"):  # the shell's working folders
        return False
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    if any(w in SECRET_WORDS for w in words) or any(
        p in SECRET_PAIRS for p in zip(words, words[1:])
    ):
        return True
    return (
        bool(words) and words[-1] == "token" and (len(words) < 2 or words[-2] not in SPECIAL_TOKENS)
    )


def _flag_name(arg: str) -> str | None:
    """The name of a `--flag` or `--flag=value` argument (None for a value)."""
    if not arg.startswith("-") or arg in ("-", "--") or arg[1:2].isdigit():
        return None
    return arg.lstrip("-").split("=", 1)[0]


def _whole(value: str) -> bool:
    """A value named as a secret is masked whole, unless it is a switch or an {env:NAME}
    reference."""
    return value.lower() not in NOT_SECRETS and not ENV_REFERENCE.fullmatch(value)


def _shaped(value: str) -> str:
    """A value with the secrets its shape shows masked: URL and conninfo passwords, well-known
    tokens; an {env:NAME} reference is kept."""
    if ENV_REFERENCE.search(value):  # postgresql://u:{env:PW}@h: the reference is what is kept
        return TOKEN_SHAPE.sub(MASK, value)
    return TOKEN_SHAPE.sub(MASK, _forms(value))


def mask_argv(argv: list[str]) -> list[str]:
    """An argument list with its secrets masked: the value of a flag named like a secret
    (`--hub_token X`, `--api-key=X`), and in every argument its URL passwords and well-known
    tokens."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        name = _flag_name(arg)
        before = _flag_name(argv[i - 1]) if i else None
        if (
            name is None
            and before is not None
            and "=" not in argv[i - 1]
            and secret_name(before)
            and _whole(arg)
        ):
            out.append(MASK)
        elif name is not None and "=" in arg and secret_name(name) and _whole(arg.split("=", 1)[1]):
            out.append(arg.split("=", 1)[0] + "=" + MASK)
        else:
            out.append(_shaped(arg))
    return out


def mask_env(env: dict[str, str]) -> dict[str, str]:
    """Environment additions with their secrets masked: a variable named like a secret whole, and in
    every value its URL passwords and well-known tokens."""
    return {k: MASK if secret_name(k) and _whole(v) else _shaped(v) for k, v in env.items()}


def keep_command(argv: list[str], env: dict[str, str]) -> None:
    """Note the values masking takes out of a command, whole (keep): any later text showing one,
    the resolved config of `validate` too, is masked."""
    pairs = [*zip(argv, mask_argv(argv)), *zip(env.values(), mask_env(env).values())]
    keep([before for before, after in pairs if after != before])


def mask_command(command: dict[str, Any]) -> dict[str, Any]:
    """A command section (config.CommandConfig as JSON) with the secrets of its argv and env masked:
    what study.db and best.yaml keep. `{env:NAME}` references are kept: they hold no secret."""
    argv = [str(a) for a in command.get("argv") or []]
    env = {str(k): str(v) for k, v in (command.get("env") or {}).items()}
    return {**command, "argv": mask_argv(argv), "env": mask_env(env)}


def mask_doc(doc: object) -> Any:
    """A JSON-like document with mask() applied to every string in it (a record's reason quoting a
    job's output that showed its token)."""
    if isinstance(doc, str):
        return mask(doc)
    if isinstance(doc, dict):
        return {k: mask_doc(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [mask_doc(v) for v in doc]
    return doc
