"""The sandbox on Windows and macOS (issue 29): names compared as the file system compares them,
walks that never enter a junction, UNC links read back, and the writer and the login store on file
systems and with programs that Linux does not have (FAT ids, sharing violations, antivirus).

Only Linux runs here. Path logic runs with the platform set (PureWindowsPath, `_WINDOWS`,
`_DIR_FDS`) against this machine's real files, and the system calls Windows answers differently
are replaced by recordings of what Windows does (rename that never replaces, winerror 32, a
junction's attributes). What needs the real system has a Windows-only or macOS-only test below,
skipped here with the reason.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import unicodedata
from pathlib import Path, PureWindowsPath

import pytest

import abstract
from abstract import _Sandbox, SandboxError

windows_only = pytest.mark.skipif(sys.platform != "win32",
                                  reason="needs NTFS, junctions or Windows file sharing")
macos_only = pytest.mark.skipif(sys.platform != "darwin",
                                reason="needs APFS or HFS+ (case- and normalisation-insensitive)")


def _sharing_violation(path: str = "f") -> PermissionError:
    """The error Windows raises for a file another program holds (ERROR_SHARING_VIOLATION)."""
    e = PermissionError(errno.EACCES, "The process cannot access the file because it is being "
                                      "used by another process", path)
    e.winerror = 32
    return e


@pytest.fixture
def as_windows(monkeypatch):
    """This process taking Windows' code paths: no descriptor-relative calls, paths checked again
    after use, rename to publish (os functions stay Linux's unless a test records Windows')."""
    monkeypatch.setattr(abstract, "_WINDOWS", True)
    monkeypatch.setattr(abstract, "_DIR_FDS", False)


# ---- 1. look-alike names: the file system decides, not str.casefold ----

# (allowed folder, a name casefold calls equal to it (or nearly), why they differ on disk)
LOOKALIKES = [
    ("Desktop", "Des\u212atop", "Kelvin sign: casefold makes it k, NTFS keeps it"),
    ("Stra\u00dfe", "STRASSE", "casefold expands \u00df to ss (one character becomes two)"),
    ("Strasse", "Stra\u017fse", "long s: casefold makes it s, NTFS keeps it"),
    ("Kim", "K\u0131m", "dotless i: str.upper makes it I, NTFS keeps it"),
    ("\u0130stanbul", "i\u0307stanbul", "Turkish dotted I: casefold gives i + U+0307 (longer)"),
    ("\u03bf\u03b4\u03bf\u03c2", "\u03bf\u03b4\u03bf\u03c3", "Greek final sigma folds to sigma"),
    ("Caf\u00e9", "Cafe\u0301", "NFC and NFD: one folder on macOS, two here"),
]


@pytest.mark.parametrize("name, lookalike, why", LOOKALIKES, ids=[w for _, _, w in LOOKALIKES])
def test_lookalike_folder_is_refused_where_the_file_system_keeps_it_apart(
        tmp_path, as_windows, name, lookalike, why):
    """Issue 29.1: with `...\\Desktop\\outputs` allowed, `...\\Des<Kelvin>top\\outputs` passed the
    casefold check and make_dir created that folder outside. This file system keeps each pair
    apart, as NTFS does (and a case-sensitive NTFS folder keeps every pair apart): refused, and
    nothing is created."""
    allowed = tmp_path / name / "outputs"
    allowed.mkdir(parents=True)
    sb = _Sandbox([str(allowed)])
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(SandboxError, match="outside the allowed directories"):
        sb.make_dir(str(tmp_path / lookalike / "outputs" / "sub"))
    with pytest.raises(SandboxError, match="outside the allowed directories"):
        sb.resolve(str(tmp_path / lookalike / "outputs" / "report.csv"))
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no look-alike folder made


def test_length_changing_fold_never_lands_in_a_wrong_subfolder(tmp_path, monkeypatch):
    """Issue 29.1, macOS: the walk cut `real[len(root):]`; casefold makes "Straße" one character
    longer, so ".../strasse/sub" was created as Straße/e/sub and the answer named a folder that
    does not exist. (`_folds_case` forces the old case-insensitive branch; the new code has no
    such guess and asks the file system, which here keeps the names apart.)"""
    monkeypatch.setattr(abstract, "_MACOS", True)
    monkeypatch.setattr(abstract, "_folds_case", lambda path: True, raising=False)
    allowed = tmp_path / "Stra\u00dfe"
    allowed.mkdir()
    sb = _Sandbox([str(allowed)])
    try:
        with sb.make_dir(str(tmp_path / "strasse" / "sub")) as d:
            assert os.path.isdir(d), f"the answer names {d}, which does not exist"
    except SandboxError as e:
        assert "outside the allowed directories" in str(e)
    assert not (allowed / "e").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Stra\u00dfe"]


def _apfs_like(monkeypatch):
    """This file system answering as APFS does by default: names that differ only in case or
    normalisation are one folder (recorded as: _same_dir says so when both exist folded)."""
    def same(a: str, b: str) -> bool:
        return abstract._caseless(a) == abstract._caseless(b) and os.path.isdir(b)
    monkeypatch.setattr(abstract, "_same_dir", same)


@pytest.mark.parametrize("spelling", ["Caf\u00e9", "Cafe\u0301", "CAF\u00c9", "cafe\u0301"],
                         ids=["nfc", "nfd", "upper-nfc", "lower-nfd"])
@pytest.mark.parametrize("root_form", ["NFC", "NFD"])
def test_nfc_and_nfd_spellings_of_an_allowed_folder_are_inside_on_a_macos_volume(
        tmp_path, monkeypatch, spelling, root_form):
    """Issue 29.10: an allowed folder given in NFC and a path in NFD (or the reverse) was refused.
    On a volume that treats them as one folder they are inside, and the file lands in the
    allowed folder itself (the walk goes by components, so no length is assumed)."""
    _apfs_like(monkeypatch)
    allowed = tmp_path / unicodedata.normalize(root_form, "Caf\u00e9")
    allowed.mkdir()
    sb = _Sandbox([str(allowed)])
    with sb.make_dir(str(tmp_path / spelling / "sub" / "deeper")) as d:
        path = abstract._write_new(d, "report", ".txt", b"x")
    assert (allowed / "sub" / "deeper" / "report.txt").read_bytes() == b"x"
    assert sorted(p.name for p in tmp_path.iterdir()) == [allowed.name]
    assert os.path.basename(path) == "report.txt"


def test_same_spelling_on_a_volume_that_says_different_is_refused(tmp_path, monkeypatch):
    """The file system has the last word: names _caseless calls equal are refused when the ids
    differ (a case-sensitive folder, or st_ino 0 from a share that gives no ids)."""
    allowed = tmp_path / "Out"
    allowed.mkdir()
    (tmp_path / "OUT").mkdir()  # a different folder here (ext4 is case-sensitive)
    sb = _Sandbox([str(allowed)])
    with pytest.raises(SandboxError, match="outside"):
        sb.resolve(str(tmp_path / "OUT" / "x"))
    real_stat = os.stat

    def no_ids(p, *a, **kw):
        r = real_stat(p, *a, **kw)
        return os.stat_result((r.st_mode, 0, 0) + tuple(r)[3:])
    monkeypatch.setattr(os, "stat", no_ids)
    assert not abstract._same_dir(str(allowed), str(allowed))  # ids 0: never taken at its word
    assert sb.resolve(str(allowed / "x")) == str(allowed / "x")  # the exact name needs no id


# NTFS, recorded: which spellings name which folder (the file ids an NTFS volume answers with).
# NTFS upcases one UTF-16 unit at a time with its $UpCase table: "desktop" is "Desktop", but the
# Kelvin sign, "ß", "ſ" and "ı" stay themselves, and a case-sensitive folder folds nothing.
NTFS_IDS = {
    "C:\\Users\\me\\Desktop\\outputs": 7, "c:\\users\\ME\\desktop\\OUTPUTS": 7,
    "C:\\Users\\me\\Des\u212atop\\outputs": 8,
    "C:\\Stra\u00dfe": 9, "C:\\STRA\u00dfE": 9, "C:\\STRASSE": 10,
    "C:\\cs\\Data": 11, "C:\\cs\\DATA": 12,  # a case-sensitive folder (fsutil setCaseSensitiveInfo)
    # Georgian: str.upper() maps U+10D0 to U+1C90 (Unicode 11); a volume whose $UpCase table is
    # older keeps them apart, so a table built from str.upper() would let the second one in
    "C:\\\u10d0": 13, "C:\\\u1c90": 14,
}


def _ntfs_same(a: str, b: str) -> bool:
    return a in NTFS_IDS and NTFS_IDS[a] == NTFS_IDS.get(b)


@pytest.mark.parametrize("real, root, below", [
    ("C:\\Users\\me\\Desktop\\outputs\\a\\b", "C:\\Users\\me\\Desktop\\outputs", ["a", "b"]),
    ("c:\\users\\ME\\desktop\\OUTPUTS\\a", "C:\\Users\\me\\Desktop\\outputs", ["a"]),
    ("C:\\Users\\me\\Des\u212atop\\outputs\\a", "C:\\Users\\me\\Desktop\\outputs", None),
    ("C:\\Users\\me\\Des\u212atop\\outputs", "C:\\Users\\me\\Desktop\\outputs", None),
    ("C:\\STRA\u00dfE\\a", "C:\\Stra\u00dfe", ["a"]),
    ("C:\\STRASSE\\a", "C:\\Stra\u00dfe", None),  # casefold equal, NTFS not: and never Straße/E
    ("C:\\Stra\u017fse\\a", "C:\\Strasse", None),
    ("C:\\cs\\DATA\\a", "C:\\cs\\Data", None),
    ("C:\\\u1c90\\a", "C:\\\u10d0", None),
    ("C:\\Users\\me\\Desktop\\outputs-evil\\a", "C:\\Users\\me\\Desktop\\outputs", None),
    ("D:\\Users\\me\\Desktop\\outputs\\a", "C:\\Users\\me\\Desktop\\outputs", None),
    ("\\\\server\\share\\out\\a", "\\\\server\\share\\out", ["a"]),
    ("\\\\server\\other\\out\\a", "\\\\server\\share\\out", None),
])
def test_windows_containment_is_by_components_and_file_ids(real, root, below):
    assert abstract._below(real, root, PureWindowsPath, _ntfs_same) == below


def test_caseless_is_only_a_filter():
    """_caseless equal is necessary, never sufficient: the cases casefold calls equal."""
    k = abstract._caseless
    assert k("Des\u212atop") == k("Desktop") and k("Stra\u00dfe") == k("STRASSE")
    assert k("\u03bf\u03b4\u03bf\u03c2") == k("\u039f\u0394\u039f\u03a3")
    assert k("Caf\u00e9") == k("CAFE\u0301")
    assert len(k("\u0130")) == 2 and len("\u0130") == 1  # İ folds to i + combining dot
    assert k("K\u0131m") != k("Kim")  # dotless i is its own letter even to casefold


@windows_only
def test_windows_kelvin_lookalike_on_ntfs_is_refused(tmp_path):
    allowed = tmp_path / "Desktop" / "outputs"
    allowed.mkdir(parents=True)
    sb = _Sandbox([str(allowed)])
    with pytest.raises(SandboxError, match="outside"):
        sb.make_dir(str(tmp_path / "Des\u212atop" / "outputs"))
    assert not (tmp_path / "Des\u212atop").exists()
    with sb.make_dir(str(tmp_path / "DESKTOP" / "OUTPUTS" / "sub")) as d:  # NTFS folds these
        assert os.path.isdir(d)
    assert (allowed / "sub").is_dir()


@macos_only
def test_macos_nfd_path_for_an_nfc_folder_is_inside(tmp_path):
    allowed = tmp_path / unicodedata.normalize("NFC", "Caf\u00e9")
    allowed.mkdir()
    sb = _Sandbox([str(allowed)])
    with sb.make_dir(str(tmp_path / unicodedata.normalize("NFD", "Caf\u00e9") / "sub")) as d:
        abstract._write_new(d, "r", ".txt", b"x")
    assert (allowed / "sub" / "r.txt").read_bytes() == b"x"
    with pytest.raises(SandboxError, match="outside"):
        sb.make_dir(str(tmp_path / "Stra\u00dfe-not-allowed"))


# ---- 2. walks never enter a junction (or any reparse point) ----

class _Entry:
    """An os.DirEntry as Windows lists a junction: is_dir(follow_symlinks=False) is True and
    is_symlink() False; only the attributes (from the listing) say it is a reparse point."""

    def __init__(self, real: os.DirEntry, attributes: int) -> None:
        self._real, self.name, self.path = real, real.name, real.path
        self._attributes = attributes

    def is_dir(self, follow_symlinks: bool = True) -> bool:
        return self._real.is_dir(follow_symlinks=follow_symlinks)

    def is_symlink(self) -> bool:
        return False

    def stat(self, follow_symlinks: bool = True):
        st = self._real.stat(follow_symlinks=follow_symlinks)
        return type("WinStat", (), {"st_mode": st.st_mode, "st_file_attributes":
                                    self._attributes, "st_reparse_tag": 0xA0000003})()


def _listing_junctions(monkeypatch, names: set) -> None:
    """os.scandir reporting the folders called `names` as junctions (FILE_ATTRIBUTE_REPARSE_POINT
    | FILE_ATTRIBUTE_DIRECTORY), every other entry with FILE_ATTRIBUTE_DIRECTORY or nothing."""
    real_scandir = os.scandir

    class Listing:
        def __init__(self, path):
            self._it = real_scandir(path)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._it.close()

        def __iter__(self):
            for e in self._it:
                yield _Entry(e, 0x410 if e.name in names else 0x10)
    monkeypatch.setattr(os, "scandir", Listing)


def _tree_with_a_junction(tmp_path: Path) -> Path:
    """allowed/ with a file and a folder, and allowed/link standing for a junction whose target
    (here a real folder, since Linux has none) holds what lies outside."""
    allowed = tmp_path / "allowed"
    (allowed / "inner").mkdir(parents=True)
    (allowed / "mine.txt").write_text("mine")
    (allowed / "inner" / "deep.txt").write_text("deep")
    (allowed / "link").mkdir()
    (allowed / "link" / "secret.txt").write_text("outside")
    return allowed


def test_walks_never_enter_a_junction(tmp_path, monkeypatch, as_windows):
    """Issue 29.2: a junction counted as a folder, so the walk (resources/list, --reindex, the
    quota, the sweep) went through it."""
    allowed = _tree_with_a_junction(tmp_path)
    _listing_junctions(monkeypatch, {"link"})
    walked = [name for _, name, _ in abstract._bounded_walk([str(allowed)])]
    assert "secret.txt" not in walked
    assert {"mine.txt", "deep.txt"} <= set(walked)
    listed = [os.path.basename(p) for p, _, _ in abstract._recent_files([str(allowed)])]
    assert sorted(listed) == ["deep.txt", "mine.txt"]
    used, complete = abstract._dir_usage(str(allowed))
    assert (used, complete) == (len("mine") + len("deep"), True)


def test_reindex_reads_nothing_behind_a_junction(tmp_path, monkeypatch, as_windows):
    allowed = _tree_with_a_junction(tmp_path)
    (allowed / "link" / "secret.csv").write_text("a,b\n1,2\n")
    (allowed / "mine.csv").write_text("a,b\n3,4\n")
    _listing_junctions(monkeypatch, {"link"})
    seen = []
    real_open = abstract._open_regular

    def recording(name, dfd=None):
        seen.append(os.path.basename(name))
        return real_open(name, dfd)
    monkeypatch.setattr(abstract, "_open_regular", recording)
    catalog = abstract._Catalog(":memory:")
    try:
        abstract._reindex(catalog, [str(allowed)], [])
    finally:
        catalog.close()
    assert "mine.csv" in seen and "secret.csv" not in seen and "secret.txt" not in seen


@windows_only
def test_windows_real_junction_is_listed_never_entered(tmp_path):
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("outside")
    (allowed / "mine.txt").write_text("mine")
    subprocess.run(["cmd", "/c", "mklink", "/J", str(allowed / "link"), str(outside)],
                   check=True, capture_output=True, timeout=60)
    walked = [name for _, name, _ in abstract._bounded_walk([str(allowed)])]
    assert "secret.txt" not in walked
    assert [os.path.basename(p) for p, _, _ in abstract._recent_files([str(allowed)])] == [
        "mine.txt"]
    with pytest.raises(SandboxError, match="outside"):
        _Sandbox([str(allowed)]).open_read(str(allowed / "link" / "secret.txt"))


# ---- 8. UNC links read back ----

@pytest.mark.parametrize("path, uri", [
    ("\\\\server\\share\\out\\report.csv", "file://server/share/out/report.csv"),
    ("\\\\server\\share\\a b\\%\u00e9.txt", "file://server/share/a%20b/%25%C3%A9.txt"),
    ("C:\\Users\\me\\out\\r.csv", "file:///C:/Users/me/out/r.csv"),
])
def test_windows_links_read_back_including_unc(path, uri):
    """Issue 29.8: a link to a file under \\\\server\\share is file://server/share/..., which
    resources/read refused (any non-empty host). Abstract reads back its own links."""
    assert abstract._file_uri(path, windows=True) == uri
    assert abstract._uri_to_path(uri, windows=True) == path
    assert PureWindowsPath(path).as_uri() == uri  # what Path.as_uri gives on Windows


@pytest.mark.parametrize("uri, path", [
    ("file:////server/share/x.txt", "\\\\server\\share\\x.txt"),  # the four-slash UNC form
    ("file://localhost/C:/x.txt", "C:\\x.txt"),
    ("file:///C|/x.txt", "C:\\x.txt"),
    ("file:///c:/", "c:\\"),
])
def test_windows_other_file_uri_forms(uri, path):
    assert abstract._uri_to_path(uri, windows=True) == path


def test_posix_refuses_a_host_and_says_why():
    assert abstract._uri_to_path("file:///tmp/a%20b", windows=False) == "/tmp/a b"
    assert abstract._uri_to_path("file://localhost/tmp/x", windows=False) == "/tmp/x"
    with pytest.raises(SandboxError, match="remote host.*Windows network share"):
        abstract._uri_to_path("file://server/share/x", windows=False)


@windows_only
def test_windows_unc_link_reads_back_through_the_sandbox(tmp_path):
    drive, rest = os.path.splitdrive(str(tmp_path))
    unc = f"\\\\localhost\\{drive[0]}$" + rest  # the administrative share of this drive
    if not os.path.isdir(unc):
        pytest.skip("administrative shares are off on this machine")
    (Path(unc) / "r.txt").write_text("hello")
    sb = _Sandbox([unc])
    f, real, size = sb.open_read(abstract._uri_to_path(abstract._file_uri(str(Path(unc) /
                                                                              "r.txt"))))
    with f:
        assert f.read() == b"hello" and size == 5


# ---- 9. FAT ids, sharing violations, antivirus ----

def test_store_without_hard_links_keeps_the_file_when_the_rename_changes_its_id(
        tmp_path, monkeypatch):
    """Issue 29.9: on FAT and exFAT (no hard links) the file is renamed into place, and its id
    is where its entry lies, so the rename changes it: the check unlinked the published file and
    failed the store. Recorded: os.link refused (EPERM, as vfat does), ids that change on rename."""
    def no_links(*a, **kw):
        raise PermissionError(errno.EPERM, "Operation not permitted")
    monkeypatch.setattr(os, "link", no_links)
    real_stat, real_replace, renamed = os.stat, os.replace, set()

    def replace(src, dst, **kw):
        real_replace(src, dst, **kw)
        renamed.add(os.path.basename(dst))

    def fat_stat(p, *a, **kw):
        r = real_stat(p, *a, **kw)
        if isinstance(p, str) and os.path.basename(p) in renamed:
            return os.stat_result((r.st_mode, r.st_ino + 1000) + tuple(r)[2:])
        return r
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "stat", fat_stat)
    (tmp_path / "report.csv").write_bytes(b"old")
    path = abstract._write_new(str(tmp_path), "report", ".csv", b"a,b\n1,2\n")
    assert os.path.basename(path) == "report-1.csv"
    assert (tmp_path / "report-1.csv").read_bytes() == b"a,b\n1,2\n"
    assert (tmp_path / "report.csv").read_bytes() == b"old"  # never overwritten
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report-1.csv", "report.csv"]


def test_store_without_hard_links_still_refuses_a_swapped_temporary_file(tmp_path, monkeypatch):
    """The check that remains (passes before the fix too): a temporary file replaced while
    written is not published."""
    monkeypatch.setattr(os, "link", lambda *a, **kw: (_ for _ in ()).throw(
        OSError(errno.ENOTSUP, "Operation not supported")))
    real_fdopen = os.fdopen

    class Swapping:
        """The writer's file; on close, someone puts their own file at its name."""

        def __init__(self, fd, mode):
            self._f = real_fdopen(fd, mode)
            self._name = None

        def __getattr__(self, a):
            return getattr(self._f, a)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._f.close()
            for p in tmp_path.glob(".abstract-*.tmp"):
                p.rename(tmp_path / "aside")  # (kept, so the new file cannot reuse its inode)
                p.write_bytes(b"not mine")
    monkeypatch.setattr(os, "fdopen", Swapping)
    with pytest.raises(OSError, match="was replaced while it was written"):
        abstract._write_new(str(tmp_path), "report", ".csv", b"data")
    assert not (tmp_path / "report.csv").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["aside"]


def _windows_rename(monkeypatch, busy: int) -> list:
    """os.rename as Windows answers it: FileExistsError when the name exists (it never
    replaces), and a sharing violation while an antivirus holds the file (the first `busy`
    tries). os.unlink of a held temporary file fails the same way, for good."""
    real_rename, real_unlink, tries = os.rename, os.unlink, []

    def rename(src, dst, **kw):
        tries.append(dst)
        if os.path.lexists(dst):
            raise FileExistsError(errno.EEXIST, "Cannot create a file when that file already "
                                                "exists", src, None, dst)
        if len(tries) <= busy:
            raise _sharing_violation(src)
        real_rename(src, dst, **kw)

    def unlink(p, **kw):
        if ".abstract-" in os.fspath(p) and os.path.exists(p):
            raise _sharing_violation(p)
        real_unlink(p, **kw)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "unlink", unlink)
    monkeypatch.setattr(abstract, "_SHARING_WAIT_S", 2.0)
    return tries


def test_antivirus_holding_the_temporary_file_leaves_no_second_link(
        tmp_path, monkeypatch, as_windows):
    """Issue 29.9: an antivirus holding the temporary file kept the unlink from removing it, so
    the stored file had two links and was refused until the next start. Windows now publishes
    by rename (never replaces there), waiting out the scan: one name, readable at once."""
    tries = _windows_rename(monkeypatch, busy=2)
    (tmp_path / "r.csv").write_bytes(b"old")
    path = abstract._write_new(str(tmp_path), "r", ".csv", b"a,b\n1,2\n")
    assert os.path.basename(path) == "r-1.csv" and len(tries) >= 3
    assert os.stat(path).st_nlink == 1
    f, _, size = _Sandbox([str(tmp_path)]).open_read(path)
    with f:
        assert f.read() == b"a,b\n1,2\n" and size == 8
    assert (tmp_path / "r.csv").read_bytes() == b"old"
    assert not list(tmp_path.glob(".abstract-*.tmp"))


def test_antivirus_holding_the_file_for_good_fails_clearly_and_replaces_nothing(
        tmp_path, monkeypatch, as_windows):
    _windows_rename(monkeypatch, busy=10 ** 6)
    monkeypatch.setattr(abstract, "_SHARING_WAIT_S", 0.2)
    (tmp_path / "r.csv").write_bytes(b"old")
    with pytest.raises(OSError, match=r"another program \(an antivirus\?\) held the new file"):
        abstract._write_new(str(tmp_path), "r", ".csv", b"new")
    assert (tmp_path / "r.csv").read_bytes() == b"old"
    assert not (tmp_path / "r-1.csv").exists()


def _open_held(monkeypatch, busy: int) -> list:
    """open() as Windows answers while another Abstract replaces the login file: a sharing
    violation for the first `busy` tries."""
    import builtins
    tries = []

    def held_open(path, *a, **kw):
        tries.append(path)
        if str(path).endswith(".json") and len(tries) <= busy:
            raise _sharing_violation(str(path))
        return builtins.open(path, *a, **kw)
    monkeypatch.setattr(abstract, "open", held_open, raising=False)
    return tries


def test_login_read_during_a_refresh_waits_for_the_file(tmp_path, monkeypatch):
    """Issue 29.9: a token file read while a refresh replaced it failed on Windows (sharing
    violation), and load answered {} ("log in again"), which the next save wrote back."""
    store = abstract._TokenStore(str(tmp_path / "oauth"))
    doc = {"server_url": "https://x", "issuer": "i", "issuers": {"i": {"tokens": {"a": 1}}}}
    store.save("srv", doc)
    tries = _open_held(monkeypatch, busy=3)
    assert store.load("srv") == doc
    assert len(tries) == 4


def test_login_held_for_good_is_an_error_not_an_empty_login(tmp_path, monkeypatch):
    store = abstract._TokenStore(str(tmp_path / "oauth"))
    doc = {"server_url": "https://x", "issuer": "i", "issuers": {"i": {"tokens": {"a": 1}}}}
    store.save("srv", doc)
    _open_held(monkeypatch, busy=10 ** 6)
    monkeypatch.setattr(abstract, "_SHARING_WAIT_S", 0.2)
    with pytest.raises(abstract._AuthError, match="stayed locked.*try again"):
        store.load("srv")
    monkeypatch.undo()
    assert store.load("srv") == doc  # nothing lost


def test_login_save_waits_for_a_reader_to_close_the_file(tmp_path, monkeypatch):
    """The other side: os.replace over a file another Abstract is reading is refused on Windows
    (ERROR_ACCESS_DENIED) until it closes it."""
    store = abstract._TokenStore(str(tmp_path / "oauth"))
    store.save("srv", {"v": 1})
    real_replace, tries = os.replace, []

    def replace(src, dst, **kw):
        tries.append(dst)
        if len(tries) <= 2:
            e = PermissionError(errno.EACCES, "Access is denied", dst)
            e.winerror = 5
            raise e
        real_replace(src, dst, **kw)
    monkeypatch.setattr(os, "replace", replace)
    store.save("srv", {"v": 2})
    assert len(tries) == 3
    monkeypatch.undo()
    assert store.load("srv")["v"] == 2


@windows_only
def test_windows_login_read_while_another_thread_replaces_it(tmp_path):
    import threading
    store = abstract._TokenStore(str(tmp_path / "oauth"))
    store.save("srv", {"server_url": "u", "n": 0})
    stop, empty = threading.Event(), []

    def reader():
        while not stop.is_set():
            if store.load("srv").get("server_url") != "u":
                empty.append(1)
    t = threading.Thread(target=reader)
    t.start()
    try:
        for n in range(200):
            store.save("srv", {"server_url": "u", "n": n})
    finally:
        stop.set()
        t.join(timeout=60)
    assert not empty


@windows_only
def test_windows_store_on_a_fat_volume(tmp_path):
    """Needs a FAT or exFAT volume: set ABSTRACT_TEST_FAT_DIR to a folder on one."""
    target = os.environ.get("ABSTRACT_TEST_FAT_DIR")
    if not target:
        pytest.skip("set ABSTRACT_TEST_FAT_DIR to a folder on a FAT or exFAT volume")
    path = abstract._write_new(target, "abstract-fat-test", ".txt", b"x" * 1000)
    try:
        assert Path(path).read_bytes() == b"x" * 1000
    finally:
        os.unlink(path)


def test_reparse_attribute_constant_matches_windows():
    assert abstract._REPARSE_POINT == 0x400
    assert getattr(stat, "FILE_ATTRIBUTE_REPARSE_POINT", 0x400) == 0x400
