"""The planner: answers built from many simulations (docs/planning.md).

``targets`` judges one run against the scenario's SLO targets; ``capacity`` searches the
highest arrival rate a deployment sustains while meeting them (each rate one ``probe``, the
answer's spread over seeds a ``spread``). The configuration search
(``space``, ``bounds``, ``backends``, ``cache``, ``search``, ``output``) prunes a space of
deployments by cheap bounds and simulates the survivors. Each simulation is one pure
``servesim.simulate`` call.
"""
