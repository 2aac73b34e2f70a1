"""One Abstract's use of a saved login, in a process of its own, held at gates the test opens:
the helper of test_oauth.py's shared-login tests. Run as

    python refresher.py REPO_ROOT SERVER_URL CLOCK_OFFSET_S

with the environment of an Abstract (XDG_CONFIG_HOME: where the logins are). It says `ready` and
waits for a line; then asks the login for its Authorization header as Abstract does before a
request (a token about to expire by the offset clock is refreshed) and sends `initialize` with
it. A refresh stops twice for a line from the test: before the token request
(`token-request`) and after its answer, before anything is saved (`token-answer`). Abstract's
log lines come out as `log: ...`; the end is `status <HTTP status>` or `error <text>`."""

from __future__ import annotations

import json
import logging
import os
import sys
import time

sys.path.insert(0, sys.argv[1])
import abstract  # noqa: E402


def say(line: str) -> None:
    print(line, flush=True)


def gate() -> None:
    if not sys.stdin.readline():
        sys.exit(3)  # the test is gone


original = abstract._OAuth._token


def token(self, entry, client, resource, form):
    if form.get("grant_type") != "refresh_token":
        return original(self, entry, client, resource, form)
    say("token-request")
    gate()
    try:
        return original(self, entry, client, resource, form)
    finally:
        say("token-answer")
        gate()


class Tell(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        say("log: " + record.getMessage())


abstract._OAuth._token = token
logging.getLogger("abstract").addHandler(Tell())
logging.getLogger("abstract").setLevel(logging.INFO)
url, offset = sys.argv[2], float(sys.argv[3])
env = dict(os.environ)
auth = abstract._auth_provider("remote", url, abstract._Settings.load(None, env), env)
auth._clock = lambda: time.time() + offset
auth.start_logins = False  # a needed login is an error here, not a browser
say("ready")
gate()
init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "refresher", "version": "0"}}}
try:
    with abstract._http_request("POST", url, {"Content-Type": "application/json",
                                             "Accept": "application/json, text/event-stream"},
                               json.dumps(init).encode(), auth=auth, environ=env) as resp:
        say(f"status {resp.status}")
except abstract._HttpError as e:
    say(f"error {e}")
