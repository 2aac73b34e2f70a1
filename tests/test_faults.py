"""Faults (issue 3): timeouts, cancellation, progress, crashes, start failures, misbehaving
upstreams, memory bounds, upstream->client requests, concurrency, bad settings and CLI errors.

Each test asserts the behaviour itself, so it fails if the behaviour is removed.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import abstract
from conftest import ABSTRACT, base_env, proc_status, text_of, wait_for
from fake_upstream import TOOLS, big_text

HAS_PROC = Path("/proc/self/status").exists()


# -- timeouts


@pytest.mark.parametrize("source", ["settings", "env"])
def test_timeout_names_server_tool_and_limit_cancels_upstream_and_keeps_session(world, source):
    world.fake("slowpoke")
    extra = {}
    if source == "settings":
        world.settings = {"servers": {"slowpoke": {"timeout_seconds": 0.5}}}
    else:
        extra["ABSTRACT_TIMEOUT"] = "0.5"
    proxy = world.start(env=world.env(**extra))
    t0 = time.monotonic()
    res = proxy.upstream("slowpoke", "record_cancel")
    assert 0.4 < time.monotonic() - t0 < 5
    assert res["isError"] is True
    for frag in ("'slowpoke'", "'record_cancel'", "0.5 s"):
        assert frag in text_of(res)
    [started] = world.events("slowpoke", "started")
    cancelled = wait_for(lambda: world.events("slowpoke", "cancelled"), what="notifications/cancelled upstream")
    assert [e["id"] for e in cancelled] == [started["id"]]
    assert text_of(proxy.upstream("slowpoke", "echo", {"text": "still here"})) == "still here"
    assert len(world.pids("slowpoke")) == 1  # the same process served both calls


def test_server_timeout_setting_wins_over_env(world):
    world.fake("patient")
    world.settings = {"servers": {"patient": {"timeout_seconds": 30}}}
    proxy = world.start(env=world.env(ABSTRACT_TIMEOUT="0.2"))
    assert text_of(proxy.upstream("patient", "slow", {"seconds": 0.6, "text": "made it"})) == "made it"


# -- cancellation and progress from the client


def test_client_cancel_is_forwarded_with_the_upstream_id_and_never_answered(world):
    world.fake("up")
    proxy = world.start()
    proxy.send_request("tools/call", {"name": "call_tool", "arguments": {"server": "up", "tool_name": "record_cancel"}},
                       rid="to-cancel")
    [started] = wait_for(lambda: world.events("up", "started"), what="the call to reach the upstream")
    proxy.notify("notifications/cancelled", {"requestId": "to-cancel", "reason": "user pressed stop"})
    [cancelled] = wait_for(lambda: world.events("up", "cancelled"), what="the cancel to reach the upstream")
    assert cancelled["id"] == started["id"] and cancelled["id"] != "to-cancel"
    assert proxy.request("ping", rid="after")["result"] == {}
    assert text_of(proxy.upstream("up", "echo", {"text": "next"})) == "next"
    assert not proxy.has_response("to-cancel")


@pytest.mark.parametrize("token", ["tok-A", 0])
def test_progress_is_relayed_with_the_client_token(world, token):
    world.fake("up")
    proxy = world.start()
    res = proxy.call_tool("call_tool", {"server": "up", "tool_name": "progress", "tool_args": {"steps": 3}},
                          meta={"progressToken": token})
    assert text_of(res) == "done 3"
    got = [n["params"] for n in proxy.notifications if n["method"] == "notifications/progress"]
    assert got == [{"progressToken": token, "progress": i, "total": 3, "message": f"step {i}"} for i in (1, 2, 3)]


def test_no_progress_is_relayed_without_a_client_token(world):
    world.fake("up")
    proxy = world.start()
    assert text_of(proxy.upstream("up", "progress", {"steps": 2})) == "done 2"
    assert [n for n in proxy.notifications if n["method"] == "notifications/progress"] == []


# -- crashes


def test_crash_in_flight_fails_at_once_with_exit_code_and_stderr_and_is_not_replayed(world, tmp_path):
    world.fake("fragile", "--crash-once-file", str(tmp_path / "crashed.flag"))
    world.settings = {"timeout_seconds": 30}
    proxy = world.start()
    t0 = time.monotonic()
    res = proxy.upstream("fragile", "echo", {"text": "first"})
    assert time.monotonic() - t0 < 5
    assert res["isError"] is True
    for frag in ("'fragile'", "exited with code 3", "fake: crashing on purpose with code 3", "not retried"):
        assert frag in text_of(res), text_of(res)
    assert text_of(proxy.upstream("fragile", "echo", {"text": "second"})) == "second"
    calls = [e["arguments"]["text"] for e in world.events("fragile", "call")]
    assert calls == ["first", "second"]  # the crashed call was never sent again
    first, second = world.pids("fragile")
    assert first != second


def test_a_server_silent_on_the_probe_is_waited_for_once_and_remembered(world, tmp_path):
    """stdio: server/discover goes first (2026-07-28 spec, stdio backward compatibility). A
    handshake-era server that never answers it is taken for one after the probe's wait, and the
    era is remembered: the restart after a crash goes straight to initialize."""
    world.fake("quiet", "--silent-probe", "--crash-once-file", str(tmp_path / "crashed.flag"))
    proxy = world.start()
    t0 = time.monotonic()
    assert proxy.upstream("quiet", "echo", {"text": "first"})["isError"] is True  # (crashed once)
    assert time.monotonic() - t0 >= abstract._PROBE_S  # the probe was waited for
    assert text_of(proxy.upstream("quiet", "echo", {"text": "second"})) == "second"
    assert len(world.events("quiet", "initialize")) == 2
    assert len(world.events("quiet", "discover")) == 1  # the second run was not probed


def test_a_server_that_exits_on_the_probe_is_started_again_and_never_probed_again(world):
    """stdio: a handshake-era server that exits on a method it does not know dies on the first
    server/discover. Abstract starts it again at once, straight to initialize, so the call works,
    says why in its log, and remembers the era: a restart after a crash is not probed."""
    world.fake("naive", "--exit-on-probe")
    proxy = world.start()
    assert text_of(proxy.upstream("naive", "echo", {"text": "first"})) == "first"
    assert len(world.pids("naive")) == 2  # the probe killed the first run; one more was started
    proxy.wait_stderr("exited on the server/discover probe")
    assert "exited with code 1" in proxy.stderr and "fake: unknown method server/discover" in proxy.stderr
    assert "exited with code 7" in text_of(proxy.upstream("naive", "crash", {"code": 7}))
    assert text_of(proxy.upstream("naive", "echo", {"text": "second"})) == "second"
    assert len(world.pids("naive")) == 3
    assert len(world.events("naive", "discover")) == 1
    assert len(world.events("naive", "initialize")) == 2


@pytest.mark.parametrize("refusal", ["-32022", "-32601"])
def test_a_2026_server_that_answers_the_probe_too_late_is_probed_again(world, refusal):
    """stdio: a dual-era server slow to start answers the probe after Abstract stopped waiting,
    and, serving 2026-07-28 from then on, refuses initialize with -32022 (or, a modern-only one,
    with any other code): Abstract probes once more (at once, not after a crash) and speaks
    2026-07-28, as the SDK's own client does."""
    world.fake("slow", "--modern-only", "--slow-probe", "4", "--init-refusal", refusal)
    world.settings = {"servers": {"slow": {"startup_timeout_seconds": 2}}}
    proxy = world.start()
    assert text_of(proxy.upstream("slow", "echo", {"text": "hi"})) == "hi"
    assert len(world.events("slow", "discover")) == 2
    assert len(world.events("slow", "initialize")) == 1
    assert len(world.pids("slow")) == 1  # one run: no restart was needed


def test_repeated_quick_crashes_say_when_the_server_is_tried_again(world):
    world.fake("flaky")
    proxy = world.start()
    for code in (5, 6):
        assert f"exited with code {code}" in text_of(proxy.upstream("flaky", "crash", {"code": code}))
    res = proxy.upstream("flaky", "echo", {"text": "x"})
    assert res["isError"] is True
    text = text_of(res)
    assert "failed 2 times" in text and "not restarted for another" in text
    assert "Last failure: server 'flaky' exited with code 6" in text  # the cause is kept, not just the count
    assert len(world.pids("flaky")) == 2  # the third call did not start it again


# -- start failures: tools and --check say the same


def _broken_world(world) -> None:
    world.fake("good")
    world.servers["missing"] = {"command": "no-such-command-for-abstract-tests"}
    world.fake("dies", "--exit-at-start", "4")
    world.fake("mute", "--no-handshake")
    world.settings = {"startup_timeout_seconds": 1}


_DIAGNOSIS = {
    "missing": ["command not found", "no-such-command-for-abstract-tests"],
    "dies": ["exited with code 4", "fake: exiting at start with code 4"],
    "mute": ["initialize", "1 s"],
}


def test_start_failures_are_clear_and_leave_other_servers_working(world):
    _broken_world(world)
    proxy = world.start()
    t0 = time.monotonic()
    out = proxy.listing()
    assert time.monotonic() - t0 < 5  # servers start in parallel
    assert {e["server"] for e in out["tools"]} == {"good"}
    failed = {f["server"]: f["error"] for f in out["failed_servers"]}
    assert set(failed) == set(_DIAGNOSIS)
    for name, fragments in _DIAGNOSIS.items():
        for frag in fragments:
            assert frag in failed[name], (name, failed[name])
    assert text_of(proxy.upstream("good", "echo", {"text": "fine"})) == "fine"


def _check_report(out: str) -> dict:
    """--check's per-server blocks: name -> its text (continuation lines included)."""
    blocks: dict = {}
    name = None
    for line in out.splitlines():
        if line.startswith("context:"):  # the per-server blocks end here
            break
        if line.startswith("  ") and line[2] != " ":
            name = line.split()[0]
            blocks[name] = line
        elif name is not None:
            blocks[name] += "\n" + line
    return blocks


def test_check_shows_the_same_diagnosis_and_exits_1(world):
    _broken_world(world)
    proc = world.check()
    report = _check_report(proc.stdout.decode())
    assert proc.returncode == 1, report
    assert set(report) == {"good", *_DIAGNOSIS}
    assert "started" in report["good"] and f"{len(TOOLS)} tools" in report["good"]
    for name, fragments in _DIAGNOSIS.items():
        assert report[name].split()[1] == "FAILED:"
        for frag in fragments:
            assert frag in report[name], (name, report[name])
    assert report["dies"].endswith("\nfake: exiting at start with code 4")  # the stderr tail comes last


def test_check_exits_0_when_every_server_starts(world):
    world.fake("legacy")
    world.fake("modern", "--modern-only")
    proc = world.check()
    out = proc.stdout.decode()
    assert proc.returncode == 0, out
    assert "FAILED" not in out
    report = _check_report(out)
    assert set(report) == {"legacy", "modern"}
    assert "protocol 2025-11-25" in report["legacy"] and f"{len(TOOLS)} tools" in report["legacy"]
    assert "protocol 2026-07-28" in report["modern"]
    assert world.pids("legacy") and world.pids("modern")


# -- misbehaving upstreams


def test_garbage_stdout_lines_are_skipped_and_logged_with_the_server_name(world):
    world.fake("garbler", "--garbage")
    proxy = world.start()
    assert text_of(proxy.upstream("garbler", "echo", {"text": "clean"})) == "clean"
    proxy.wait_stderr("this is not json from the fake")
    assert any("garbler" in line and "this is not json from the fake" in line for line in proxy.stderr_lines)


def test_response_with_unknown_id_is_dropped_and_logged(world):
    world.fake("confused", "--unknown-id")
    proxy = world.start()
    assert text_of(proxy.upstream("confused", "echo", {"text": "ok"})) == "ok"
    proxy.wait_stderr("424242")
    assert any("confused" in line and "unknown id 424242" in line for line in proxy.stderr_lines)


@pytest.mark.skipif(not HAS_PROC, reason="reads /proc/<pid>/status (Linux)")
def test_stderr_flood_neither_blocks_nor_grows_memory(world):
    world.fake("chatty", "--stderr-flood", "32")  # 16 MB in lines, then a 16 MB line without newline
    proxy = world.start()
    before = proc_status(proxy.pid, "VmHWM")
    assert text_of(proxy.upstream("chatty", "echo", {"text": "heard"}, timeout=20)) == "heard"
    # read through, in bounded pieces: more lines than the log rate lets through, so a count of
    # those dropped is written (at a pause in its stderr: docs/reference.md#stderr-flood)
    proxy.wait_stderr("log lines from 'chatty'")
    peak, now = proc_status(proxy.pid, "VmHWM"), proc_status(proxy.pid, "VmRSS")
    assert peak - before < 8 * 1024, f"peak RSS grew from {before} to {peak} kB"  # half the long line
    assert now <= peak


@pytest.mark.skipif(not HAS_PROC, reason="reads /proc/<pid>/status (Linux)")
def test_30_mb_single_line_result_arrives_intact_with_bounded_peak_memory(world):
    world.fake("bulky")
    world.settings = {"output_cache": {"enabled": False}}  # the raw relay, not the cache, is under test
    proxy = world.start()
    res = proxy.upstream("bulky", "big", {"mb": 30}, timeout=60)
    assert res == {"content": [{"type": "text", "text": big_text(30)}]}
    peak = proc_status(proxy.pid, "VmHWM")
    assert peak < (6 * 30 + 60) * 1024, f"peak RSS {peak} kB for a 30 MB message"


# -- requests from the upstream to Abstract


def _ask(proxy, method: str) -> dict:
    return json.loads(text_of(proxy.upstream("asker", "ask_client", {"method": method})))


def test_upstream_ping_and_roots_list_are_answered(world, tmp_path):
    world.fake("asker")
    world.settings = {"roots": "allowed_directories"}
    dirs = [tmp_path / "first dir", tmp_path / "second"]
    proxy = world.start(*map(str, dirs))
    assert _ask(proxy, "ping") == {"result": {}}
    roots = _ask(proxy, "roots/list")["result"]["roots"]
    assert [r["uri"] for r in roots] == [d.resolve().as_uri() for d in dirs]
    assert roots[0]["uri"].startswith("file:///") and "%20" in roots[0]["uri"]
    assert [r["name"] for r in roots] == ["first dir", "second"]


def test_roots_are_the_clients_so_none_when_the_client_declares_none(world):
    world.fake("asker")
    proxy = world.start()  # the test client's initialize declares no capabilities
    assert _ask(proxy, "roots/list")["error"]["code"] == -32601
    assert "roots" not in world.events("asker", "initialize")[0]["capabilities"]


def test_roots_are_not_shared_when_settings_say_so(world):
    world.fake("asker")
    world.settings = {"share_roots": False}
    proxy = world.start()
    assert _ask(proxy, "roots/list")["error"]["code"] == -32601
    assert _ask(proxy, "ping") == {"result": {}}


@pytest.mark.parametrize("method", ["sampling/createMessage", "elicitation/create", "some/unknown"])
def test_other_upstream_requests_are_method_not_found(world, method):
    world.fake("asker")
    proxy = world.start()
    assert _ask(proxy, method)["error"]["code"] == -32601


# -- concurrency


def test_100_concurrent_slow_calls_finish_together_with_matching_answers(world):
    world.fake("sleepy")
    proxy = world.start()
    proxy.listing()  # start the upstream first; the timing below is about the calls
    t0 = time.monotonic()
    ids = {proxy.send_request("tools/call", {"name": "call_tool", "arguments": {
        "server": "sleepy", "tool_name": "slow", "tool_args": {"seconds": 1, "text": f"answer {i}"}}}): i
        for i in range(100)}
    for rid, i in ids.items():
        assert text_of(proxy.wait_response(rid, timeout=10)["result"]) == f"answer {i}"
    assert time.monotonic() - t0 < 5
    assert len(world.pids("sleepy")) == 1


# -- settings file and command line


def _main(argv, env, stdin: bytes = b"") -> tuple:
    """abstract.main in-process; returns (exit code, stdout text, stderr text)."""
    out, err = io.BytesIO(), io.StringIO()
    code = abstract.main(argv, stdin=io.BytesIO(stdin), stdout=out, stderr=err, environ=env)
    return code, out.getvalue().decode(), err.getvalue()


def _settings_env(tmp_path: Path, text: str, **extra: str) -> dict:
    path = tmp_path / "settings.json"
    path.write_text(text)
    return base_env(ABSTRACT_CONFIG=str(path), **extra)


@pytest.mark.parametrize("text, named", [
    ('{"timeout_seconds": 5,\n "bogus": }', "line 2 column 11"),
    ('{"bogus": 1}', "'bogus'"),
    ('{"timeout_seconds": "soon"}', "'timeout_seconds'"),
    ('{"timeout_seconds": true}', "'timeout_seconds'"),
    ('{"organize": "sideways"}', "'organize'"),
    ('{"servers": {"a": {"timeout_seconds": -1}}}', "'servers.a.timeout_seconds'"),
    ('{"servers": {"a": {"colour": "red"}}}', "'servers.a.colour'"),
    ('{"servers": []}', "'servers'"),
    ('[1, 2]', "object"),
    ('[]', "object"),
    ('0', "object"),
])
def test_bad_settings_file_exits_2_with_one_line_naming_the_key(tmp_path, text, named):
    code, out, err = _main([str(tmp_path / "store")], _settings_env(tmp_path, text))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("abstract: ")
    assert named in err and "settings" in err
    assert not (tmp_path / "store").exists()  # nothing happened before the check


def test_bad_abstract_timeout_env_exits_2(tmp_path):
    code, _, err = _main([str(tmp_path)], base_env(ABSTRACT_TIMEOUT="soon"))
    assert code == 2 and "ABSTRACT_TIMEOUT" in err and "'soon'" in err


def test_bad_log_level_env_exits_2(tmp_path):
    code, _, err = _main([str(tmp_path)], base_env(ABSTRACT_LOG_LEVEL="loud"))
    assert code == 2 and err.count("\n") == 1
    assert "ABSTRACT_LOG_LEVEL" in err and "LOUD" in err


def test_bad_settings_as_a_real_process_exits_2_without_traceback(tmp_path):
    env = _settings_env(tmp_path, '{"timeout_seconds": 0}')
    proc = subprocess.run([sys.executable, str(ABSTRACT), str(tmp_path)], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=30, text=True)
    assert proc.returncode == 2
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "'timeout_seconds'" in proc.stderr


def test_dir_that_is_a_file_exits_2(tmp_path):
    afile = tmp_path / "plain.txt"
    afile.write_text("x")
    code, _, err = _main([str(afile)], base_env())
    assert code == 2 and str(afile) in err and "not a directory" in err


def test_missing_dir_is_created_and_said_on_stderr(tmp_path):
    target = tmp_path / "new" / "nested"
    config = tmp_path / "config.json"
    config.write_text('{"mcpServers": {}}')
    code, out, err = _main(["--check", str(target)], base_env(APP_CONFIG_PATH=str(config)))
    assert code == 0, out + err
    assert target.is_dir()
    assert f"created directory {target}" in err


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as info:
        abstract.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"abstract {abstract.__version__}\n"


def test_help_flag_names_the_environment_and_options(capsys):
    with pytest.raises(SystemExit) as info:
        abstract.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for frag in ("usage: abstract", "--check", "APP_CONFIG_PATH", "ABSTRACT_PROXY_SERVERS", "ABSTRACT_CONFIG"):
        assert frag in out
