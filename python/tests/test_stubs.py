"""The type stubs name every public attribute of the native module, and the package
exports what its __all__ lists."""

from __future__ import annotations

import ast
import os

import kvstash
from kvstash import _native


def stub_names():
    path = os.path.join(os.path.dirname(kvstash.__file__), "_native.pyi")
    tree = ast.parse(open(path, encoding="utf-8").read())
    names = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        elif isinstance(node, ast.FunctionDef):
            names[node.name] = set()
    return names


def test_stub_covers_native_module():
    stubs = stub_names()
    for name in dir(_native):
        if name.startswith("_"):
            continue
        assert name in stubs, f"_native.{name} missing from _native.pyi"
        obj = getattr(_native, name)
        if isinstance(obj, type):
            public = {a for a in vars(obj) if not a.startswith("_")}
            assert public <= stubs[name], f"{name}: {sorted(public - stubs[name])} not in stub"
    assert os.path.exists(os.path.join(os.path.dirname(kvstash.__file__), "py.typed"))


def test_package_exports():
    for name in kvstash.__all__:
        assert hasattr(kvstash, name), name
    assert kvstash.Client.lookup_async.__doc__ and kvstash.PrefixCodec.encode_chunks.__doc__
