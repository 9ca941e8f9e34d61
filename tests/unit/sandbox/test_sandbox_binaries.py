"""Where the sandbox finds its binaries: envtest's variables first, then our cache, then PATH."""

from __future__ import annotations

from pathlib import Path

from nodewright_bridge.sandbox import binaries


def _fake(path: Path, version: str, *, code: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{version}'\nexit {code}\n")
    path.chmod(0o755)
    return path


def test_envtest_variable_names_follow_envtests_rule() -> None:
    assert binaries.asset_env_name("kube-apiserver") == "TEST_ASSET_KUBE_APISERVER"
    assert binaries.asset_env_name("kube-controller-manager") == (
        "TEST_ASSET_KUBE_CONTROLLER_MANAGER"
    )
    assert binaries.asset_env_name("etcd") == "TEST_ASSET_ETCD"
    assert binaries.asset_env_name("3d.tool") == "TEST_ASSET_D_TOOL"


def test_lookup_order_is_test_asset_then_kubebuilder_assets_then_cache_then_path(
    tmp_path: Path,
) -> None:
    asset = _fake(tmp_path / "asset" / "etcd", "from asset")
    kb = _fake(tmp_path / "kb" / "etcd", "from kubebuilder")
    cache = tmp_path / "cache"
    cached = _fake(binaries.cache_bin_dir({"NWB_CACHE_DIR": str(cache)}) / "etcd", "from cache")
    on_path = _fake(tmp_path / "path" / "etcd", "from path")
    env = {
        "TEST_ASSET_ETCD": str(asset),
        "KUBEBUILDER_ASSETS": str(kb.parent),
        "NWB_CACHE_DIR": str(cache),
        "PATH": str(on_path.parent),
    }
    order = [path for _, path in binaries.candidates("etcd", env)]
    assert order == [asset, kb, cached, on_path]
    found = binaries.find("etcd", env)
    assert found is not None and (found.source, found.version) == ("TEST_ASSET_ETCD", "from asset")


def test_a_candidate_that_does_not_run_is_skipped(tmp_path: Path) -> None:
    broken = _fake(tmp_path / "kb" / "etcd", "crash", code=3)
    missing = tmp_path / "asset" / "etcd"
    cache = tmp_path / "cache"
    cached = _fake(binaries.cache_bin_dir({"NWB_CACHE_DIR": str(cache)}) / "etcd", "etcd 3.6")
    env = {
        "TEST_ASSET_ETCD": str(missing),
        "KUBEBUILDER_ASSETS": str(broken.parent),
        "NWB_CACHE_DIR": str(cache),
        "PATH": "",
    }
    found = binaries.find("etcd", env)
    assert found is not None
    assert (found.path, found.source, found.version) == (cached, "cache", "etcd 3.6")


def test_nothing_found_is_none(tmp_path: Path) -> None:
    env = {"NWB_CACHE_DIR": str(tmp_path), "PATH": str(tmp_path / "empty")}
    assert binaries.find("kube-apiserver", env) is None


def test_the_cache_directory_is_keyed_by_versions(tmp_path: Path) -> None:
    directory = binaries.cache_bin_dir({"XDG_CACHE_HOME": str(tmp_path)})
    assert directory == (
        tmp_path
        / "nodewright-bridge"
        / "bin"
        / f"k8s-{binaries.K8S_VERSION}-etcd-{binaries.ETCD_VERSION}"
    )
