"""Secrets: the one rule for what epforge treats as secret, and the ways it keeps them out of results, facts,
logs and messages. Every module and module_util that hides a secret goes through here.

The rule: a setting, env entry or command-line flag is secret when its name ends with one of SECRET_WORDS
as a whole word (after '_' or '-', any case): api_key, admin_api_key, ssl_keyfile_password, hf_token,
HF_TOKEN, OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, --api-key. Names that only contain one are not: SGLang's
server_info has tokenizer_path, max_total_tokens, token_capacity, bucket_time_to_first_token
(tests/fixtures/sglang_h200/tp1-graph-get_server_info.json). Known secret values (the module's api_key) are
also scrubbed from any text, and so are the credentials of a URL (`http://user:TOKEN@mirror`, the user and
password part; `https://TOKEN@host`, a bare user on http(s), which is how tokens ride in URLs): url_secrets
gives them for a module's no_log_values, redact_url writes a URL without them. (The server launcher script,
which runs on the host without module_utils, hides the one key value it is given:
roles/sglang_server/files/epforge_sglang_launch.py.)

Unit-tested in tests/unit/test_secrets.py.
"""

from __future__ import annotations

import copy
import re
from urllib.parse import unquote

REDACTED = "<redacted>"
SECRET_WORDS = (
    "api_key",
    "access_key",
    "secret_key",
    "private_key",
    "token",
    "secret",
    "password",
    "passwd",
    "credential",
    "credentials",
)
_SECRET_NAME_RE = re.compile(
    r"(?:^|[_-])(?:" + "|".join(w.replace("_", "[_-]?") for w in SECRET_WORDS) + r")$", re.IGNORECASE
)


# scheme://USERINFO@ : credentials when USERINFO has a password (any scheme) or stands alone on http(s)/ftp
# (a token as the user name); `ssh://git@host` and `git@host:repo` name an account, not a secret.
_URL_USERINFO_RE = re.compile(r"\b(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<userinfo>[^\s/?#@]+)@")


def _userinfo_is_secret(scheme: str, userinfo: str) -> bool:
    return ":" in userinfo or scheme.lower() in ("http", "https", "ftp", "ftps")


def url_secrets(url: str) -> list[str]:
    """The credentials in a URL's user part (as written and percent-decoded: the password, or a bare user
    name on http(s)), for a module's no_log_values; [] when it has none."""
    found: list[str] = []
    for match in _URL_USERINFO_RE.finditer(str(url or "")):
        userinfo = match.group("userinfo")
        if not _userinfo_is_secret(match.group("scheme"), userinfo):
            continue
        user, _unused, password = userinfo.partition(":")
        for part in (password, userinfo) if password else (user,):
            found += [part, unquote(part)]
    return [s for s in dict.fromkeys(found) if s]


def redact_url(text: str) -> str:
    """Text with every URL's credentials replaced: `http://user:TOKEN@mirror` -> `http://<redacted>@mirror`."""

    def hide(match: re.Match) -> str:
        if not _userinfo_is_secret(match.group("scheme"), match.group("userinfo")):
            return match.group(0)
        return f"{match.group('scheme')}://{REDACTED}@"

    return _URL_USERINFO_RE.sub(hide, str(text))


def is_secret_name(name) -> bool:
    """Whether a setting, env variable or flag ('--api-key') of this name holds a secret."""
    return bool(_SECRET_NAME_RE.search(str(name).lstrip("-")))


def _hidden(value) -> bool:
    """A value a secret can be: non-empty text or a number written as one (not a flag, list or float: so the
    rule's near misses in SGLang's server_info, e.g. bucket_time_to_first_token, a list, stay visible)."""
    if isinstance(value, bool):
        return False
    return (isinstance(value, str) and value != "") or isinstance(value, int)


def redact(value: object, secrets: list[str] | tuple[str, ...] = ()) -> object:
    """A copy of value with secrets replaced by REDACTED: values of secret-named keys (at any depth, env
    entries included), the argument of a secret-named flag in argv lists ('--api-key X', '--api-key=X'), and
    any occurrence of the given secret strings in text, and the credentials of any URL in text."""
    live = [s for s in secrets if s]

    def scrub_text(text: str) -> str:
        for secret in live:
            text = text.replace(secret, REDACTED)
        return redact_url(text)

    def walk_list(items) -> list:
        out: list = []
        hide_next = False
        for element in items:
            if hide_next:
                out.append(REDACTED)
                hide_next = False
                continue
            if isinstance(element, str) and element.startswith("--"):
                flag, sep, _unused = element.partition("=")
                if is_secret_name(flag):
                    if sep:
                        out.append(f"{flag}={REDACTED}")
                    else:
                        out.append(element)
                        hide_next = True
                    continue
            out.append(walk(element))
        return out

    def walk(item: object) -> object:
        if isinstance(item, dict):
            return {k: (REDACTED if is_secret_name(k) and _hidden(v) else walk(v)) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return walk_list(item)
        if isinstance(item, str):
            return scrub_text(item)
        return item

    return walk(value)


def without_secrets(settings: dict | None) -> dict:
    """Server settings with secret-named keys (and secret-named env entries) left out: for results that a
    caller might apply as settings, where a placeholder value would be worse than no value."""
    clean = {k: copy.deepcopy(v) for k, v in (settings or {}).items() if not is_secret_name(k)}
    if isinstance(clean.get("env"), dict):
        clean["env"] = {k: v for k, v in clean["env"].items() if not is_secret_name(k)}
    return clean


def secret_values(settings: dict | None) -> list[str]:
    """The secret values in server settings (top level and env), for a module's no_log_values, so Ansible
    masks them in its invocation record and any message as well."""
    settings = settings or {}
    values = [v for k, v in settings.items() if is_secret_name(k)]
    env = settings.get("env")
    if isinstance(env, dict):
        values += [v for k, v in env.items() if is_secret_name(k)]
    return [str(v) for v in values if _hidden(v)]
