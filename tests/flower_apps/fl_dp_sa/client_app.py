"""fl_dp_sa: the ClientApp — a NumPyClient behind ``secaggplus_mod`` and ``fixedclipping_mod``."""

from __future__ import annotations

from typing import Any

from flwr.client import NumPyClient
from flwr.client.mod import fixedclipping_mod, secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import Context

from flower_apps.task import Net, get_weights, load_data, set_weights, test, train


class FlowerClient(NumPyClient):
    def __init__(self, trainset: Any, valset: Any) -> None:
        self.net = Net()
        self.trainset, self.valset = trainset, valset

    def fit(self, parameters: Any, config: Any) -> tuple[Any, int, dict[str, float]]:
        set_weights(self.net, parameters)
        loss = train(self.net, self.trainset, epochs=1)
        return get_weights(self.net), len(self.trainset[0]), {"train_loss": loss}

    def evaluate(self, parameters: Any, config: Any) -> tuple[float, int, dict[str, float]]:
        set_weights(self.net, parameters)
        loss, accuracy = test(self.net, self.valset)
        return loss, len(self.valset[0]), {"accuracy": accuracy}


def client_fn(context: Context) -> Any:
    trainset, valset = load_data(int(context.node_config["partition-id"]), int(context.node_config["num-partitions"]))
    return FlowerClient(trainset, valset).to_client()


MODS = [secaggplus_mod, fixedclipping_mod]

app = ClientApp(client_fn=client_fn, mods=MODS)
