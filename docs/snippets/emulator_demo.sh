# the demo database on a manual clock a minute before its first window, with seeded splits and merges;
# the history's final state goes to truth.json (for `python -m airflow_provider_cdc compare --truth`)
python -m airflow_provider_cdc.testing.spanner_emulator --port 9010 --clock manual \
    --start 2025-12-31T23:59:00Z --split-every 30 --seed 7 --demo --demo-truth truth.json
