"""Review of the process lifecycle (issue 24 items 4, 10, 14; issue 29 item 5): the subreaper never
takes the exit status of a process Abstract started itself, the descendants are ended before a
late signal can end Abstract, a signal ignored at start-up (nohup) stays ignored."""

from __future__ import annotations

import io
import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import abstract
from conftest import ROOT, Proxy, pid_alive, pipe_pair, text_of, wait_for

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the subreaper (prctl PR_SET_CHILD_SUBREAPER) and /proc")
posix_only = pytest.mark.skipif(abstract._WINDOWS, reason="POSIX signals")


def _exited_unreaped(args: list) -> subprocess.Popen:
    """A child of this process that exited and is not reaped yet (a zombie its Popen owns)."""
    proc = subprocess.Popen([sys.executable, "-c", *args], stdin=subprocess.DEVNULL)
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # (blocks until it exited; no reap)
    return proc


@linux_only
def test_the_reaper_never_takes_the_exit_status_of_a_process_abstract_started_itself():
    """A process Abstract starts for itself (a browser, a query worker) and has not waited for
    yet is a zombie child like an adopted orphan. The reaper took it once two passes had seen
    it, so its Popen.wait() returned 0 instead of its status (7 here)."""
    d = abstract._Descendants()
    procs = [_exited_unreaped(["raise SystemExit(7)"]),  # Abstract's session
             _exited_unreaped(["import os; os.setsid(); raise SystemExit(7)"])]  # its own
    for _ in range(3):
        d.reap()
    assert [p.wait(10) for p in procs] == [7, 7]


@linux_only
def test_an_orphan_in_someone_elses_session_is_reaped_though_no_pass_saw_it_run(tmp_path):
    """An upstream's child left behind by a parent that exited (in the upstream's session, not
    Abstract's) and that exited before any pass: not a process Abstract started, so reaped."""
    script = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        import abstract
        abstract._prctl_subreaper(True)
        r, w = os.pipe()
        middle = os.fork()
        if middle == 0:
            os.setsid()  # a session as an upstream has (start_new_session)
            if os.fork() == 0:  # the orphan to be: exits once its parent is gone
                os.close(w)
                os.read(r, 1)
                os._exit(0)
            os._exit(0)
        os.close(r)
        os.waitpid(middle, 0)
        os.close(w)
        kids = {{}}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # (the orphan's exit is not ours to wait for)
            kids = abstract._children_of(os.getpid())
            if kids and all(state == "Z" for state, _, _ in kids.values()):
                break
            time.sleep(0.01)
        assert len(kids) == 1, kids
        abstract._Descendants().reap()
        print(abstract._children_of(os.getpid()))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "{}"


def _wrapper(tmp_path: Path, body: str) -> Path:
    """A script that runs Abstract as `abstract` does (_console), after `body`."""
    path = tmp_path / "wrapper.py"
    path.write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nimport abstract\n"
                    f"{textwrap.dedent(body)}\nabstract._console()\n")
    return path


def _start(world, script: Path) -> Proxy:
    world.dir.mkdir(exist_ok=True)
    p = Proxy([str(world.dir)], world.env(), script=script)
    world.proxies.append(p)
    p.initialize()
    return p


@linux_only
def test_a_sigterm_after_serving_ended_does_not_leave_the_adopted_descendants_running(world,
                                                                                    tmp_path):
    """After EOF serving ends; the handlers were put back before the adopted descendants were
    killed (the last undo step, after joins of up to 5 s each), so the SIGTERM MCP clients send
    2 s after EOF killed Abstract outright there and the double-forked grandchild outlived it.
    The wrapper holds the exit at the cache sweeper's end until the SIGTERM was sent."""
    flag = tmp_path / "go"
    script = _wrapper(tmp_path, f"""
        import contextlib, os, time
        @contextlib.contextmanager
        def sweeping(cache):
            try:
                yield
            finally:
                open({str(flag)!r} + ".reached", "w").close()
                deadline = time.monotonic() + 30
                while not os.path.exists({str(flag)!r}) and time.monotonic() < deadline:
                    time.sleep(0.01)
        abstract._sweeping = sweeping
    """)
    world.fake("up", "--daemon-child", "120")
    p = _start(world, script)
    assert text_of(p.upstream("up", "echo", {"text": "up"})) == "up"
    [event] = wait_for(lambda: world.events("up", "daemon"), what="the grandchild's pid")
    pid = event["pid"]
    try:
        p.close_stdin()
        wait_for(lambda: Path(f"{flag}.reached").exists(), timeout=30, what="serving to end")
        os.kill(p.pid, signal.SIGTERM)
        flag.touch()
        p.wait_exit(15)
        wait_for(lambda: not pid_alive(pid), timeout=10, what="the grandchild to be gone")
    finally:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


@posix_only
def test_a_sighup_ignored_at_start_as_under_nohup_stays_ignored(world, tmp_path):
    """`nohup abstract` asks to outlive its terminal: SIGHUP is ignored when Abstract starts. The
    handlers replaced it, so the terminal closing shut Abstract down (status 129)."""
    script = _wrapper(tmp_path, """
        import signal
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    """)
    world.fake("up")
    p = _start(world, script)
    os.kill(p.pid, signal.SIGHUP)
    assert text_of(p.upstream("up", "echo", {"text": "still here"})) == "still here"
    p.close_stdin()
    assert p.wait_exit(15) == 0, p.stderr[-3000:]


def test_one_sessions_shutdown_does_not_refuse_the_writes_made_elsewhere_in_the_process(world,
                                                                                      tmp_path):
    """main() in-process (a host running sessions on threads): the switch that refuses writes
    during a shutdown was one for the whole process, so while session A shut down (its stubborn
    upstream takes 1.6 s to stop) every write elsewhere failed with 'Abstract is shutting
    down' (ECANCELED). Now each Server stops only the writes of its own requests."""
    world.fake("stubborn", "--stubborn")
    world.dir.mkdir()
    rin, win = pipe_pair()
    rout, wout = pipe_pair()
    err, lines = io.StringIO(), queue.Queue()
    session = threading.Thread(target=abstract.main, args=([str(world.dir)],),
                               kwargs={"stdin": rin, "stdout": wout, "stderr": err,
                                       "environ": world.env()}, daemon=True)
    session.start()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in iter(rout.readline, b"")],
                              daemon=True)
    reader.start()
    try:
        for msg in ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                        "protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "t", "version": "0"}}},
                    {"jsonrpc": "2.0", "method": "notifications/initialized"},
                    {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                        "name": "call_tool", "arguments": {"server": "stubborn",
                                                           "tool_name": "echo",
                                                           "tool_args": {"text": "up"}}}}):
            win.write(json.dumps(msg).encode() + b"\n")
        answers = [json.loads(lines.get(timeout=30)) for _ in range(2)]
        assert text_of(answers[1]["result"]) == "up", answers
        win.close()  # EOF: session A shuts down
        wait_for(lambda: "stopping" in err.getvalue(), timeout=30, what="A stopping its upstream")
        path = abstract._write_new(str(tmp_path), "elsewhere", ".txt", b"written meanwhile")
        assert Path(path).read_bytes() == b"written meanwhile"
        session.join(30)
        assert not session.is_alive()
    finally:
        win.close()
        session.join(30)
        for f in (rin, wout):
            f.close()
        reader.join(10)
        rout.close()


@posix_only
def test_a_signal_during_the_drain_does_not_cut_it_short(world, tmp_path):
    """After EOF, requests still running get the drain (1 s) to answer; the shutdown is documented
    as going on unchanged when a signal comes during it. A SIGTERM in the drain raised into its
    wait instead: the upstreams were stopped at once and a call that needed 0.5 s more failed
    with 'Abstract is shutting down'. The wrapper marks the drain's start."""
    marker = tmp_path / "draining"
    script = _wrapper(tmp_path, f"""
        import threading
        wait_idle = abstract.Connection.wait_idle
        def marked(self, timeout):
            if threading.current_thread() is threading.main_thread() and self.name == "client":
                open({str(marker)!r}, "a").close()
            return wait_idle(self, timeout)
        abstract.Connection.wait_idle = marked
    """)
    world.fake("up")
    p = _start(world, script)
    assert text_of(p.upstream("up", "echo", {"text": "up"})) == "up"
    rid = p.send_request("tools/call", {"name": "call_tool", "arguments": {
        "server": "up", "tool_name": "slow", "tool_args": {"seconds": 0.5, "text": "done"}}})
    p.close_stdin()
    wait_for(marker.exists, timeout=15, what="the drain to begin")
    os.kill(p.pid, signal.SIGTERM)
    answer = p.wait_response(rid, timeout=15)
    assert p.wait_exit(15) == 128 + signal.SIGTERM, p.stderr[-3000:]
    assert text_of(answer["result"]) == "done", answer
