"""assets."""
import warnings

# The assets use Dagster's Beta/Preview APIs knowingly: quiet those warnings before the asset
# modules define anything, or they reach stderr, which a program running a Sheaf command reads
# as the command's own (the PaperForge plugin shows a build's stderr as "published with warning").
# By message and module only: importing this package must not import Dagster (`pipelines.noop`
# reads `assets.versions` on the light path).
warnings.filterwarnings("ignore", message=r".* is currently in (beta|preview)")
warnings.filterwarnings("ignore", module="dagster")
