"""iris.mem.common: importing it has no effect, and its scoped patches restore what they replaced
on every path out (exceptions, nesting, threads)."""

import subprocess
import sys
import threading
import types

import pytest

import iris.mem.common as common


def test_importing_it_imports_no_triton():
    code = "import sys, iris.mem.common; assert 'triton' not in sys.modules, sorted(sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"importing iris.mem.common imported triton:\n{done.stderr[-3000:]}"


def test_saved_restores_own_and_inherited_attributes_in_reverse_order():
    class Base:
        inherited = "base"

    obj = types.SimpleNamespace(own="own")
    saved = common.Saved()
    saved.set(obj, "own", 1)
    saved.set(obj, "own", 2)  # twice: the first value must come back, not the second
    saved.set(obj, "new", 3)
    saved.set(Base, "inherited", "patched")

    class Child(Base):
        pass

    saved.set(Child, "inherited", "child")
    assert (obj.own, obj.new, Base.inherited, Child.inherited) == (2, 3, "patched", "child")
    saved.restore()
    assert obj.own == "own" and not hasattr(obj, "new")
    assert Base.inherited == "base" and "inherited" not in vars(Child) and Child.inherited == "base"
    saved.restore()  # nothing left: a no-op


def _counting_patches(target):
    installs = []

    def install(set_attr):
        installs.append(1)
        set_attr(target, "value", "patched")

    return common.Patches("test", install), installs


def _scope(monkeypatch, interpreting):
    """A layer's scope as iris.mem.triton.interpret is one: (the Scope class, the target its counting
    patches set, the patches, their installs), with TRITON_INTERPRET as ``interpreting`` says."""
    monkeypatch.setattr(common.target, "interpreted", lambda: interpreting)
    target = types.SimpleNamespace(value="original")
    patches, installs = _counting_patches(target)
    scope = type("Scope", (common.Scope,), {"patches": (patches,)})
    return scope, target, patches, installs


def test_patches_install_once_and_restore_when_the_last_holder_leaves():
    target = types.SimpleNamespace(value="original")
    patches, installs = _counting_patches(target)
    patches.enter()
    patches.enter()
    assert target.value == "patched" and patches.inside() and len(installs) == 1
    patches.exit()
    assert target.value == "patched", "restored while a holder remained"
    patches.exit()
    assert target.value == "original" and not patches.inside()


def test_patches_restore_what_a_failing_install_had_set():
    target = types.SimpleNamespace(a="a", b="b")

    def install(set_attr):
        set_attr(target, "a", "patched")
        raise RuntimeError("install failed half way")

    patches = common.Patches("failing", install)
    with pytest.raises(RuntimeError, match="half way"):
        patches.enter()
    assert (target.a, target.b) == ("a", "b") and not patches.inside()


def test_patches_act_for_the_threads_inside_only():
    target = types.SimpleNamespace(value="original")
    patches, _ = _counting_patches(target)
    seen, entered, release = {}, threading.Event(), threading.Event()

    def holder():
        patches.enter()
        seen["holder inside"] = patches.inside()
        entered.set()
        release.wait(60)
        patches.exit()

    thread = threading.Thread(target=holder)
    thread.start()
    assert entered.wait(60)
    seen["main inside"] = patches.inside()
    release.set()
    thread.join(60)
    assert seen == {"holder inside": True, "main inside": False}
    assert target.value == "original"


def test_a_scope_without_the_interpreter_changes_nothing(monkeypatch):
    Scope, target, patches, installs = _scope(monkeypatch, interpreting=False)
    with Scope():
        assert Scope.entered() and target.value == "original" and not installs
    assert not Scope.entered()


def test_a_scope_restores_on_exceptions_and_nesting(monkeypatch):
    Scope, target, patches, installs = _scope(monkeypatch, interpreting=True)
    with pytest.raises(KeyError):
        with Scope():
            with Scope():
                assert target.value == "patched" and patches.inside()
            assert target.value == "patched", "an inner exit restored too early"
            raise KeyError("inside")
    assert target.value == "original" and not Scope.entered() and len(installs) == 1

    @Scope()
    def host():
        assert patches.inside()
        raise ValueError("in a decorated function")

    with pytest.raises(ValueError):
        host()
    assert target.value == "original" and not patches.inside()
