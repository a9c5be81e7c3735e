#!/usr/bin/env python3
"""Forward a run's metrics to TensorBoard, Weights & Biases and MLflow.

    scripts/track.py --to tensorboard,wandb,mlflow --run runs/demo [--follow PID]
    scripts/track.py --to tensorboard --out DIR --name NAME train-metrics.jsonl ...

With --run, the sources are the run directory's files, written by
scripts/run.sh and the loop scripts:

    metrics.jsonl                     one line per phase event; the keys go
                                      under their phase: rl/reward_mean,
                                      eval/greedy_accuracy, sft/loss_last, …
                                      at the line's `step` (the RL step)
    logs/sft-metrics.jsonl            arl-train's lines of the SFT run:
                                      sft_train/loss, … at the SFT step
    steps/step-N/train-metrics.jsonl  arl-train's lines of each RL step:
                                      train/loss, train/grad_norm, … at the
                                      optimizer step counted over the run
                                      (train/rl_step says which RL step)

Positional files are arl-train `--metrics` files (prefix train/, their own
`step`). Nested objects are flattened with `/`; strings, nulls, booleans and
lists are not scalars and are skipped.

Hyper-parameters: every KEY=VALUE line of RUN/params.env (the experiment's
variables with their effective values, written by run.sh) and of --params
files, plus the arl commit. The exact commands (RUN/logs/commands.log, every
arl binary the scripts ran, with its arguments) are attached at the end: a
text entry in TensorBoard, a file of the W&B run, an MLflow artifact.

Where the records go (everything under OUT, by default RUN/tracking):
    tensorboard  OUT/tensorboard/ (event files: `tensorboard --logdir runs/`)
    wandb        OUT/wandb/offline-run-*/ (offline unless WANDB_MODE says
                 otherwise; `wandb sync OUT/wandb/offline-run-*` uploads it;
                 WANDB_PROJECT, default arl)
    mlflow       MLFLOW_TRACKING_URI, else MLflow's default local store kept
                 in the run: sqlite:///OUT/mlflow.db with artifacts in
                 OUT/mlartifacts (`mlflow ui --backend-store-uri
                 sqlite:///OUT/mlflow.db`); MLFLOW_EXPERIMENT_NAME, default arl

--follow PID tails the sources while process PID lives (run.sh passes its
own), forwarding each new complete line within --interval seconds; SIGTERM
forwards what is left and closes the runs as finished; PID ending without
SIGTERM closes them as failed. The forwarded offsets and the run ids are kept
in OUT/state.json, so a resumed run (RESUME=1) appends to the same W&B and
MLflow runs instead of sending everything twice. A backend that fails is
reported once on stderr and left out; the run goes on.
"""
import argparse
import glob
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time

BACKENDS = ("tensorboard", "wandb", "mlflow")


def scalars(obj, prefix):
    """(key, float) pairs of a JSON object, nested objects flattened with `/`."""
    out = []
    for k, v in obj.items():
        key = f"{prefix}/{k}"
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, (int, float)):
            out.append((key, float(v)))
        elif isinstance(v, dict):
            out.extend(scalars(v, key))
    return out


def read_env(path):
    params = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line)
                if m:
                    params[m.group(1)] = m.group(2)
    except FileNotFoundError:
        pass
    return params


class Source:
    """One JSONL file read from a byte offset, whole lines only."""

    def __init__(self, path, kind, state):
        self.path, self.kind, self.state = path, kind, state

    def new_lines(self):
        off = self.state["offsets"].get(self.path, 0)
        try:
            with open(self.path, "rb") as f:
                f.seek(off)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.state["offsets"][self.path] = off + end + 1
        out = []
        for n, raw in enumerate(data[: end + 1].splitlines()):
            if not raw.strip():
                continue
            try:
                out.append(json.loads(raw))
            except json.JSONDecodeError as e:
                warn(f"{self.path}: a line at byte {off} + {n} is not JSON ({e}); skipped")
        return out


def warn(msg):
    print(f"track: {msg}", file=sys.stderr, flush=True)


class TensorBoard:
    def __init__(self, out, name, params, state):
        from torch.utils.tensorboard import SummaryWriter

        self.w = SummaryWriter(log_dir=os.path.join(out, "tensorboard"))
        if not state.get("tensorboard_params"):
            table = "\n".join(f"| {k} | `{v}` |" for k, v in sorted(params.items()))
            self.w.add_text("config/params", f"| variable | value |\n|---|---|\n{table}", 0)
            state["tensorboard_params"] = True

    def log(self, points):
        for step, key, value in points:
            self.w.add_scalar(key, value, step)
        self.w.flush()

    def finish(self, commands, ok):
        if commands:
            self.w.add_text("config/commands", "    " + commands.replace("\n", "\n    "), 0)
        self.w.close()


class WandB:
    def __init__(self, out, name, params, state):
        import wandb

        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_SILENT", "true")
        state.setdefault("wandb_id", secrets.token_hex(4))
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "arl"),
            name=name,
            id=state["wandb_id"],
            resume="allow",
            dir=out,
            config=params,
            settings=wandb.Settings(console="off", x_disable_stats=True),
        )
        self.axes = set()

    def log(self, points):
        # One history row per (axis, step); each prefix has its own step axis.
        rows = {}
        for step, key, value in points:
            axis = key.split("/", 1)[0]
            rows.setdefault((axis, step), {})[key] = value
        for (axis, step), row in rows.items():
            if axis not in self.axes:
                self.run.define_metric(f"{axis}/step")
                self.run.define_metric(f"{axis}/*", step_metric=f"{axis}/step")
                self.axes.add(axis)
            row[f"{axis}/step"] = step
            self.run.log(row)

    def finish(self, commands, ok):
        if commands:
            p = os.path.join(self.run.dir, "commands.log")
            with open(p, "w", encoding="utf-8") as f:
                f.write(commands)
        self.run.finish(exit_code=0 if ok else 1)


class MLflow:
    def __init__(self, out, name, params, state):
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///" + os.path.abspath(os.path.join(out, "mlflow.db"))
        self.c = MlflowClient(uri)
        exp_name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "arl")
        exp = self.c.get_experiment_by_name(exp_name)
        if exp is None:
            loc = None
            if not os.environ.get("MLFLOW_TRACKING_URI"):
                loc = "file://" + os.path.abspath(os.path.join(out, "mlartifacts"))
            exp_id = self.c.create_experiment(exp_name, artifact_location=loc)
        else:
            exp_id = exp.experiment_id
        if state.get("mlflow_run_id"):
            self.run_id = state["mlflow_run_id"]
            self.c.update_run(self.run_id, status="RUNNING")
        else:
            self.run_id = self.c.create_run(exp_id, run_name=name).info.run_id
            state["mlflow_run_id"] = self.run_id
            from mlflow.entities import Param

            ps = [Param(k, str(v)[:6000]) for k, v in sorted(params.items())]
            for i in range(0, len(ps), 100):
                self.c.log_batch(self.run_id, params=ps[i : i + 100])

    def log(self, points):
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        ms = [Metric(key, value, ts, step) for step, key, value in points]
        for i in range(0, len(ms), 1000):
            self.c.log_batch(self.run_id, metrics=ms[i : i + 1000])

    def finish(self, commands, ok):
        if commands:
            self.c.log_text(self.run_id, commands, "commands.log")
        self.c.set_terminated(self.run_id, status="FINISHED" if ok else "FAILED")


class Tracker:
    def __init__(self, args):
        self.args = args
        self.out = args.out or os.path.join(args.run, "tracking")
        os.makedirs(self.out, exist_ok=True)
        self.state_path = os.path.join(self.out, "state.json")
        try:
            with open(self.state_path, encoding="utf-8") as f:
                self.state = json.load(f)
        except FileNotFoundError:
            self.state = {}
        self.state.setdefault("offsets", {})
        self.state.setdefault("train_step", 0)
        self.state.setdefault("rl_step", 0)
        params = {}
        if args.run:
            params.update(read_env(os.path.join(args.run, "params.env")))
        for p in args.params:
            params.update(read_env(p))
        commit = git_commit()
        if commit:
            params["arl_commit"] = commit
        name = args.name or (os.path.basename(os.path.normpath(args.run)) if args.run else "arl")
        self.backends = {}
        for b in args.to:
            cls = {"tensorboard": TensorBoard, "wandb": WandB, "mlflow": MLflow}[b]
            try:
                self.backends[b] = cls(self.out, name, params, self.state)
            except Exception as e:  # a backend that cannot start is left out
                warn(f"{b}: cannot start ({type(e).__name__}: {e}); not tracked")
        self.save()

    def sources(self):
        a, st = self.args, self.state
        out = []
        if a.run:
            out.append(Source(os.path.join(a.run, "metrics.jsonl"), "phase", st))
            out.append(Source(os.path.join(a.run, "logs", "sft-metrics.jsonl"), "sft_train", st))
            steps = glob.glob(os.path.join(a.run, "steps", "step-*", "train-metrics.jsonl"))

            def num(p):
                m = re.search(r"step-(\d+)", p)
                return int(m.group(1)) if m else 0

            for p in sorted(steps, key=num):
                s = Source(p, "train", st)
                s.rl_step = num(p)
                out.append(s)
        for f in a.files:
            out.append(Source(f, "file", st))
        return out

    def points(self, src, line):
        st = self.state
        if src.kind == "phase":
            phase = str(line.get("phase", "run"))
            step = line.get("step")
            if not isinstance(step, int):
                step = st["rl_step"] if phase != "sft" else 0
            if phase in ("rl", "eval"):
                st["rl_step"] = max(st["rl_step"], step)
            body = {k: v for k, v in line.items() if k not in ("phase", "step")}
            return [(step, k, v) for k, v in scalars(body, phase)]
        if src.kind == "train":
            st["train_step"] += 1
            body = {k: v for k, v in line.items() if k != "step"}
            body["rl_step"] = src.rl_step
            return [(st["train_step"], k, v) for k, v in scalars(body, "train")]
        step = line.get("step") if isinstance(line.get("step"), int) else 0
        body = {k: v for k, v in line.items() if k != "step"}
        return [(step, k, v) for k, v in scalars(body, "sft_train" if src.kind == "sft_train" else "train")]

    def forward(self):
        pts = []
        for s in self.sources():
            for line in s.new_lines():
                if isinstance(line, dict):
                    pts.extend(self.points(s, line))
        if pts:
            for b, be in list(self.backends.items()):
                try:
                    be.log(pts)
                except Exception as e:
                    warn(f"{b}: logging failed ({type(e).__name__}: {e}); not tracked from here on")
                    del self.backends[b]
            self.save()
        return len(pts)

    def finish(self, ok):
        commands = ""
        if self.args.run:
            try:
                with open(os.path.join(self.args.run, "logs", "commands.log"), encoding="utf-8") as f:
                    commands = f.read()
            except FileNotFoundError:
                pass
        for b, be in self.backends.items():
            try:
                be.finish(commands, ok)
            except Exception as e:
                warn(f"{b}: closing the run failed ({type(e).__name__}: {e})")
        self.save()

    def save(self):
        tmp = self.state_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_path)


def git_commit():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        r = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--to", required=True, help="comma-separated: tensorboard,wandb,mlflow (or all)")
    ap.add_argument("--run", help="a run directory of scripts/run.sh or the loop scripts")
    ap.add_argument("--out", help="where the records go (default RUN/tracking)")
    ap.add_argument("--name", help="the run's name (default: the run directory's name)")
    ap.add_argument("--params", action="append", default=[], help="KEY=VALUE file logged as hyper-parameters (repeatable)")
    ap.add_argument("--follow", type=int, metavar="PID", help="keep forwarding new lines while PID lives")
    ap.add_argument("--interval", type=float, default=2.0, help="seconds between polls with --follow (2)")
    ap.add_argument("files", nargs="*", help="arl-train --metrics files (prefix train/)")
    a = ap.parse_args()
    to = [t.strip() for t in a.to.split(",") if t.strip()]
    if to == ["all"]:
        to = list(BACKENDS)
    bad = [t for t in to if t not in BACKENDS]
    if bad or not to:
        ap.error(f"--to: unknown backend {', '.join(bad) or '(none)'}; choose from {', '.join(BACKENDS)}")
    a.to = to
    if not a.run and not a.out:
        ap.error("give --run RUN_DIR, or --out DIR with metrics files")
    # Before the libraries load (seconds): a short run may end meanwhile.
    stop = {"term": False}

    def on_term(*_):
        stop["term"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    tracker = Tracker(a)
    if not tracker.backends:
        warn("no backend could start; nothing is tracked")
        sys.exit(1)
    ok = True
    if a.follow:
        while not stop["term"]:
            tracker.forward()
            if not alive(a.follow):
                ok = False
                break
            time.sleep(a.interval)
    tracker.forward()
    tracker.finish(ok)


if __name__ == "__main__":
    main()
