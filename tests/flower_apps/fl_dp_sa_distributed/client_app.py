"""fl_dp_sa_distributed: the ClientApp — fl_dp_sa's NumPyClient (its ``client_fn``, imported) behind
``secaggplus_mod`` and dpfl's ``DistributedDpMod`` in place of ``fixedclipping_mod``: the mod clips the
update, encodes it as integers and adds its Skellam share before SecAgg+ masks it. Lines dpfl adds
or changes end in ``# dpfl``. The privacy numbers are fixed here, on the client (the server cannot
lower the noise), and the server app imports them."""

from __future__ import annotations

from flwr.client.mod import secaggplus_mod  # dpfl
from flwr.clientapp import ClientApp

from dpfl.runtime.flowerapps.distributed import DistributedDpMod  # dpfl
from flower_apps.fl_dp_sa.client_app import client_fn

CLIPPING_NORM = 1.0  # dpfl
NOISE_MULTIPLIER = 0.2  # dpfl
NUM_SAMPLED = 10  # dpfl

MODS = [secaggplus_mod, DistributedDpMod(CLIPPING_NORM, NOISE_MULTIPLIER, NUM_SAMPLED)]  # dpfl

app = ClientApp(client_fn=client_fn, mods=MODS)
