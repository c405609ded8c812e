"""The fenced store (hilock.FencedStore): fences checked on every read and
write, refusals that change nothing, records beside their keys, bad input;
and the pause scenario that motivates it: processes incrementing a counter
under a lock, some holders pausing past their TTL between read and write.
Without the store updates are lost; with it none is, and the stale
accesses are refused and counted. The checker reads every accepted write's
(fence, value): the values must be exactly 1..total, once each, and the
fences must not go down along them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any, Dict, List, Sequence

import pytest
import redis
from redis.cluster import RedisCluster

import hilock
from cluster import LocalCluster, key_slot

# -- basics -----------------------------------------------------------------------


def test_get_set_incrby_delete_and_fence_of(client: hilock.Client, rds: redis.Redis) -> None:
    st = client.fenced_store()
    assert st.get("stock", fence=10) is None
    assert st.fence_of("stock") == 10  # a read touches the key
    st.set("stock", 7, fence=10)
    assert st.incrby("stock", -2, fence=11) == 5
    assert st.get("stock", fence=11) == b"5"
    assert rds.get("stock") == b"5"  # a plain string other clients can read
    assert rds.get("hilock:fence:{stock}") == b"11"
    assert st.delete("stock", fence=11) is True
    assert st.delete("stock", fence=11) is False
    assert st.fence_of("stock") == 11
    assert st.fence_of("never") is None
    st.set(b"bin\x00key", b"\xff\x00", fence=3)
    assert st.get(b"bin\x00key", fence=3) == b"\xff\x00"


def test_a_lower_fence_is_refused_and_nothing_changes(client: hilock.Client,
                                                      rds: redis.Redis) -> None:
    st = client.fenced_store()
    st.set("k", "new", fence=50)
    for call in (lambda: st.get("k", fence=49), lambda: st.set("k", "old", fence=1),
                 lambda: st.incrby("k", 1, fence=49), lambda: st.delete("k", fence=49)):
        with pytest.raises(hilock.StaleFence) as e:
            call()
        assert e.value.code == hilock._hilock.HILOCK_ESTALE
        assert isinstance(e.value, hilock.LockLost)
    assert rds.get("k") == b"new"
    assert rds.get("hilock:fence:{k}") == b"50"
    st.set("k", "again", fence=50)  # the same holder's next call


def test_ttl_and_linger(client: hilock.Client, rds: redis.Redis) -> None:
    st = client.fenced_store(linger=60)
    st.set("t", "v", fence=5, ttl=20)
    assert 0 < rds.pttl("t") <= 20000
    assert 60000 < rds.pttl("hilock:fence:{t}") <= 80000
    st.delete("t", fence=5)
    assert 0 < rds.pttl("hilock:fence:{t}") <= 60000
    forever = client.fenced_store(linger=None)
    forever.set("u", "v", fence=5, ttl=20)
    assert rds.pttl("hilock:fence:{u}") == -1


def test_lock_store_binds_the_grant_fence(client: hilock.Client, rds: redis.Redis) -> None:
    with client.lock("inv") as lk:
        s = lk.store()
        assert s.fence == lk.fence
        assert s.incrby("stock:inv", 3) == 3
        assert s.fence_of("stock:inv") == lk.fence
    first = lk.fence
    with pytest.raises(hilock.LockNotOwnedError):
        lk.store()  # released: no grant to bind
    with client.fair_lock("inv") as fl:  # another family, same name: a later fence
        assert fl.fence is not None and first is not None and fl.fence > first
        assert fl.store().incrby("stock:inv", 1) == 4
    with client.rlock("r") as rl:
        assert rl.store().get("stock:r") is None
    with client.multi_lock(["a", "b"]) as ml:
        with pytest.raises(hilock.InvalidArgument):
            ml.store()
        assert ml.store(name="b").incrby("stock:b") == 1
    with client.rwlock("rw").read() as rd, pytest.raises(hilock.UnsupportedError):
        rd.store()  # shared holders have no fence
    with client.semaphore("sem", 2) as sem, pytest.raises(hilock.UnsupportedError):
        sem.store()
    other = hilock.FencedStore(client.url)
    try:
        with client.lock("inv") as lk:
            assert lk.store(other).get("stock:inv") == b"4"
    finally:
        other.close()


def test_store_on_its_own_server_for_redlock(redis_nodes: list, redis_url: str) -> None:
    urls = [s.url for s in redis_nodes[:3]]
    with hilock.FencedStore(redis_url) as st:
        with hilock.Redlock(urls, "rl-store", ttl=5) as rl:
            with pytest.raises(hilock.InvalidArgument):
                rl.store()  # a Redlock has no server of its own
            assert rl.store(st).incrby("stock:rl") == 1
            assert st.fence_of("stock:rl") == rl.fence


def test_bad_input(client: hilock.Client, rds: redis.Redis) -> None:
    st = client.fenced_store()
    for fence in (0, -1, 1 << 60, "5", None, 1.5, True):
        with pytest.raises(hilock.InvalidArgument):
            st.get("k", fence=fence)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        st.get("k")  # type: ignore[call-arg]  # the fence is required
    for key in ("", b"", 5, None, "x" * 65537):
        with pytest.raises(hilock.InvalidArgument):
            st.set(key, "v", fence=1)  # type: ignore[arg-type]
    for value in (None, 1.5, True, object()):
        with pytest.raises(hilock.InvalidArgument):
            st.set("k", value, fence=1)  # type: ignore[arg-type]
    for ttl in (0, -1, float("nan"), "1"):
        with pytest.raises(hilock.InvalidArgument):
            st.set("k", "v", fence=1, ttl=ttl)  # type: ignore[arg-type]
    with pytest.raises(hilock.InvalidArgument):
        st.incrby("k", 1 << 63, fence=1)
    small = client.fenced_store(max_value=16)
    with pytest.raises(hilock.InvalidArgument, match="limit is 16"):
        small.set("k", b"x" * 17, fence=1)
    big = client.fenced_store()
    with pytest.raises(hilock.InvalidArgument, match="limit is"):
        big.set("k", b"x" * ((64 << 20) + 1), fence=1)
    for bad in ({"linger": 0}, {"linger": -5}, {"max_value": 0}, {"max_value": 1 << 40}):
        with pytest.raises(hilock.InvalidArgument):
            client.fenced_store(**bad)
    with pytest.raises(hilock.InvalidArgument):
        hilock.FencedStore(42)  # type: ignore[arg-type]
    rds.hset("h", "a", 1)
    with pytest.raises(hilock.WrongTypeError):
        st.get("h", fence=1)
    assert not rds.exists("hilock:fence:{h}")
    rds.set("word", "abc")
    with pytest.raises(hilock.RedisError, match="not an integer"):
        st.incrby("word", 1, fence=1)
    assert st.fence_of("word") is None  # the failed increment touched nothing
    st.close()
    st.close()
    with pytest.raises(hilock.ConnectionError):
        st.get("k", fence=1)
    with pytest.raises(TypeError):
        import pickle
        pickle.dumps(big)


def test_a_closed_client_fails_store_calls(redis_url: str) -> None:
    c = hilock.Client(redis_url)
    st = c.fenced_store()
    c.close()
    with pytest.raises(hilock.ConnectionError):
        st.incrby("k", fence=1)


# -- the pause scenario ---------------------------------------------------------------

WORKER = textwrap.dedent("""
    import json, sys, time
    import hilock
    cfg = json.loads(sys.argv[1])
    if cfg["kind"] == "redlock":
        client = None
    else:
        client = hilock.Client(cfg["lock_url"])
    if cfg["mode"] == "plain":
        import redis
        if cfg["cluster"]:
            from redis.cluster import RedisCluster
            host, port = cfg["data_url"].split("//")[1].split(",")[0].split(":")
            r = RedisCluster(host=host, port=int(port))
        else:
            r = redis.Redis.from_url(cfg["data_url"])
    else:
        store = hilock.FencedStore(cfg["data_url"]) if cfg["data_url"] != cfg["lock_url"] \\
            else client.fenced_store()
    done = refused = i = 0
    log = []
    while done < cfg["n"]:
        key, name = cfg["pairs"][i % len(cfg["pairs"])]
        if cfg["kind"] == "redlock":
            lk = hilock.Redlock(cfg["nodes"], name, ttl=cfg["ttl"], auto_renew=False)
        elif cfg["kind"] == "fair":
            lk = client.fair_lock(name, ttl=cfg["ttl"], auto_renew=False)
        else:
            lk = client.lock(name, ttl=cfg["ttl"], auto_renew=False)
        assert lk.acquire(timeout=30)
        pause = i % 10 == cfg["wid"] % 10  # one hold in ten
        i += 1
        try:
            f = lk.fence
            if cfg["mode"] == "plain":
                v = int(r.get(key) or 0)
                if pause:
                    time.sleep(cfg["pause"])
                r.set(key, v + 1)
            else:
                v = int(store.get(key, fence=f) or 0)
                if pause:
                    time.sleep(cfg["pause"])
                store.set(key, v + 1, fence=f)
            done += 1
            log.append([key, f, v + 1])
        except hilock.StaleFence:
            refused += 1
        finally:
            try:
                lk.release()
            except hilock.LockNotOwnedError:
                pass
        if cfg["kind"] == "redlock":
            lk.close() if hasattr(lk, "close") else None
    print(json.dumps({"done": done, "refused": refused, "log": log}))
""")


def run_pause_scenario(kind: str, mode: str, lock_url: str, data_url: str,
                       pairs: Sequence[Sequence[str]], *, nodes: Sequence[str] = (),
                       cluster: bool = False, workers: int = 4, n: int = 30,
                       ) -> Dict[str, Any]:
    cfg = {"kind": kind, "mode": mode, "lock_url": lock_url, "data_url": data_url,
           "pairs": [list(p) for p in pairs], "nodes": list(nodes), "cluster": cluster,
           "n": n, "ttl": 0.2, "pause": 0.3}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(dict(cfg, wid=w))],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy())
             for w in range(workers)]
    results: List[Dict[str, Any]] = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
        results.append(json.loads(out))
    return {"done": sum(r["done"] for r in results),
            "refused": sum(r["refused"] for r in results),
            "log": [e for r in results for e in r["log"]]}


def final_values(data: Any, keys: Sequence[str]) -> Dict[str, int]:
    return {k: int(data.get(k) or 0) for k in keys}


def check_no_lost_update(res: Dict[str, Any], finals: Dict[str, int]) -> None:
    """Every accepted write's value, per key, is 1..final exactly once, and
    the fences do not go down along them; the finals add up to the writes."""
    assert sum(finals.values()) == res["done"]
    for key, final in finals.items():
        writes = sorted((v, f) for k, f, v in res["log"] if k == key)
        assert [v for v, _ in writes] == list(range(1, final + 1)), key
        fences = [f for _, f in writes]
        assert fences == sorted(fences), key


def lost_updates(res: Dict[str, Any], finals: Dict[str, int]) -> int:
    return res["done"] - sum(finals.values())


PAIRS = [("stock:sku1", "inv:sku1")]


@pytest.mark.parametrize("kind", ["lock", "fair"])
def test_pause_past_ttl_loses_updates_without_the_store_and_none_with_it(
        kind: str, redis_url: str, rds: redis.Redis) -> None:
    plain = run_pause_scenario(kind, "plain", redis_url, redis_url, PAIRS)
    lost = lost_updates(plain, final_values(rds, ["stock:sku1"]))
    rds.flushall()
    fenced = run_pause_scenario(kind, "fenced", redis_url, redis_url, PAIRS)
    finals = final_values(rds, ["stock:sku1"])
    check_no_lost_update(fenced, finals)
    print(f"{kind}: plain lost {lost} of {plain['done']}; fenced lost 0 of "
          f"{fenced['done']}, refused {fenced['refused']}")
    assert lost > 0
    assert fenced["refused"] > 0


def test_pause_past_ttl_with_redlock(redis_nodes: list, redis_url: str,
                                     rds: redis.Redis) -> None:
    nodes = [s.url for s in redis_nodes[:3]]
    plain = run_pause_scenario("redlock", "plain", redis_url, redis_url, PAIRS, nodes=nodes)
    lost = lost_updates(plain, final_values(rds, ["stock:sku1"]))
    rds.flushall()
    fenced = run_pause_scenario("redlock", "fenced", nodes[0], redis_url, PAIRS, nodes=nodes)
    check_no_lost_update(fenced, final_values(rds, ["stock:sku1"]))
    print(f"redlock: plain lost {lost} of {plain['done']}; fenced refused {fenced['refused']}")
    assert lost > 0
    assert fenced["refused"] > 0



def test_pause_past_ttl_on_a_cluster(cluster: LocalCluster) -> None:
    # Data keys on several slots, with and without their own hash tags.
    pairs = [("stock:sku1", "inv:sku1"), ("stock:{sku2}:n", "inv:sku2"),
             ("count:{x}", "inv:x")]
    assert len({key_slot(k.encode()) for k, _ in pairs}) == 3
    keys = [k for k, _ in pairs]
    conn = RedisCluster(host="127.0.0.1", port=int(cluster.hosts.split(",")[0].split(":")[1]))
    try:
        plain = run_pause_scenario("lock", "plain", cluster.url, cluster.url, pairs,
                                   cluster=True, n=45)
        lost = lost_updates(plain, final_values(conn, keys))
        for k in keys:
            conn.delete(k)
        fenced = run_pause_scenario("lock", "fenced", cluster.url, cluster.url, pairs,
                                    cluster=True, n=45)
        check_no_lost_update(fenced, final_values(conn, keys))
        # Each record sits in its key's slot.
        for k in keys:
            rec = ("hilock:fence:" + k) if "{" in k else "hilock:fence:{" + k + "}"
            assert key_slot(rec.encode()) == key_slot(k.encode())
            assert conn.get(rec) is not None
        print(f"cluster: plain lost {lost} of {plain['done']}; fenced refused "
              f"{fenced['refused']}")
        assert lost > 0
        assert fenced["refused"] > 0
    finally:
        conn.close()


def test_a_key_without_tag_but_with_a_brace_is_refused_on_a_cluster(
        cluster: LocalCluster) -> None:
    c = hilock.Client(cluster.url)
    try:
        st = c.fenced_store()
        with pytest.raises(hilock.InvalidArgument, match="hash tag"):
            st.set("odd}key", "v", fence=1)
        st.set("fine:{tag}", "v", fence=1)
        assert st.get("fine:{tag}", fence=1) == b"v"
    finally:
        c.close()


def test_records_survive_a_restart_with_aof() -> None:
    from helpers import RedisServer

    srv = RedisServer(extra_args=["--appendonly", "yes", "--appendfsync", "everysec"])
    srv.start()
    try:
        c = hilock.Client(srv.url)
        c.fenced_store().set("stock", 3, fence=900)
        c.close()
        # everysec: a clean shutdown (SHUTDOWN) writes the AOF out.
        redis.Redis.from_url(srv.url).shutdown(nosave=False)
        srv.proc.wait(timeout=10)  # type: ignore[union-attr]
        srv.start()
        c = hilock.Client(srv.url)
        with pytest.raises(hilock.StaleFence):
            c.fenced_store().get("stock", fence=899)
        assert c.fenced_store().get("stock", fence=900) == b"3"
        c.close()
    finally:
        srv.cleanup()




def test_inventory_demo_pause_mode(redis_url: str) -> None:
    """The demo's --pause rows: the lock alone oversells, the fenced store
    sells exactly the stock."""
    demo = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python")
    env = dict(os.environ, HILOCK_URL=redis_url)
    out = subprocess.run([sys.executable, "inventory_demo.py", "--pause", "--stock", "40",
                          "--workers", "4"], cwd=demo, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:5]]
            for line in out.stdout.splitlines() if line.startswith("| ") and "guard" not in line}
    assert rows["fenced store"][:3] == ["40", "0", "0"]
    assert int(rows["lock (paused)"][1]) > 0, out.stdout
