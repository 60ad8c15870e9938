"""Running dpfl algorithms outside one process: the Flower adapter (:mod:`dpfl.runtime.flower`).

The adapter translates messages only; the algorithm code is the simulator's (see
:class:`dpfl.algorithms.base.Algorithm`: ``client_step`` on each client, ``aggregate`` on the
server) and the privacy ledger is the runner's (:func:`dpfl.rounds.run_experiment`
with a ``remote`` cohort).
"""
