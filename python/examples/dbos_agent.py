"""A durable agent on DBOS: each turn is two workflow steps — the model's reply, then one
flux-tools turn named after the workflow (`WORKFLOW_ID:turn-N`) with its journal in Redis.

A worker that dies anywhere is recovered by the next one DBOS starts: a step that finished is
not run again (DBOS recorded its output); the step that was running is, and flux-tools makes
that safe — the same run id sends the same idempotency keys, and the shared journal keeps every
call that finished, runs what never dispatched, and (idempotent tools) sends what was in flight
again with the same key, which the tool dedupes.

    FLUX_JOURNAL=redis://127.0.0.1:6379 FLUX_MANIFEST=tools.toml \\
    DBOS_SYSTEM_DATABASE_URL=sqlite:///dbos.sqlite python dbos_agent.py WORKFLOW_ID [TURNS]

prints the workflow's result (every turn's call ids, statuses and outputs) as JSON.
"""

import json
import os
import sys

from dbos import DBOS, SetWorkflowID

import flux_tools

JOURNAL = os.environ["FLUX_JOURNAL"]
MANIFEST = os.environ["FLUX_MANIFEST"]

DBOS(config={"name": "flux-agent", "system_database_url": os.environ["DBOS_SYSTEM_DATABASE_URL"]})


@DBOS.step()
def model(turn: int) -> dict:
    """Stands for the model's reply (a step: a recovered workflow sees the same reply)."""
    calls = [{"id": f"note{k}", "tool": "note", "args": {"text": f"turn {turn}, note {k}"}}
             for k in range(3)]
    calls.append({"id": "look", "tool": "lookup", "args": {"q": f"turn {turn}"}})
    return {"calls": calls}


@DBOS.step()
def tools(turn: int, reply: dict) -> list:
    """One flux-tools turn, safe to run again anywhere."""
    doc = flux_tools.run(reply, manifest=MANIFEST, journal=JOURNAL,
                         run_id=f"{DBOS.workflow_id}:turn-{turn}")
    return [[r["id"], r["status"], r["output"]] for r in doc["results"]]


@DBOS.workflow()
def agent(turns: int) -> list:
    return [tools(t, model(t)) for t in range(1, turns + 1)]


if __name__ == "__main__":
    DBOS.launch()  # recovers the workflows a dead worker left pending
    workflow_id = sys.argv[1]
    turns = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    if DBOS.get_workflow_status(workflow_id) is not None:
        handle = DBOS.retrieve_workflow(workflow_id)
    else:
        with SetWorkflowID(workflow_id):
            handle = DBOS.start_workflow(agent, turns)
    print(json.dumps(handle.get_result()))
    DBOS.destroy()
