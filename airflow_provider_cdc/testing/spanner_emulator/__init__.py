"""A Spanner change-stream emulator: a gRPC server the unmodified ``google-cloud-spanner`` client talks to.

Time: every commit gets a unique microsecond timestamp strictly after the clock's ``now`` and after
the previous commit, and the clock moves to it; so everything at or before ``now`` is final and a
change-stream read bounded by ``end_timestamp <= now`` completes at once, while a read whose end is
later (or NULL) waits for the clock or for its partition's child records. With a ``ManualClock``
time moves only by ``advance``/``set`` (in the process, or from outside it through ``RemoteClock`` or
``cdc-spanner-emulator clock``) or by commits; splits and merges take a timestamp the same way.

Tables: every commit keeps the versions of the rows it writes, so reads and queries at a timestamp (a
snapshot, a batch snapshot's partitions) see the database as of then, within the version retention
period; a timestamp later than now waits for the clock.

Part of the test kit: it needs the ``testing`` extra (``pip install 'airflow-provider-cdc[testing]'``).
"""

try:
    import grpc  # noqa: F401 - the server's own dependency, beyond what the product needs
except ImportError as exc:
    raise ImportError(
        "the Spanner change-stream emulator needs the testing extra: "
        "pip install 'airflow-provider-cdc[testing]'"
    ) from exc

from .admin import RemoteClock
from .clock import Clock, ManualClock, WallClock
from .model import PartitionSchedule
from .server import SpannerEmulator

__all__ = ["Clock", "ManualClock", "PartitionSchedule", "RemoteClock", "SpannerEmulator", "WallClock"]
