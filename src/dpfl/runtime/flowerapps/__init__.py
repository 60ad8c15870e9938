"""dpfl inside someone else's Flower app: strategy wrappers and client mods a Flower user adds to an
app of their own (its model, data, ``train()`` and ClientApp stay theirs), where
:mod:`dpfl.runtime.flower` is dpfl deploying itself on Flower (its own ServerApp and ClientApp).

* :mod:`.certified` — ``CertifiedStrategy`` / ``CertifiedLegacyStrategy``: dpfl's certificates,
  per observer, for an app that trains with Flower's own DP (its central-DP wrappers,
  ``fixedclipping_mod``, ``LocalDpMod``, SecAgg+).
* :mod:`.distributed` — ``DistributedDpMod`` / ``DistributedDpLegacyStrategy``: dpfl's distributed
  DP (Skellam shares carried by Flower's SecAgg+) in place of Flower's central noise.
* :mod:`.correlated` — ``CorrelatedNoiseStrategy``: DP-FTRL's tree, banded MF or BLT noise for a
  fleet that cannot be sampled, under a participation schema the wrapper enforces.

Each records its rounds in a dpfl ledger; ``docs/how-to/flower-apps.md`` shows the lines an app
changes. The modules import Flower when they are imported: ``pip install 'dpfl[flower]'``.
"""
