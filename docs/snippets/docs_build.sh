.venv/bin/mkdocs build --strict        # the site, into .cache/site; any warning fails the build
.venv/bin/mkdocs serve                 # the site at http://127.0.0.1:8000, rebuilt on every change
.venv/bin/python -m pytest tests/docs  # the build, the snippets run, and the inline-command check
