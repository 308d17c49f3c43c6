"""The synchronous SDK facade, as a script would use it, against a real `ferrymq dev` process."""

import threading

from ferrymq.client.sync import ConsumeResult, Message, Producer, PullConsumer, PushConsumer

from .test_dev import start_dev, stop


def test_blocking_producer_pull_and_push_consumers(tmp_path):
    proc, banner = start_dev(tmp_path / "data")
    try:
        namesrv = banner.split("NameServer", 1)[1].split()[0]
        with Producer("SyncProducers", namesrv) as producer:
            results = [producer.send(Message("Sync", f"m{i}".encode(), tags="T")) for i in range(5)]
            assert all(r.status.value == "SEND_OK" for r in results)
            done = threading.Event()
            producer.send_async(Message("Sync", b"async"), lambda result, error: done.set())
            assert done.wait(10)
        with PullConsumer("SyncPull", namesrv, consume_from="first") as consumer:
            consumer.subscribe("Sync")
            got = []
            for _ in range(20):
                got += consumer.poll(1.0)
                if len(got) >= 6:
                    break
            assert sorted(m.body for m in got) == sorted([f"m{i}".encode() for i in range(5)] + [b"async"])
        pushed, all_in = [], threading.Event()

        def listener(messages):  # a plain function: runs in a worker thread, may block
            pushed.extend(m.body for m in messages)
            if len(pushed) >= 6:
                all_in.set()
            return ConsumeResult.SUCCESS

        push = PushConsumer("SyncPush", namesrv, consume_from="first")
        push.subscribe("Sync", "*", listener)
        with push:
            assert all_in.wait(20), pushed
    finally:
        stop(proc)
