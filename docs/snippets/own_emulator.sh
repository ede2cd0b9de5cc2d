# The emulator with your schema and a manual clock that starts before the DAG's first window
# (2026-01-01T00:00:00Z). It runs until stopped; leave it running in this shell.
cdc-spanner-emulator --ddl docs/snippets/shop.sql --database shop \
    --clock manual --start 2025-12-31T23:59:00Z --port 9010
