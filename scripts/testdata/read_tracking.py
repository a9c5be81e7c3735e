#!/usr/bin/env python3
"""Read back what scripts/track.py wrote, with each library's own reader, and
print it as one JSON object (used by the tests):

    {"tensorboard": {"scalars": {tag: [[step, value], ...]}, "texts": [tag, ...]},
     "wandb":       {"scalars": {key: [[step, value], ...]}, "config": {...}, "files": [...]},
     "mlflow":      {"scalars": {key: [[step, value], ...]}, "params": {...},
                     "status": ..., "artifacts": [...]}}

    read_tracking.py OUT_DIR [--mlflow-uri URI]

TensorBoard: tensorboard's EventAccumulator. MLflow: MlflowClient. W&B: the
offline run's .wandb file is a LevelDB-format log of wandb's protobuf
records (wandb 0.31 no longer ships a Python reader for it): the framing is
read here, each record is parsed with wandb's own protobuf classes.
"""
import glob
import json
import os
import struct
import sys


def tensorboard(out):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(os.path.join(out, "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    tags = ea.Tags()
    sc = {t: [[e.step, e.value] for e in ea.Scalars(t)] for t in tags.get("scalars", [])}
    # Text summaries are tensors of the text plugin.
    texts = sorted(tags.get("tensors", []))
    return {"scalars": sc, "texts": texts}


def wandb_records(path):
    """The protobuf payloads of a LevelDB-format log (7-byte W&B header)."""
    data = open(path, "rb").read()
    assert data[:4] == b":W&B", f"{path}: not a W&B log"
    block = 32768
    pos, out, pending = 7, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pos += 7
        chunk = data[pos : pos + length]
        pos += length
        if kind == 0 and length == 0:
            continue
        if kind == 1:
            out.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            out.append(pending + chunk)
            pending = b""
    return out


def wandb(out):
    from wandb.proto import wandb_internal_pb2 as pb

    runs = sorted(glob.glob(os.path.join(out, "wandb", "*run-*", "run-*.wandb")))
    sc, config, files = {}, {}, []
    for path in runs:
        for raw in wandb_records(path):
            r = pb.Record()
            r.ParseFromString(raw)
            t = r.WhichOneof("record_type")
            if t == "history":
                row = {}
                for i in r.history.item:
                    key = i.key or "/".join(i.nested_key)
                    row[key] = json.loads(i.value_json)
                axes = {k.split("/", 1)[0] for k in row if k.endswith("/step")}
                for k, v in row.items():
                    if k.startswith("_") or k.endswith("/step") or not isinstance(v, (int, float)):
                        continue
                    axis = k.split("/", 1)[0]
                    step = row.get(f"{axis}/step") if axis in axes else row.get("_step")
                    sc.setdefault(k, []).append([step, v])
            elif t == "config":
                for i in r.config.update:
                    config[i.key] = json.loads(i.value_json)
            elif t == "run":
                for i in r.run.config.update:
                    config[i.key] = json.loads(i.value_json)
        files += sorted(os.listdir(os.path.join(os.path.dirname(path), "files")))
    return {"scalars": sc, "config": {k: v.get("value", v) if isinstance(v, dict) else v for k, v in config.items()}, "files": files, "runs": len(runs)}


def mlflow(out, uri):
    from mlflow.tracking import MlflowClient

    uri = uri or "sqlite:///" + os.path.abspath(os.path.join(out, "mlflow.db"))
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name(os.environ.get("MLFLOW_EXPERIMENT_NAME", "arl"))
    runs = c.search_runs([exp.experiment_id])
    assert len(runs) == 1, f"{len(runs)} MLflow runs"
    r = runs[0]
    sc = {}
    for k in r.data.metrics:
        sc[k] = [[m.step, m.value] for m in sorted(c.get_metric_history(r.info.run_id, k), key=lambda m: (m.step, m.timestamp))]
    arts = [a.path for a in c.list_artifacts(r.info.run_id)]
    return {"scalars": sc, "params": r.data.params, "status": r.info.status, "artifacts": arts, "name": r.info.run_name}


def main():
    out = sys.argv[1]
    uri = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--mlflow-uri" else None
    res = {}
    if os.path.isdir(os.path.join(out, "tensorboard")):
        res["tensorboard"] = tensorboard(out)
    if os.path.isdir(os.path.join(out, "wandb")):
        res["wandb"] = wandb(out)
    if uri or os.path.exists(os.path.join(out, "mlflow.db")):
        res["mlflow"] = mlflow(out, uri)
    json.dump(res, sys.stdout)


if __name__ == "__main__":
    main()
