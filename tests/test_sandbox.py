"""The sandbox: Sandbox.resolve / make_dir and _safe_filename as units, then an attack list driven
end to end through a real Abstract subprocess (call_tool_and_store, call_tool_with_file_content,
resources/read), checking that every attempt is either refused with a message naming the path and
the allowed directories, or lands inside the allowed directory, and that nothing outside changes.

Only Linux runs here; the Windows forms (drive letters, UNC, reserved device names) are checked as
the strings a model might send, which POSIX must refuse or make harmless.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.parse
from pathlib import Path

import pytest

from conftest import World, files_under, snapshot, text_of

import abstract
from abstract import _Sandbox, SandboxError, _safe_filename

needs_symlinks = pytest.mark.skipif(not hasattr(os, "symlink") or sys.platform == "win32",
                                    reason="symlinks need privileges on Windows")
# What POSIX must do with Windows forms (refuse them); on Windows they are real paths.
posix_only = pytest.mark.skipif(sys.platform == "win32", reason="expectations for POSIX paths")


# ---- units: _safe_filename ----

@pytest.mark.parametrize("name, expected", [
    ("report", "report"),
    ("  report  ", "report"),
    ("report. . .", "report"),
    ("report...", "report"),
    ('a<b>c:d"e|f?g*h', "a_b_c_d_e_f_g_h"),
    ("CON", "_CON"),
    ("con", "_con"),
    ("nul.txt", "_nul.txt"),
    ("COM1", "_COM1"),
    ("com1.tar.gz", "_com1.tar.gz"),
    ("LPT9", "_LPT9"),
    ("COM\u00b9", "_COM\u00b9"),
    ("CONIN$", "_CONIN$"),
    ("AUX .txt", "_AUX .txt"),      # Windows ignores the spaces before the dot: still the device
    ("CONSOLE", "CONSOLE"),         # not reserved: only the exact device names are
    ("COM10", "COM10"),
    ("%2e%2e", "%2e%2e"),
    ("~", "~"),
    ("Zo\u00eb \U0001f389", "Zo\u00eb \U0001f389"),
])
def test_safe_filename_cleans(name, expected):
    assert _safe_filename(name) == expected


@pytest.mark.parametrize("name, why", [
    ("", "empty"),
    ("   ", "empty"),
    (".", "is a path"),
    ("..", "is a path"),
    ("...", "no usable characters"),
    (". .", "no usable characters"),
    ("a/b", "is a path"),
    ("../x", "is a path"),
    ("/etc/passwd", "is a path"),
    ("a\\b", "is a path"),
    ("C:\\x", "is a path"),
    ("\\\\server\\share", "is a path"),
    ("a\x00b", "control characters"),
    ("a\nb", "control characters"),
    ("a\rb", "control characters"),
    ("a\tb", "control characters"),
    ("a\x7fb", "control characters"),
    ("." * 250 + "ab", "no usable characters"),  # shortening must not leave only dots
])
def test_safe_filename_refuses(name, why):
    with pytest.raises(SandboxError) as err:
        _safe_filename(name)
    assert why in str(err.value)


@pytest.mark.parametrize("name", ["a" * 300, "\u00e9" * 300, "\U0001f389" * 100, "ab. " * 100])
def test_safe_filename_shortens_long_names_to_200_bytes(name):
    out = _safe_filename(name)
    assert 0 < len(out.encode("utf-8")) <= 200
    assert name.startswith(out) and not out.endswith((".", " "))
    assert len(out.encode("utf-8")) > 190  # shortened, not emptied


def test_safe_filename_is_fast_on_huge_names():
    # One character per step used to be re-encoded in full: a 1 MB name took minutes.
    import time

    start = time.monotonic()
    assert _safe_filename("x" * 1_000_000) == "x" * 200
    assert time.monotonic() - start < 1.0


# ---- units: Sandbox ----

@pytest.fixture
def layout(tmp_path):
    """tmp/box/{store, store-evil, outside} with links out of store (when symlinks work)."""
    box = tmp_path / "box"
    store, evil, outside = box / "store", box / "store-evil", box / "outside"
    for d in (store, evil, outside):
        d.mkdir(parents=True)
    (outside / "secret.json").write_text('{"secret": "outside"}')
    (evil / "secret.json").write_text('{"secret": "sibling"}')
    (store / "inside.json").write_text('{"inside": true}')
    (store / "sub").mkdir()
    if hasattr(os, "symlink") and sys.platform != "win32":
        os.symlink(outside, store / "link_dir")
        os.symlink(outside / "secret.json", store / "link_file.json")
        os.symlink(outside / "created-by-attack.json", store / "dangling.json")
        os.symlink(store / "loop", store / "loop")
        os.symlink(store / "inside.json", store / "link_inside.json")
        os.symlink(store / "sub", store / "link_sub")
    return box


def test_resolve_relative_absolute_and_dotdot_inside(layout):
    store = str(layout / "store")
    sb = _Sandbox([store])
    assert sb.roots == [os.path.realpath(store)] and sb.default == sb.roots[0]
    assert sb.resolve("inside.json") == os.path.join(sb.default, "inside.json")
    assert sb.resolve("sub/../inside.json") == os.path.join(sb.default, "inside.json")
    assert sb.resolve(store + "/sub/x") == os.path.join(sb.default, "sub", "x")
    assert sb.resolve(".") == sb.default
    assert sb.resolve("not/yet/there") == os.path.join(sb.default, "not", "yet", "there")


@pytest.mark.parametrize("path, why", [
    ("../outside", "outside the allowed directories"),
    ("sub/../../outside", "outside the allowed directories"),
    ("..", "outside the allowed directories"),
    ("/", "outside the allowed directories"),
    ("/etc/passwd", "outside the allowed directories"),
    ("//server/share", "outside the allowed directories"),
    ("", "is empty"),
    ("  ", "is empty"),
    ("a\x00b", "control characters"),
    ("a\nb", "control characters"),
    ("C:\\x", "Windows path"),
    ("C:/x", "Windows path"),
    ("c:x", "Windows path"),
    ("\\\\server\\share", "Windows path"),
    ("\\\\?\\C:\\x", "Windows path"),
    ("sub\\..\\..\\outside", "Windows path"),
])
@posix_only
def test_resolve_refuses(layout, path, why):
    sb = _Sandbox([str(layout / "store")])
    with pytest.raises(SandboxError) as err:
        sb.resolve(path)
    msg = str(err.value)
    assert why in msg and repr(path) in msg
    assert f"Allowed directories: {sb.default}" in msg


def test_resolve_sibling_with_the_same_prefix_is_outside(layout):
    store = str(layout / "store")
    sb = _Sandbox([store])
    for path in (store + "-evil", store + "-evil/secret.json", store + "/../store-evil/secret.json"):
        with pytest.raises(SandboxError, match="outside the allowed directories"):
            sb.resolve(path)
    # With the sibling also allowed it resolves to the sibling, not into store.
    both = _Sandbox([store, store + "-evil"])
    assert both.resolve(store + "-evil/secret.json") == os.path.realpath(store + "-evil/secret.json")
    assert both.root_of(os.path.realpath(store + "-evil/x")) == os.path.realpath(store + "-evil")


def test_resolve_expands_tilde(layout, monkeypatch):
    sb = _Sandbox([str(layout / "store")])
    monkeypatch.setenv("HOME", str(layout / "outside"))
    with pytest.raises(SandboxError, match="outside"):
        sb.resolve("~/secret.json")
    monkeypatch.setenv("HOME", str(layout / "store" / "sub"))
    assert sb.resolve("~/x") == os.path.join(sb.default, "sub", "x")


@needs_symlinks
def test_resolve_follows_symlinks(layout):
    sb = _Sandbox([str(layout / "store")])
    for path in ("link_dir", "link_dir/secret.json", "link_dir/new/deeper", "link_file.json", "dangling.json",
                 "link_dir/../store-evil"):
        with pytest.raises(SandboxError, match="outside the allowed directories"):
            sb.resolve(path)
    assert sb.resolve("link_inside.json") == os.path.join(sb.default, "inside.json")
    assert sb.resolve("link_sub/x") == os.path.join(sb.default, "sub", "x")


@needs_symlinks
def test_root_given_through_a_symlink_is_its_real_path(layout):
    alias = layout / "alias"
    os.symlink(layout / "store", alias)
    sb = _Sandbox([str(alias)])
    assert sb.default == os.path.realpath(layout / "store")
    assert sb.resolve(str(alias / "inside.json")) == os.path.join(sb.default, "inside.json")
    assert sb.resolve(str(layout / "store" / "inside.json")) == os.path.join(sb.default, "inside.json")


def test_make_dir_creates_missing_subdirectories(layout):
    sb = _Sandbox([str(layout / "store")])
    made = sb.make_dir("a/b/c")
    assert made == os.path.join(sb.default, "a", "b", "c") and os.path.isdir(made)
    assert sb.make_dir(None) == sb.default and sb.make_dir("") == sb.default
    assert sb.make_dir("a/b/c") == made  # existing: fine


def test_make_dir_refuses_a_file_and_outside(layout):
    sb = _Sandbox([str(layout / "store")])
    with pytest.raises(SandboxError, match="is a file, not a directory"):
        sb.make_dir("inside.json")
    with pytest.raises(SandboxError, match="outside"):
        sb.make_dir("../outside/new")
    assert not (layout / "outside" / "new").exists()


@needs_symlinks
def test_make_dir_refuses_symlinks_out_and_loops(layout):
    sb = _Sandbox([str(layout / "store")])
    before = snapshot(layout / "outside")
    for path in ("link_dir", "link_dir/new", "link_dir/a/b"):
        with pytest.raises(SandboxError, match="outside"):
            sb.make_dir(path)
    with pytest.raises(SandboxError, match="cannot be created"):
        sb.make_dir("loop")
    assert snapshot(layout / "outside") == before


# ---- end to end: the attack list ----

REFUSE = "refuse"


def _write(subdir: str = "", name: str = None):
    """Expected: a file written under store/subdir (named `name` when given)."""
    return ("write", subdir, name)


# {store}, {outside} and {evil} (the sibling store-evil) are filled in with the real directories.
STORAGE_CASES = [
        ("../outside", REFUSE),
        ("a/../../outside", REFUSE),
        ("..", REFUSE),
        ("../store-evil", REFUSE),
        ("{outside}", REFUSE),
        ("{evil}", REFUSE),                         # the sibling whose name starts with store's
        ("{store}-evil/deeper", REFUSE),
        ("{store}/../outside", REFUSE),
        ("link_dir", REFUSE),                       # symlink inside pointing at a directory outside
        ("link_dir/sub", REFUSE),                   # ... and a directory it would create out there
        ("link_dir/../escape", REFUSE),
        ("link_file.json", REFUSE),                 # symlink inside pointing at a file outside
        ("inside.json", REFUSE),                    # a file, not a directory
        ("loop", REFUSE),                           # symlink loop
        ("a\x00b", REFUSE),
        ("a\nb", REFUSE),
        ("a\tb", REFUSE),
        ("C:\\x", REFUSE),
        ("C:/x", REFUSE),
        ("c:x", REFUSE),
        ("\\\\server\\share", REFUSE),
        ("\\\\?\\C:\\x", REFUSE),
        ("//server/share", REFUSE),
        ("~/x", REFUSE),                            # HOME is the outside directory
        ("~", REFUSE),
        ("/", REFUSE),
        ("/tmp", REFUSE),
        ("  ", REFUSE),
        ("%2e%2e", _write("%2e%2e")),               # not decoded: a directory of that name inside
        ("%2e%2e/%2e%2e/outside", _write("%2e%2e/%2e%2e/outside")),
        ("sub/../kept", _write("kept")),
        ("{store}/abs/inside", _write("abs/inside")),
        ("link_sub/via-link", _write("sub/via-link")),  # a symlink that stays inside is fine
        ("", _write("")),
]

FILENAME_CASES = [
        ("../x", REFUSE),
        ("a/../../x", REFUSE),
        ("/abs/x", REFUSE),
        ("..", REFUSE),
        (".", REFUSE),
        ("...", REFUSE),
        ("x\x00y", REFUSE),
        ("x\ny", REFUSE),
        ("x\x7fy", REFUSE),
        ("C:\\x", REFUSE),
        ("\\\\server\\share", REFUSE),
        ("\\\\?\\C:\\x", REFUSE),
        ("~/x", REFUSE),
        ("  ", REFUSE),
        ("C:x", _write(name="C_x.json")),
        ("CON", _write(name="_CON.json")),
        ("nul.csv", _write(name="_nul.json")),
        ("COM1.json", _write(name="_COM1.json")),
        ("LPT9", _write(name="_LPT9.json")),
        ("lpt9.tar", _write(name="_lpt9.tar.json")),
        ("aux .txt", _write(name="_aux.json")),
        ("report. . .", _write(name="report.json")),
        ("report.json.", _write(name="report.json")),
        ("report.json.gz", _write(name="report.json")),
        ("  spaced  ", _write(name="spaced.json")),
        ("a" * 300, _write(name="a" * 200 + ".json")),
        ("\u00e9" * 300, _write(name="\u00e9" * 100 + ".json")),
        ("%2e%2e", _write(name="%2e%2e.json")),
        ('w<h>a:t"|?*', _write(name="w_h_a_t____.json")),
        ("~", _write(name="~.json")),
]


# Names of the store's own symlinks: stored next to them (storage_path ""), never through them.
LINK_NAME_CASES = [
    ("link_file", "link_file-1.json"),  # link_file.json exists (a link to a file outside)
    ("dangling", "dangling-1.json"),    # dangling.json points at a file outside that does not exist
    ("loop", "loop.json"),              # the link is named loop, not loop.json: the name is free
]


class Box:
    def __init__(self, root: Path, world: World) -> None:
        self.root, self.world = root, world
        self.store, self.outside, self.evil = root / "store", root / "outside", root / "store-evil"
        self.real_store = os.path.realpath(self.store)
        self.proxy = None
        self.n = 0

    def fill(self, template: str, quote: bool = False) -> str:
        """A case's {store}/{outside}/{evil} replaced by the directories (percent-encoded for URIs)."""
        enc = urllib.parse.quote if quote else str
        return (template.replace("{store}", enc(str(self.store))).replace("{outside}", enc(str(self.outside)))
                .replace("{evil}", enc(str(self.evil))))

    def calls(self) -> int:
        return len(self.world.events("up", "call"))

    def outside_snapshot(self):
        return snapshot(self.root, skip=(self.store,))

    def store_links(self):
        return {k: v for k, v in snapshot(self.store).items() if v[0] == "link"}


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    if sys.platform == "win32":  # symlinks need privileges there, and the expectations are POSIX's
        pytest.skip("the attack list's expectations are the POSIX ones")
    tmp = tmp_path_factory.mktemp("attacks")
    root = tmp / "box"
    world = World(tmp)
    b = Box(root, world)
    for d in (b.store, b.outside, b.evil):
        d.mkdir(parents=True)
    (b.outside / "secret.json").write_text('{"secret": "outside"}')
    (b.evil / "secret.json").write_text('{"secret": "sibling"}')
    (b.store / "inside.json").write_text('{"inside": true}')
    (b.store / "sub").mkdir()
    os.symlink(b.outside, b.store / "link_dir")
    os.symlink(b.outside / "secret.json", b.store / "link_file.json")
    os.symlink(b.outside / "created-by-attack.json", b.store / "dangling.json")
    os.symlink(b.store / "loop", b.store / "loop")
    os.symlink(b.store / "inside.json", b.store / "link_inside.json")
    os.symlink(b.store / "sub", b.store / "link_sub")
    world.fake("up")
    b.proxy = world.start(str(b.store), env=world.env(HOME=str(b.outside)))
    try:
        yield b
    finally:
        world.cleanup()


def _names_path_and_dirs(text: str, value: str, box: Box) -> None:
    assert value in text or repr(value) in text, f"the refusal does not name {value!r}: {text}"
    assert f"Allowed directories: {box.real_store}" in text, f"the refusal does not name the allowed directory: {text}"


def _check_store_attack(box: Box, field: str, value: str, expect, storage: str = None,
                        via: str = "call_tool_and_store") -> None:
    """Store through `via` with `field` set to `value`; check the outcome is `expect`."""
    box.n += 1
    marker = f"m{box.n}"
    args = {"server": "up", "tool_name": "echo_args", "tool_args": {"marker": marker}, field: value}
    content = {"marker": marker}
    if via == "call_tool_with_file_content":  # the response stored with response_format
        args.update(file_path="inside.json", data_key="file", response_format="json")
        content = {"marker": marker, "file": {"inside": True}}
    if field == "filename":  # each case its own directory unless it needs the store's own links
        args["storage_path"] = f"case{box.n}" if storage is None else storage
    else:  # one name per tool: both store into the same folders
        args["filename"] = "out" if via == "call_tool_and_store" else "out-fc"
    before, links, files = box.outside_snapshot(), box.store_links(), files_under(box.store)
    res = box.proxy.call_tool(via, args)
    assert box.outside_snapshot() == before, "something outside the allowed directory changed"
    assert box.store_links() == links, "a symlink inside the allowed directory changed"
    new = {k: v for k, v in files_under(box.store).items() if k not in files}
    if expect == REFUSE:
        assert res.get("isError") is True, f"{field}={value!r} was accepted: {res}"
        _names_path_and_dirs(text_of(res), value, box)
        assert new == {}
        return
    assert not res.get("isError"), text_of(res)
    path = res["structuredContent"]["path"]
    rel = os.path.relpath(path, box.real_store)
    _, subdir, name = expect
    folder = args["storage_path"] if field == "filename" else subdir
    assert os.path.dirname(rel) == (os.path.normpath(folder) if folder else ""), rel
    assert os.path.basename(path) == (name or args["filename"] + ".json")
    assert list(new) == [rel]
    assert json.loads(new[rel]) == content
    base = os.path.basename(path)
    assert len(base.encode("utf-8")) <= 255 and not any(ord(c) < 32 for c in base)


VIA = ["call_tool_and_store", "call_tool_with_file_content"]


@pytest.mark.parametrize("via", VIA)
@pytest.mark.parametrize("value, expect", STORAGE_CASES, ids=[repr(c[0])[:60] for c in STORAGE_CASES])
def test_storage_path_attack(box, value, expect, via):
    _check_store_attack(box, "storage_path", box.fill(value), expect, via=via)


@pytest.mark.parametrize("via", VIA)
@pytest.mark.parametrize("value, expect", FILENAME_CASES, ids=[repr(c[0])[:60] for c in FILENAME_CASES])
def test_filename_attack(box, value, expect, via):
    _check_store_attack(box, "filename", value, expect, via=via)


def test_attack_lists_are_long_enough():
    assert len(STORAGE_CASES) >= 30 and len(FILENAME_CASES) >= 30 and len(FILE_CASES) >= 30


@pytest.mark.parametrize("name, expected", LINK_NAME_CASES)
def test_filename_of_a_symlink_is_not_followed(box, name, expected):
    _check_store_attack(box, "filename", name, _write(name=expected), storage="")
    # Again: the second store must not go through the link either, nor replace the first file.
    again = {"link_file-1.json": "link_file-2.json", "dangling-1.json": "dangling-2.json",
             "loop.json": "loop-1.json"}[expected]
    _check_store_attack(box, "filename", name, _write(name=again), storage="",
                        via="call_tool_with_file_content")


FILE_CASES = [
        "../outside/secret.json",
        "a/../../outside/secret.json",
        "sub/../../outside/secret.json",
        "{outside}/secret.json",
        "{evil}/secret.json",
        "{store}-evil/secret.json",
        "{store}/../outside/secret.json",
        "link_dir/secret.json",
        "link_file.json",
        "dangling.json",
        "loop",
        "link_dir",
        "..",
        ".",
        "sub",
        "secret.json\x00.txt",
        "inside.json\n",
        "C:\\secret.json",
        "C:/secret.json",
        "\\\\server\\share\\secret.json",
        "\\\\?\\C:\\secret.json",
        "//server/share/secret.json",
        "~/secret.json",
        "/etc/passwd",
        "/proc/self/environ",
        "%2e%2e/outside/secret.json",
        "..%2foutside%2fsecret.json",
        "CON",
        "NUL.json",
        "missing.json",
]


@pytest.mark.parametrize("value", FILE_CASES, ids=[repr(c)[:60] for c in FILE_CASES])
def test_file_path_attack(box, value):
    value = box.fill(value)
    calls, before = box.calls(), box.outside_snapshot()
    res = box.proxy.call_tool("call_tool_with_file_content", {
        "server": "up", "tool_name": "echo_args", "file_path": value, "data_key": "data"})
    assert res.get("isError") is True, f"file_path={value!r} was read: {res}"
    _names_path_and_dirs(text_of(res), value, box)
    assert "secret" not in text_of(res).replace("secret.json", "")
    assert box.calls() == calls, "the upstream tool was called"
    assert box.outside_snapshot() == before


@pytest.mark.parametrize("value", ["inside.json", "sub/../inside.json", "link_inside.json", "./inside.json",
                                   "INSIDE"])
def test_file_path_inside_is_read(box, value):
    if value == "INSIDE":
        value = str(box.store / "inside.json")
    calls = box.calls()
    res = box.proxy.call_tool("call_tool_with_file_content", {
        "server": "up", "tool_name": "echo_args", "file_path": value, "data_key": "data"})
    assert not res.get("isError"), text_of(res)
    got = box.world.events("up", "call")
    assert len(got) == calls + 1 and got[-1]["arguments"] == {"data": {"inside": True}}


# {store}, {outside} and {evil} become the percent-encoded directories; nothing is normalised.
URI_CASES = [
    ("file://{outside}/secret.json", -32602),
    ("file://{evil}/secret.json", -32602),
    ("file://{store}/../outside/secret.json", -32602),
    ("file://{store}/%2e%2e/outside/secret.json", -32602),
    ("file://{store}/%2E%2E%2Foutside%2Fsecret.json", -32602),
    ("file://{store}/link_file.json", -32602),
    ("file://{store}/link_dir/secret.json", -32602),
    ("file://{store}/dangling.json", -32602),
    ("file://{store}-evil/secret.json", -32602),
    ("file://{store}/inside.json%00.txt", -32602),
    ("file://{store}/x%0Ay", -32602),
    ("file:///etc/passwd", -32602),
    ("file:///C:/secret.json", -32602),
    ("file://server/share/secret.json", -32602),
    ("http://example.com/secret.json", -32602),
    ("file://{store}/missing.json", -32002),
    ("file://{store}/sub", -32002),
    ("file://{store}/loop", -32002),
]


@pytest.mark.parametrize("uri, code", URI_CASES, ids=[c[0][:60] for c in URI_CASES])
def test_resources_read_attack(box, uri, code):
    uri = box.fill(uri, quote=True)
    before = box.outside_snapshot()
    resp = box.proxy.request("resources/read", {"uri": uri})
    assert "error" in resp, f"{uri} was read: {resp}"
    err = resp["error"]
    assert err["code"] == code, err
    assert "secret" not in json.dumps(err).replace("secret.json", "")
    if code == -32602 and uri.startswith("file:///"):
        assert f"Allowed directories: {box.real_store}" in err["message"], err  # names the allowed directory
    assert box.outside_snapshot() == before


def test_resources_read_inside_by_uri(box):
    got = box.proxy.result("resources/read", {"uri": (box.store / "inside.json").as_uri()})
    assert got["contents"][0]["text"] == '{"inside": true}'
    assert got["contents"][0]["mimeType"] == "application/json"
    via_link = box.proxy.result("resources/read", {"uri": (box.store / "link_inside.json").as_uri()})
    assert via_link["contents"][0]["text"] == '{"inside": true}'


def test_attack_module_left_outside_untouched(box):
    """After every attack above: the files outside are exactly the ones the fixture made."""
    assert files_under(box.outside) == {"secret.json": b'{"secret": "outside"}'}
    assert files_under(box.evil) == {"secret.json": b'{"secret": "sibling"}'}
    assert not os.path.lexists(box.outside / "created-by-attack.json")
    assert abstract._WINDOWS is False  # these expectations are the POSIX ones
