"""The planner: configuration search (``space``, ``bounds``, ``backends``, ``cache``,
``search``, ``output``) over many ``simulate()`` calls."""
