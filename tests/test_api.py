"""The public surface: __all__, main's signature, no import side effects, stdlib only, Python 3.9."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import abstract
from conftest import ABSTRACT

PY39 = Path("/root/.pyenv/versions/3.9.18/bin/python3.9")


def test_all_is_pinned():
    assert abstract.__all__ == ["Error", "ConfigError", "FormatError", "SandboxError", "RpcError",
                                "UpstreamError", "Connection", "main"]
    for name in abstract.__all__:
        assert getattr(abstract, name).__doc__, f"{name} has no docstring"


def test_main_signature_is_pinned():
    assert str(inspect.signature(abstract.main)) == (
        "(argv: 'Optional[List[str]]' = None, *, stdin: 'Any' = None, stdout: 'Any' = None, "
        "stderr: 'Any' = None, environ: 'Optional[Dict[str, str]]' = None) -> 'int'")


def test_version_is_a_literal_string():
    assert isinstance(abstract.__version__, str)
    assert [int(p) for p in abstract.__version__.split(".")] >= [0, 1, 0]


def test_errors_inherit_the_nearest_builtin():
    assert issubclass(abstract.ConfigError, ValueError) and issubclass(abstract.ConfigError, abstract.Error)
    assert issubclass(abstract.FormatError, ValueError) and issubclass(abstract.SandboxError, ValueError)
    assert issubclass(abstract.UpstreamError, abstract.RpcError)
    err = abstract.RpcError(-32602, "bad", {"k": 1})
    assert err.to_dict() == {"code": -32602, "message": "bad", "data": {"k": 1}}
    back = abstract.RpcError.from_dict(err.to_dict())
    assert (back.code, back.message, back.data) == (-32602, "bad", {"k": 1})
    assert abstract.RpcError.from_dict("junk").code == -32603


def test_jsonrpc_code_table():
    table = {"PARSE_ERROR": -32700, "INVALID_REQUEST": -32600, "METHOD_NOT_FOUND": -32601,
             "INVALID_PARAMS": -32602, "INTERNAL_ERROR": -32603, "CONNECTION_CLOSED": -32000,
             "REQUEST_TIMEOUT": -32001, "RESOURCE_NOT_FOUND": -32002, "UNSUPPORTED_VERSION": -32022}
    assert {name: getattr(abstract, "_" + name) for name in table} == table


def test_protocol_version_tables():
    assert abstract._HANDSHAKE_VERSIONS == ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
    assert abstract._MODERN_VERSIONS == ("2026-07-28",)


_IMPORT_PROBE = """
import json, logging, sys, threading
out, err, before = sys.stdout, sys.stderr, threading.active_count()
root_handlers = list(logging.getLogger().handlers)
sys.path.insert(0, sys.argv[1])
import abstract
print(json.dumps({
    "threads": threading.active_count() - before,
    "stdout_same": sys.stdout is out, "stderr_same": sys.stderr is err,
    "root_handlers": len(logging.getLogger().handlers) - len(root_handlers),
    "abstract_handlers": len(logging.getLogger("abstract").handlers),
}))
"""


def test_import_has_no_side_effects():
    proc = subprocess.run([sys.executable, "-c", _IMPORT_PROBE, str(ABSTRACT.parent)],
                          capture_output=True, timeout=30, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert json.loads(proc.stdout) == {"threads": 0, "stdout_same": True, "stderr_same": True,
                                       "root_handlers": 0, "abstract_handlers": 0}


def _top_level_imports(path: Path) -> set:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.skipif(not hasattr(sys, "stdlib_module_names"), reason="needs Python 3.10+")
def test_imports_only_stdlib_modules():
    imported = _top_level_imports(ABSTRACT)
    assert {"json", "subprocess", "threading"} <= imported  # the walk finds real imports
    assert sorted(imported - set(sys.stdlib_module_names)) == []


@pytest.mark.skipif(not PY39.exists(), reason="no Python 3.9 interpreter here")
def test_compiles_and_imports_under_python_3_9():
    probe = ("import sys; src = open(sys.argv[1], encoding='utf-8').read(); compile(src, sys.argv[1], 'exec'); "
             "sys.path.insert(0, sys.argv[2]); import abstract; print(abstract.__version__)")
    proc = subprocess.run([str(PY39), "-c", probe, str(ABSTRACT), str(ABSTRACT.parent)],
                          capture_output=True, timeout=60, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == abstract.__version__


def test_file_starts_with_shebang_and_licence():
    head = ABSTRACT.read_text(encoding="utf-8").splitlines()[:2]
    assert head == ["#!/usr/bin/env python3", "# SPDX-License-Identifier: MIT"]
