# In another shell: any Spanner client reaches the emulator; its commits take the clock's time.
export SPANNER_EMULATOR_HOST=127.0.0.1:9010
cdc-spanner-emulator clock show                      # prints the time
cdc-spanner-emulator clock set 2026-01-01T00:01:00Z  # a minute into the first window
python docs/snippets/own_rows.py                     # writes a few rows (any Spanner client will do)
cdc-spanner-emulator clock advance 10m               # the window [00:00, 00:10) has ended
