"""The emulator's admin service: its clock, read and moved from outside the process.

A gRPC service on the emulator's own port, ``airflow_provider_cdc.spanner_emulator.Admin``, whose
requests and responses are JSON objects (UTF-8 bytes, no protobuf):

- ``GetClock`` ``{}``;
- ``AdvanceClock`` ``{"microseconds": 600000000}`` (not negative);
- ``SetClock`` ``{"time": "2026-01-01T00:10:00Z"}`` (RFC 3339, not before the clock's time);

each answers ``{"clock": "manual" | "wall", "now": "<RFC 3339>"}``. Only a manual clock moves: moving the
wall clock fails with FAILED_PRECONDITION, a bad value with INVALID_ARGUMENT. :class:`RemoteClock` and
``cdc-spanner-emulator clock`` are its clients.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import grpc

from airflow_provider_cdc.core.timestamps import ensure_utc, parse_timestamp

from .clock import Clock, ManualClock

SERVICE = "airflow_provider_cdc.spanner_emulator.Admin"
_UNITS = {"d": 86_400_000_000, "h": 3_600_000_000, "m": 60_000_000, "s": 1_000_000, "ms": 1000, "us": 1}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(d|h|ms|us|m|s)")


class ClockError(RuntimeError):
    """The emulator refused to read or move its clock, or could not be reached."""


def rfc3339(value: datetime) -> str:
    """``2026-01-01T00:10:00Z``, with a fraction only when the time has one."""
    value = ensure_utc(value)
    fraction = f".{value.microsecond:06d}".rstrip("0") if value.microsecond else ""
    return f"{value.year:04d}-{value:%m-%dT%H:%M:%S}{fraction}Z"


def parse_clock_duration(text: str) -> timedelta:
    """``10m``, ``90s``, ``1h30m``, ``1.5s``, ``250ms``, ``2d``: a duration to move a clock by."""
    compact = text.strip().replace(" ", "")
    parts = _DURATION_PART.findall(compact)
    if not compact or "".join(number + unit for number, unit in parts) != compact:
        raise ValueError(f"invalid duration {text!r}: use e.g. 10m, 90s, 1h30m, 1.5s or 250ms")
    micros = sum(round(float(number) * _UNITS[unit]) for number, unit in parts)
    return timedelta(microseconds=micros)


# ----- server side ------------------------------------------------------------------------------------
def admin_handler(clock: Clock) -> grpc.GenericRpcHandler:
    """The admin service over ``clock``."""

    def state() -> dict[str, Any]:
        kind = "manual" if isinstance(clock, ManualClock) else "wall"
        return {"clock": kind, "now": rfc3339(clock.now())}

    def manual() -> ManualClock:
        if not isinstance(clock, ManualClock):
            raise _Refused(
                grpc.StatusCode.FAILED_PRECONDITION,
                "the emulator runs on the wall clock, which cannot be moved: start it with --clock manual "
                "--start <RFC 3339 time>",
            )
        return clock

    def advance(request: dict[str, Any]) -> dict[str, Any]:
        micros = request.get("microseconds")
        if not isinstance(micros, int) or isinstance(micros, bool) or micros < 0:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, "microseconds must be a whole number >= 0")
        manual().advance(timedelta(microseconds=micros))
        return state()

    def set_(request: dict[str, Any]) -> dict[str, Any]:
        text = request.get("time")
        target = manual()
        try:
            target.set(parse_timestamp(text))
        except ValueError as exc:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc
        return state()

    methods: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "GetClock": lambda _request: state(),
        "AdvanceClock": advance,
        "SetClock": set_,
    }
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            name: grpc.unary_unary_rpc_method_handler(
                _json_method(fn), request_deserializer=None, response_serializer=None
            )
            for name, fn in methods.items()
        },
    )


class _Refused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _json_method(fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[bytes, Any], bytes]:
    def call(request: bytes, context: grpc.ServicerContext) -> bytes:
        try:
            payload = json.loads(request.decode("utf-8") or "{}")
            if not isinstance(payload, dict):
                raise ValueError("not an object")
        except ValueError:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the request must be a JSON object")
        try:
            return json.dumps(fn(payload)).encode("utf-8")
        except _Refused as exc:
            context.abort(exc.code, str(exc))

    return call


# ----- client side ------------------------------------------------------------------------------------
class RemoteClock:
    """The clock of the emulator at ``host`` (``host:port``, as ``SPANNER_EMULATOR_HOST``), read and moved
    from another process: ``RemoteClock(host).advance(timedelta(minutes=10))``."""

    def __init__(self, host: str, timeout: float = 10.0) -> None:
        self.host = host
        self.timeout = timeout

    def state(self) -> tuple[str, datetime]:
        """The clock's kind (``manual`` or ``wall``) and its time."""
        return self._call("GetClock", {})

    def now(self) -> datetime:
        return self.state()[1]

    def advance(self, delta: timedelta) -> datetime:
        """Move a manual clock forward by ``delta``; returns its new time."""
        return self._call("AdvanceClock", {"microseconds": delta // timedelta(microseconds=1)})[1]

    def set(self, value: datetime) -> datetime:
        """Move a manual clock forward to ``value``; returns its new time."""
        return self._call("SetClock", {"time": rfc3339(value)})[1]

    def _call(self, method: str, request: dict[str, Any]) -> tuple[str, datetime]:
        with grpc.insecure_channel(self.host) as channel:
            call = channel.unary_unary(
                f"/{SERVICE}/{method}", request_serializer=None, response_deserializer=None
            )
            try:
                answer = json.loads(call(json.dumps(request).encode("utf-8"), timeout=self.timeout))
            except grpc.RpcError as exc:
                code = exc.code()
                if code is grpc.StatusCode.UNIMPLEMENTED:
                    raise ClockError(f"{self.host} serves no emulator clock (Google's emulator?)") from exc
                if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise ClockError(f"no emulator answers at {self.host}: {exc.details()}") from exc
                raise ClockError(f"{code.name}: {exc.details()}") from exc
        return answer["clock"], parse_timestamp(answer["now"])


__all__ = ["SERVICE", "ClockError", "RemoteClock", "admin_handler", "parse_clock_duration", "rfc3339"]
