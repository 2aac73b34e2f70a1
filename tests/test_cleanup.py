"""Leftovers of interrupted writes are cleaned up, and nothing else is touched."""

from __future__ import annotations

import os
import time

import abstract


def _age(path, seconds: float) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old))


def test_sweep_temps_removes_only_old_own_temporaries(tmp_path):
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    old_tmp, new_tmp = sub / ".abstract-old.tmp", tmp_path / ".abstract-new.tmp"
    user_files = [tmp_path / "report.csv", tmp_path / ".abstract-notes.txt", sub / "abstract-x.tmp"]
    for p in [old_tmp, new_tmp] + user_files:
        p.write_text("x")
        _age(p, 7200)
    _age(new_tmp, 10)
    assert abstract._sweep_temps([str(tmp_path)]) == 1
    assert not old_tmp.exists() and new_tmp.exists()
    assert all(p.exists() for p in user_files)


def test_cache_start_up_drops_orphans_but_keeps_entries_and_foreign_files(tmp_path):
    cache = abstract._OutputCache(str(tmp_path), abstract._Settings({}))
    png = "iVBORw0KGgo="
    entry, _, _ = cache.put({"content": [{"type": "text", "text": "x" * 10},
                                         {"type": "image", "data": png, "mimeType": "image/png"}]}, "s", "t")
    orphan = tmp_path / ("A" * 24 + ".json")
    foreign = tmp_path / "notes.txt"
    for p in (orphan, foreign):
        p.write_text("left behind")
    for name in os.listdir(tmp_path):
        _age(tmp_path / name, 7200)
    abstract._OutputCache(str(tmp_path), abstract._Settings({}))
    left = sorted(os.listdir(tmp_path))
    assert not orphan.exists() and foreign.exists()
    assert [n for n in left if n.startswith(entry.token)] == sorted(
        [f"{entry.token}-1.png", f"{entry.token}.json", f"{entry.token}.meta.json", f"{entry.token}.txt"])


def test_bounded_walk_stops_for_good_at_its_limit(tmp_path):
    for i in range(50):
        (tmp_path / f"d{i}").mkdir()
        (tmp_path / f"d{i}" / "f.txt").write_text("x")
    assert len(list(abstract._bounded_walk([str(tmp_path)], scan=5))) == 5
    assert len(abstract._recent_files([str(tmp_path)], scan=7)) == 7
    assert len(abstract._recent_files([str(tmp_path)])) == 50
