"""The gRPC server: Spanner, DatabaseAdmin, InstanceAdmin and Operations as the real client calls them.

Spanner serves change-stream queries (:mod:`.reads`), reads of tables at a timestamp, whole or by
partition (:mod:`.table_reads`), and commits of mutations (:mod:`.database`).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
from google.cloud.spanner_admin_database_v1.types import spanner_database_admin as dbadmin
from google.cloud.spanner_admin_instance_v1.types import spanner_instance_admin as instadmin
from google.cloud.spanner_v1.types import commit_response, spanner, transaction
from google.longrunning import operations_pb2
from google.protobuf import empty_pb2, timestamp_pb2
from google.rpc import status_pb2

from airflow_provider_cdc.core.timestamps import from_micros

from .admin import admin_handler
from .clock import Clock, ManualClock, WallClock
from .database import Database
from .model import EmulatorError, PartitionSchedule, StatementError
from .query import change_stream_function, is_change_stream_query, parse_change_stream_query
from .results import Fault, stream_rows
from .snapshots import Transactions, transaction_pb
from .table_reads import TableReads

log = logging.getLogger(__name__)


def _identity(message: bytes) -> bytes:
    return message


def _timestamp_pb(micros: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=micros // 1_000_000, nanos=(micros % 1_000_000) * 1000)


class SpannerEmulator:
    """A Spanner emulator for change streams and table reads that the unmodified ``google-cloud-spanner``
    client talks to.

    Point the client at it with ``SPANNER_EMULATOR_HOST=<host>``. Partitions split and merge on a seeded
    schedule or on ``split_partition``/``merge_partitions``; a ``ManualClock`` makes time simulated.
    """

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        seed: int = 0,
        initial_partitions: int = 2,
        partition_schedule: PartitionSchedule | None = None,
        max_workers: int = 32,
    ) -> None:
        self.clock = clock or WallClock()
        self.seed = seed
        self.initial_partitions = initial_partitions
        self.partition_schedule = partition_schedule
        self._databases: dict[str, Database] = {}
        self._instances: dict[str, instadmin.Instance] = {}
        self._sessions: dict[str, str] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._transactions = Transactions(itertools.count(1))
        self._tables = TableReads(self._transactions)
        self._fault: Fault | None = None
        self._server: grpc.Server | None = None
        self._max_workers = max_workers
        self.port: int | None = None

    # ----- lifecycle ------------------------------------------------------------------------------
    def start(self, port: int = 0, host: str = "127.0.0.1") -> str:
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="spanner-emulator"),
            options=[
                ("grpc.max_send_message_length", 64 << 20),
                ("grpc.max_receive_message_length", 64 << 20),
            ],
        )
        server.add_generic_rpc_handlers(self._handlers())
        self.port = server.add_insecure_port(f"{host}:{port}")
        if not self.port:
            raise RuntimeError(f"cannot bind the emulator to {host}:{port}")
        server.start()
        self._server = server
        self._host = host
        return self.host

    @property
    def host(self) -> str:
        if self.port is None:
            raise RuntimeError("the emulator is not started")
        return f"{self._host}:{self.port}"

    def stop(self, grace: float | None = 0.5) -> None:
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None
        self.clock.notify()

    def wait(self) -> None:
        if self._server is not None:
            self._server.wait_for_termination()

    def __enter__(self) -> SpannerEmulator:
        if self._server is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----- control --------------------------------------------------------------------------------
    def database(self, path: str) -> Database:
        """The database at ``path``; as Spanner answers, ``Instance not found`` when its instance does
        not exist, else ``Database not found``."""
        instance = path.split("/databases/", 1)[0]
        with self._lock:
            database = self._databases.get(path)
            known_instance = instance in self._instances
        if database is None:
            if not known_instance:
                raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Instance not found: {instance}")
            raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Database not found: {path}")
        return database

    def create_database(self, project: str, instance: str, database: str, statements: list[str]) -> Database:
        """Create ``projects/<project>/instances/<instance>/databases/<database>`` (and its instance if
        new) with DDL ``statements``, as the admin API does; a refused statement raises
        :class:`~.model.StatementError` (its ``index`` in ``statements``) and creates nothing."""
        return self._create(f"projects/{project}/instances/{instance}", database, statements)

    def _create(self, parent: str, database_id: str, statements: list[str]) -> Database:
        name = f"{parent}/databases/{database_id}"
        with self._lock:
            if name in self._databases:
                raise EmulatorError(grpc.StatusCode.ALREADY_EXISTS, f"Database already exists: {name}")
        created = Database(name, self.clock, self.seed, self.initial_partitions, self.partition_schedule)
        created.apply_ddl(list(statements))
        with self._lock:
            if name in self._databases:
                raise EmulatorError(grpc.StatusCode.ALREADY_EXISTS, f"Database already exists: {name}")
            self._instances.setdefault(
                parent, instadmin.Instance(name=parent, state=instadmin.Instance.State.READY)
            )
            self._databases[name] = created
        return created

    def split_partition(self, database_path: str) -> None:
        """End one current partition now and give its key range to two children."""
        self.database(database_path).split()

    def merge_partitions(self, database_path: str) -> None:
        """End two adjacent current partitions now and give their key ranges to one child."""
        self.database(database_path).merge()

    def inject_stream_faults(self, count: int = 1, code: str = "UNAVAILABLE", after_rows: int = 0) -> None:
        """Make the next ``count`` change-stream reads fail with ``code`` after ``after_rows`` rows.

        ``code`` is the name of any gRPC status code but ``OK`` (``UNAVAILABLE``, ``RESOURCE_EXHAUSTED``,
        ``PERMISSION_DENIED`` …), in any case.
        """
        name = str(code).strip().upper()
        status = grpc.StatusCode.__members__.get(name)
        if status is None or status is grpc.StatusCode.OK:
            names = ", ".join(c.name for c in grpc.StatusCode if c is not grpc.StatusCode.OK)
            raise ValueError(f"unsupported fault code {code!r}: use a gRPC status code name but OK ({names})")
        with self._lock:
            self._fault = Fault(count, status, after_rows)

    # ----- gRPC plumbing --------------------------------------------------------------------------
    def _handlers(self) -> list[grpc.GenericRpcHandler]:
        def unary(fn: Callable, request_type: Any, response: Callable[[Any], bytes]) -> grpc.RpcMethodHandler:
            def handle(request: Any, context: grpc.ServicerContext) -> Any:
                try:
                    return fn(request, context)
                except EmulatorError as exc:
                    context.abort(exc.code, exc.message)
                except Exception as exc:
                    log.exception("emulator error in %s", fn.__name__)
                    context.abort(grpc.StatusCode.INTERNAL, f"emulator error: {type(exc).__name__}: {exc}")

            return grpc.unary_unary_rpc_method_handler(
                handle, request_deserializer=request_type.deserialize, response_serializer=response
            )

        spanner_methods = {
            "CreateSession": unary(
                self._create_session, spanner.CreateSessionRequest, spanner.Session.serialize
            ),
            "BatchCreateSessions": unary(
                self._batch_create_sessions,
                spanner.BatchCreateSessionsRequest,
                spanner.BatchCreateSessionsResponse.serialize,
            ),
            "GetSession": unary(self._get_session, spanner.GetSessionRequest, spanner.Session.serialize),
            "DeleteSession": unary(
                self._delete_session, spanner.DeleteSessionRequest, empty_pb2.Empty.SerializeToString
            ),
            "BeginTransaction": unary(
                self._begin_transaction, spanner.BeginTransactionRequest, transaction.Transaction.serialize
            ),
            "Commit": unary(self._commit, spanner.CommitRequest, commit_response.CommitResponse.serialize),
            "Rollback": unary(self._rollback, spanner.RollbackRequest, empty_pb2.Empty.SerializeToString),
            "ExecuteStreamingSql": grpc.unary_stream_rpc_method_handler(
                self._execute_streaming_sql,
                request_deserializer=spanner.ExecuteSqlRequest.deserialize,
                response_serializer=_identity,
            ),
            "StreamingRead": grpc.unary_stream_rpc_method_handler(
                self._streaming_read,
                request_deserializer=spanner.ReadRequest.deserialize,
                response_serializer=_identity,
            ),
            "PartitionQuery": unary(
                self._partition_query, spanner.PartitionQueryRequest, spanner.PartitionResponse.serialize
            ),
            "PartitionRead": unary(
                self._partition_read, spanner.PartitionReadRequest, spanner.PartitionResponse.serialize
            ),
        }
        database_methods = {
            "CreateDatabase": unary(
                self._create_database,
                dbadmin.CreateDatabaseRequest,
                operations_pb2.Operation.SerializeToString,
            ),
            "GetDatabase": unary(self._get_database, dbadmin.GetDatabaseRequest, dbadmin.Database.serialize),
            "ListDatabases": unary(
                self._list_databases, dbadmin.ListDatabasesRequest, dbadmin.ListDatabasesResponse.serialize
            ),
            "UpdateDatabaseDdl": unary(
                self._update_ddl, dbadmin.UpdateDatabaseDdlRequest, operations_pb2.Operation.SerializeToString
            ),
            "GetDatabaseDdl": unary(
                self._get_ddl, dbadmin.GetDatabaseDdlRequest, dbadmin.GetDatabaseDdlResponse.serialize
            ),
            "DropDatabase": unary(
                self._drop_database, dbadmin.DropDatabaseRequest, empty_pb2.Empty.SerializeToString
            ),
        }
        instance_methods = {
            "CreateInstance": unary(
                self._create_instance,
                instadmin.CreateInstanceRequest,
                operations_pb2.Operation.SerializeToString,
            ),
            "GetInstance": unary(
                self._get_instance, instadmin.GetInstanceRequest, instadmin.Instance.serialize
            ),
            "ListInstances": unary(
                self._list_instances,
                instadmin.ListInstancesRequest,
                instadmin.ListInstancesResponse.serialize,
            ),
        }
        operations = {
            "GetOperation": grpc.unary_unary_rpc_method_handler(
                self._get_operation,
                request_deserializer=operations_pb2.GetOperationRequest.FromString,
                response_serializer=operations_pb2.Operation.SerializeToString,
            )
        }
        return [
            grpc.method_handlers_generic_handler("google.spanner.v1.Spanner", spanner_methods),
            grpc.method_handlers_generic_handler(
                "google.spanner.admin.database.v1.DatabaseAdmin", database_methods
            ),
            grpc.method_handlers_generic_handler(
                "google.spanner.admin.instance.v1.InstanceAdmin", instance_methods
            ),
            grpc.method_handlers_generic_handler("google.longrunning.Operations", operations),
            admin_handler(self.clock),
        ]

    # ----- admin ----------------------------------------------------------------------------------
    def _done_operation(self, name: str, response: Any, metadata: Any = None) -> operations_pb2.Operation:
        operation = operations_pb2.Operation(name=f"{name}/operations/op{next(self._ids)}", done=True)
        operation.response.Pack(
            response if isinstance(response, empty_pb2.Empty) else type(response).pb(response)
        )
        if metadata is not None:
            operation.metadata.Pack(type(metadata).pb(metadata))
        return operation

    def _get_operation(self, request: Any, context: grpc.ServicerContext) -> operations_pb2.Operation:
        return operations_pb2.Operation(name=request.name, done=True)

    def _create_instance(self, request: Any, context: grpc.ServicerContext) -> operations_pb2.Operation:
        name = f"{request.parent}/instances/{request.instance_id}"
        with self._lock:
            if name in self._instances:
                raise EmulatorError(grpc.StatusCode.ALREADY_EXISTS, f"Instance already exists: {name}")
            instance = instadmin.Instance(request.instance)
            instance.name = name
            instance.state = instadmin.Instance.State.READY
            self._instances[name] = instance
        return self._done_operation(name, instance, instadmin.CreateInstanceMetadata(instance=instance))

    def _get_instance(self, request: Any, context: grpc.ServicerContext) -> instadmin.Instance:
        with self._lock:
            instance = self._instances.get(request.name)
        if instance is None:
            raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Instance not found: {request.name}")
        return instance

    def _list_instances(self, request: Any, context: grpc.ServicerContext) -> instadmin.ListInstancesResponse:
        prefix = f"{request.parent}/instances/"
        with self._lock:
            found = [i for name, i in sorted(self._instances.items()) if name.startswith(prefix)]
        return instadmin.ListInstancesResponse(instances=found)

    def _create_database(self, request: Any, context: grpc.ServicerContext) -> operations_pb2.Operation:
        words = request.create_statement.split()
        if len(words) != 3 or [w.upper() for w in words[:2]] != ["CREATE", "DATABASE"]:
            raise EmulatorError(
                grpc.StatusCode.INVALID_ARGUMENT, f"Invalid create statement: {request.create_statement}"
            )
        name = self._create(request.parent, words[2].strip("`"), list(request.extra_statements)).path
        info = dbadmin.Database(name=name, state=dbadmin.Database.State.READY)
        return self._done_operation(name, info, dbadmin.CreateDatabaseMetadata(database=name))

    def _get_database(self, request: Any, context: grpc.ServicerContext) -> dbadmin.Database:
        database = self.database(request.name)
        return dbadmin.Database(
            name=request.name,
            state=dbadmin.Database.State.READY,
            version_retention_period=database.options.get("version_retention_period", "1h"),
            earliest_version_time=from_micros(database.earliest_version_us()),
        )

    def _list_databases(self, request: Any, context: grpc.ServicerContext) -> dbadmin.ListDatabasesResponse:
        with self._lock:
            if request.parent not in self._instances:
                raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Instance not found: {request.parent}")
            prefix = f"{request.parent}/databases/"
            names = sorted(name for name in self._databases if name.startswith(prefix))
        return dbadmin.ListDatabasesResponse(
            databases=[dbadmin.Database(name=name, state=dbadmin.Database.State.READY) for name in names]
        )

    def _update_ddl(self, request: Any, context: grpc.ServicerContext) -> operations_pb2.Operation:
        """Refused statements fail the call; a statement whose data check fails fails the operation, which
        lists the commit timestamps of the statements before it (those took effect)."""
        error: StatementError | None = None
        try:
            applied = self.database(request.database).apply_ddl(list(request.statements))
        except StatementError as exc:
            if exc.applied is None:
                raise
            applied, error = exc.applied, exc
        metadata = dbadmin.UpdateDatabaseDdlMetadata(
            database=request.database,
            statements=list(request.statements),
            commit_timestamps=[from_micros(ts) for ts in applied],
        )
        operation = self._done_operation(request.database, empty_pb2.Empty(), metadata)
        if error is not None:
            operation.ClearField("response")
            operation.error.CopyFrom(status_pb2.Status(code=error.code.value[0], message=error.message))
        return operation

    def _get_ddl(self, request: Any, context: grpc.ServicerContext) -> dbadmin.GetDatabaseDdlResponse:
        return dbadmin.GetDatabaseDdlResponse(statements=self.database(request.database).ddl_statements)

    def _drop_database(self, request: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:
        with self._lock:
            self._databases.pop(request.database, None)
        return empty_pb2.Empty()

    # ----- sessions and transactions --------------------------------------------------------------
    def _new_session(self, database: str, template: Any) -> spanner.Session:
        self.database(database)
        name = f"{database}/sessions/s{next(self._ids)}"
        with self._lock:
            self._sessions[name] = database
        session = spanner.Session(name=name, multiplexed=bool(template and template.multiplexed))
        session.create_time = from_micros(self.clock.now_us())
        return session

    def _session_database(self, session: str) -> Database:
        with self._lock:
            path = self._sessions.get(session)
        if path is None:
            raise EmulatorError(grpc.StatusCode.NOT_FOUND, f"Session not found: {session}")
        return self.database(path)

    def _create_session(self, request: Any, context: grpc.ServicerContext) -> spanner.Session:
        return self._new_session(request.database, request.session)

    def _batch_create_sessions(self, request: Any, context: grpc.ServicerContext) -> Any:
        count = max(1, min(request.session_count, 100))
        sessions = [self._new_session(request.database, request.session_template) for _ in range(count)]
        return spanner.BatchCreateSessionsResponse(session=sessions)

    def _get_session(self, request: Any, context: grpc.ServicerContext) -> spanner.Session:
        self._session_database(request.name)
        return spanner.Session(name=request.name)

    def _delete_session(self, request: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:
        with self._lock:
            self._sessions.pop(request.name, None)
        return empty_pb2.Empty()

    def _begin_transaction(self, request: Any, context: grpc.ServicerContext) -> transaction.Transaction:
        database = self._session_database(request.session)
        options = type(request).pb(request).options
        info = self._transactions.begin(request.session, database, options)
        returned = info.mode == "read_only" and options.read_only.return_read_timestamp
        return transaction_pb(info, info.read_us, returned)

    def _check_writable(self, transaction_id: bytes) -> None:
        info = self._transactions.find(transaction_id) if transaction_id else None
        if info is not None and info.mode != "read_write":
            raise EmulatorError(
                grpc.StatusCode.FAILED_PRECONDITION,
                "Cannot commit or rollback a read-only or partitioned-dml transaction.",
            )

    def _rollback(self, request: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:
        self._check_writable(request.transaction_id)
        return empty_pb2.Empty()

    def _commit(self, request: Any, context: grpc.ServicerContext) -> commit_response.CommitResponse:
        database = self._session_database(request.session)
        self._check_writable(request.transaction_id)
        commit_us = database.commit(list(type(request).pb(request).mutations))
        response = commit_response.CommitResponse()
        type(response).pb(response).commit_timestamp.CopyFrom(_timestamp_pb(commit_us))
        return response

    # ----- queries --------------------------------------------------------------------------------
    def _execute_streaming_sql(self, request: Any, context: grpc.ServicerContext) -> Iterator[bytes]:
        try:
            database = self._session_database(request.session)
            raw = type(request).pb(request)
            if not is_change_stream_query(request.sql):
                yield from self._tables.query(database, raw, context)
                return
            called = change_stream_function(request.sql)
            if called is not None and called[0] not in database.streams:  # as Spanner: no such function
                raise EmulatorError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Table-valued function not found: READ_{called[0]} [at {called[1]}]",
                )
            if raw.transaction.HasField("begin") and raw.transaction.begin.HasField("read_write"):
                raise EmulatorError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "Change stream queries are not supported in read-write transactions",
                )
            query = parse_change_stream_query(request.sql, raw.params)
            skip = int(raw.resume_token.decode() or 0) if raw.resume_token else 0
            rows = database.read(query, context.is_active)
            yield from self._stream(rows, skip, context)
        except EmulatorError as exc:
            context.abort(exc.code, exc.message)

    def _streaming_read(self, request: Any, context: grpc.ServicerContext) -> Iterator[bytes]:
        try:
            database = self._session_database(request.session)
            yield from self._tables.streaming_read(database, type(request).pb(request), context)
        except EmulatorError as exc:
            context.abort(exc.code, exc.message)

    def _partition_query(self, request: Any, context: grpc.ServicerContext) -> Any:
        database = self._session_database(request.session)
        return self._tables.partition_query(database, type(request).pb(request))

    def _partition_read(self, request: Any, context: grpc.ServicerContext) -> Any:
        database = self._session_database(request.session)
        return self._tables.partition_read(database, type(request).pb(request))

    def _take_fault(self) -> Fault | None:
        with self._lock:
            fault = self._fault
            if fault is None or fault.remaining <= 0:
                return None
            fault.remaining -= 1
            if fault.remaining == 0:
                self._fault = None
            return Fault(1, fault.code, fault.after_rows)

    def _stream(self, rows: Iterator[Any], skip: int, context: grpc.ServicerContext) -> Iterator[bytes]:
        yield from stream_rows(rows, skip, context, self._take_fault())


def parse_clock(kind: str, start: str | None) -> Clock:
    from airflow_provider_cdc.core.timestamps import parse_timestamp

    if kind == "wall":
        return WallClock()
    if kind == "manual":
        if not start:
            raise ValueError("--clock manual needs --start")
        return ManualClock(parse_timestamp(start))
    raise ValueError(f"unknown clock {kind!r}")


__all__ = ["ManualClock", "PartitionSchedule", "SpannerEmulator", "WallClock", "parse_clock"]
