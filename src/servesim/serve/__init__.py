"""``servesim serve``: an OpenAI-compatible HTTP endpoint over a live simulation (docs/serve.md).

``driver`` steps the cluster's event loop against the wall clock, ``protocol`` reads and
writes the OpenAI API's bodies, ``prom`` keeps vLLM's Prometheus metrics, ``app`` is the
ASGI app and ``server`` turns a scenario into a running server.
"""
