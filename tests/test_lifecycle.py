"""Process lifecycle (issues 24 and 29): Ctrl-C and SIGHUP shut down as EOF and SIGTERM do, a
crashed upstream leaves no descriptor open, no descendant of an upstream outlives Abstract
(Linux: Abstract as their subreaper; Windows: a Job Object that kills on close)."""

from __future__ import annotations

import ctypes
import gc
import itertools
import json
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

import abstract
from conftest import FAKE, pid_alive, pipe_pair, text_of, wait_for

posix_only = pytest.mark.skipif(abstract._WINDOWS, reason="POSIX signals and process groups")
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the subreaper (prctl PR_SET_CHILD_SUBREAPER) and /proc")


# -- descriptors: a crashed upstream's pipes are closed

def _pipes() -> int:
    """Pipe descriptors this process holds (Linux /proc)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")
        except OSError:
            pass
    return n


@linux_only
def test_descriptors_stay_flat_across_100_crash_and_restart_cycles(tmp_path):
    """Each cycle starts the fake, calls its crash tool (the process exits at once) and fails;
    the next cycle starts it again. Garbage collection is off, as a long-lived server's may not
    run for a while: every pipe end must be closed when its run ends, not when collected."""
    spec = abstract._ServerSpec("up", sys.executable, [str(FAKE)])
    clock = itertools.count(0.0, 1000.0).__next__  # every crash "long after the start": no backoff
    up = abstract._Upstream(spec, abstract._Settings({}), abstract._ClientLink("none", []),
                           clock=clock)
    gc.collect()
    before = _pipes()
    gc.disable()
    try:
        for _ in range(100):
            with pytest.raises(abstract.UpstreamError, match="exited with code 3"):
                up.call_tool("crash", {"code": 3})
            wait_for(lambda: up._runs == [], what="the crashed run to be let go")
        # the last run's watcher closes its stdin right after the crash: bounded wait for it
        wait_for(lambda: _pipes() <= before, timeout=10,
                 what=f"pipes back to {before} (now {_pipes()})")
    finally:
        gc.enable()
        up.close()


@linux_only
def test_ten_upstreams_crashed_once_leave_no_pipe_open_in_abstract(world):
    """The issue's figure, through a real Abstract: 10 upstreams, each crashed once, left 12
    write ends open with no child left. Abstract's pipes come back to what it had before any
    upstream started."""
    names = [f"up{i}" for i in range(10)]
    for name in names:
        world.fake(name)
    p = world.start()

    def pipes() -> int:
        return sum(os.readlink(f"/proc/{p.pid}/fd/{fd}").startswith("pipe:")
                   for fd in os.listdir(f"/proc/{p.pid}/fd"))

    before = pipes()
    gc_note = "(Abstract's garbage collector may close some later; none may stay open)"
    for name in names:
        res = p.upstream(name, "crash", {"code": 3})
        assert res["isError"] and "exited with code 3" in text_of(res), res
    wait_for(lambda: pipes() <= before, timeout=10,
             what=f"Abstract's pipes back to {before} (now {pipes()}) {gc_note}")


# -- Ctrl-C (SIGINT) and SIGHUP: the shutdown EOF and SIGTERM run

def _temps(root: Path) -> list:
    return [str(p) for p in root.rglob(".abstract-*.tmp")]


def _assert_clean_exit(p, code: int, pids: list) -> None:
    assert p.wait_exit(15) == code, p.stderr[-3000:]
    assert "Fatal Python error" not in p.stderr and "Traceback" not in p.stderr, p.stderr[-3000:]
    wait_for(lambda: not [pid for pid in pids if pid_alive(pid)], timeout=10,
             what="every upstream to be gone")


@posix_only
@pytest.mark.parametrize("sig", ["SIGINT", "SIGHUP"])
def test_sigint_or_sighup_while_idle_shuts_down_like_sigterm(world, sig):
    """Each upstream is started; the stubborn one ignores stdin EOF and SIGTERM. Ctrl-C ended
    Abstract with 'Fatal Python error: _enter_buffered_busy' (status -6), the stubborn one still
    running; now it is the EOF/SIGTERM shutdown, with 128 + the signal's number."""
    world.fake("good")
    world.fake("stubborn", "--stubborn")
    p = world.start()
    for name in ("good", "stubborn"):
        assert text_of(p.upstream(name, "echo", {"text": "up"})) == "up"
    pids = world.pids("good") + world.pids("stubborn")
    os.kill(p.pid, getattr(signal, sig))
    _assert_clean_exit(p, 128 + getattr(signal, sig), pids)


@posix_only
def test_sigint_in_the_middle_of_a_large_store_answers_it_and_leaves_no_temporary_file(world):
    """A store of several megabytes of CSV is being written (its .abstract-*.tmp is there)
    when Ctrl-C comes: the call is answered (an error saying Abstract is shutting down, or
    its result if it was done), no temporary file is left, the upstream is gone, status 130."""
    world.fake("up")
    world.dir.mkdir()
    p = world.start()
    rid = p.send_request("tools/call", {"name": "call_tool_and_store", "arguments": {
        "server": "up", "tool_name": "rows", "tool_args": {"n": 600000}, "file_format": "csv"}})
    wait_for(lambda: _temps(world.dir), timeout=120, what="the store's temporary file")
    os.kill(p.pid, signal.SIGINT)
    answer = p.wait_response(rid, timeout=15)
    _assert_clean_exit(p, 130, world.pids("up"))
    assert _temps(world.dir) == []
    result = answer["result"]
    if result.get("isError"):
        assert "shutting down" in text_of(result), result
    else:  # it was finished: whole
        assert Path(result["structuredContent"]["path"]).stat().st_size > 0


def test_a_request_still_running_when_the_shutdown_gives_up_is_answered_once_with_an_error():
    """Over real pipes: a handler still running when the shutdown's budget is spent (a long
    conversion) left its request unanswered; Connection.abandon answers it with an error, and the
    handler's own answer, when it comes, is dropped (one answer per request)."""
    rin, win = pipe_pair()
    rout, wout = pipe_pair()
    started, release = threading.Event(), threading.Event()

    def slow(req) -> dict:
        started.set()
        release.wait(10)
        return {"late": True}

    pool = abstract._Pool(2, "test-abandon")
    conn = abstract.Connection(rin, wout, requests={"slow": slow}, pool=pool, queued=True)
    conn.start()
    try:
        win.write(b'{"jsonrpc":"2.0","id":7,"method":"slow"}\n')
        assert started.wait(10)
        assert conn.abandon("Abstract is shutting down: the request did not finish in time") == 1
        release.set()
        assert conn.wait_idle(10)
        assert conn.abandon("again") == 0
        assert conn.finish(10)
    finally:
        release.set()
        win.close()
        conn.closed.wait(10)  # the reader saw the EOF
        rin.close()
        pool.join(10)
        wout.close()
    lines = rout.read().splitlines()
    rout.close()
    error = {"code": -32000,
             "message": "Abstract is shutting down: the request did not finish in time"}
    assert [json.loads(line) for line in lines] == [{"jsonrpc": "2.0", "id": 7, "error": error}]


# -- Linux: no descendant of an upstream outlives Abstract (its subreaper)

def _daemon_pid(world, name: str) -> int:
    [event] = wait_for(lambda: world.events(name, "daemon"), what="the grandchild's pid")
    return event["pid"]


@linux_only
@pytest.mark.parametrize("end", ["EOF", "SIGINT"])
def test_a_double_forked_grandchild_that_ignores_sigterm_is_gone_after_abstract(world, end):
    """The upstream's child forks a grandchild and exits; the grandchild calls setsid (out of
    the upstream's process group, which shutdown signals) and ignores SIGTERM. It survived
    Abstract's exit; now it became Abstract's child (the subreaper) and is killed at the exit."""
    world.fake("up", "--daemon-child", "120")
    p = world.start()
    assert text_of(p.upstream("up", "echo", {"text": "up"})) == "up"
    pid = _daemon_pid(world, "up")
    assert os.getsid(pid) == pid  # a session of its own: no group signal reaches it
    if end == "EOF":
        p.close_stdin()
    else:
        os.kill(p.pid, signal.SIGINT)
    assert p.wait_exit(15) == (0 if end == "EOF" else 130), p.stderr[-3000:]
    try:
        wait_for(lambda: not pid_alive(pid), timeout=10, what="the grandchild to be gone")
    finally:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


@linux_only
def test_an_adopted_orphan_that_exits_is_reaped_and_the_upstreams_exit_status_is_kept(world):
    """As the subreaper Abstract must reap the orphans it adopts, or they stay zombies; but never
    an upstream's own process, whose exit status says how it ended. The orphan (in a session of
    its own) lives long enough for a pass to see it run with the upstreams' mark: a process
    Abstract started itself is never reaped by the reaper (test_review2)."""
    lives = 1.5 * abstract._REAP_EVERY_S
    world.fake("up", "--daemon-child", str(lives))
    p = world.start()
    assert text_of(p.upstream("up", "echo", {"text": "up"})) == "up"
    pid = _daemon_pid(world, "up")
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"),
             timeout=lives + 4 * abstract._REAP_EVERY_S + 10,
             what="the exited grandchild to be reaped")
    res = p.upstream("up", "crash", {"code": 3})
    assert res["isError"] and "exited with code 3" in text_of(res), res


# -- Windows: each upstream in a Job Object that kills on close

def test_the_job_limits_structure_has_the_win32_layout():
    """JOBOBJECT_EXTENDED_LIMIT_INFORMATION: 144 bytes on 64-bit Windows, 112 on 32-bit (winnt.h;
    ctypes lays out these fixed-width fields on Linux as MSVC does)."""
    limits = abstract._job_limits_type()
    wide = ctypes.sizeof(ctypes.c_void_p) == 8
    basic, io = dict(limits._fields_)["BasicLimitInformation"], dict(limits._fields_)["IoInfo"]
    assert ctypes.sizeof(limits) == (144 if wide else 112)
    assert ctypes.sizeof(basic) == (64 if wide else 48)
    assert basic.LimitFlags.offset == 16
    assert limits.IoInfo.offset == (64 if wide else 48)
    assert ctypes.sizeof(io) == 48
    assert limits.ProcessMemoryLimit.offset == (112 if wide else 96)


class _FakeKernel32:
    """Records the Job Object calls; `fail` names one that returns FALSE."""

    def __init__(self, fail: str = "") -> None:
        self.calls, self.fail = [], fail

    def _call(self, name: str, *args):
        if name == "SetInformationJobObject":  # what the kernel would read through the pointer
            info = args[2]._obj
            args = (*args[:2], ("LimitFlags", info.BasicLimitInformation.LimitFlags), args[3])
        self.calls.append((name, *args))
        return 0 if name == self.fail else (0x5A5A if name == "CreateJobObjectW" else 1)

    def __getattr__(self, name: str):
        return lambda *args: self._call(name, *args)


class _Proc:
    pid, _handle = 4242, 0x77

    def kill(self) -> None:
        pass


def _windows(monkeypatch, k: _FakeKernel32):
    """Windows as far as the Job Object code can tell, over the fake kernel32; taskkill recorded.
    Returns a fresh _Descendants (the one _terminate uses) and a fake upstream process in it."""
    monkeypatch.setattr(abstract, "_WINDOWS", True)
    monkeypatch.setattr(abstract, "_kernel32", lambda: k)
    monkeypatch.setattr(abstract, "_taskkill", lambda pid: k.calls.append(("taskkill", pid)))
    d, proc = abstract._Descendants(), _Proc()
    monkeypatch.setattr(abstract, "_DESCENDANTS", d)
    d.add(proc)
    return d, proc


def test_an_upstream_process_is_put_in_a_kill_on_close_job_and_its_tree_ended_through_it(
        monkeypatch):
    k = _FakeKernel32()
    d, proc = _windows(monkeypatch, k)
    size = ctypes.sizeof(abstract._job_limits_type())
    assert k.calls == [("CreateJobObjectW", None, None),
                       ("SetInformationJobObject", 0x5A5A, 9, ("LimitFlags", 0x2000), size),
                       ("AssignProcessToJobObject", 0x5A5A, 0x77)]
    del k.calls[:]
    abstract._terminate(proc)  # after the EOF wait: no SIGTERM on Windows, the tree ends
    abstract._hard_kill(proc)
    assert k.calls == [("TerminateJobObject", 0x5A5A, 1)] * 2
    del k.calls[:]
    d.release(proc)  # the run's end: closing the handle ends what is left in the job
    d.release(proc)
    assert k.calls == [("CloseHandle", 0x5A5A)]


@pytest.mark.parametrize("fail", ["CreateJobObjectW", "SetInformationJobObject",
                                  "AssignProcessToJobObject"])
def test_an_upstream_that_cannot_be_put_in_a_job_is_ended_by_taskkill(monkeypatch, caplog, fail):
    k = _FakeKernel32(fail)
    d, proc = _windows(monkeypatch, k)
    assert f"{fail} failed" in caplog.text and "may outlive Abstract" in caplog.text
    assert k.calls[-1] == (("CreateJobObjectW", None, None) if fail == "CreateJobObjectW"
                           else ("CloseHandle", 0x5A5A))  # a job made is not left open
    del k.calls[:]
    abstract._terminate(proc)
    d.release(proc)
    assert k.calls == [("taskkill", 4242)]


def _win_alive(pid: int) -> bool:
    """Windows: whether `pid` runs (os.kill(pid, 0) would end it there)."""
    k = ctypes.WinDLL("kernel32", use_last_error=True)
    k.OpenProcess.restype = ctypes.c_void_p
    handle = k.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        return False
    code = ctypes.c_ulong()
    try:
        k.GetExitCodeProcess(ctypes.c_void_p(handle), ctypes.byref(code))
        return code.value == 259  # STILL_ACTIVE
    finally:
        k.CloseHandle(ctypes.c_void_p(handle))


@pytest.mark.skipif(not abstract._WINDOWS, reason="Job Objects need the real Windows kernel")
@pytest.mark.parametrize("end", ["EOF", "killed"])
def test_windows_a_child_that_ignores_eof_is_gone_when_abstract_exits_however_it_exits(world,
                                                                                      end):
    """The fake leaves a child that ignores its EOF (as node under npx can): Abstract's EOF
    shutdown ends it through the job, and so does Abstract being killed outright (its handle to
    the job closes with it)."""
    world.fake("up", "--spawn-child")
    p = world.start()
    assert text_of(p.upstream("up", "echo", {"text": "up"})) == "up"
    [child] = [e["pid"] for e in wait_for(lambda: world.events("up", "child"), what="the child")]
    pids = world.pids("up") + [child]
    if end == "EOF":
        p.close_stdin()
    else:
        p.proc.kill()  # TerminateProcess: no shutdown at all
    p.wait_exit(15)
    wait_for(lambda: not [pid for pid in pids if _win_alive(pid)], timeout=10,
             what="the upstream and its child to be gone")


def test_the_command_exits_with_130_on_ctrl_c_before_serving(monkeypatch):
    """`abstract` (pyproject's console script) and `python abstract.py` go through _console:
    a KeyboardInterrupt before the handlers are installed is exit status 130, no traceback."""
    exits = []

    def interrupted() -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(abstract, "main", interrupted)
    monkeypatch.setattr(abstract, "_exit_now", exits.append)
    abstract._console()
    assert exits == [130]
    pyproject = (Path(abstract.__file__).parent / "pyproject.toml").read_text()
    assert 'abstract = "abstract:_console"' in pyproject
