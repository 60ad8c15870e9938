"""correlated_noise: the ServerApp — FedAvg given correlated noise across rounds by dpfl.

The app is message_dp's with Flower's ``DifferentialPrivacyServerSideFixedClipping`` (independent
Gaussian noise each round, priced by an accountant that assumes a random sample) replaced by dpfl's
``CorrelatedNoiseStrategy``: the fleet takes part in cyclic order (node i every b rounds), the
server clips each update, sums, adds round t's entry of BLT noise (or banded MF, DP-FTRL's tree) and
divides by the schema's cohort; dpfl logs the certificate per observer each round and at the end.
dpfl adds two lines (marked ``# dpfl``): the import and the wrapper's first line; the wrapper's
arguments are the app's privacy settings, read from the run config.
"""

from __future__ import annotations

from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from dpfl.runtime.flowerapps.correlated import CorrelatedNoiseStrategy  # dpfl
from flower_apps.task import Net, load_test, test

app = ServerApp()


def central_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    net = Net()
    net.load_state_dict(arrays.to_torch_state_dict())
    loss, accuracy = test(net, load_test())
    return MetricRecord({"loss": loss, "accuracy": accuracy})


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    num_nodes = int(cfg.get("num-nodes", 10))
    num_rounds = int(cfg.get("num-server-rounds", 10))
    target = float(cfg.get("target-epsilon", 0.0))
    strategy = FedAvg(fraction_evaluate=0.0, min_available_nodes=num_nodes)
    strategy = CorrelatedNoiseStrategy(  # dpfl
        strategy, num_clients=num_nodes, num_rounds=num_rounds, delta=1e-5,
        schema={"kind": "min_separation", "min_separation": int(cfg.get("min-separation", 5))},
        mechanism=str(cfg.get("mechanism", "blt")), clip_norm=float(cfg.get("clipping-norm", 1.0)),
        noise_multiplier=None if target > 0 else float(cfg.get("noise-multiplier", 1.0)),
        target_epsilon=target if target > 0 else None,
        server_momentum=float(cfg.get("server-momentum", 0.0)))
    result = strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(Net().state_dict()),
        train_config=ConfigRecord({"lr": float(cfg.get("lr", 0.1))}),
        num_rounds=num_rounds,
        evaluate_fn=central_evaluate,
    )
    context.state["final-accuracy"] = MetricRecord({"accuracy": result.evaluate_metrics_serverapp[
        max(result.evaluate_metrics_serverapp)]["accuracy"]})
