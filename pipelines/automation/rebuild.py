"""`rebuild_stale`: a job with no config, launched from the Launchpad, that rebuilds every paper
needing work, as the nightly schedule would now, without anyone picking partition keys.

Its one op plans as `nightly_rebuild` does (`stale_runs`) and runs each planned range of papers
as a run of `paper_chain` of its own (in the op's process, as `sheaf build` does), under the
home's build lock, so a `sheaf build` and this job never rebuild at once. Each of those runs
carries the partition tags of its papers and `sheaf/papers` (which papers and why), so the
Partitions tabs and, through `library_status_refresh_sensor`, `library_status` follow.
"""

from dagster import Definitions, Failure, MetadataValue, OpExecutionContext, ResourceParam, job, op

from pipelines.automation.schedules import stale_runs
from pipelines.build.runs import run_chain
from pipelines.build_lock import build_lock
from pipelines.planning.statuses import chain_of
from pipelines.resources import SheafConfig

REBUILD_JOB = "rebuild_stale"


class OwnDefinitions:
    """The Definitions this job is part of, set once they are built (`pipelines.definitions`):
    how the op reaches `paper_chain` both in a code location and in `execute_in_process`, where
    a step has no repository."""

    def __init__(self) -> None:
        self.defs: Definitions | None = None

    def get(self) -> Definitions:
        if self.defs is None:
            raise RuntimeError("rebuild_stale runs only within the definitions it belongs to")
        return self.defs


@op(description="Rebuild every paper that needs work (missing, stale, or failed with a changed input or code), "
                "one run of paper_chain per contiguous range of papers.")
def rebuild_papers_needing_work(context: OpExecutionContext, sheaf: SheafConfig,
                                own_definitions: ResourceParam[OwnDefinitions]) -> None:
    defs = own_definitions.get()
    chain = chain_of(defs)
    with build_lock(sheaf.settings().home, say=context.log.info):
        runs, total = stale_runs(context.instance, chain, sheaf)
        if not runs:
            context.log.info(f"all {total} papers are built: nothing to rebuild")
            return
        failed = []
        for first, keys, why, titles in runs:
            context.log.info(f"rebuilding {len(keys)} paper(s) from {first}: {why}")
            res = run_chain(context.instance, defs, keys, first, chain,
                            tags={"sheaf/papers": why, "sheaf/launched_by": f"{REBUILD_JOB} {context.run_id}",
                                  # the UI's "Launched by": this job's run (`run_tags` says `sheaf build`)
                                  "user": f"{REBUILD_JOB} run {context.run_id[:8]}",
                                  **({"sheaf/titles": titles} if titles else {})})
            if not res["success"]:
                failed.append(f"run {res['run_id']} ({keys[0]}…{keys[-1]}): " + "; ".join(res["errors"])[:300])
    papers = [k for _, keys, _, _ in runs for k in keys]
    context.log.info(f"rebuilt {len(papers)} of {total} papers in {len(runs)} run(s)")
    if failed:
        raise Failure(f"{len(failed)} of {len(runs)} runs failed", metadata={"failed": MetadataValue.json(failed)})


@job(name=REBUILD_JOB, description="Rebuild every paper that needs work (what library_status lists first, what "
                                   "paper_up_to_date marks red), with no config: one run of paper_chain per range.")
def rebuild_stale():
    rebuild_papers_needing_work()
