"""TEST DOUBLE of SGLang for epforge's tests: NOT SGLang.

This package exists only so tests can put tests/sglang_standin/ on PYTHONPATH and run
`python -m sglang.launch_server ...` without a GPU. It parses (a subset of) SGLang's launch_server
flags and serves SGLang's HTTP API with made-up text. No role or default of epforge points here.
"""

__version__ = "0.0.0+standin"
STANDIN = True
