"""The one loader of the native modules: which modules exist, and TRACEKIT_PURE_PYTHON."""

from __future__ import annotations

import pytest

from tracekit import native


def test_every_module_has_its_source_and_stub() -> None:
    from pathlib import Path

    here = Path(native.__file__).parent
    for name in native.MODULES:
        assert (here / f"_{name}.c").is_file(), name
        assert (here / f"_{name}.pyi").is_file(), name


def test_pure_python_for_every_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.PURE_PYTHON_ENV, "1")
    assert native.pure_python_requested()
    assert all(native.load(name) is None for name in native.MODULES)


def test_pure_python_for_some_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.PURE_PYTHON_ENV, "dag, sweep")
    assert not native.pure_python_requested()
    assert native.pure_python_requested("dag")
    assert native.pure_python_requested("sweep")
    assert native.load("dag") is None
    assert native.load("sweep") is None
    assert native.load("kineto_scan") is native.compiled("kineto_scan")


@pytest.mark.parametrize("value", ["", "0"])
def test_native_by_default(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(native.PURE_PYTHON_ENV, value)
    assert not any(native.pure_python_requested(name) for name in native.MODULES)
    assert all(native.load(name) is native.compiled(name) for name in native.MODULES)


def test_an_unknown_module_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="no native module"):
        native.load("_dag")
