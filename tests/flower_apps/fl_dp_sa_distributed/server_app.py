"""fl_dp_sa_distributed: the ServerApp — FedAvg inside dpfl's ``DistributedDpLegacyStrategy``, SecAgg+.

No Flower DP wrapper: the clients' ``DistributedDpMod`` adds the noise in shares, the SecAgg+ sum
carries all of it, and dpfl's wrapper decodes the sum, averages it and certifies the run per
observer (server = public: of the updates the server sees only the noised sum). Lines dpfl adds or changes end
in ``# dpfl``. The global model is evaluated on MNIST's test set each round (``test accuracy``
lines in Flower's log), which fl_dp_sa does not do.
"""

from __future__ import annotations

from logging import INFO
from typing import Any

from flwr.common import Context, ndarrays_to_parameters
from flwr.common.logger import log
from flwr.server import Grid, LegacyContext, ServerApp, ServerConfig
from flwr.server.strategy import FedAvg  # dpfl
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

from dpfl.runtime.flowerapps.distributed import DistributedDpLegacyStrategy  # dpfl
from flower_apps.fl_dp_sa_distributed.client_app import CLIPPING_NORM, NOISE_MULTIPLIER, NUM_SAMPLED  # dpfl
from flower_apps.task import Net, get_weights, load_test, set_weights, test

app = ServerApp()


def evaluate(server_round: int, parameters: Any, config: Any) -> tuple[float, dict[str, float]]:
    net = Net()
    set_weights(net, parameters)
    loss, accuracy = test(net, load_test())
    log(INFO, "test accuracy after round %s: %.4f", server_round, accuracy)
    return loss, {"accuracy": accuracy}


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    num_sampled = NUM_SAMPLED  # dpfl
    fraction_fit = float(cfg.get("fraction-fit", 0.5))
    strategy = FedAvg(
        fraction_fit=fraction_fit,
        fraction_evaluate=0.0,
        min_fit_clients=num_sampled,
        min_available_clients=num_sampled,
        initial_parameters=ndarrays_to_parameters(get_weights(Net())),
        evaluate_fn=evaluate,
    )
    num_rounds = int(cfg.get("num-server-rounds", 3))
    fit_workflow = SecAggPlusWorkflow(  # dpfl
        num_shares=int(cfg.get("num-shares", 7)),
        reconstruction_threshold=int(cfg.get("reconstruction-threshold", 4)),
    )
    strategy = DistributedDpLegacyStrategy(strategy, clip_norm=CLIPPING_NORM, noise_multiplier=NOISE_MULTIPLIER,  # dpfl
                                           expected_clients=num_sampled, delta=1e-5, num_rounds=num_rounds,  # dpfl
                                           secagg=fit_workflow)  # dpfl
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=num_rounds), strategy=strategy)
    workflow = DefaultWorkflow(fit_workflow=fit_workflow)  # dpfl
    workflow(grid, legacy)
