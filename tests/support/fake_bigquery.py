"""The real BigQuery clients against the loopback fake (``airflow_provider_cdc.testing.bigquery_fake``)."""

from __future__ import annotations

import grpc
from google.auth.credentials import AnonymousCredentials
from google.cloud import bigquery
from google.cloud.bigquery_storage_v1 import BigQueryWriteClient
from google.cloud.bigquery_storage_v1.services.big_query_write.transports import BigQueryWriteGrpcTransport

from airflow_provider_cdc.testing.bigquery_fake import FakeBigQuery


def fake_clients(fake: FakeBigQuery, project: str) -> tuple[bigquery.Client, BigQueryWriteClient]:
    """``fake``'s BigQuery client (REST, anonymous, of ``project``) and Storage Write client (gRPC)."""
    client = bigquery.Client(
        project=project,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": fake.rest_endpoint},
    )
    write = BigQueryWriteClient(
        transport=BigQueryWriteGrpcTransport(channel=grpc.insecure_channel(fake.write_endpoint))
    )
    return client, write
