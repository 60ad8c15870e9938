"""fl_dp_sa: the ServerApp — FedAvg with client-side fixed clipping and central noise, SecAgg+.

dpfl adds two lines (marked ``# dpfl``): the import and the wrapper that certifies the run per
observer. Flower's wrapper adds the noise on the server, after SecAgg+ has shown it the sum of the
clipped updates, so dpfl certifies ∞ against the server and dp-accounting's figure for the public.
"""

from __future__ import annotations

from flwr.common import Context, ndarrays_to_parameters
from flwr.server import Grid, LegacyContext, ServerApp, ServerConfig
from flwr.server.strategy import DifferentialPrivacyClientSideFixedClipping, FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

from dpfl.runtime.flowerapps.certified import CertifiedLegacyStrategy  # dpfl
from flower_apps.fl_dp_sa.client_app import MODS
from flower_apps.task import Net, get_weights

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    num_sampled = int(cfg.get("num-sampled-clients", 20))
    fraction_fit = float(cfg.get("fraction-fit", 0.2))
    strategy = FedAvg(
        fraction_fit=fraction_fit,
        fraction_evaluate=0.0,
        min_fit_clients=num_sampled,
        min_available_clients=num_sampled,
        initial_parameters=ndarrays_to_parameters(get_weights(Net())),
    )
    strategy = DifferentialPrivacyClientSideFixedClipping(
        strategy,
        noise_multiplier=float(cfg.get("noise-multiplier", 0.2)),
        clipping_norm=float(cfg.get("clipping-norm", 10.0)),
        num_sampled_clients=num_sampled,
    )
    num_rounds = int(cfg.get("num-server-rounds", 3))
    strategy = CertifiedLegacyStrategy(strategy, delta=1e-5, client_mods=MODS, secure_aggregation=True,  # dpfl
                                       num_rounds=num_rounds)  # dpfl
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=num_rounds), strategy=strategy)
    workflow = DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(
        num_shares=int(cfg.get("num-shares", 7)),
        reconstruction_threshold=int(cfg.get("reconstruction-threshold", 4)),
    ))
    workflow(grid, legacy)
