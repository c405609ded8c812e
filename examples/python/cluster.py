"""Locks on a Redis Cluster, and a master failing over under them.

With $HILOCK_URL set to a redis+cluster:// URL it uses that cluster (and
kills nothing). Otherwise it starts a private cluster of 3 masters and 3
replicas on loopback (needs redis-server and redis-cli), runs four threads
on locks spread over the masters, kills one master with SIGKILL halfway and
shows the threads carry on once its replica has taken over."""
import os
import signal
import subprocess
import threading
import time

import hilock
from hilock._server import RedisServer, free_port


def start_cluster():
    args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", "1000"]
    ports = []
    while len(ports) < 6:              # the cluster bus listens on port + 10000
        p = free_port()
        if p <= 55535 and p not in ports:
            ports.append(p)
    nodes = [RedisServer(port=p, extra_args=args).start() for p in ports]
    subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
                    "--cluster-replicas", "1", "--cluster-yes"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Ready when every node says cluster_state:ok and every replica's link
    # to its master is up (a replica that never synced cannot take over).
    def cli(port, *cmd):
        return subprocess.run(["redis-cli", "-p", str(port), *cmd], capture_output=True,
                              text=True).stdout
    def ready(port):
        repl = cli(port, "info", "replication")
        linked = ("connected_slaves:1" in repl if "role:master" in repl
                  else "master_link_status:up" in repl)
        return linked and "cluster_state:ok" in cli(port, "cluster", "info")
    for _ in range(200):
        if all(ready(p) for p in ports):
            break
        time.sleep(0.1)
    return nodes, "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports[:3])


def work(client, name, stop, counts):
    lk = client.lock(name, ttl=10.0)
    while not stop.is_set():
        with lk:                       # on the master of {name}'s slot
            counts[name] = counts.get(name, 0) + 1
            time.sleep(0.01)


def main():
    url = os.environ.get("HILOCK_URL", "")
    nodes = []
    if not url.startswith("redis+cluster://"):
        nodes, url = start_cluster()
    try:
        client = hilock.Client(url, reconnect=20.0)   # longer than a failover
        print(url, "cluster:", client.cluster)
        stop, counts = threading.Event(), {}
        names = ["orders:1", "orders:2", "reports", "inventory"]
        threads = [threading.Thread(target=work, args=(client, n, stop, counts)) for n in names]
        for t in threads:
            t.start()
        time.sleep(1.0)
        if nodes:
            master = nodes[0]          # a master: the first three are masters
            print("killing the master on port", master.port, "(SIGKILL)")
            os.kill(master.pid, signal.SIGKILL)
            before = dict(counts)
            time.sleep(5.0)
            print("grants per lock before the kill:", before)
        time.sleep(1.0)
        stop.set()
        for t in threads:
            t.join()
        print("grants per lock at the end:     ", counts)
        client.close()
    finally:
        for n in nodes:
            n.cleanup()


if __name__ == "__main__":
    main()
