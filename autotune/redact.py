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
  appears;
- a value after `Bearer ` or in an `Authorization:` header, anywhere;
- a command's secrets (task command): a value named like one (secret_name), of a well-known token
  shape, a header's `Basic X`; and each of them wherever it appears later (keep).
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
# an HTTP credential: what follows `Bearer ` anywhere, or an `Authorization:` header's value (after
# its scheme, if any), RFC 7235's token68 characters; `*` too, so that a masked one stays as it is.
# The scheme, once read, is never taken for the credential (atomic): `Bearer {env:NAME}` is kept.
_TOKEN68 = r"([A-Za-z0-9._~+/*-]+=*)"
_AUTHORIZATION = re.compile(
    r"(?i)(\bbearer\s+|\bauthorization\s*[:=]\s*(?>(?:[a-z][\w-]*\s+)?))" + _TOKEN68
)
# a value that is `Basic X` whole (a header's value given alone): "a Basic run" is no credential
_BASIC = re.compile(r"(?i)(\s*basic\s+)" + _TOKEN68 + r"(\s*)")
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
    text = _CONNINFO.sub(lambda m: m.group(1) + MASK, text)
    return _AUTHORIZATION.sub(lambda m: m.group(1) + MASK, text)


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


# A command's own secrets (task command): a variable or a flag whose name says it holds one
# (secret_name), a token of a well-known shape, a value after an HTTP authorization scheme, a URL
# or conninfo password. Names after the conventions of HF (HF_TOKEN, --hub_token), W&B
# (WANDB_API_KEY, WANDB_KEY), cloud SDKs (AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), databases
# (PGPASSWORD, MYSQL_PWD, REDIS_PASS), HTTP (HTTP_AUTHORIZATION, SESSION_COOKIE).
SECRET_STEMS = (
    *("password", "passwd", "passphrase", "passcode", "secret", "credential"),
    *("apikey", "apitoken", "authtoken", "accesstoken", "accesskey", "privatekey"),
)
SECRET_WORDS = {"pass", "pwd", "key", "token", "auth", "authorization", "cookie", "bearer"}
# what a name ending in one of these names: a setting of the secret, never the secret itself
DESCRIBING = {"mode", "type", "method", "scheme", "kind", "provider", "backend", "strategy"}
DESCRIBING |= {"enabled", "enable", "disabled", "disable", "required", "format", "style", "level"}
DESCRIBING |= {"version", "len", "length", "size", "bits", "count", "limit", "budget", "name"}
DESCRIBING |= {"file", "path", "dir", "url", "uri", "host", "port", "endpoint", "server"}
# --eos_token "</s>" holds no secret
SPECIAL_TOKENS = {"pad", "eos", "bos", "unk", "sep", "cls", "mask"}
SHELL_FOLDERS = {"PWD", "OLDPWD"}
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


def _words(name: str) -> list[str]:
    """A name's words, lower case: cut at non-alphanumerics and where its case turns (hubToken,
    OpenAIAPIKey: open, aiapi, key)."""
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]


def _secret_word(words: list[str], i: int) -> bool:
    """words[i] is a short secret word as itself (a token word after a special token's name is
    not: eos_token)."""
    after_special = i > 0 and words[i - 1] in SPECIAL_TOKENS
    return words[i] in SECRET_WORDS and not (words[i] == "token" and after_special)


def secret_name(name: str) -> bool:
    """A variable or flag name that says it holds a secret.

    The name is cut into words at '_', '-', '.' (any non-alphanumeric) and where its case turns
    (hubToken: hub, token; OpenAIAPIKey: open, aiapi, key). It names a secret when
    - a word contains a stem that no innocent word does (SECRET_STEMS), glued to others or not:
      PGPASSWORD, CLIENT_SECRET, --passphrase, NGROK_AUTHTOKEN, OPENAIAPIKEY;
    - a whole word, in any position, is a short secret word (SECRET_WORDS): REDIS_PASS,
      MYSQL_PWD, WANDB_KEY, HF_TOKEN, TOKEN_FOR_HUB, --auth, HTTP_AUTHORIZATION. Inside another
      word it is none: MONKEY, KEYBOARD, BYPASS, AUTHOR, TOKENS_PER_STEP, TOKENIZERS_PARALLELISM;
    unless (for a short word) the name ends in a word that says what kind of thing it names, not
    the value (DESCRIBING: --auth-mode oauth, --key-size 2048, --token-limit, SSL_KEY_FILE), or
    the token word follows a special token's name (--eos_token "</s>", pad_token_id). PWD and
    OLDPWD are the shell's working folders. A false alarm costs little (the job still gets the
    value; `check` asks for it from the environment), a miss shows a secret to whoever reads the
    study folder.
    """
    if name.upper() in SHELL_FOLDERS:
        return False
    words = _words(name)
    if any(stem in word for word in words for stem in SECRET_STEMS):
        return True
    if words and words[-1] in DESCRIBING:  # --auth-mode, --key-size: what kind, not the value
        return False
    return any(_secret_word(words, i) for i in range(len(words)))


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
    if basic := _BASIC.fullmatch(value):
        return basic.group(1) + MASK + basic.group(3)
    if ENV_REFERENCE.search(value):  # postgresql://u:{env:PW}@h: the reference is what is kept
        return TOKEN_SHAPE.sub(MASK, _AUTHORIZATION.sub(lambda m: m.group(1) + MASK, value))
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


def removed(before: str, after: str) -> list[str]:
    """What masking or filling took out of a value: each part a mask or an `{env:NAME}` stands for
    (`Bearer X`: X, `--password={env:PW}`: the password), else the value whole."""
    literal = re.split(r"\*\*\*|\{env:[A-Za-z_][A-Za-z0-9_]*\}", after)
    found = re.fullmatch("(.+?)".join(re.escape(part) for part in literal), before, re.S)
    return [part for part in found.groups() if part != MASK] if found else [before]


def keep_command(argv: list[str], env: dict[str, str]) -> None:
    """Note the values masking takes out of a command (keep), whole and each part masked in it
    (the token of `Bearer X`): any later text showing one, the resolved config of `validate` too,
    is masked."""
    pairs = [*zip(argv, mask_argv(argv)), *zip(env.values(), mask_env(env).values())]
    changed = [(before, after) for before, after in pairs if after != before]
    keep([part for before, after in changed for part in (before, *removed(before, after))])


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
