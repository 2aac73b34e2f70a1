"""Starting upstreams on Windows and macOS as on Linux (issue 29): batch files (npx.cmd) get
cmd.exe's quoting, PATHEXT wins over npm's extensionless shell script, environment names ignore
case on Windows, CLI output and logs are UTF-8 whatever the code page, and Abstract runs from a
folder whose path holds a space and a non-ASCII letter.

Only Linux runs here: Windows logic is tested with the platform set (abstract._WINDOWS) and
against a model of cmd.exe's and the C runtime's parsing; what needs the real system is in
Windows-only tests, skipped here.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import ABSTRACT, FAKE, WAIT, Proxy, World, base_env, text_of, wait_for

import abstract

CMD = "C:\\Windows\\System32\\cmd.exe"
NASTY = ["https://example.com/mcp?team=a&token=b", "%API_KEY%", "100%", "%OS%%CD%", "a^b",
         "x|y", "<in>", "(paren)", 'say "hi"', 'say \\"hi', 'a\\\\"b', "C:\\dir\\",
         "\\\\server\\share\\", "", "two words", "wow!", "!API_KEY!", "=;,", "tab\there",
         "Jane Doe", "Études", "模型", "--flag=value", "a&&calc", "^&^|", '"', '""', "\\"]


# -- a model of what cmd.exe and the C runtime do with the line


def cmd_percent(line: str, env: Dict[str, str]) -> str:
    """cmd.exe's first pass over a /c command line (not a batch file), command extensions on:
    %NAME% and %NAME:~a,b% of a defined variable are replaced; any other % stays and the scan
    goes on at the next character (so %% leaves a %, and %cd:~,% after it is an empty slice)."""
    out, i = [], 0
    while i < len(line):
        j = line.find("%", i + 1) if line[i] == "%" else -1
        if j < 0:
            out.append(line[i])
            i += 1
            continue
        name, _, rest = line[i + 1:j].partition(":")
        # (CD is one of cmd's dynamic variables: always defined, the current folder)
        known = dict({"CD": "C:\\here"}, **{k.upper(): v for k, v in env.items()})
        value = known.get(name.upper()) if name else None
        if value is None:
            out.append("%")
            i += 1
            continue
        if rest.startswith("~"):
            start, _, length = rest[1:].partition(",")
            value = value[int(start or 0):][:int(length or 0)] if "," in rest else value
        out.append(value)
        i = j + 1
    return "".join(out)


def exposed(line: str) -> str:
    """The characters of `line` outside cmd.exe's quotes (its quote state toggles on every ")."""
    out, quoted = [], False
    for c in line:
        if c == '"':
            quoted = not quoted
        elif not quoted:
            out.append(c)
    return "".join(out)


def crt_split(line: str) -> List[str]:
    """The C runtime's (and CommandLineToArgvW's) argv of a command line: 2n backslashes and a "
    give n and a quote toggle, 2n+1 give n and a literal "; "" inside quotes is a literal "."""
    args, i, n = [], 0, len(line)
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i >= n:
            return args
        cur: List[str] = []
        quoted = False
        while i < n:
            c = line[i]
            if c == "\\":
                j = i
                while j < n and line[j] == "\\":
                    j += 1
                if j < n and line[j] == '"':
                    cur.append("\\" * ((j - i) // 2))
                    if (j - i) % 2:
                        cur.append('"')
                        j += 1
                else:
                    cur.append("\\" * (j - i))
                i = j
            elif c == '"':
                if quoted and line[i + 1:i + 2] == '"':
                    cur.append('"')
                    i += 2
                else:
                    quoted = not quoted
                    i += 1
            elif c in " \t" and not quoted:
                break
            else:
                cur.append(c)
                i += 1
        args.append("".join(cur))


def run_by_cmd(line: str, env: Dict[str, str]) -> List[str]:
    """What the program a batch file hands `%*` to receives, the script path first: cmd /s /c
    drops the outer quotes, expands %...%, must see no operator outside quotes; the batch's
    `%*` is that text as it is (not expanded again), read by the C runtime."""
    prefix = f'"{CMD}" /d /e:ON /v:OFF /s /c "'
    assert line.startswith(prefix) and line.endswith('"'), line
    inner = cmd_percent(line[len(prefix):-1], env)
    outside = exposed(inner)
    assert not re.search(r"[&|<>()^%!\r\n]", outside), (line, outside)
    return crt_split(inner)


ENV = {"PATH": "C:\\Windows", "API_KEY": "SECRET", "OS": "Windows_NT"}


def test_batch_arguments_reach_the_program_whole_and_unexpanded():
    script = "C:\\Users\\Jane Doe\\AppData\\Roaming\\npm\\npx.cmd"
    line = abstract._batch_line(script, NASTY, CMD)
    assert "SECRET" not in cmd_percent(line, ENV)
    assert run_by_cmd(line, ENV) == [script] + NASTY


@pytest.mark.parametrize("arg", NASTY)
def test_each_argument_alone_round_trips(arg):
    line = abstract._batch_line("C:\\npm\\x.cmd", ["-y", arg, "last"], CMD)
    assert run_by_cmd(line, ENV)[1:] == ["-y", arg, "last"]


def test_plain_arguments_stay_unquoted_as_rust_writes_them():
    line = abstract._batch_line("C:\\npm\\npx.cmd", ["-y", "@scope/pkg@1.2.3", "C:\\dir\\x"], CMD)
    assert line == f'"{CMD}" /d /e:ON /v:OFF /s /c ""C:\\npm\\npx.cmd" -y @scope/pkg@1.2.3 C:\\dir\\x"'
    assert abstract._cmd_quote("a&b") == '"a&b"'
    assert abstract._cmd_quote("%PATH%") == '"%%cd:~,%PATH%%cd:~,%"'
    assert abstract._cmd_quote('say \\"hi') == '"say \\\\""hi"'
    assert abstract._cmd_quote("C:\\dir\\") == '"C:\\dir\\\\"'


def test_a_percent_in_the_script_path_is_not_expanded():
    script = "C:\\Users\\100%API_KEY%\\npx.cmd"
    line = abstract._batch_line(script, ["a"], CMD)
    assert run_by_cmd(line, ENV) == [script, "a"]


@pytest.mark.parametrize("bad", ["line\nbreak", "carriage\rreturn", "nul\0byte"])
def test_what_cmd_cannot_pass_is_refused_naming_the_argument(bad):
    with pytest.raises(abstract.UpstreamError) as e:
        abstract._batch_line("C:\\npm\\npx.cmd", ["-y", "ok", bad], CMD)
    assert "args[2]" in e.value.message and repr(bad[:4])[:-1] in e.value.message
    assert "npx.cmd" in e.value.message and '"env"' in e.value.message


@pytest.mark.parametrize("script", ['C:\\a"b\\x.cmd', "C:\\dir\\", "C:\\a\nb\\x.cmd"])
def test_a_script_path_cmd_cannot_quote_is_refused(script):
    with pytest.raises(abstract.UpstreamError, match="cannot run the batch file"):
        abstract._batch_line(script, [], CMD)


@pytest.mark.parametrize("path, batch", [
    ("C:\\npm\\npx.cmd", True), ("C:\\npm\\NPX.CMD", True), ("C:\\x\\run.bat", True),
    ("C:\\x\\run.cmd. .", True), ("C:\\x\\run.cmd::$DATA", True), ("C:run.bat", True),
    ("C:\\x\\node.exe", False), ("/usr/bin/npx", False), ("C:\\x.cmd\\node.exe", False)])
def test_what_counts_as_a_batch_file(path, batch):
    assert abstract._is_batch(path) is batch


def test_launch_builds_the_cmd_line_only_on_windows(monkeypatch):
    assert abstract._launch("/usr/bin/npx.cmd", ["a&b"], {}) == ["/usr/bin/npx.cmd", "a&b"]
    monkeypatch.setattr(abstract, "_WINDOWS", True)
    assert abstract._launch("C:\\node\\node.exe", ["a&b"], {}) == ["C:\\node\\node.exe", "a&b"]
    line = abstract._launch("C:\\npm\\npx.cmd", ["a&b"], {"SystemRoot": "D:\\Win"})
    assert line.startswith('"D:\\Win\\System32\\cmd.exe" /d /e:ON /v:OFF /s /c ""C:\\npm\\npx.cmd" "a&b""')


# -- PATHEXT: npx.cmd, never npm's extensionless shell script


@pytest.fixture
def npm_folder(tmp_path):
    """A folder as npm fills it on Windows: `npx` (a shell script) beside `npx.cmd`."""
    folder = tmp_path / "Program Files" / "nodejs"
    folder.mkdir(parents=True)
    (folder / "npx").write_text("#!/bin/sh\nexec node npx-cli.js \"$@\"\n")
    (folder / "npx.cmd").write_text("@node npx-cli.js %*\r\n")
    return folder


def resolve(command: str, env: Dict[str, str], cwd=None) -> str:
    return abstract._resolve_command(abstract._ServerSpec("s", command, [], {}, cwd), env)


def test_pathext_match_wins_over_the_extensionless_script(monkeypatch, npm_folder, tmp_path):
    monkeypatch.setattr(abstract, "_WINDOWS", True)
    first = tmp_path / "first"  # a PATH folder before it holding only the shell script
    first.mkdir()
    shutil.copy(npm_folder / "npx", first / "npx")
    env = {"PATH": f'{first};"{npm_folder}"', "PATHEXT": ".COM;.EXE;.BAT;.CMD;.VBS;.JS"}
    assert resolve("npx", env) == str(npm_folder / "npx.cmd")
    assert resolve("npx.cmd", env) == str(npm_folder / "npx.cmd")
    # a command with a folder part tries PATHEXT too
    assert resolve(str(npm_folder / "npx"), env) == str(npm_folder / "npx.cmd")
    assert resolve("nodejs/npx", env, cwd=str(npm_folder.parent)) == str(npm_folder / "npx.cmd")
    # PATHEXT's .JS needs a host program (WinError 193): never picked
    (npm_folder / "tool.js").write_text("")
    with pytest.raises(abstract.UpstreamError, match="command not found"):
        resolve("tool", env)
    with pytest.raises(abstract.UpstreamError, match="no such file; tried PATHEXT"):
        resolve(str(first / "npx"), env)


def test_without_pathext_the_runnable_extensions_are_tried(monkeypatch, npm_folder):
    monkeypatch.setattr(abstract, "_WINDOWS", True)
    assert resolve("npx", {"Path": str(npm_folder)}) == str(npm_folder / "npx.cmd")


def test_posix_resolution_is_unchanged(npm_folder):
    (npm_folder / "npx").chmod(0o755)
    assert resolve("npx", {"PATH": str(npm_folder)}) == str(npm_folder / "npx")


class Recorder:
    """A spawn that records what Popen would get and fails as a missing file would."""

    def __init__(self) -> None:
        self.calls: List[tuple] = []

    def __call__(self, argv, **kw):
        self.calls.append((argv, kw))
        raise FileNotFoundError(2, "recorded, not started")


def test_npx_with_a_url_argument_is_started_through_cmd_with_the_platform_set(monkeypatch,
                                                                                npm_folder):
    """The config as users write it for mcp-remote: npx resolves to npx.cmd on the entry's own
    Path (its case differs from the inherited PATH's), and the URL's & reaches mcp-remote."""
    monkeypatch.setattr(abstract, "_WINDOWS", True)
    args = ["-y", "mcp-remote", "https://example.com/mcp?team=a&token=b", "--header",
            "Authorization: Bearer %TOKEN%"]
    spec = abstract._ServerSpec("remote", "npx", args, {"Path": str(npm_folder)})
    spawn = Recorder()
    up = abstract._Upstream(spec, abstract._Settings({}), abstract._ClientLink("none", []),
                           spawn=spawn, environ={"PATH": "C:\\Windows", "SYSTEMROOT": "C:\\Windows",
                                                 "TOKEN": "SECRET"})
    with pytest.raises(abstract.UpstreamError, match="recorded, not started"):
        up.tools()
    (line, kw), = spawn.calls
    assert isinstance(line, str) and run_by_cmd(line, {"TOKEN": "SECRET"}) == \
        [str(npm_folder / "npx.cmd")] + args
    assert kw["env"]["Path"] == str(npm_folder) and "PATH" not in kw["env"]
    up.close()


# -- environment names ignore case on Windows


def test_env_names_ignore_case_with_the_platform_set(monkeypatch):
    env = {"APPDATA": "C:\\Users\\Jane Doe\\AppData\\Roaming", "PATH": "C:\\Windows"}
    missing: List[str] = []
    # POSIX: names are case-sensitive
    assert abstract._expand("${env:AppData}\\x", env, missing) == "\\x" and missing == ["AppData"]
    monkeypatch.setattr(abstract, "_WINDOWS", True)
    missing = []
    assert abstract._expand("${env:AppData}\\x ${appdata}", env, missing) == \
        f"{env['APPDATA']}\\x {env['APPDATA']}" and missing == []
    merged = dict(env, Path="C:\\other", path="C:\\third")
    abstract._env_merge(merged, {"Path": "C:\\mine"})
    assert merged == {"APPDATA": env["APPDATA"], "Path": "C:\\mine"}
    assert abstract._env_get(merged, "PATH") == "C:\\mine"


def test_on_posix_an_entrys_path_is_a_variable_of_its_own(world):
    """POSIX keeps case: an entry's "Path" is set beside the inherited PATH, in a real child."""
    world.fake("up")
    world.servers["up"]["env"] = {"Path": "from-config"}
    proxy = world.start(str(world.dir))
    got = {n: text_of(proxy.upstream("up", "getenv", {"name": n})) for n in ("Path", "PATH")}
    assert "from-config" in got["Path"] and os.environ["PATH"] in got["PATH"]


# -- CLI output and logs: UTF-8, never a traceback


def cp1252(strict: bool = True) -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), "cp1252", errors="strict" if strict else "replace",
                            newline="\n", write_through=True)


def test_check_on_a_cp1252_strict_stdout_writes_utf8(world, monkeypatch):
    """--check's report goes to sys.stdout, which on Windows, redirected, is cp1252 strict."""
    world.fake("café ☃")
    out, err = cp1252(), cp1252()
    monkeypatch.setattr(sys, "stdout", out)
    code = abstract.main(["--check", str(world.dir / "Étu☃")], stderr=err, environ=world.env())
    report = out.buffer.getvalue().decode("utf-8")
    assert code == 0 and "café ☃  started" in report, report
    assert "Étu☃" in err.buffer.getvalue().decode("utf-8")  # "created directory ..."
    assert (out.encoding, out.errors, err.encoding, err.errors) == ("cp1252", "strict") * 2


class Ascii:
    """A text stream without reconfigure that raises on what ASCII cannot hold."""
    encoding = "ascii"

    def __init__(self) -> None:
        self.text = ""

    def write(self, s: str) -> int:
        s.encode("ascii")
        self.text += s
        return len(s)

    def flush(self) -> None:
        pass


def test_a_stream_that_cannot_be_reconfigured_gets_replacements():
    err = Ascii()
    code = abstract.main(["--check", "x"], stderr=err, stdout=io.BytesIO(),
                         environ={"ABSTRACT_LOG_LEVEL": "Ünknown"})
    assert code == 2 and "not 'ÜNKNOWN'".replace("Ü", "?") in err.text


def test_check_in_a_cp1252_process_writes_utf8_and_no_traceback(world):
    """The real process with Windows's redirected streams (cp1252; stdout strict)."""
    world.fake("café ☃")
    env = world.env(PYTHONIOENCODING="cp1252:strict")
    proc = subprocess.run([sys.executable, str(ABSTRACT), "--check", str(world.dir / "Étu☃")],
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    out, err = proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")
    assert proc.returncode == 0 and "café ☃  started" in out, (out, err)
    assert "Traceback" not in err and "Étu☃" in err and "\\u2603" not in err


# -- a folder whose path holds a space and a non-ASCII letter (C:\Users\Jane Doe, ~/Études)


def test_a_whole_session_from_a_folder_with_a_space_and_an_accent(tmp_path):
    """abstract.py, the upstream, the client config (${workspaceFolder}), the settings, the
    allowed folder and the browser command all under "sp ace/Études"."""
    home = tmp_path / "sp ace" / "Études"
    project = home / "My Project"
    (project / ".vscode").mkdir(parents=True)
    (project / "tools").mkdir()
    shutil.copy(ABSTRACT, home / "abstract.py")
    shutil.copy(FAKE, project / "tools" / "fake upstream.py")
    config = project / ".vscode" / "mcp.json"
    config.write_text(json.dumps({"servers": {"up": {
        "command": sys.executable, "args": ["${workspaceFolder}/tools/fake upstream.py"],
        "cwd": "${workspaceFolder}"}}}))
    settings = home / "settings é.json"
    settings.write_text(json.dumps({"output_cache": {"dir": str(home / "cache dir")},
                                    "catalog": {"path": str(home / "catalog é.sqlite3")}}))
    store = home / "out dir"
    env = base_env(APP_CONFIG_PATH=str(config), ABSTRACT_CONFIG=str(settings))
    proxy = Proxy([str(store)], env, script=home / "abstract.py")
    try:
        proxy.initialize()
        assert text_of(proxy.upstream("up", "echo", {"text": "héllo"})) == "héllo"
        res = proxy.call_tool("call_tool_and_store", {"server": "up", "tool_name": "echo",
                                                      "tool_args": {"text": "stored"}})
        path = Path(res["structuredContent"]["path"])
        assert path.parent == store and "stored" in path.read_text()
    finally:
        proxy.stop()
    log = home / "browser log.txt"
    browser = home / "open browser.sh"  # (a #! line cannot hold a space: sh runs python)
    browser.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -c "import sys; '
                       f'open(sys.argv[1], \'a\').write(sys.argv[2] + chr(10))" '
                       f'{shlex.quote(str(log))} "$1"\n')
    browser.chmod(0o755)
    url = "http://127.0.0.1:9/authorize?a=1&b=%20"
    for command in (str(browser), f"{shlex.quote(str(browser))} %s"):
        env2 = {k: v for k, v in base_env(BROWSER=command).items()
                if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
        probe = (f"import sys; sys.path.insert(0, sys.argv[1]); import abstract; "
                 f"sys.exit(0 if abstract._open_browser(sys.argv[2]) else 3)")
        subprocess.run([sys.executable, "-c", probe, str(home), url], env=env2, check=True,
                       timeout=WAIT)
    wait_for(lambda: log.exists() and log.read_text().count(url) == 2, WAIT, "the browser")


# -- Windows only: the real cmd.exe


windows = pytest.mark.skipif(sys.platform != "win32",
                             reason="needs Windows: the real cmd.exe running a .cmd file")


@windows
def test_real_cmd_passes_every_argument_to_a_cmd_file(tmp_path):
    folder = tmp_path / "Jane Doe & Études 100%"
    folder.mkdir()
    show = folder / "show.cmd"
    show.write_text(f'@"{sys.executable}" -c "import sys, json; '
                    f'sys.stdout.write(json.dumps(sys.argv[1:]))" %*\r\n', encoding="utf-8")
    (folder / "show").write_text("#!/bin/sh\n")  # npm's extensionless script beside it
    env = dict(os.environ, API_KEY="SECRET", PATH=f"{folder};{os.environ['PATH']}")
    path = resolve("show", env)
    assert path.lower().endswith("show.cmd")
    proc = subprocess.run(abstract._launch(path, NASTY, env), env=env, capture_output=True,
                          timeout=60)
    assert json.loads(proc.stdout.decode("utf-8")) == NASTY, proc.stderr


@windows
def test_real_upstream_behind_a_cmd_file_starts(world, tmp_path):
    folder = tmp_path / "Jane Doe"
    folder.mkdir()
    (folder / "fake.cmd").write_text(f'@"{sys.executable}" "{FAKE}" %*\r\n')
    world.servers["up"] = {"command": "fake", "args": ["a&b %OS%", "^x"],
                           "env": {"Path": f"{folder};{os.environ['PATH']}"}}
    proc = world.check()
    assert proc.returncode == 0 and b"started" in proc.stdout, proc.stdout + proc.stderr


def test_the_model_refuses_what_list2cmdline_writes():
    """The check above has teeth: Python's own quoting (what Popen did with a list) leaves the
    URL's & outside cmd's quotes, lets %API_KEY% expand, and its \\" ends cmd's quotes."""
    for arg in ("https://example.com/mcp?team=a&token=b", "%API_KEY%", 'x" & calc & "y'):
        line = subprocess.list2cmdline(["C:\\npm\\npx.cmd", arg])
        with pytest.raises(AssertionError):
            assert run_by_cmd(f'"{CMD}" /d /e:ON /v:OFF /s /c "{line}"', ENV)[1:] == [arg]


def test_a_stdout_that_cannot_be_reconfigured_gets_replacements_in_the_report(world, monkeypatch):
    """--check's report on a sys.stdout without reconfigure (an unusual host): written with
    replacements through the same wrapper as stderr, not a UnicodeEncodeError."""
    world.fake("café ☃")
    out = Ascii()
    monkeypatch.setattr(sys, "stdout", out)
    code = abstract.main(["--check", str(world.dir)], stderr=cp1252(False), environ=world.env())
    assert code == 0 and "caf? ?  started" in out.text, out.text
    assert sys.stdout is out
