"""Races against the sandbox: the tree is changed from another thread while Abstract stores and
reads (a real `python abstract.py` over pipes), and nothing may ever be written or read outside
the allowed directory. Each race runs for a few seconds; the counts go in the failure message.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Callable, List

import pytest

from conftest import World, text_of

pytestmark = pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt", reason="POSIX races")

RACE_S = 3.0  # how long each race runs
BATCH = 8  # requests in flight at once, so several workers race the swapper together
SECRET = "S3CRET-outside-the-sandbox"


class Swapper:
    """Runs `step` in a loop on a thread until stopped; counts the swaps made."""

    def __init__(self, step: Callable[[int], None]) -> None:
        self.step, self.swaps, self._stop = step, 0, threading.Event()
        self.errors: List[BaseException] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step(self.swaps)
            except OSError as e:  # the store may hold a name for a moment; try the next round
                self.errors.append(e)
            self.swaps += 1

    def __enter__(self) -> "Swapper":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def _race(proxy, make_request: Callable[[int], tuple], seconds: float = RACE_S) -> List[dict]:
    """Send batches of requests for `seconds`; every one must be answered (bounded wait)."""
    answers, deadline, n = [], time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        ids = []
        for _ in range(BATCH):
            method, params = make_request(n)
            ids.append(proxy.send_request(method, params))
            n += 1
        answers += [proxy.wait_response(i, timeout=30) for i in ids]
    return answers


def _files(root: Path) -> List[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.fixture
def setup(world: World, tmp_path: Path):
    world.fake("up")
    store, outside = world.dir, tmp_path / "outside"
    store.mkdir()
    outside.mkdir()
    (outside / "secret.json").write_text(json.dumps({"s": SECRET}))
    proxy = world.start(str(store))
    return world, proxy, store, outside


def test_stores_never_land_outside_while_the_folder_is_swapped_for_a_symlink(setup):
    _, proxy, store, outside = setup
    sub = store / "sub"
    sub.mkdir()

    def swap(i: int) -> None:  # the real folder moved aside (inside), a symlink out in its place
        os.rename(sub, store / f"parked-{i}")
        os.symlink(outside, sub)
        os.unlink(sub)
        os.mkdir(sub)

    def store_call(n: int) -> tuple:
        return "tools/call", {"name": "call_tool_and_store", "arguments": {
            "server": "up", "tool_name": "echo", "tool_args": {"text": f"row {n}"}, "storage_path": "sub",
            "file_format": "txt"}}

    with Swapper(swap) as swapper:
        answers = _race(proxy, store_call)
    landed = _files(outside)
    assert landed == ["secret.json"], (f"{len(landed) - 1} files written outside in {len(answers)} stores "
                                       f"({swapper.swaps} swaps): {landed[:10]}")
    stored = [a for a in answers if "result" in a and not a["result"].get("isError")]
    assert stored and swapper.swaps > 10, f"the race did not run: {len(stored)} stored, {swapper.swaps} swaps"
    assert all("error" not in a for a in answers), [a for a in answers if "error" in a][:3]
    # every file that was stored is inside, whole
    inside = [p for p in store.rglob("*.txt") if not p.is_symlink()]
    assert len(inside) == len(stored), (len(inside), len(stored))


def _flip(store: Path, outside: Path, other: Callable[[Path], None]) -> Callable[[int], None]:
    """A step that makes store/f.json a regular file, then `other` (a symlink out, a FIFO)."""
    target = store / "f.json"

    def step(i: int) -> None:
        tmp = store / f".flip-{i}"
        tmp.write_text(json.dumps({"ok": i}))
        os.replace(tmp, target)
        other(tmp)
        os.replace(tmp, target)

    return step


def _read_call(uri: str) -> Callable[[int], tuple]:
    """Alternately call_tool_with_file_content (file_path) and resources/read of store/f.json."""
    def make(n: int) -> tuple:
        if n % 2:
            return "resources/read", {"uri": uri}
        return "tools/call", {"name": "call_tool_with_file_content", "arguments": {
            "server": "up", "tool_name": "echo_args", "file_path": "f.json", "data_key": "data"}}

    return make


def test_reads_never_return_an_outside_file_while_a_file_flips_to_a_symlink(setup):
    world, proxy, store, outside = setup
    with Swapper(_flip(store, outside, lambda tmp: os.symlink(outside / "secret.json", tmp))) as swapper:
        answers = _race(proxy, _read_call((store / "f.json").as_uri()))
    leaked = [a for a in answers if SECRET in json.dumps(a)]
    sent = [e for e in world.events("up", "call") if SECRET in json.dumps(e)]
    internal = [a for a in answers if a.get("error", {}).get("code") == -32603]
    assert not leaked and not sent, (f"{len(leaked)} of {len(answers)} reads returned the outside file, "
                                     f"{len(sent)} sent it upstream ({swapper.swaps} swaps)")
    assert not internal, f"{len(internal)} internal errors: {internal[:2]}"
    ok = [a for a in answers if "result" in a and not a["result"].get("isError")]
    assert ok and swapper.swaps > 10, f"the race did not run: {len(ok)} read, {swapper.swaps} swaps"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_swapped_in_for_a_file_never_blocks_a_worker(setup):
    _, proxy, store, outside = setup
    with Swapper(_flip(store, outside, os.mkfifo)) as swapper:
        # every request answered within _race's bound: a worker stuck in a FIFO's open() never is
        answers = _race(proxy, _read_call((store / "f.json").as_uri()))
    assert swapper.swaps > 10 and answers
    assert proxy.request("ping", timeout=10).get("result") == {}
    fifo = store / "fifo.json"
    os.mkfifo(fifo)
    res = proxy.call_tool("call_tool_with_file_content", {"server": "up", "tool_name": "echo_args",
                                                          "file_path": "fifo.json", "data_key": "data"}, timeout=10)
    assert res.get("isError") is True and "not a regular file" in text_of(res), res
    resp = proxy.request("resources/read", {"uri": fifo.as_uri()}, timeout=10)
    assert "Resource not found" in resp["error"]["message"], resp


def test_a_hard_link_to_an_outside_file_is_not_read(setup):
    world, proxy, store, outside = setup
    try:
        os.link(outside / "secret.json", store / "linked.json")
    except OSError as e:  # pragma: no cover (a file system without hard links)
        pytest.skip(f"no hard links here: {e}")
    res = proxy.call_tool("call_tool_with_file_content", {"server": "up", "tool_name": "echo_args",
                                                          "file_path": "linked.json", "data_key": "data"})
    assert res.get("isError") is True and "2 hard links" in text_of(res), res
    resp = proxy.request("resources/read", {"uri": (store / "linked.json").as_uri()})
    assert "2 hard links" in resp["error"]["message"], resp
    assert SECRET not in json.dumps(resp) + json.dumps(res)
    assert not [e for e in world.events("up", "call") if SECRET in json.dumps(e)]


@pytest.mark.parametrize("key", ["storage_path", "filename", "file_path", "uri"])
def test_a_lone_surrogate_in_a_path_is_a_clear_refusal(setup, key):
    _, proxy, store, outside = setup
    bad = "a\ud800b"
    if key == "uri":
        resp = proxy.request("resources/read", {"uri": store.as_uri() + "/" + bad})
        assert resp["error"]["code"] == -32602 and "lone surrogate" in resp["error"]["message"], resp
        return
    if key == "file_path":
        res = proxy.call_tool("call_tool_with_file_content", {"server": "up", "tool_name": "echo_args",
                                                              "file_path": bad, "data_key": "data"})
    else:
        res = proxy.call_tool("call_tool_and_store", {"server": "up", "tool_name": "echo",
                                                      "tool_args": {"text": "x"}, key: bad})
    assert res.get("isError") is True and "lone surrogate" in text_of(res), res


def _tree(root: Path) -> dict:
    """Every name under `root` with its mode (and a file's bytes): what a test compares before and after."""
    out = {".": oct(root.stat().st_mode)}
    for p in root.rglob("*"):
        st = p.lstat()
        out[str(p.relative_to(root))] = (oct(st.st_mode), p.read_bytes() if p.is_file() and not p.is_symlink() else None)
    return out


def test_the_cache_folder_swapped_for_a_symlink_never_leads_cache_files_outside(world: World, tmp_path: Path):
    world.fake("up")
    store, outside = world.dir, tmp_path / "outside"
    store.mkdir()
    outside.mkdir(mode=0o755)
    outside.chmod(0o755)
    (outside / "notes.txt").write_text("the user's own file")
    before = _tree(outside)
    proxy = world.start(str(store))
    cache = tmp_path / "cache"

    def swap(i: int) -> None:  # the cache folder moved aside, a symlink out in its place, then gone
        os.rename(cache, tmp_path / f"parked-{i}")  # FileNotFoundError while Abstract has not made it again
        os.symlink(outside, cache)
        os.unlink(cache)

    def big_call(n: int) -> tuple:
        return "tools/call", {"name": "call_tool", "arguments": {"server": "up", "tool_name": "big",
                                                                 "tool_args": {"mb": 0.1}}}

    with Swapper(swap) as swapper:
        answers = _race(proxy, big_call)
    after = _tree(outside)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, (f"{len(changed)} names written, changed or deleted outside in {len(answers)} cached calls "
                         f"({swapper.swaps} swaps): {changed[:10]}")
    cached = [a for a in answers if "result" in a and "Token: " in text_of(a["result"])]
    renamed = swapper.swaps - len([e for e in swapper.errors if isinstance(e, FileNotFoundError)])
    assert cached and renamed > 5, f"the race did not run: {len(cached)} cached, {renamed} swaps"
    assert all("error" not in a for a in answers), [a for a in answers if "error" in a][:3]


# Flips a folder and a symlink out in its place, by turns, until its stdin closes; prints how many
# flips it made. Its own process: in-process threads would take turns on the GIL every 5 ms
# (sys.getswitchinterval), far too coarse to race a walk, where an attacker's process is not.
_FLIPPER = """
import os, sys, threading
sub, outside, parked = sys.argv[1:4]
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
n = 0
while not done.is_set():
    try:
        if n % 2 == 0:
            os.rename(sub, parked)
            os.symlink(outside, sub)
        else:
            os.unlink(sub)
            os.rename(parked, sub)
    except OSError:
        pass
    n += 1
print(n)
"""


def _race_in_process(sub: Path, outside: Path, run: Callable[[], None], seconds: float = RACE_S) -> tuple:
    """Call `run` in a loop for `seconds` while another process flips `sub` and a symlink to
    `outside`; (runs, flips). `sub` is a real folder again at the end."""
    import subprocess
    import sys

    parked = sub.parent / "parked"
    flipper = subprocess.Popen([sys.executable, "-c", _FLIPPER, str(sub), str(outside), str(parked)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        runs, deadline = 0, time.monotonic() + seconds
        while time.monotonic() < deadline:
            run()
            runs += 1
        out, _ = flipper.communicate("", timeout=30)
    finally:
        if flipper.poll() is None:
            flipper.kill()
            flipper.wait(10)
    if sub.is_symlink():
        sub.unlink()
    if parked.exists():
        parked.rename(sub)
    return runs, int(out or 0)


def test_the_temp_sweep_never_deletes_outside_while_a_folder_is_swapped_for_a_symlink(tmp_path: Path):
    import abstract

    store, outside = tmp_path / "store", tmp_path / "outside"
    sub = store / "sub"
    sub.mkdir(parents=True)
    outside.mkdir()

    def temps(folder: Path, n: int, age: float = 7200) -> List[Path]:
        made = [folder / f".abstract-{i:016x}.tmp" for i in range(n)]
        for p in made:
            p.write_text("left by a killed writer")
            os.utime(p, (time.time() - age, time.time() - age))
        return made

    theirs = temps(outside, 200)
    temps(sub, 200, age=0)  # the same names inside, but new: listed inside, checked and deleted through the link
    temps(store, 1)
    assert abstract._sweep_temps([str(store)]) == 1  # the sweep works: its own names, old, inside

    sweeps, flips = _race_in_process(sub, outside, lambda: abstract._sweep_temps([str(store)]))
    gone = [p.name for p in theirs if not p.exists()]
    assert not gone, f"{len(gone)} of {len(theirs)} files deleted outside in {sweeps} sweeps ({flips} flips)"
    assert sweeps > 10 and flips > 10, f"the race did not run: {sweeps} sweeps, {flips} flips"


class _Listed:
    """What os.scandir returns (an iterator and a context manager), listed in advance."""

    def __init__(self, entries: list) -> None:
        self._it = iter(entries)

    def __iter__(self) -> "_Listed":
        return self

    def __next__(self) -> os.DirEntry:
        return next(self._it)

    def __enter__(self) -> "_Listed":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    close = __exit__


@pytest.fixture
def swapped_after_listing(tmp_path: Path, monkeypatch):
    """store/sub, swapped for a symlink to `outside` the moment a walk has listed it: the race
    the loops above win only now and then, won every time (os.walk lists through os.scandir too)."""
    store, outside = tmp_path / "store", tmp_path / "outside"
    sub = store / "sub"
    sub.mkdir(parents=True)
    outside.mkdir()
    ino, real_scandir = sub.stat().st_ino, os.scandir

    def scandir(target=".") -> _Listed:
        with real_scandir(target) as it:
            listed = _Listed(list(it))
        st = os.fstat(target) if isinstance(target, int) else os.stat(target)
        if st.st_ino == ino and not sub.is_symlink():
            os.rename(sub, store / "parked")
            os.symlink(outside, sub)
        return listed

    monkeypatch.setattr(os, "scandir", scandir)
    return store, sub, outside


def test_the_temp_sweep_deletes_nothing_through_a_folder_swapped_after_listing(swapped_after_listing):
    import abstract

    store, sub, outside = swapped_after_listing
    for folder, age in ((outside, 7200), (sub, 0)):  # the same names; only the outside ones are old
        for i in range(3):
            p = folder / f".abstract-{i:016x}.tmp"
            p.write_text("x")
            os.utime(p, (time.time() - age, time.time() - age))
    abstract._sweep_temps([str(store)])
    assert sub.is_symlink(), "the walk never listed store/sub"
    left = sorted(p.name for p in outside.iterdir())
    assert len(left) == 3, f"{3 - len(left)} of 3 files deleted outside"


def test_reindex_reads_nothing_through_a_folder_swapped_after_listing(swapped_after_listing):
    import abstract

    if abstract.sqlite3 is None:
        pytest.skip("no sqlite3")
    store, sub, outside = swapped_after_listing
    (sub / "data.txt").write_text("harmless")
    (outside / "data.txt").write_text(SECRET)
    catalog = abstract._Catalog()
    summary = abstract._reindex(catalog, [str(store)], [])
    assert sub.is_symlink(), "the walk never listed store/sub"
    assert not catalog.search("S3CRET")["results"], summary
    catalog.close()
