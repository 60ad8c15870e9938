"""message_dp: the ServerApp — FedAvg in server-side fixed clipping with Flower's RdpAccountant.

dpfl adds two lines (marked ``# dpfl``): the import and the wrapper. Flower's accountant gives one
figure; dpfl's wrapper logs the certificate per observer each round beside it, and the PLD at the
end: ∞ against the server (it clips and noises the updates it sees), for the public the tight
figure of the same Gaussian events.
"""

from __future__ import annotations

from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg
from flwr.supercore.privacy_accounting import NeighboringRelation, PrivacyConfig, SamplingMethod
from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

from dpfl.runtime.flowerapps.certified import CertifiedStrategy  # dpfl
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
    num_sampled = int(cfg.get("num-sampled-clients", 5))
    accountant = RdpAccountant(PrivacyConfig(
        target_delta=1e-5,
        population_size=num_nodes,
        neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
        sampling_method=SamplingMethod.NO_AMPLIFICATION,
    ))
    strategy = DifferentialPrivacyServerSideFixedClipping(
        FedAvg(fraction_train=num_sampled / num_nodes, fraction_evaluate=0.0, min_available_nodes=num_nodes),
        noise_multiplier=float(cfg.get("noise-multiplier", 1.0)),
        clipping_norm=float(cfg.get("clipping-norm", 1.0)),
        num_sampled_clients=num_sampled,
        accountant=accountant,
    )
    strategy = CertifiedStrategy(strategy, delta=1e-5)  # dpfl
    result = strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(Net().state_dict()),
        train_config=ConfigRecord({"lr": float(cfg.get("lr", 0.1))}),
        num_rounds=int(cfg.get("num-server-rounds", 5)),
        evaluate_fn=central_evaluate,
    )
    context.state["final-accuracy"] = MetricRecord({"accuracy": result.evaluate_metrics_serverapp[
        max(result.evaluate_metrics_serverapp)]["accuracy"]})
