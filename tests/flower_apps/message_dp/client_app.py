"""message_dp: the ClientApp (Message API) — train and evaluate on the node's partition."""

from __future__ import annotations

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from flower_apps.task import Net, load_data, test, train

app = ClientApp()


def _partition(context: Context) -> tuple:
    return load_data(int(context.node_config["partition-id"]), int(context.node_config["num-partitions"]))


@app.train()
def train_fn(msg: Message, context: Context) -> Message:
    net = Net()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    trainset, _ = _partition(context)
    loss = train(net, trainset, epochs=1, lr=float(msg.content["config"].get("lr", 0.1)))
    metrics = MetricRecord({"train_loss": loss, "num-examples": len(trainset[0])})
    return Message(RecordDict({"arrays": ArrayRecord(net.state_dict()), "metrics": metrics}), reply_to=msg)


@app.evaluate()
def evaluate_fn(msg: Message, context: Context) -> Message:
    net = Net()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    _, valset = _partition(context)
    loss, accuracy = test(net, valset)
    metrics = MetricRecord({"eval_loss": loss, "eval_acc": accuracy, "num-examples": len(valset[0])})
    return Message(RecordDict({"metrics": metrics}), reply_to=msg)
