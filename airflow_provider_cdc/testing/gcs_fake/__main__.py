"""Serve the loopback Cloud Storage: ``python -m airflow_provider_cdc.testing.gcs_fake --bucket b``.

Prints one JSON line ``{"endpoint": ...}`` (and writes the port to ``--port-file`` if given), then
serves until stdin closes or the process is terminated.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading

from . import FakeGcs


def _wait_for_eof(closed: threading.Event) -> None:
    # os.read, not sys.stdin: a daemon thread holding stdin's buffer lock delays interpreter exit.
    while os.read(0, 65536):
        pass
    closed.set()


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", help="write the bound port here (atomically)")
    parser.add_argument("--bucket", action="append", default=[], help="bucket to create")
    parser.add_argument("--versioned-bucket", action="append", default=[], help="bucket with versioning")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    fake = FakeGcs().start(args.host, args.port)
    try:
        for name in args.bucket:
            fake.create_bucket(name)
        for name in args.versioned_bucket:
            fake.create_bucket(name, versioning=True)
        if args.port_file:
            tmp = f"{args.port_file}.tmp"
            with open(tmp, "w") as handle:
                handle.write(fake.endpoint.rsplit(":", 1)[1])
            os.replace(tmp, args.port_file)
        print(json.dumps({"endpoint": fake.endpoint}), flush=True)
        stdin_closed = threading.Event()
        threading.Thread(target=_wait_for_eof, args=(stdin_closed,), daemon=True).start()
        stdin_closed.wait()
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
