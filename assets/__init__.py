"""assets."""

from pipelines.dagster_private import quiet_dagster_warnings

# The assets use Dagster's Beta/Preview APIs knowingly: quiet their warnings before the asset
# modules define anything, or they reach stderr, which a program running a Sheaf command reads
# as the command's own (the PaperForge plugin shows a build's stderr as "published with warning").
quiet_dagster_warnings()
