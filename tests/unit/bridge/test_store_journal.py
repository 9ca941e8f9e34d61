"""The store's change journal: which keys and index values changed since a serial a reader
read, exactly (nothing missed, nothing unchanged), and bounded under churn."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nodewright_bridge.k8s.store import Store, by_node_name


def pod(name: str, node: str, version: int = 1) -> dict[str, object]:
    return {
        "metadata": {"namespace": "ns", "name": name, "resourceVersion": str(version)},
        "spec": {"nodeName": node},
    }


def test_the_keys_written_after_a_serial_are_named_once_and_the_others_not() -> None:
    store = Store({"node": by_node_name})
    store.put("ns/a", pod("a", "n1"))
    store.put("ns/b", pod("b", "n1"))
    seen = store.serial
    store.put("ns/a", pod("a", "n1", 2))
    store.put("ns/c", pod("c", "n2"))
    store.put("ns/a", pod("a", "n1", 3))
    store.delete("ns/b")
    assert sorted(store.changed_since(seen) or ()) == ["ns/a", "ns/b", "ns/c"]
    assert store.changed_since(store.serial) == []


def test_a_pod_that_moves_or_goes_names_every_node_it_left_or_reached() -> None:
    store = Store({"node": by_node_name})
    store.put("ns/a", pod("a", "n1"))
    store.put("ns/b", pod("b", "n3"))
    seen = store.serial
    store.put("ns/a", pod("a", "n2"))  # moved: n1 lost it, n2 got it
    store.delete("ns/b")  # n3 has nothing left
    assert sorted(store.index_changed_since("node", seen) or ()) == ["n1", "n2", "n3"]
    assert store.index_serial("node", "n3") == 0


def test_a_reader_older_than_the_forgotten_deletions_is_told_to_read_everything() -> None:
    store = Store({"node": by_node_name})
    store.put("ns/keep", pod("keep", "n0"))
    old = store.serial
    for i in range(3000):  # churn: pods come and go
        store.put(f"ns/p{i}", pod(f"p{i}", f"n{i}"))
        store.delete(f"ns/p{i}")
    assert store.changed_since(old) is None
    assert store.index_changed_since("node", old) is None
    recent = store.serial
    store.put("ns/keep", pod("keep", "n0", 2))
    assert store.changed_since(recent) == ["ns/keep"]
    assert store.index_changed_since("node", recent) == ["n0"]
    # bounded: the journals hold the live names and at most about as many gone ones again
    assert len(store._journal._serials) < 2 * len(store) + 1100
    assert len(store._index_journals["node"]._serials) < 2 * len(store) + 1100


OPS = st.lists(
    st.tuples(st.sampled_from(["put", "delete", "read"]), st.integers(0, 5), st.integers(0, 3)),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_what_a_reader_is_told_matches_a_model_of_every_write(
    ops: list[tuple[str, int, int]],
) -> None:
    """Against a model that remembers every write: since any serial a reader took, the journal
    names exactly the keys written and the nodes whose pods changed."""
    store = Store({"node": by_node_name})
    writes: list[tuple[int, str, set[str]]] = []  # (serial, key, nodes it touched)
    where: dict[str, str] = {}
    readers: list[int] = [store.serial]
    for op, k, n in ops:
        key = f"ns/p{k}"
        if op == "put":
            touched = {f"n{n}"} | ({where[key]} if key in where else set())
            store.put(key, pod(f"p{k}", f"n{n}"))
            where[key] = f"n{n}"
            writes.append((store.serial, key, touched))
        elif op == "delete" and key in where:
            touched = {where.pop(key)}
            store.delete(key)
            writes.append((store.serial, key, touched))
        else:
            readers.append(store.serial)
    for serial in readers:
        keys = store.changed_since(serial)
        nodes = store.index_changed_since("node", serial)
        assert keys is not None and nodes is not None  # no churn beyond the slack here
        later = [w for w in writes if w[0] > serial]
        assert sorted(keys) == sorted({w[1] for w in later})
        assert sorted(nodes) == sorted(set().union(*(w[2] for w in later)))
