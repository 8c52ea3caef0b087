"""The answers: the recording processes (record.py), the searches over
sizes and settings on cachealloc's engine (search.py), the words, page and
JSON (report.py), and the command (cli.py). Depends on device/ and
kernels/ (through the recordings they make), never the other way."""
