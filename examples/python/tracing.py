"""OpenTelemetry traces of hilock's locks (needs opentelemetry-sdk here; the
library itself needs only opentelemetry-api): two threads take turns at one
lock, a third tries it once, and the trace is printed as a tree."""
import threading

import hilock
import hilock.tracing
from _example import redis_url
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
hilock.tracing.instrument(provider)
tracer = provider.get_tracer("example")

SHOWN = ("hilock.lock.type", "hilock.acquire.outcome", "hilock.lock.fence",
         "hilock.hold.end")


def show(spans):
    """Each span under its parent, with its duration, a few attributes and
    its links (to the span they point at)."""
    by_parent = {}
    names = {s.context.span_id: s.name for s in spans}
    for s in spans:
        by_parent.setdefault(s.parent.span_id if s.parent else None, []).append(s)

    def walk(parent, depth):
        for s in sorted(by_parent.get(parent, []), key=lambda s: s.start_time):
            ms = (s.end_time - s.start_time) / 1e6
            a = {k.rsplit(".", 1)[-1]: s.attributes[k] for k in SHOWN if k in s.attributes}
            text = " ".join(f"{k}={v}" for k, v in a.items())
            links = "".join(f" -> link to {names.get(lk.context.span_id, '?')} "
                            f"{lk.context.span_id:016x}" for lk in s.links)
            print(f"{'  ' * depth}{s.name} [{s.context.span_id:016x}] {ms:.1f} ms "
                  f"{text}{links}")
            walk(s.context.span_id, depth + 1)
    walk(None, 0)


with redis_url() as url, hilock.Client(url) as client:
    first_holds = threading.Event()

    def worker(n: int) -> None:
        with tracer.start_as_current_span(f"worker {n}"):
            lk = client.lock("orders:42", ttl=10.0, timeout=5.0)
            if n == 2:
                first_holds.wait()
            with lk:
                if n == 1:
                    first_holds.set()
                    # Let worker 2 queue behind this hold before releasing.
                    while client.waiting == 0:
                        threading.Event().wait(0.001)

    threads = [threading.Thread(target=worker, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with tracer.start_as_current_span("one try"):
        holder = client.lock("orders:42", ttl=10.0)
        holder.acquire(blocking=False)  # free again: granted
        busy = client.lock("orders:42", ttl=10.0)
        print("a try at the held lock:", busy.acquire(blocking=False))
        holder.release()

hilock.tracing.uninstrument()
show(exporter.get_finished_spans())
