"""Scripts that run in another Python (a host's env, a client's venv), kept as real files: linted, unit-tested
and imported by tests as code. Each needs only the standard library, reads its arguments from sys.argv and
prints one JSON document as its last line. plugins/module_utils/payload.py sends one to an interpreter."""
